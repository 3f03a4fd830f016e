#include "serve/responses/responses_wire.h"

#include <ctime>
#include <string_view>

#include "serve/wire/serve_wire.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace responses_bodies {

// A cut answer: max_output_tokens (or the server's default) ended it, or the client left.
bool incomplete(const RunResult& r) { return r.finish_reason == "length" || r.finish_reason == "cancelled"; }

// The answer has a message item: text, or nothing else to show (no calls, none left out, no reasoning).
bool has_message(const RunResult& r) {
  return !r.text.empty() || (r.tool_calls.empty() && !r.tool_call_left_out && !(r.reasoning && !r.reasoning->empty()));
}

// The text part; with the answer's log probabilities when it has them (include message.output_text.logprobs).
json output_text(const std::string& text, const std::vector<StepLogprobs>* logprobs = nullptr) {
  json part = {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
  if (logprobs != nullptr && !logprobs->empty()) part["logprobs"] = logprobs_content(*logprobs);
  return part;
}

json message_item(const ResponseHead& head, const RunResult* result, const std::string& status, bool with_content) {
  const std::string text = result == nullptr ? "" : result->text;
  return {{"type", "message"},
          {"id", head.message_id()},
          {"status", status},
          {"role", "assistant"},
          {"content", with_content ? json::array({output_text(text, result == nullptr ? nullptr : &result->logprobs)})
                                   : json::array()}};
}

// The status of call i once the answer is over: "incomplete" for a call max_output_tokens cut (its arguments
// as far as they were written), else "completed".
const char* call_status(const RunResult& r, std::size_t i) {
  return r.tool_call_cut && i + 1 == r.tool_calls.size() ? "incomplete" : "completed";
}

// The reasoning item: {type: "reasoning", id: "rs_...", summary: [], content: [{type: "reasoning_text", text}],
// status}; content empty while in progress.
json reasoning_item(const ResponseHead& head, const std::string& text, const std::string& status, bool with_content) {
  return {{"type", "reasoning"},
          {"id", head.reasoning_id()},
          {"summary", json::array()},
          {"content", with_content ? json::array({{{"type", "reasoning_text"}, {"text", text}}}) : json::array()},
          {"status", status}};
}

// The answer has a reasoning item: a reasoning parser read some.
bool has_reasoning(const RunResult& r) { return r.reasoning && !r.reasoning->empty(); }

// The reasoning item's status at the end: "incomplete" where the answer was cut with nothing after the
// reasoning (max_output_tokens ended it inside), else "completed".
const char* reasoning_status(const RunResult& r) {
  return incomplete(r) && r.text.empty() && r.tool_calls.empty() ? "incomplete" : "completed";
}

// Function call item i; `status` "in_progress" (arguments not given yet) or call_status's.
json call_item(const ResponseHead& head, std::size_t i, const ChatToolCall& call, const std::string& status) {
  return {{"type", "function_call"},
          {"id", head.call_item_id(i)},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", status == "in_progress" ? "" : call.arguments},
          {"status", status}};
}

}  // namespace responses_bodies

std::string ResponseHead::message_id() const { return "msg_" + id.substr(id.find('_') + 1); }

std::string ResponseHead::reasoning_id() const { return "rs_" + id.substr(id.find('_') + 1); }

std::string ResponseHead::call_item_id(std::size_t i) const {
  return "fc_" + id.substr(id.find('_') + 1) + "_" + std::to_string(i);
}

json responses_usage(const RunUsage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_tokens()}}},
          {"output_tokens", usage.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens.value_or(0)}}},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"orbit", usage.to_json()["orbit"]}};
}

json response_body(const ResponseHead& head, const RunResult* result) {
  json body = {
      {"id", head.id},
      {"object", "response"},
      {"created_at", head.created_at},
      {"completed_at", nullptr},
      {"status", "in_progress"},
      {"error", nullptr},
      {"incomplete_details", nullptr},
      {"model", head.model},
      {"output", json::array()},
      {"usage", nullptr},
      {"previous_response_id", head.previous_response_id.empty() ? json(nullptr) : json(head.previous_response_id)}};
  for (const auto& [key, value] : head.echo.items()) body[key] = value;
  if (result == nullptr) return body;
  const bool cut = responses_bodies::incomplete(*result);
  body["status"] = cut ? "incomplete" : "completed";
  if (cut) body["incomplete_details"] = {{"reason", "max_output_tokens"}};
  // As OpenAI has it: completed_at only on a completed response; an incomplete one keeps null.
  if (!cut) body["completed_at"] = static_cast<int64_t>(std::time(nullptr));
  if (responses_bodies::has_reasoning(*result)) {
    body["output"].push_back(
        responses_bodies::reasoning_item(head, *result->reasoning, responses_bodies::reasoning_status(*result), true));
  }
  if (responses_bodies::has_message(*result))
    body["output"].push_back(responses_bodies::message_item(head, result, body["status"].get<std::string>(), true));
  for (std::size_t i = 0; i < result->tool_calls.size(); ++i) {
    body["output"].push_back(
        responses_bodies::call_item(head, i, result->tool_calls[i], responses_bodies::call_status(*result, i)));
  }
  body["usage"] = responses_usage(result->usage);
  return body;
}

