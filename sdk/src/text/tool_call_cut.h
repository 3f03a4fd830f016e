// A tool call cut short: what an answer ended by max_tokens inside a call had written of it
// (parse_tool_calls with CutToolCall::kCall, orbit/tool_calls.h).
#pragma once

#include <optional>
#include <string_view>

#include "orbit/sync.h"

namespace orbit::tool_call_cut {

struct CutCall {
  ChatToolCall call;        // the name as far as it was written, the arguments' JSON text so far; an id
  bool named = false;       // the object's "name" had begun: its key whole, a character of its value written
  bool name_whole = false;  // ... and its string closed: the name is the one meant, only what follows was cut
};

// The call the JSON object text `body` begins, read up to where it stops ({"name": ..., "arguments" |
// "parameters": ..., "id"?}, in any order; the arguments less the whitespace between tokens, strings decoded
// as far as they are whole). std::nullopt when `body` is not the start of an object (spaces and nothing else
// are the start of one).
std::optional<CutCall> read(std::string_view body);

}  // namespace orbit::tool_call_cut
