// Cross-origin access for pages in a browser (the Fetch standard's CORS protocol): which origins' pages may
// read `orbit serve`'s answers (`--allow-origin`), and the header fields that tell a browser so. No HTTP
// library here: serve_routes.cpp and the front (http_front.h) write the fields this policy gives.
//
// Off (the default, CorsPolicy{}): no answer carries a CORS field, so no web page can read the server's
// answers (a page on any site could otherwise drive a server on 127.0.0.1), and OPTIONS is a 405 as any
// method a path does not serve.
//
// On (`--allow-origin http://localhost:5173,https://app.example`, or `*` for any origin), for a request that
// carries an Origin field:
//   preflight  OPTIONS with Access-Control-Request-Method, on a path the server serves, from an allowed
//              origin: 204 with preflight_fields() (the path's methods, the headers the request asked for,
//              Max-Age) and answer_fields(); from another origin: 403, answer_fields() only (no grant).
//              Counted in /metrics' orbit_requests_total by endpoint and status (ServeMetrics::count_untimed).
//   answers    every other answer (JSON, streams, the front's /health and refusals, 404, 405, 413, 415...)
//              carries answer_fields(): for an allowed origin, Access-Control-Allow-Origin and
//              -Expose-Headers; for another, none: the request is still served as before (CORS is not
//              authentication; the browser keeps the answer from the page).
// Access-Control-Allow-Origin is the request's own Origin for a listed origin, with
// Access-Control-Allow-Credentials: true (the origin was named, so a page may send cookies or TLS client
// certificates a proxy in front checks); `*` under `--allow-origin '*'`, never with credentials (browsers
// refuse that pair). Every answer while on carries `Vary: Origin` (what it carries depends on the Origin), so a
// cache never hands one origin's answer to another.
// Thread-safety: const after construction; any thread.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace orbit::serve {

// Header fields, (name, value), in the order they are written.
using HeaderFields = std::vector<std::pair<std::string, std::string>>;

// The request headers a preflight that names none is granted: what the server reads (Authorization and
// Content-Type; X-Orbit-Session) and what the OpenAI, LangChain, AI SDK and Agents clients send.
inline constexpr const char* kCorsAllowHeaders =
    "Authorization, Content-Type, Accept, User-Agent, X-Orbit-Session, OpenAI-Organization, OpenAI-Project, "
    "OpenAI-Beta, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, X-Stainless-Package-Version, "
    "X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout, "
    "X-Stainless-Helper-Method, X-Stainless-Poll-Helper, X-Stainless-Custom-Poll-Interval";
// The response headers the server sets that a page may read beyond the CORS-safelisted ones (Content-Type,
// Content-Length, Cache-Control, ...): what a stored answer's write came to (stored/store_write.h).
inline constexpr const char* kCorsExposeHeaders =
    "Orbit-Stored, Orbit-Store-Error, Orbit-Store-Pending, Orbit-Store-Journaled";
// How long a browser may keep a preflight's grant, seconds (Chromium keeps at most 7200, Firefox 86400).
inline constexpr int kCorsMaxAgeSeconds = 7200;

class CorsPolicy {
 public:
  CorsPolicy() = default;  // off: no origin allowed, no field written
  // The policy `--allow-origin VALUE` asks for: `*`, or origins separated by commas, each
  // scheme://host[:port] (no path, query or user; IPv6 hosts in brackets). Schemes and hosts are compared
  // lowercase, and a scheme's default port (http 80, https 443) is dropped, as browsers write an Origin.
  // Throws orbit::Error naming the argument and the item: an empty item, a malformed origin, `null` (what
  // file:// pages send: allow them with `*`), `*` beside origins.
  static CorsPolicy parse(const std::string& value);

  bool enabled() const { return any_ || !origins_.empty(); }
  // The Access-Control-Allow-Origin value for a request's Origin field ("" when it has none): `*` when any
  // origin is allowed, the origin itself when listed; nullopt when it is not allowed (or the policy is off,
  // or the request names no origin).
  std::optional<std::string> allowed(const std::string& origin) const;
  // The fields every answer to a request with Origin `origin` carries (see above); none while off.
  HeaderFields answer_fields(const std::string& origin) const;
  // What a preflight from an allowed `origin` is granted beside answer_fields(): Access-Control-Allow-Methods
  // `methods` (the path's, "GET, HEAD, POST"), -Allow-Headers (`requested_headers`, the preflight's
  // Access-Control-Request-Headers, as asked; kCorsAllowHeaders when it asked for none), -Max-Age, and
  // `Vary: Access-Control-Request-Headers`. None for an origin not allowed.
  HeaderFields preflight_fields(const std::string& origin, const std::string& methods,
                                const std::string& requested_headers) const;
  // The origins allowed, normalized (empty for `*`), for the startup line and tests.
  const std::vector<std::string>& origins() const { return origins_; }
  bool any() const { return any_; }

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // normalized: lowercase scheme and host, no default port
};

// `origin` normalized (lowercase scheme and host, a default port dropped), or why it is not an origin
// (scheme://host[:port]) in `*problem`. For CorsPolicy::parse and tests.
std::optional<std::string> normalize_origin(const std::string& origin, std::string* problem);

}  // namespace orbit::serve
