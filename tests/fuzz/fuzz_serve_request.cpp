// libFuzzer target for `orbit serve`'s request parser (cli/serve/serve_api.cpp): the bytes as a
// /v1/chat/completions body and as a /v1/completions body. Neither parse may throw or crash; an accepted
// request must satisfy what the server relies on (a non-empty message list of known roles, sampling fields
// in range, at most four non-empty stop strings), and a refusal must be a 400 or 413 whose error body is
// JSON carrying the message.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "serve/serve_api.h"

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

void check_user(const std::string& user) {
  if (!user.empty() && !sv::session_id_problem(user).empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  sv::ServeLimits limits;
  limits.max_body_bytes = 8192;  // inputs past it must be refused with 413

  const sv::Parsed<sv::ChatRequest> chat = sv::parse_chat_request(body, limits);
  if (chat.ok()) {
    static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
    if (chat.value->messages.empty()) std::abort();
    for (const orbit::ChatMessage& m : chat.value->messages) {
      if (!kRoles.count(m.role)) std::abort();
    }
    check_sampling(chat.value->sampling);
    check_user(chat.value->user);
    if (size > limits.max_body_bytes) std::abort();
  } else {
    check_error(chat.error);
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
