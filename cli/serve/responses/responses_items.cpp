#include "serve/responses/responses_items.h"

#include "serve/stored/cursor_page.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace response_items {

json message_item(const std::string& id, const ChatMessage& m) {
  const bool answer = m.role == "assistant";
  json part = {{"type", answer ? "output_text" : "input_text"}, {"text", m.content}};
  if (answer) part["annotations"] = json::array();
  return {{"type", "message"},
          {"id", id},
          {"role", m.role},
          {"status", "completed"},
          {"content", json::array({std::move(part)})}};
}

}  // namespace response_items

json input_items(const StoredResponse& response) {
  const std::string digits = response.id.substr(response.id.find('_') + 1);
  json items = json::array();
  const std::size_t inputs = response.added.empty() ? 0 : response.added.size() - 1;  // the last is the answer
  for (std::size_t k = 0; k < inputs; ++k) {
    const ChatMessage& m = response.added[k];
    const std::string place = digits + "_" + std::to_string(k);
    if (m.role == "tool") {
      items.push_back({{"type", "function_call_output"},
                       {"id", "fco_" + place},
                       {"call_id", m.tool_call_id.value_or("")},
                       {"output", m.content},
                       {"status", "completed"}});
      continue;
    }
    if (m.reasoning_content) {  // read from a reasoning item before this turn: listed back as one
      items.push_back({{"type", "reasoning"},
                       {"id", "rs_" + place},
                       {"summary", json::array()},
                       {"content", json::array({{{"type", "reasoning_text"}, {"text", *m.reasoning_content}}})},
                       {"status", "completed"}});
    }
    if (m.role != "assistant" || !m.content.empty() || m.tool_calls.empty()) {
      items.push_back(response_items::message_item("msg_" + place, m));
    }
    for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
      const ChatToolCall& call = m.tool_calls[c];
      items.push_back({{"type", "function_call"},
                       {"id", "fc_" + place + "_" + std::to_string(c)},
                       {"call_id", call.id},
                       {"name", call.name},
                       {"arguments", call.arguments},
                       {"status", "completed"}});
    }
  }
  return items;
}

ItemsPage input_items_page(const StoredResponse& response, const std::multimap<std::string, std::string>& params) {
  const Parsed<PageQuery> query = read_page_query(params, "desc", "order, limit and after are");
  if (!query.ok()) return {{}, query.error};
  Parsed<json> page = json_page(input_items(response), *query.value);
  if (!page.ok()) return {{}, page.error};
  return {std::move(*page.value), std::nullopt};
}

std::optional<ApiError> retrieve_query_problem(const std::multimap<std::string, std::string>& params) {
  for (const auto& [name, value] : params) {
    if (params.count(name) > 1 && name != "include[]") return bad_query_param(name, "given more than once");
    if (name == "include_obfuscation") {
      if (value != "true" && value != "false")
        return bad_query_param(name, "must be 'true' or 'false'", "invalid_value");
    } else if (name == "stream") {
      if (value == "false") continue;
      if (value != "true") return bad_query_param(name, "must be 'true' or 'false'", "invalid_value");
      return api_error(400,
                       "stream: streaming a stored response is not served (it replays a background response's "
                       "events, and this server runs none): GET it without stream for the whole response",
                       "invalid_request_error", "unsupported_parameter", name);
    } else {
      const std::string why = name == "include" || name == "include[]"
                                  ? "a stored response is returned as it was created: give include when creating it"
                              : name == "starting_after" ? "it resumes a streamed retrieve, which is not served"
                                                         : "unknown (stream=false and include_obfuscation are served)";
      return api_error(400, name + ": this query parameter is not supported by this server: " + why,
                       "invalid_request_error", "unsupported_parameter", name);
    }
  }
  return std::nullopt;
}

}  // namespace orbit::serve
