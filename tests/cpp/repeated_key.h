// The first key an object of a JSON text repeats, or "" when none does: what a parser that keeps the last
// value of a key hides (tests of constrained decoding's repeated keys).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "orbit/common/json_repeated_key.h"

namespace orbit::test {

// `text` must be JSON (nlohmann::json::parse throws otherwise).
inline std::string repeated_key(const std::string& text) {
  const nlohmann::json parsed = nlohmann::json::parse(text);
  (void)parsed;
  const std::optional<RepeatedKey> found = first_repeated_key(text);
  return found ? found->key : std::string();
}

}  // namespace orbit::test
