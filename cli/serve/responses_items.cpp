#include "serve/responses_items.h"

#include <algorithm>
#include <cstdlib>

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

ApiError bad_param(const std::string& param, const std::string& message) {
  return api_error(400, param + ": " + message, "invalid_request_error", "", param);
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
  ItemsPage out;
  std::string order = "desc", after;
  int64_t limit = 20;
  for (const auto& [name, value] : params) {
    if (params.count(name) > 1) return {{}, response_items::bad_param(name, "given more than once")};
    if (name == "order") {
      if (value != "asc" && value != "desc") return {{}, response_items::bad_param(name, "must be 'asc' or 'desc'")};
      order = value;
    } else if (name == "limit") {
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 100) {
        return {{}, response_items::bad_param(name, "must be an integer from 1 to 100, got '" + value + "'")};
      }
      limit = n;
    } else if (name == "after") {
      after = value;
    } else {
      return {
          {},
          api_error(400, name + ": this query parameter is not supported by this server (order, limit and after are)",
                    "invalid_request_error", "unsupported_parameter", name)};
    }
  }
  json items = input_items(response);
  if (order == "desc") std::reverse(items.begin(), items.end());
  std::size_t begin = 0;
  if (!after.empty()) {
    const auto at = std::find_if(items.begin(), items.end(), [&](const json& i) { return i["id"] == after; });
    if (at == items.end()) return {{}, response_items::bad_param("after", "no item '" + after + "' in this list")};
    begin = static_cast<std::size_t>(at - items.begin()) + 1;
  }
  const std::size_t end = std::min(items.size(), begin + static_cast<std::size_t>(limit));
  json data = json::array();
  for (std::size_t i = begin; i < end; ++i) data.push_back(items[i]);
  out.body = {{"object", "list"},
              {"data", data},
              {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
              {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
              {"has_more", end < items.size()}};
  return out;
}

std::optional<ApiError> retrieve_query_problem(const std::multimap<std::string, std::string>& params) {
  for (const auto& [name, value] : params) {
    if (params.count(name) > 1 && name != "include[]") return response_items::bad_param(name, "given more than once");
    if (name == "include_obfuscation") {
      if (value != "true" && value != "false") return response_items::bad_param(name, "must be 'true' or 'false'");
    } else if (name == "stream") {
      if (value == "false") continue;
      if (value != "true") return response_items::bad_param(name, "must be 'true' or 'false'");
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
