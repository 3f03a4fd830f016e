// JSON text read as written: where each character falls (between tokens or in a string), the spans of values
// and members, and text cut short. The tool call parsers (tool_calls.cpp, tool_calls_cut.cpp) read a model's
// calls with these so that arguments come back as the model wrote them (numbers of any length, escapes),
// never converted through a JSON value. Torch-free; no state beyond the objects made here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orbit::json_spans {

// JSON nesting accepted in a call (deeper is malformed, never a crash).
inline constexpr int kMaxDepth = 64;

// Where each character of a JSON text falls, read one at a time: between tokens, or a string's opening quote,
// inside, or closing quote.
class JsonScan {
 public:
  enum class At { kOutside, kOpen, kInside, kClose };
  At step(char c);

 private:
  bool in_string_ = false, escaped_ = false;
};

bool is_space(char c);
std::string trim(std::string_view s);
// The first index at or after `at` that is not whitespace (t.size() when none is).
std::size_t skip_space(std::string_view t, std::size_t at);

// `text` as JSON, or a discarded value when it is not JSON or nests deeper than kMaxDepth.
nlohmann::json parse_json(std::string_view text);

// True when `text` is the start of a JSON document that ends before its value does: every byte read was
// valid JSON and the parser failed only for want of more (an answer cut by max_tokens inside a call).
bool cut_short(std::string_view text);

// One past the end of the value (or object key) that starts at `at`; t.size() when `t` ends first.
std::size_t value_end(std::string_view t, std::size_t at);

// The members of the complete object or the items of the complete array `t` as written: (the key with its
// quotes, "" for an item; the value). Any other text gives some list, never a read past its end.
std::vector<std::pair<std::string_view, std::string_view>> raw_children(std::string_view t);

// `raw` without the whitespace between its tokens (as json::dump() writes), each token as written.
std::string compact(std::string_view raw);

}  // namespace orbit::json_spans
