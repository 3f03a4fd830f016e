// libFuzzer target for constrained decoding's schema compiler (sdk/src/constrain/): every JSON Schema a
// request's tools or response_format carries, regular expressions and formats included. The input is a
// schema's text; or, after a first byte 'P', a pattern for {"type": "string", "pattern": ...}. A schema must be
// refused with orbit::Error or compiled; a compiled one must have a finite shortest text, and a walk that
// always takes the byte leaving the fewest bytes to write never meets a dead end and ends in a whole match
// that is JSON. Along the walk's first bytes, TokenConstraint's budgeted mask over a small vocabulary (every
// byte, and pieces with '"', ',' and escapes) must keep exactly the tokens whose fewest bytes after them,
// each token advanced on a copy of the matcher, fit, at budgets from the least need to past the largest.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/constraint.h"

namespace {

std::string schema_of(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.empty() || text[0] != 'P') return text;
  nlohmann::json s{{"type", "string"}, {"pattern", text.substr(1)}};
  return s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const std::shared_ptr<const orbit::TokenVocabulary>& budget_vocabulary() {
  static const auto v = [] {
    orbit::TokenBytes b;
    for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
    for (const char* p : {"\",\"", "\", \"", "\":", ",\"", "\"a\"", "a\"", "a\":", "ab", "\\u00", "\\u0061", "a,b",
                          "{\"", "\"}", ",\"a\":", "\"\"", "\\\"", "0,", "1}"}) {
      b.text.emplace_back(p);
    }
    return orbit::TokenVocabulary::from_bytes(std::move(b));
  }();
  return v;
}

// The budgeted mask of `tc` against each allowed token's exact need, at budgets from the least to one past
// the most (at most 8 of them).
void check_budget(const orbit::TokenConstraint& tc, const orbit::TokenVocabulary& v) {
  const orbit::TokenMask all = tc.allowed();
  std::vector<int64_t> need(static_cast<std::size_t>(v.size()), -1);
  int64_t least = INT64_MAX, most = 0;
  for (int64_t id = 0; id < v.size(); ++id) {
    if (!all.allows(id)) continue;
    orbit::ConstraintMatcher after = tc.matcher();
    if (!after.advance(*v.bytes(id))) std::abort();  // the mask allowed a token the matcher refuses
    need[static_cast<std::size_t>(id)] = after.min_bytes_to_complete();
    least = std::min(least, need[static_cast<std::size_t>(id)]);
    most = std::max(most, need[static_cast<std::size_t>(id)]);
  }
  if (least == INT64_MAX) return;
  for (int64_t r = least; r <= most + 1; r += std::max<int64_t>(1, (most + 1 - least) / 7)) {
    const orbit::TokenMask budgeted = tc.allowed(r);
    for (int64_t id = 0; id < v.size(); ++id) {
      const bool want = all.allows(id) && need[static_cast<std::size_t>(id)] <= r;
      if (budgeted.allows(id) != want) std::abort();  // kept a token that does not fit, or dropped one that does
    }
  }
}

void walk(const std::shared_ptr<const orbit::Constraint>& c) {
  orbit::ConstraintMatcher m(c);
  orbit::TokenConstraint tc(c, budget_vocabulary());
  constexpr std::size_t kLimit = 2048, kBudgetBytes = 24;
  while (!m.complete() && m.text().size() < kLimit) {
    if (m.text().size() < kBudgetBytes) check_budget(tc, *budget_vocabulary());
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
    if (m.text().size() <= kBudgetBytes) tc.accept_text(std::string_view(&ch, 1));
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
