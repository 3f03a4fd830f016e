#include "serve/responses/responses_wire.h"

#include <ctime>

#include "serve/wire/serve_wire.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace responses_bodies {

// A cut answer: max_output_tokens (or the server's default) ended it, or the client left.
bool incomplete(const RunResult& r) { return r.finish_reason == "length" || r.finish_reason == "cancelled"; }

// The answer has a message item: text, or nothing else to show.
bool has_message(const RunResult& r) { return !r.text.empty() || r.tool_calls.empty(); }

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

std::string ResponseHead::call_item_id(std::size_t i) const {
  return "fc_" + id.substr(id.find('_') + 1) + "_" + std::to_string(i);
}

json responses_usage(const RunUsage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_tokens()}}},
          {"output_tokens", usage.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
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
  body["completed_at"] = static_cast<int64_t>(std::time(nullptr));
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
  return "event: " + body["type"].get<std::string>() + "\ndata: " + dump(body) + "\n\n";
}

std::string ResponseEvents::start() {
  const json body = response_body(head_, nullptr);
  std::string out = event({{"type", "response.created"}, {"response", body}});
  return out + event({{"type", "response.in_progress"}, {"response", body}});
}

std::string ResponseEvents::open_message() {
  message_open_ = true;
  std::string out = event({{"type", "response.output_item.added"},
                           {"output_index", 0},
                           {"item", responses_bodies::message_item(head_, nullptr, "in_progress", false)}});
  return out + event({{"type", "response.content_part.added"},
                      {"item_id", head_.message_id()},
                      {"output_index", 0},
                      {"content_index", 0},
                      {"part", responses_bodies::output_text("")}});
}

std::string ResponseEvents::text(const std::string& delta) {
  if (delta.empty()) return "";
  std::string out = message_open_ ? "" : open_message();
  return out + event({{"type", "response.output_text.delta"},
                      {"item_id", head_.message_id()},
                      {"output_index", 0},
                      {"content_index", 0},
                      {"delta", delta},
                      {"logprobs", take_stream_logprobs_content()}});  // the tokens since the last delta
}

std::string ResponseEvents::finish(const RunResult& result, const StoreWrite* stored) {
  std::string out = text(result.unstreamed);  // content held back while it might have been a call
  if (!message_open_ && responses_bodies::has_message(result)) out += open_message();
  json body = response_body(head_, &result);
  if (stored != nullptr && !stored->ok) body["orbit"] = store_notice(*stored);
  const std::string id = head_.message_id();
  if (message_open_) {
    out += event({{"type", "response.output_text.done"},
                  {"item_id", id},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"text", result.text},
                  {"logprobs", logprobs_content(result.logprobs)}});
    out += event({{"type", "response.content_part.done"},
                  {"item_id", id},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"part", responses_bodies::output_text(result.text, &result.logprobs)}});
    out += event({{"type", "response.output_item.done"},
                  {"output_index", 0},
                  {"item", responses_bodies::message_item(head_, &result, body["status"].get<std::string>(), true)}});
  }
  const std::size_t first = message_open_ ? 1 : 0;
  for (std::size_t i = 0; i < result.tool_calls.size(); ++i) {
    const ChatToolCall& call = result.tool_calls[i];
    const std::size_t index = first + i;
    const std::string item_id = head_.call_item_id(i);
    out += event({{"type", "response.output_item.added"},
                  {"output_index", index},
                  {"item", responses_bodies::call_item(head_, i, call, "in_progress")}});
    out += event({{"type", "response.function_call_arguments.delta"},
                  {"item_id", item_id},
                  {"output_index", index},
                  {"delta", call.arguments}});
    out += event({{"type", "response.function_call_arguments.done"},
                  {"item_id", item_id},
                  {"output_index", index},
                  {"name", call.name},
                  {"arguments", call.arguments}});
    out += event({{"type", "response.output_item.done"},
                  {"output_index", index},
                  {"item", responses_bodies::call_item(head_, i, call, responses_bodies::call_status(result, i))}});
  }
  const char* type = body["status"] == "incomplete" ? "response.incomplete" : "response.completed";
  return out + event({{"type", type}, {"response", body}});
}

std::string ResponseEvents::failed(const ApiError& error) {
  json body = response_body(head_, nullptr);
  body["status"] = "failed";
  body["error"] = {{"code", error.code.empty() ? "server_error" : error.code}, {"message", error.message}};
  return event({{"type", "response.failed"}, {"response", body}});
}

}  // namespace orbit::serve
