// The call a streamed answer is writing, read as it grows (ToolCallReader, tool_call_reader.cpp): what
// cut_call_from (tool_call_parts.h) reads of the call's JSON text at every length, at the cost of the bytes
// that came since the text was last extended rather than of the whole call.
//
//   {"name": "f", "arguments": {"q": "ab          cut call "f", arguments {"q":"ab     (cut_name_whole)
//   {"name": "f", "arguments": {"q": "abc"}}      the call, whole (not cut)
//   {"name": "f", "arguments": {"q": tx           no call: not JSON, now or later
//
// Three parts follow the text byte by byte: a json_spans::JsonPrefix says whether the text is cut short
// (tool_call_cut::read is taken then) or whole; the members of the call's object are found as
// tool_call_cut::read finds them, and each is read once with tool_call_cut::take_member as soon as more text
// follows its value; the member being written, when it is the arguments, keeps its compacted text (its
// decoded text first where the arguments are a JSON string) and adds only what each byte adds. Read whole
// instead, as cut_call_from reads it: a text whose object has ended (a few tokens before the call's closing
// mark or ';'), and one that starts with 0xEF (a byte order mark, which nlohmann skips). Not thread-safe;
// copyable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "orbit/tool_calls.h"
#include "text/json_prefix.h"
#include "text/json_spans.h"
#include "text/tool_call_cut.h"

namespace orbit::tool_call_parts {

class OpenCall {
 public:
  // Reads raw[fed(), raw.size()): `raw` is the call's text so far, trimmed (its first and last bytes are not
  // spaces), and the text given before is a prefix of it.
  void extend(std::string_view raw);
  std::size_t fed() const { return fed_; }
  // cut_call_from(std::string(raw), call, r), for `raw` as last extended: true with the call read, r->cut and
  // r->cut_name_whole set; false when it reads no call. With `held` (orbit/tool_calls.h: ToolCallHeld), where
  // the arguments are read as they grow under the number held->growing, the call leaves out their first
  // min(held->bytes, size) bytes; on return held->growing is their number (0: not growing) and held->bytes
  // how many were left out.
  bool read(std::string_view raw, ChatToolCall* call, ToolCallParse* r, ToolCallHeld* held = nullptr) const;
  // Gives the arguments being written a fresh number (ToolCallReading::growing): a copy's text may grow apart.
  void renumber();

 private:
  // Where tool_call_cut::read stands in the object.
  enum class Phase { kStart, kBeforeKey, kKey, kKeyClosed, kAfterKey, kAfterColon, kValue, kValueClosed, kStopped };
  // The arguments being written: their compacted text so far.
  struct Arguments {
    bool on = false;                    // the member being written is "arguments" or "parameters"
    bool string = false;                // given as a JSON string: decoded, then compacted
    std::string compact;                // compact(value so far), or compact(the string decoded so far)
    json_spans::JsonScan compact_scan;  // over the decoded string, for compact
    json_spans::StringLexer lexer;      // over the string's bytes, for where characters end
    std::size_t whole_to = 0;           // the string's bytes in raw[0, whole_to) end a character or escape ...
    std::size_t decoded_to = 0;         // ... and those in raw[0, decoded_to) are decoded into `compact`
    bool closed = false;                // the string's closing quote was read
    uint64_t number = 0;                // unique to these arguments: `compact` only grows while it holds
  };

  void member_byte(std::string_view raw, std::size_t i);
  void before_key(std::string_view raw, std::size_t i);
  void value_byte(std::string_view raw, std::size_t i);
  void arguments_byte(std::size_t i, char c, json_spans::JsonScan::At where);
  void decode_arguments(std::string_view raw);
  void settle(std::string_view raw, std::size_t end);
  std::string_view open_arguments(std::string_view raw) const;  // a prefix of arguments_.compact

  std::size_t fed_ = 0;
  bool object_ = false;  // the text starts with '{': anything else is no call (or read whole: 0xEF)
  bool whole_ = false;   // read as cut_call_from reads it
  json_spans::JsonPrefix prefix_;
  Phase phase_ = Phase::kStart;
  bool comma_ = false;           // kBeforeKey: the one ',' between members was read
  json_spans::JsonScan scan_;    // kKey, kValue: the key's or the value's bytes
  int depth_ = 0;                // kValue: nesting within the value
  std::size_t begin_ = 0;        // kKey on: where the key starts in raw; kValue on: where the value does
  std::size_t end_ = 0;          // kKeyClosed: one past the key; kValueClosed: one past the value
  std::string key_;              // kAfterKey on: the member's key, decoded
  tool_call_cut::CutCall read_;  // what the members whose values more text follows read as
  bool from_arguments_ = false;  // take_member's flag after them
  Arguments arguments_;
};

}  // namespace orbit::tool_call_parts
