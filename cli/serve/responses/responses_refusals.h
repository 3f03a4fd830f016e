// The Responses parser's refusals (responses_api.h lists what is refused and how): the modes and features this
// server does not have, chat's own fields, the hints taken only when neutral, and any field the API does not
// have. Throws RequestInvalid (request_invalid.h), which parse_responses_request catches.
#pragma once

#include "serve/responses/responses_fields.h"

namespace orbit::serve::responses_parser {

// The include item that asks for the answer's log probabilities: the one include served (copy_sampling).
inline constexpr const char* kIncludeLogprobs = "message.output_text.logprobs";

// What this server cannot honour, refused unless neutral, and any field this API does not have. Checked in
// this order, so a body with several faults is refused naming the first: the unserved modes (background,
// reasoning, truncation, include, conversation, prompt, max_tool_calls), the samplers chat refuses and chat's
// own fields, the hints (service_tier, context_management, the cache and safety hints, stream_options), then
// the unknown fields.
void refuse_unsupported(const ojson& body);

}  // namespace orbit::serve::responses_parser
