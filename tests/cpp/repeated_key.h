// The first key an object of a JSON text repeats, or "" when none does: what a parser that keeps the last
// value of a key hides (tests of constrained decoding's repeated keys).
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace orbit::test {

// `text` must be JSON (nlohmann::json::parse throws otherwise).
inline std::string repeated_key(const std::string& text) {
  using Json = nlohmann::json;
  std::vector<std::set<std::string>> open;
  std::string found;
  const Json::parser_callback_t note = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open.emplace_back();
    if (event == Json::parse_event_t::object_end) open.pop_back();
    if (event == Json::parse_event_t::key && !open.back().insert(parsed.get<std::string>()).second && found.empty()) {
      found = parsed.get<std::string>();
    }
    return true;
  };
  const Json parsed = Json::parse(text, note);
  (void)parsed;
  return found;
}

}  // namespace orbit::test
