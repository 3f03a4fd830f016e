#include "serve/http/cors.h"

#include <algorithm>
#include <cctype>

#include "orbit/common/error.h"

namespace orbit::serve {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const std::size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
bool is_scheme(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
}

// A host name or IPv4 address (letters, digits, '-', '_' (Docker service names), '.'; no empty label), or an IPv6
// address in brackets.
bool is_host(const std::string& s) {
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') {
    return std::all_of(s.begin() + 1, s.end() - 1,
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; });
  }
  if (s.empty() || s.front() == '.' || s.back() == '.' || s.find("..") != std::string::npos) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

// "1".."65535" without a leading zero.
bool is_port(const std::string& s) {
  if (s.empty() || s.size() > 5 || s[0] == '0') return false;
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return std::stoi(s) <= 65535;
}

}  // namespace

std::optional<std::string> normalize_origin(const std::string& origin, std::string* problem) {
  auto fail = [&](const std::string& why) -> std::optional<std::string> {
    *problem = why;
    return std::nullopt;
  };
  if (origin == "null") return fail("'null' (what file:// pages send) names no origin: allow those with *");
  const std::size_t sep = origin.find("://");
  if (sep == std::string::npos) return fail("it has no scheme (http://, https://)");
  const std::string scheme = lower(origin.substr(0, sep));
  if (!is_scheme(scheme)) return fail("'" + origin.substr(0, sep) + "' is not a scheme");
  std::string rest = origin.substr(sep + 3);
  const std::size_t extra = rest.find_first_of("/?#@");
  if (extra != std::string::npos) {
    const char c = rest[extra];
    if (c == '/' && extra == rest.size() - 1) return fail("it ends in '/' (an origin has no path: drop it)");
    return fail(c == '@' ? "it names a user (an origin has none)"
                         : std::string("it has a ") +
                               (c == '/'   ? "path"
                                : c == '?' ? "query"
                                           : "fragment") +
                               " (an origin is scheme://host[:port] only)");
  }
  const std::size_t colon = rest.rfind(':');
  const bool has_port = colon != std::string::npos && rest.find(']', colon) == std::string::npos;
  std::string host = lower(has_port ? rest.substr(0, colon) : rest);
  const std::string port = has_port ? rest.substr(colon + 1) : "";
  if (!is_host(host)) return fail(host.empty() ? "it has no host" : "'" + host + "' is not a host name or address");
  if (has_port && !is_port(port)) return fail("'" + port + "' is not a port (1 to 65535)");
  const bool default_port = (scheme == "http" && port == "80") || (scheme == "https" && port == "443");
  return scheme + "://" + host + (has_port && !default_port ? ":" + port : "");
}

CorsPolicy CorsPolicy::parse(const std::string& value) {
  CorsPolicy policy;
  std::size_t at = 0;
  for (int item = 1;; ++item) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string origin = trim(value.substr(at, comma - at));
    const std::string where = "serve: argument '--allow-origin': item " + std::to_string(item);
    ORBIT_CHECK(!origin.empty(), where << " is empty (give scheme://host[:port] origins separated by commas, or *)");
    if (origin == "*") {
      policy.any_ = true;
    } else {
      std::string problem;
      const auto normalized = normalize_origin(origin, &problem);
      ORBIT_CHECK(normalized,
                  where << " '" << origin << "' is not an origin (scheme://host[:port], or * for any): " << problem);
      if (std::find(policy.origins_.begin(), policy.origins_.end(), *normalized) == policy.origins_.end()) {
        policy.origins_.push_back(*normalized);
      }
    }
    if (comma == value.size()) break;
    at = comma + 1;
  }
  ORBIT_CHECK(!policy.any_ || policy.origins_.empty(),
              "serve: argument '--allow-origin': * allows every origin already: give it alone, or list origins");
  return policy;
}

std::optional<std::string> CorsPolicy::allowed(const std::string& origin) const {
  if (origin.empty() || !enabled()) return std::nullopt;
  if (any_) return std::string("*");
  std::string problem;
  const auto normalized = normalize_origin(origin, &problem);
  if (!normalized || std::find(origins_.begin(), origins_.end(), *normalized) == origins_.end()) return std::nullopt;
  return origin;
}

HeaderFields CorsPolicy::answer_fields(const std::string& origin) const {
  if (!enabled()) return {};
  HeaderFields fields = {{"Vary", "Origin"}};
  const auto grant = allowed(origin);
  if (!grant) return fields;
  fields.emplace_back("Access-Control-Allow-Origin", *grant);
  if (!any_) fields.emplace_back("Access-Control-Allow-Credentials", "true");
  fields.emplace_back("Access-Control-Expose-Headers", kCorsExposeHeaders);
  return fields;
}

HeaderFields CorsPolicy::preflight_fields(const std::string& origin, const std::string& methods,
                                          const std::string& requested_headers) const {
  if (!allowed(origin)) return {};
  const std::string asked = trim(requested_headers);
  return {{"Access-Control-Allow-Methods", methods},
          {"Access-Control-Allow-Headers", asked.empty() ? std::string(kCorsAllowHeaders) : asked},
          {"Access-Control-Max-Age", std::to_string(kCorsMaxAgeSeconds)},
          {"Vary", "Access-Control-Request-Headers"}};
}

}  // namespace orbit::serve
