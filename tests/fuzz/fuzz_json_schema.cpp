// libFuzzer target for constrained decoding's schema compiler (sdk/src/constrain/): every JSON Schema a
// request's tools or response_format carries, regular expressions and formats included. The input is a
// schema's text; or, after a first byte 'P', a pattern for {"type": "string", "pattern": ...}. A schema must be
// refused with orbit::Error or compiled; a compiled one must have a finite shortest text, and a walk that
// always takes the byte leaving the fewest bytes to write never meets a dead end and ends in a whole match
// that is JSON.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "orbit/common/error.h"
#include "orbit/constraint.h"

namespace {

std::string schema_of(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.empty() || text[0] != 'P') return text;
  nlohmann::json s{{"type", "string"}, {"pattern", text.substr(1)}};
  return s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void walk(const std::shared_ptr<const orbit::Constraint>& c) {
  orbit::ConstraintMatcher m(c);
  constexpr std::size_t kLimit = 2048;
  while (!m.complete() && m.text().size() < kLimit) {
    int best = -1;
    int64_t fewest = 0;
    for (int b = 0; b < 256; ++b) {
      const char ch = static_cast<char>(b);
      const int64_t left = m.min_bytes_after(std::string_view(&ch, 1));
      if (left >= 0 && (best < 0 || left < fewest)) best = b, fewest = left;
    }
    if (best < 0) std::abort();  // a dead end: not complete, and no byte goes on
    const char ch = static_cast<char>(best);
    if (!m.advance(std::string_view(&ch, 1))) std::abort();
  }
  if (!m.complete()) return;  // longer than the walk's limit
  if (!c->matches(m.text())) std::abort();
  if (nlohmann::json::parse(m.text(), nullptr, false).is_discarded()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  std::shared_ptr<const orbit::Constraint> c;
  try {
    c = orbit::Constraint::json_schema(schema_of(data, size));
  } catch (const orbit::Error&) {
    return 0;
  }
  if (c->min_bytes() < 0 || c->min_bytes() > (int64_t{1} << 40)) std::abort();
  walk(c);
  return 0;
}