std::string ResponseEvents::event(json body) {
  body["sequence_number"] = sequence_++;
  const std::string type = body["type"].get<std::string>();
  std::string framed = "event: " + type + "\ndata: " + dump(body) + "\n\n";
  const std::string_view delta = ".delta";
  const bool is_delta =
      type.size() > delta.size() && type.compare(type.size() - delta.size(), delta.size(), delta) == 0;
  return is_delta ? obfuscation_.pad(std::move(framed)) : framed;
}

std::string ResponseEvents::start() {
  const json body = response_body(head_, nullptr);
  std::string out = event({{"type", "response.created"}, {"response", body}});
  return out + event({{"type", "response.in_progress"}, {"response", body}});
}

std::string ResponseEvents::reasoning(const std::string& delta) {
  if (delta.empty() || reasoning_closed_) return "";
  std::string out;
  const std::string id = head_.reasoning_id();
  if (!reasoning_open_) {
    reasoning_open_ = true;
    out = event({{"type", "response.output_item.added"},
                 {"output_index", 0},
                 {"item", responses_bodies::reasoning_item(head_, "", "in_progress", false)}});
    out += event({{"type", "response.content_part.added"},
                  {"item_id", id},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  }
  reasoning_ += delta;
  return out + event({{"type", "response.reasoning_text.delta"},
                      {"item_id", id},
                      {"output_index", 0},
                      {"content_index", 0},
                      {"delta", delta}});
}

std::string ResponseEvents::close_reasoning(const std::string& status) {
  if (!reasoning_open_ || reasoning_closed_) return "";
  reasoning_closed_ = true;
  const std::string id = head_.reasoning_id();
  const json part = {{"type", "reasoning_text"}, {"text", reasoning_}};
  std::string out = event({{"type", "response.reasoning_text.done"},
                           {"item_id", id},
                           {"output_index", 0},
                           {"content_index", 0},
                           {"text", reasoning_}});
  out += event({{"type", "response.content_part.done"},
                {"item_id", id},
                {"output_index", 0},
                {"content_index", 0},
                {"part", part}});
  return out + event({{"type", "response.output_item.done"},
                      {"output_index", 0},
                      {"item", responses_bodies::reasoning_item(head_, reasoning_, status, true)}});
}

std::string ResponseEvents::open_message() {
  std::string out = close_reasoning("completed");  // the answer's text follows its reasoning
  message_open_ = true;
  out += event({{"type", "response.output_item.added"},
                {"output_index", message_index()},
                {"item", responses_bodies::message_item(head_, nullptr, "in_progress", false)}});
  return out + event({{"type", "response.content_part.added"},
                      {"item_id", head_.message_id()},
                      {"output_index", message_index()},
                      {"content_index", 0},
                      {"part", responses_bodies::output_text("")}});
}

std::string ResponseEvents::text(const std::string& delta) {
  if (delta.empty()) return "";
  std::string piece = delta;
  std::string out;
  if (!message_open_) {
    pending_ += delta;
    if (pending_.find_first_not_of(" \n\t\r") == std::string::npos) return "";  // not the message's yet
    piece = std::move(pending_);
    pending_.clear();
    out = open_message();
  }
  text_ += piece;
  json logprobs = logprobs_content(pending_logprobs_);  // the tokens since the last delta
  pending_logprobs_.clear();
  for (const json& entry : logprobs) logprobs_.push_back(entry);
  return out + event({{"type", "response.output_text.delta"},
                      {"item_id", head_.message_id()},
                      {"output_index", message_index()},
                      {"content_index", 0},
                      {"delta", piece},
                      {"logprobs", std::move(logprobs)}});
}

std::string ResponseEvents::close_message(const RunResult* result) {
  if (!message_open_ || message_closed_) return "";
  message_closed_ = true;
  const std::string id = head_.message_id();
  RunResult streamed;  // the message as streamed, when a call follows it
  streamed.text = text_.substr(0, text_.find_last_not_of(" \n\t\r") + 1);
  const RunResult& r = result != nullptr ? *result : streamed;
  const json logprobs = result != nullptr ? logprobs_content(result->logprobs) : logprobs_;
  json part = responses_bodies::output_text(r.text);
  if (!logprobs.empty()) part["logprobs"] = logprobs;
  const std::string status = result != nullptr && responses_bodies::incomplete(*result) ? "incomplete" : "completed";
  json item = responses_bodies::message_item(head_, &r, status, true);
  item["content"][0] = part;
  std::string out = event({{"type", "response.output_text.done"},
                           {"item_id", id},
                           {"output_index", message_index()},
                           {"content_index", 0},
                           {"text", r.text},
                           {"logprobs", logprobs}});
  out += event({{"type", "response.content_part.done"},
                {"item_id", id},
                {"output_index", message_index()},
                {"content_index", 0},
                {"part", part}});
  return out +
         event({{"type", "response.output_item.done"}, {"output_index", message_index()}, {"item", std::move(item)}});
}

std::string ResponseEvents::close_call(const std::string& status) {
  if (!call_open_) return "";
  call_open_ = false;
  const std::size_t i = calls_.size() - 1;
  const ChatToolCall& c = calls_.back();
  std::string out = event({{"type", "response.function_call_arguments.done"},
                           {"item_id", head_.call_item_id(i)},
                           {"output_index", call_index(i)},
                           {"name", c.name},
                           {"arguments", c.arguments}});
  return out + event({{"type", "response.output_item.done"},
                      {"output_index", call_index(i)},
                      {"item", responses_bodies::call_item(head_, i, c, status)}});
}

std::string ResponseEvents::call(const ToolCallDelta& piece) {
  std::string out;
  if (piece.opens) {
    out += close_reasoning("completed");
    out += close_call("completed");  // the call before is whole: another follows it
    out += close_message(nullptr);
    pending_.clear();  // whitespace before the calls is no message
    calls_.push_back(ChatToolCall{piece.id, piece.name, ""});
    call_open_ = true;
    const std::size_t i = calls_.size() - 1;
    out += event({{"type", "response.output_item.added"},
                  {"output_index", call_index(i)},
                  {"item", responses_bodies::call_item(head_, i, calls_.back(), "in_progress")}});
  }
  if (piece.arguments.empty() || !call_open_ || piece.index + 1 != calls_.size()) return out;  // a closed call's
  const std::size_t i = calls_.size() - 1;
  calls_.back().arguments += piece.arguments;
  return out + event({{"type", "response.function_call_arguments.delta"},
                      {"item_id", head_.call_item_id(i)},
                      {"output_index", call_index(i)},
                      {"delta", piece.arguments}});
}

std::string ResponseEvents::finish(const RunResult& result, const StoreWrite* stored) {
  // Reasoning not streamed (the run's sink took none) goes out whole, then the item closes.
  std::string out;
  if (!reasoning_open_ && responses_bodies::has_reasoning(result)) out += reasoning(*result.reasoning);
  out += close_reasoning(responses_bodies::reasoning_status(result));
  out += calls_.empty() ? text(result.unstreamed) : "";  // content held back while it might have been a call
  if (!message_open_ && calls_.empty() && responses_bodies::has_message(result)) out += open_message();
  json body = response_body(head_, &result);
  if (stored != nullptr && !stored->ok) body["orbit"] = store_notice(*stored);
  out += close_message(&result);
  // The calls' pieces not streamed: the rest of each opened call's arguments, then each call not opened yet,
  // its item and all its arguments in one delta.
  for (std::size_t i = 0; i < result.tool_calls.size(); ++i) {
    const ChatToolCall& c = result.tool_calls[i];
    ToolCallDelta piece{i, false, "", "", ""};
    if (i >= calls_.size()) {
      out += call(ToolCallDelta{i, true, c.id, c.name, ""});
      piece.arguments = c.arguments;
    } else if (c.arguments.size() > calls_[i].arguments.size() &&
               c.arguments.compare(0, calls_[i].arguments.size(), calls_[i].arguments) == 0) {
      piece.arguments = c.arguments.substr(calls_[i].arguments.size());
    }
    out += call(piece);
  }
  if (call_open_) {
    calls_.back() = result.tool_calls.at(calls_.size() - 1);  // the call as the response gives it
    out += close_call(responses_bodies::call_status(result, calls_.size() - 1));
  }
  const char* type = body["status"] == "incomplete" ? "response.incomplete" : "response.completed";
  return out + event({{"type", type}, {"response", body}});
}

std::string stream_error_event(const ApiError& error) {
  const json body = {{"type", "error"},
                     {"code", error.code.empty() ? "server_error" : error.code},
                     {"message", error.message},
                     {"param", error.param.empty() ? json(nullptr) : json(error.param)},
                     {"sequence_number", 0}};
  return "event: error\ndata: " + dump(body) + "\n\n";
}

std::string ResponseEvents::failed(const ApiError& error) {
  json body = response_body(head_, nullptr);
  body["status"] = "failed";
  body["error"] = {{"code", error.code.empty() ? "server_error" : error.code}, {"message", error.message}};
  return event({{"type", "response.failed"}, {"response", body}});
}

}  // namespace orbit::serve
