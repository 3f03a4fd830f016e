// GET /v1/responses/{id}/input_items: a stored response's input as the Responses API's items (no model, no
// HTTP here; responses_http.cpp serves it). The input is what the response added to its conversation before
// its answer (responses_store.h): the request's input messages, its instructions excluded, as OpenAI's
// endpoint lists them:
//   an assistant turn's reasoning (read   {type: "reasoning", id, summary: [], status: "completed",
//   from a reasoning item or chat's       content: [{type: "reasoning_text", text}]}, before the turn's
//   reasoning_content)                    message or calls
//   a system, developer or user message   {type: "message", id, role, status: "completed",
//                                          content: [{type: "input_text", text}]}
//   an assistant message                  {type: "message", id, role: "assistant", status: "completed",
//                                          content: [{type: "output_text", text, annotations: []}]},
//                                         then one {type: "function_call", id, call_id, name, arguments,
//                                         status: "completed"} per tool call (none without text: the message
//                                         is left out when it has no content)
//   a tool result                         {type: "function_call_output", id, call_id, output,
//                                         status: "completed"}
// Item ids are the response's digits and the item's place: "msg_<hex>_<k>", "fc_<hex>_<k>", "fco_<hex>_<k>",
// "rs_<hex>_<k>".
// The page: {object: "list", data, first_id, last_id, has_more}; query parameters order ("desc", the
// default, or "asc"), limit (1..100, default 20) and after (an item id of this list); any other, or a bad
// value, is a 400 naming it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "serve/responses/responses_store.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

// Every input item of `response`, in input order.
nlohmann::json input_items(const StoredResponse& response);

// One page of them under the query `params` (name -> value); an error names the parameter at fault.
struct ItemsPage {
  nlohmann::json body;
  std::optional<ApiError> error;
};
ItemsPage input_items_page(const StoredResponse& response, const std::multimap<std::string, std::string>& params);

// The query of GET /v1/responses/{id}, which returns a stored response whole, as it was returned: nullopt
// when it asks for nothing else. OpenAI's retrieve also takes stream and starting_after (to replay a
// background response's events: this server runs none) and include (outputs to add): a value that would
// ask for them is a 400 naming the parameter, never a response that quietly left it out (the openai client
// reads a JSON body it asked to be streamed as a stream without events). stream=false and
// include_obfuscation (it only pads streamed events) are accepted.
std::optional<ApiError> retrieve_query_problem(const std::multimap<std::string, std::string>& params);

}  // namespace orbit::serve
