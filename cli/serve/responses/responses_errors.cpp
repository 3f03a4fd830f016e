#include "serve/responses/responses_errors.h"

#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orbit::serve {

namespace {

// The calls `earlier` made, in order, and the ones its tool messages answered.
void earlier_calls(const std::vector<ChatMessage>& earlier, std::vector<std::string>& made,
                   std::set<std::string>& answered) {
  for (const ChatMessage& m : earlier) {
    for (const ChatToolCall& c : m.tool_calls) made.push_back(c.id);
    if (m.tool_call_id) answered.insert(*m.tool_call_id);
  }
}

}  // namespace

std::optional<ApiError> call_pairing_error(const std::vector<CallItem>& items,
                                           const std::vector<ChatMessage>& earlier) {
  std::vector<std::string> made;  // in order: `earlier`'s, then the input's
  std::set<std::string> answered;
  earlier_calls(earlier, made, answered);
  std::set<std::string> calls(made.begin(), made.end());
  std::map<std::string, std::size_t> answered_at;  // a call answered in the input: the output's index
  for (const CallItem& o : items) {
    if (!o.output) {
      made.push_back(o.call_id);
      calls.insert(o.call_id);
      continue;
    }
    const std::string at = "input[" + std::to_string(o.item) + "].call_id";
    if (!calls.count(o.call_id)) {
      return api_error(400,
                       at + ": no tool call found for function call output with call_id '" + o.call_id +
                           "' (no function_call item before it, in the input or the previous response's "
                           "conversation, has that call_id)",
                       "invalid_request_error", "", at);
    }
    if (answered.count(o.call_id) || answered_at.count(o.call_id)) {
      const auto first = answered_at.find(o.call_id);
      return api_error(400,
                       "Duplicate function_call_output for call_id '" + o.call_id +
                           "'. Each function_call must have exactly one matching function_call_output (" + at +
                           " answers it again, after " +
                           (first != answered_at.end() ? "input[" + std::to_string(first->second) + "]"
                                                       : std::string("the previous response's conversation")) +
                           ")",
                       "invalid_request_error", "", at);
    }
    answered_at.emplace(o.call_id, o.item);
  }
  for (const std::string& id : made) {
    if (!answered.count(id) && !answered_at.count(id)) {
      return api_error(400, "No tool output found for function call " + id + ".", "invalid_request_error", "", "input");
    }
  }
  return std::nullopt;
}

namespace responses_names {

// The index in `text` between the '[' at `open` and the next ']', and where the text after that ']' starts;
// nullopt when text[open] is not '[' or no decimal index follows.
std::optional<std::pair<std::size_t, std::size_t>> index_at(std::string_view text, std::size_t open) {
  if (open >= text.size() || text[open] != '[') return std::nullopt;
  const std::size_t close = text.find(']', open);
  if (close == std::string_view::npos || close == open + 1) return std::nullopt;
  std::size_t index = 0;
  const auto [end, ec] = std::from_chars(text.data() + open + 1, text.data() + close, index);
  if (ec != std::errc() || end != text.data() + close) return std::nullopt;
  return std::make_pair(index, close + 1);
}

std::string item_at(std::size_t k) { return "input[" + std::to_string(k) + "]"; }

// The field of a function_call item, input[k], that a tool call's field `rest` (after "tool_calls[j]") is.
std::string call_field(std::size_t k, std::string_view rest) {
  static const std::pair<std::string_view, const char*> kFields[] = {
      {".id", ".call_id"}, {".function.name", ".name"}, {".function.arguments", ".arguments"}};
  for (const auto& [chat, responses] : kFields) {
    if (rest == chat) return item_at(k) + responses;
  }
  return item_at(k);  // a field the item does not have: the item
}

// The Responses field of chat field `rest` (what follows "messages[i]") of a message read from `o`.
std::string origin_field(const MessageOrigin& o, std::string_view rest) {
  using From = MessageOrigin::From;
  if (o.from == From::instructions) return "instructions";
  if (o.from == From::text) return "input";
  if (rest.rfind(".tool_calls", 0) == 0) {
    const auto call = index_at(rest, 11);
    if (call && call->first < o.calls.size()) return call_field(o.calls[call->first], rest.substr(call->second));
  }
  if ((rest == ".reasoning_content" || rest == ".reasoning") && o.reasoning) return item_at(*o.reasoning);
  if (o.from == From::calls) return item_at(o.calls.front());  // its other fields are none of an item's
  const bool content = rest == ".content" || rest.rfind(".content[", 0) == 0;
  if (o.from == From::output) {
    if (rest == ".tool_call_id") return item_at(o.item) + ".call_id";
    return item_at(o.item) + (content ? ".output" + std::string(rest.substr(8)) : "");
  }
  return item_at(o.item) + (content || rest == ".role" ? std::string(rest) : "");
}

// The Responses field of a chat message's field `param` ("messages[i]..."), or nullopt when it names none.
std::optional<std::string> message_field(std::string_view param, const std::vector<MessageOrigin>& origins) {
  if (param.rfind("messages", 0) != 0) return std::nullopt;
  const auto message = index_at(param, 8);
  if (!message) return std::nullopt;
  if (message->first >= origins.size()) return "input";
  return origin_field(origins[message->first], param.substr(message->second));
}

}  // namespace responses_names

ApiError responses_error(ApiError error, const std::vector<MessageOrigin>& origins) {
  if (const auto to = responses_names::message_field(error.param, origins)) {
    if (error.message.rfind(error.param + ":", 0) == 0) error.message.replace(0, error.param.size(), *to);
    error.param = *to;
    return error;
  }
  static const std::pair<const char*, const char*> kNames[] = {
      {"messages", "input"},
      {"max_tokens", "max_output_tokens"},
      // The Responses format is flat ({type, name, schema, strict}) where chat's nests it under json_schema.
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      // Responses' allowed_tools choice is {type, mode, tools} where chat's nests mode and tools under allowed_tools.
      {"tool_choice.allowed_tools", "tool_choice"}};
  for (const auto& [chat, responses] : kNames) {
    const std::string from = chat;
    if (error.param.compare(0, from.size(), from) != 0) continue;
    error.param = responses + error.param.substr(from.size());
    if (error.message.compare(0, from.size(), from) == 0) error.message = responses + error.message.substr(from.size());
    break;
  }
  // A chat tool's "tools[i].function.x" is the Responses tool's "tools[i].x" (chat_tools keeps the order).
  const std::size_t fn = error.param.rfind("tools[", 0) == 0 ? error.param.find("].function.") : std::string::npos;
  if (fn != std::string::npos && error.param.find_first_not_of("0123456789", 6) == fn) {
    const std::string at = error.param.substr(0, fn + 1);
    error.param.erase(fn + 1, 9);
    if (error.message.compare(0, at.size() + 10, at + ".function.") == 0) error.message.erase(fn + 1, 9);
  }
  return error;
}

}  // namespace orbit::serve
