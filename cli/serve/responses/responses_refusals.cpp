#include "serve/responses/responses_refusals.h"

#include <string>
#include <utility>

#include "serve/wire/request_invalid.h"

namespace orbit::serve::responses_parser {

// The modes and features this server does not have (background, reasoning, includes other than logprobs,
// conversations, prompt templates, max_tool_calls), refused unless neutral; truncation checked.
void refuse_unserved_modes(const ojson& body) {
  if (const ojson* v = field(body, "background"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    unsupported("background", "background mode");
  }
  if (const ojson* v = field(body, "reasoning")) {
    need_object(*v, "reasoning");
    refuse_unknown_fields(*v, "effort summary generate_summary", "reasoning", "reasoning.");
    const ojson* effort = field(*v, "effort");
    if (effort != nullptr && !(effort->is_string() && effort->get<std::string>() == "none")) {
      unsupported("reasoning.effort", "reasoning");
    }
    for (const char* name : {"summary", "generate_summary"}) {
      if (field(*v, name) != nullptr) unsupported(std::string("reasoning.") + name, "a reasoning summary");
    }
  }
  if (const ojson* v = field(body, "truncation"); v != nullptr && !v->is_null()) {
    if (!(v->is_string() && (*v == "disabled" || *v == "auto"))) {
      invalid_value("truncation", "expected 'auto' or 'disabled', got " + v->dump());
    }
  }
  if (const ojson* v = field(body, "include")) {
    if (!v->is_array()) wrong_type("include", "an array", *v);
    for (std::size_t i = 0; i < v->size(); ++i) {  // logprobs are served (copy_sampling); nothing else is
      if ((*v)[i] != kIncludeLogprobs) unsupported("include[" + std::to_string(i) + "]", "including " + (*v)[i].dump());
    }
  }
  for (const char* name : {"conversation", "prompt", "max_tool_calls"}) {
    if (field(body, name) != nullptr) unsupported(name, name);
  }
}

// Fields that chat takes and this API does not: the samplers chat refuses, and chat's own names for what
// this API names otherwise.
void refuse_chat_fields(const ojson& body) {
  // The samplers chat refuses (serve_api.cpp): the chat body written below would not carry them, so they
  // would go unnoticed.
  for (const char* name : {"top_k", "min_p", "top_a", "typical_p", "repetition_penalty", "mirostat"}) {
    if (field(body, name) != nullptr) {
      unsupported(name, std::string("sampling by ") + name + " (give temperature and top_p)");
    }
  }
  // Chat's fields are not the Responses API's: a client that sends them means something this API says
  // another way (or not at all), so they are refused naming the field to use rather than dropped.
  static const std::pair<const char*, const char*> kChatFields[] = {
      {"max_tokens", "max_output_tokens"},
      {"max_completion_tokens", "max_output_tokens"},
      {"messages", "input"},
      {"response_format", "text.format"},
      {"logprobs", "top_logprobs, or include [\"message.output_text.logprobs\"]"},
      {"stop", ""},
      {"n", ""},
      {"functions", "tools"},
      {"function_call", "tool_choice"}};
  for (const auto& [name, instead] : kChatFields) {
    if (body.contains(name)) {
      const std::string use = *instead ? std::string("; use ") + instead : std::string("; it has no equivalent here");
      throw RequestInvalid{api_error(400,
                                     std::string(name) + ": a chat completions field, not the Responses API's" + use,
                                     "invalid_request_error", "unknown_parameter", name)};
    }
  }
}

// Fields taken when neutral or as hints: service_tier, context_management, the cache and safety hints, and
// stream_options.
void check_hints(const ojson& body) {
  if (const ojson* v = field(body, "service_tier"); v != nullptr && *v != "auto" && *v != "default") {
    unsupported("service_tier", "a service tier other than auto or default");
  }
  if (const ojson* v = field(body, "context_management"); v != nullptr && !(v->is_array() && v->empty())) {
    unsupported("context_management", "context management");
  }
  for (const char* name : {"prompt_cache_key", "safety_identifier"}) {
    if (const ojson* v = field(body, name)) need_string(*v, name);
  }
  // Checked as OpenAI types them, then unused (request_invalid.h).
  if (const ojson* v = field(body, "prompt_cache_retention")) check_prompt_cache_retention(*v);
  if (const ojson* v = field(body, "prompt_cache_options")) check_prompt_cache_options(*v);
  if (const ojson* v = field(body, "stream_options")) {
    // As chat's: only beside stream true, and include_obfuscation is its one option (copy_sampling hands it
    // to chat's, which reads it).
    need_object(*v, "stream_options");
    const ojson* stream = field(body, "stream");
    if (stream == nullptr || *stream != true) invalid_field("stream_options", "only allowed when stream is true");
    refuse_unknown_fields(*v, "include_obfuscation", "stream_options", "stream_options.");
    if (const ojson* o = field(*v, "include_obfuscation"); o != nullptr && !o->is_boolean()) {
      wrong_type("stream_options.include_obfuscation", "a boolean", *o);
    }
  }
}

void refuse_unsupported(const ojson& body) {
  refuse_unserved_modes(body);
  refuse_chat_fields(body);
  check_hints(body);
  refuse_unknown_fields(body,
                        "model input instructions previous_response_id store tools tool_choice parallel_tool_calls "
                        "max_output_tokens temperature top_p seed presence_penalty frequency_penalty logit_bias "
                        "top_logprobs include stream stream_options text user metadata prompt_cache_key "
                        "prompt_cache_retention prompt_cache_options safety_identifier background reasoning truncation "
                        "conversation prompt max_tool_calls service_tier context_management top_k min_p top_a "
                        "typical_p repetition_penalty mirostat",
                        "/v1/responses");
}

}  // namespace orbit::serve::responses_parser
