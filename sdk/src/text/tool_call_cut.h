// A tool call cut short: what an answer ended by max_tokens inside a call had written of it
// (parse_tool_calls with CutToolCall::kCall, orbit/tool_calls.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "orbit/sync.h"

namespace orbit::tool_call_cut {

struct CutCall {
  ChatToolCall call;        // the name as far as it was written, the arguments' JSON text so far; an id
  bool named = false;       // the object's "name" had begun: its key whole, a character of its value written
  bool name_whole = false;  // ... and its string closed: the name is the one meant, only what follows was cut
  // A member no call has: a key other than "name", "arguments", "parameters" and "id" (one cut short: the
  // start of none of them), a name that is not a string, or arguments that are neither an object nor JSON
  // text. Such an object is no call's start (in Llama 3's format, a JSON answer's).
  bool foreign = false;
};

// The call the JSON object text `body` begins, read up to where it stops ({"name": ..., "arguments" |
// "parameters": ..., "id"?}, in any order; the arguments less the whitespace between tokens, strings decoded
// as far as they are whole). std::nullopt when `body` is not the start of an object (spaces and nothing else
// are the start of one). Each member whose value has begun is read with take_member, in order.
std::optional<CutCall> read(std::string_view body);

// One member of the object read() reads: its `key` (decoded) and its `value` as written up to where it ends
// (json_spans::value_end) or the text does; `followed`: more text comes after the value. Sets the name, the id
// (a string followed by more) or the arguments ("arguments", or "parameters" unless `*from_arguments`: the
// arguments were given under "arguments" before) of `out`; a member no call has sets out->foreign.
void take_member(const std::string& key, std::string_view value, bool followed, CutCall* out, bool* from_arguments);

// The JSON string `s` (its opening quote first, its closing one there or cut off) as far as it is whole: a
// half-written escape or UTF-8 sequence at the cut is left out, as far as 6 bytes back ("" past that).
std::string string_so_far(std::string_view s);

// `s` less a UTF-8 sequence cut at its end (a token may end inside a character); its size alone.
std::string whole_characters(std::string s);
std::size_t whole_characters_size(std::string_view s);

}  // namespace orbit::tool_call_cut
