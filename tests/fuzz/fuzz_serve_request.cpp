// libFuzzer target for `orbit serve`'s request parsers (cli/serve/wire/serve_api.cpp, responses_api.cpp): the
// bytes as a /v1/chat/completions, a /v1/completions and a /v1/responses body, and an accepted request's tool
// schemas through the server's check of them (schema_shape.h). No parse may throw or
// crash; an accepted request must satisfy what the server relies on (a non-empty message list of known
// roles, sampling fields in range, at most four non-empty stop strings), and a refusal must be a 400 or 413
// whose error body is JSON carrying the message.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "serve/responses/responses_api.h"
#include "serve/run/schema_shape.h"
#include "serve/wire/serve_api.h"

namespace sv = orbit::serve;

namespace {

void check_sampling(const sv::SamplingRequest& s) {
  if (s.max_tokens && *s.max_tokens < 1) std::abort();
  if (!(s.temperature >= 0 && s.temperature <= 2)) std::abort();
  if (!(s.top_p > 0 && s.top_p <= 1)) std::abort();
  if (s.stop.size() > 4) std::abort();
  for (const std::string& stop : s.stop) {
    if (stop.empty()) std::abort();
  }
}

void check_error(const sv::ApiError& e) {
  if (e.status != 400 && e.status != 413) std::abort();
  if (e.message.empty()) std::abort();
  const nlohmann::json body = nlohmann::json::parse(sv::error_body(e), nullptr, false);
  if (body.is_discarded() || !body["error"]["message"].is_string()) std::abort();
}

// Any `user` string is accepted; the session it names must be a valid session id (or none for "").
void check_user(const std::string& user) {
  const std::string session = sv::session_for_user(user);
  if (user.empty() != session.empty()) std::abort();
  if (!session.empty() && !sv::session_id_problem(session).empty()) std::abort();
}

// Every tool's parameters through the serve's schema check (schema_shape.h): an answer, never a throw.
void check_tool_schemas(const std::string& tools_json) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
  if (tools_json.empty()) return;
  if (!tools.is_array()) std::abort();  // the parser writes a list
  for (const auto& tool : tools) {
    const auto fn = tool.find("function");
    if (fn != tool.end() && fn->is_object() && fn->contains("parameters"))
      (void)sv::schema_shape_problem((*fn)["parameters"]);
  }
}

void check_chat(const sv::ChatRequest& chat) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  if (chat.messages.empty()) std::abort();
  for (const orbit::ChatMessage& m : chat.messages) {
    if (!kRoles.count(m.role)) std::abort();
  }
  check_sampling(chat.sampling);
  check_user(chat.user);
  check_tool_schemas(chat.tools_json);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  sv::ServeLimits limits;
  limits.max_body_bytes = 8192;  // inputs past it must be refused with 413

  const sv::Parsed<sv::ChatRequest> chat = sv::parse_chat_request(body, limits);
  if (chat.ok()) {
    check_chat(*chat.value);
    if (size > limits.max_body_bytes) std::abort();
  } else {
    check_error(chat.error);
  }

  // A Responses request is a chat request too (instructions first when given), with its echo an object.
  const sv::Parsed<sv::ResponsesRequest> responses = sv::parse_responses_request(body, limits);
  if (responses.ok()) {
    check_chat(responses.value->chat);
    if (responses.value->has_instructions && responses.value->chat.messages[0].role != "system") std::abort();
    if (!responses.value->echo.is_object()) std::abort();
    if (size > limits.max_body_bytes) std::abort();
  } else {
    check_error(responses.error);
  }

  const sv::Parsed<sv::CompletionRequest> completion = sv::parse_completion_request(body, limits);
  if (completion.ok()) {
    check_sampling(completion.value->sampling);
    check_user(completion.value->user);
  } else {
    check_error(completion.error);
  }
  return 0;
}
