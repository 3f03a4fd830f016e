// A tool call's arguments sent back in a conversation (a chat message's tool_calls[].function.arguments, a
// Responses function_call item's arguments), checked to reach the chat template as written. The renderer
// (runtime::ChatToolCall) gives a template JSON arguments parsed and any other text (a call max_tokens cut,
// as this server and OpenAI answer one) as a string. Parsed JSON would reach it altered where an object gives
// a key twice ({"a":1,"a":2} is rendered {"a": 2}), so that is refused, as is JSON nested past the input bound
// (json_input.h). Numbers are not: the renderer keeps an integer past 64 bits as written.
#pragma once

#include <string>

namespace orbit::serve {

// Throws RequestInvalid (request_invalid.h) naming `param` when `text` is JSON the template would not see as
// written; any other text is taken.
void check_call_arguments(const std::string& text, const std::string& param);

}  // namespace orbit::serve
