// The pieces parse_tool_calls (tool_calls.cpp) reads a text's calls with, shared with ToolCallReader
// (tool_call_reader.cpp), which reads a growing text's calls with the same rules.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "orbit/tool_calls.h"
#include "text/json_spans.h"

namespace orbit::tool_call_parts {

inline constexpr std::string_view kHermesOpen = "<tool_call>";
inline constexpr std::string_view kHermesClose = "</tool_call>";
inline constexpr std::string_view kMistralMark = "[TOOL_CALLS]";
inline constexpr std::string_view kPythonTag = "<|python_tag|>";

// One call from {"name": ..., "arguments" | "parameters": {...}, "id"?} (`v` parsed, `raw` that object as
// written); false when it is not one. The arguments are kept as written, less the whitespace between tokens.
bool call_from(const nlohmann::json& v, std::string_view raw, ChatToolCall* call);

// The call `raw` (a call's JSON text that the answer ended in, maybe whole) as far as it was written, r->cut
// and r->cut_name_whole saying how far; false when it is not the start of one whose name had begun (nothing a
// client could act on: and in Llama 3's format, which has no mark, a cut JSON answer must not pass for a call).
bool cut_call_from(const std::string& raw, ChatToolCall* call, ToolCallParse* r);

// The length of the longest suffix of `text` that is a proper prefix of `marker` (a mark cut at the end).
std::size_t partial_marker(std::string_view text, std::string_view marker);

// Where the Hermes block whose call starts at `body` ends: the first "</tool_call>" at or after `body` before
// which the block's text is a call (read into *call). The mark may also stand inside the call's strings (an
// argument holding "</tool_call>"): a mark the call's text is not whole at is passed. npos when none is.
std::size_t hermes_close(std::string_view text, std::size_t body, ChatToolCall* call);

// Hermes' blocks in `text`, read from its first byte (parse_tool_calls' kHermes): each ends at hermes_close.
ToolCallParse parse_hermes(std::string_view text, CutToolCall cut);

// The first ';' at or after `from` in Llama 3's JSON text that separates two calls: outside strings and at
// the depth of `from` (which must be between calls, or the text's start); npos when there is none.
std::size_t llama3_separator(std::string_view json_text, std::size_t from);

// llama3_separator over a text that grows: find() resumes where the last one stopped, so each byte is scanned
// once however often it is asked. Also notes the first NUL byte it passes. A value; once find() returns a
// separator, a scan past it is a new SeparatorScan.
class SeparatorScan {
 public:
  explicit SeparatorScan(std::size_t from) : from_(from), at_(from) {}
  // llama3_separator(text, from()) of `text`, which holds the text the last find() was given as its prefix.
  std::size_t find(std::string_view text);
  std::size_t from() const { return from_; }
  // The first NUL byte at or after from() and before the separator found (or the text's end), npos if none.
  std::size_t first_nul() const { return nul_; }

 private:
  std::size_t from_;
  std::size_t at_;  // text[from_, at_) is scanned, no separator in it
  int depth_ = 0;
  json_spans::JsonScan scan_;
  std::size_t nul_ = std::string_view::npos;
};

}  // namespace orbit::tool_call_parts
