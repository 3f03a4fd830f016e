#include "serve/stored/store_write.h"

#include <algorithm>

namespace orbit::serve {

ApiError store_refusal(const std::string& what, const StoreWrite& check) {
  return api_error(507,
                   "store: the " + what +
                       " store cannot take a write, so this request, which asks for its answer to be stored, is "
                       "refused before it runs (" +
                       check.error + "); send it again once the store has room, or with store false",
                   "server_error", "store_unavailable", "store");
}

nlohmann::json store_notice(const StoreWrite& write) {
  if (write.ok) return {{"stored", true}};
  nlohmann::json notice{{"stored", false}, {"store_error", write.error}, {"store_pending", write.held}};
  if (write.held) notice["store_journaled"] = write.journaled;
  return notice;
}

std::vector<std::pair<std::string, std::string>> store_header_fields(const StoreWrite& write) {
  if (write.ok) return {{"Orbit-Stored", "true"}};
  std::vector<std::pair<std::string, std::string>> fields = {{"Orbit-Stored", "false"},
                                                             {"Orbit-Store-Error", header_value(write.error)},
                                                             {"Orbit-Store-Pending", write.held ? "true" : "false"}};
  if (write.held) fields.emplace_back("Orbit-Store-Journaled", write.journaled ? "true" : "false");
  return fields;
}

std::string header_value(const std::string& text) {
  std::string out = text.substr(0, 512);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }, ' ');
  return out;
}

}  // namespace orbit::serve
