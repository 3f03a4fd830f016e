// Session ids: what one may hold, and the session a request's `user` names (serve_api.h).
#include <string>
#include <string_view>

#include "orbit/common/sha256.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

// Two namespaces that cannot meet: a valid session id outside "user-" is its own session; any other `user`
// (bytes a session id cannot hold, or a name starting with "user-") is "user-" and the first 128 bits of its
// SHA-256 in hex. So no chosen `user` shares another's session unless SHA-256 collides on 128 bits.
std::string session_for_user(std::string_view user) {
  static constexpr std::string_view kHashed = "user-";
  if (user.empty()) return "";
  if (session_id_problem(user).empty() && user.substr(0, kHashed.size()) != kHashed) return std::string(user);
  return std::string(kHashed) + sha256_hex(user).substr(0, 32);
}

std::string session_id_problem(std::string_view id) {
  if (id.empty() || id.size() > 128) return "a session id must hold 1 to 128 characters";
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '@' || c == '-';
    if (!ok) return "a session id may hold only letters, digits and . _ : @ -";
  }
  return "";
}

}  // namespace orbit::serve
