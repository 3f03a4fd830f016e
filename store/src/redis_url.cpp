// Redis URLs (orbit/store/redis_client.h): parsing, redaction, the server identity they name, and TLS settings from
// the environment; and the host:port form of cluster replies (redis_url.h).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/store/redis_client.h"
#include "redis_url.h"

namespace orbit::store {

namespace {

// RFC 3986 percent-decoding of a URL's user or password ("p%40ss" is "p@ss"). Throws naming `what` (never
// the text itself: it may be a password) on a '%' not followed by two hex digits.
std::string percent_decode(const std::string& url, const std::string& text, const char* what) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    const int high = i + 2 < text.size() ? hex(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? hex(text[i + 2]) : -1;
    ORBIT_CHECK(high >= 0 && low >= 0,
                "remote '" << url << "': the " << what << " has a '%' not followed by two hex digits");
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

}  // namespace

// host:port, [IPv6]:port, or a bare IPv6 address with its port after the last ':' (as MOVED and CLUSTER
// SLOTS replies name IPv6 nodes).
RedisEndpoint parse_endpoint(const std::string& url, const std::string& text) {
  RedisEndpoint e;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    ORBIT_CHECK(close != std::string::npos && close > 1 && close + 1 < text.size() && text[close + 1] == ':',
                "remote '" << url << "': '" << text << "' is not [IPv6 address]:port");
    e.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    ORBIT_CHECK(colon != std::string::npos && colon > 0, "remote '" << url << "': '" << text << "' is not host:port");
    e.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  const long value = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  ORBIT_CHECK(!port.empty() && end && *end == '\0' && errno == 0 && value >= 1 && value <= 65535,
              "remote '" << url << "': port '" << port << "' is not a number in 1..65535");
  e.port = static_cast<int>(value);
  return e;
}

std::string redact_redis_url(const std::string& text) {
  const auto scheme = text.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  // The last '@': a host, port or database never holds one, and a password given with an unescaped '/' or '@'
  // is still all before it (bounded at the first '/', "pass/wo@rd" would show "wo").
  const auto at = text.rfind('@');
  if (at == std::string::npos || at < start) return text;
  const std::string userinfo = text.substr(start, at - start);
  const auto colon = userinfo.find(':');
  const std::string user = colon == std::string::npos ? "" : userinfo.substr(0, colon);
  return text.substr(0, start) + user + ":***" + text.substr(at);
}

RedisUrl parse_redis_url(const std::string& given) {
  RedisUrl out;
  out.text = redact_redis_url(given);
  const std::string& url = out.text;  // every message below names the URL without its password
  const auto scheme_end = given.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : given.substr(0, scheme_end);
  ORBIT_CHECK(scheme == "redis" || scheme == "rediss" || scheme == "redis-cluster" || scheme == "rediss-cluster",
              "remote '" << url
                         << "': unknown scheme (expected redis://host:port[/db] or "
                            "redis-cluster://host:port[,host:port...], or rediss:// and rediss-cluster:// for TLS)");
  out.cluster = scheme.find("cluster") != std::string::npos;
  out.tls = scheme.rfind("rediss", 0) == 0;
  std::string rest = given.substr(scheme_end + 3);
  const auto at = rest.rfind('@');  // the last, as redact_redis_url reads it
  if (at != std::string::npos) {    // [user:]password@
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    out.user = percent_decode(url, colon == std::string::npos ? "" : userinfo.substr(0, colon), "user");
    out.password = percent_decode(url, colon == std::string::npos ? userinfo : userinfo.substr(colon + 1), "password");
    ORBIT_CHECK(!out.password.empty(), "remote '" << url << "': an empty password before '@'");
  }
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      ORBIT_CHECK(!out.cluster, "remote '" << url << "': a cluster has only database 0");
      char* end = nullptr;
      errno = 0;
      const long value = std::strtol(db.c_str(), &end, 10);
      ORBIT_CHECK(end && *end == '\0' && errno == 0 && value >= 0 && value < 1 << 20,
                  "remote '" << url << "': database '" << db << "' is not a number >= 0");
      out.db = static_cast<int>(value);
    }
  }
  ORBIT_CHECK(!rest.empty(), "remote '" << url << "': no host:port");
  std::size_t start = 0;
  while (start <= rest.size()) {
    const auto comma = rest.find(',', start);
    const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    ORBIT_CHECK(!item.empty(), "remote '" << url << "': an empty host:port in the list");
    out.nodes.push_back(parse_endpoint(url, item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  ORBIT_CHECK(out.cluster || out.nodes.size() == 1,
              "remote '" << url << "': " << (out.tls ? "rediss" : "redis") << ":// takes one host:port (use "
                         << (out.tls ? "rediss" : "redis") << "-cluster:// for several)");
  return out;
}

std::string redis_server_identity(const std::string& url) {
  RedisUrl parsed;
  try {
    parsed = parse_redis_url(url);
  } catch (const orbit::Error&) {
    return url;
  }
  std::vector<std::string> nodes;
  for (RedisEndpoint node : parsed.nodes) {
    for (char& c : node.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    nodes.push_back(node.str());
  }
  std::sort(nodes.begin(), nodes.end());
  std::string out = std::string(parsed.tls ? "rediss" : "redis") + (parsed.cluster ? "-cluster" : "") + "://";
  for (std::size_t i = 0; i < nodes.size(); ++i) out += (i ? "," : "") + nodes[i];
  return out + "/" + std::to_string(parsed.db);
}

RedisTlsOptions redis_tls_from_environment() {
  RedisTlsOptions o;
  auto env = [](const char* name, std::string* to) {
    const char* v = std::getenv(name);
    if (v != nullptr) *to = v;
  };
  env("ORBIT_REDIS_TLS_CA_FILE", &o.ca_file);
  env("ORBIT_REDIS_TLS_CA_DIR", &o.ca_dir);
  env("ORBIT_REDIS_TLS_CERT_FILE", &o.cert_file);
  env("ORBIT_REDIS_TLS_KEY_FILE", &o.key_file);
  const char* verify = std::getenv("ORBIT_REDIS_TLS_VERIFY");
  if (verify != nullptr && std::string(verify) == "0") o.verify_peer = false;
  return o;
}

}  // namespace orbit::store
