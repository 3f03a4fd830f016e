#include "serve/wire/serve_wire.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "orbit/common/utf8.h"

namespace orbit::serve {

using nlohmann::json;

namespace {

json finish(const std::string& reason) {
  // A cancelled run has no client to read it; "length" is what OpenAI reports for a cut answer.
  if (reason.empty()) return nullptr;
  return reason == "cancelled" ? "length" : reason;
}

json head(const ResponseIds& ids, const char* object) {
  json body = {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
  if (ids.usage_null) body["usage"] = nullptr;
  return body;
}

// What OpenAI writes for a log probability of -inf (JSON has no infinity): a token a constraint masked, listed
// among top_logprobs where fewer tokens than asked were allowed.
constexpr double kMaskedLogprob = -9999.0;

json token_logprob(const TokenLogprob& t) {
  json bytes = json::array();
  for (unsigned char c : t.bytes) bytes.push_back(static_cast<int>(c));
  const double logprob = std::isinf(t.logprob) && t.logprob < 0 ? kMaskedLogprob : t.logprob;
  // A token that is part of a character has no text of its own: dump() writes U+FFFD for its bytes.
  return {{"token", t.bytes}, {"logprob", logprob}, {"bytes", bytes}};
}

}  // namespace

int64_t RunUsage::cached_tokens() const {
  const auto forwarded = static_cast<int64_t>(std::ceil(std::max(0.0, forward_tokens)));
  return std::clamp<int64_t>(prompt_tokens - forwarded, 0, prompt_tokens);
}

json RunUsage::to_json() const {
  json orbit = {{"forward_tokens", forward_tokens},
                {"radix_cache_tokens", radix_cache_tokens},
                {"predicted_kl", predicted_kl},
                {"plan", plan},
                {"idle_forward_tokens", idle_forward_tokens}};
  if (!session.empty()) orbit["session"] = session;
  if (audit) orbit["audit"] = audit->to_json();
  if (!exact.empty()) orbit["exact"] = exact;
  if (exact_kv) orbit["exact_kv"] = *exact_kv;
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens()}}},
          {"completion_tokens_details", {{"reasoning_tokens", reasoning_tokens.value_or(0)}}},
          {"orbit", orbit}};
}

// OpenAI's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
json tool_calls_json(const std::vector<ChatToolCall>& calls) {
  json out = json::array();
  for (const ChatToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

namespace {

json logprobs_entry(const StepLogprobs& step) {
  json entry = token_logprob(step.chosen);
  json top = json::array();
  for (const TokenLogprob& t : step.top) top.push_back(token_logprob(t));
  entry["top_logprobs"] = std::move(top);
  return entry;
}

}  // namespace

json logprobs_content(const std::vector<StepLogprobs>& steps) {
  json out = json::array();
  for (const StepLogprobs& step : steps) out.push_back(logprobs_entry(step));
  return out;
}

// choices[].logprobs of a streamed chunk: {"content": [...], "refusal": null}, or null without entries.
json chunk_logprobs(const std::vector<StepLogprobs>& steps) {
  if (steps.empty()) return nullptr;
  return {{"content", logprobs_content(steps)}, {"refusal", nullptr}};
}

void StreamExtras::add_logprobs(int64_t choice, const StepLogprobs& step) { pending_[choice].logprobs.push_back(step); }

void StreamExtras::add_reasoning(int64_t choice, const std::string& text) { pending_[choice].reasoning += text; }

ChunkExtras StreamExtras::take(int64_t choice) {
  const auto at = pending_.find(choice);
  if (at == pending_.end()) return {};
  ChunkExtras out = std::move(at->second);
  pending_.erase(at);
  return out;
}

namespace {

// One choice of a chat completion: {index, message, logprobs, finish_reason}. With `mark`, its logprobs (where
// there are any) are the string mark + index, for chat_completion_text to write in their place.
json chat_choice(int64_t index, const RunResult& result, const std::string* mark = nullptr) {
  // refusal: null, as OpenAI writes it on every message (the openai client's type has it required): the model's
  // answer is never a refusal here.
  json message = {{"role", "assistant"}, {"content", result.text}, {"refusal", nullptr}};
  if (content_null(result)) message["content"] = nullptr;
  if (!result.tool_calls.empty()) message["tool_calls"] = tool_calls_json(result.tool_calls);
  if (result.reasoning) {
    message["reasoning_content"] = result.reasoning->empty() ? json(nullptr) : json(*result.reasoning);
  }
  json logprobs = nullptr;  // as OpenAI: null where they were not asked for, else an object (its content may be empty)
  if (result.logprobs_asked || !result.logprobs.empty()) {
    logprobs = mark != nullptr ? json(*mark + std::to_string(index))
                               : json{{"content", logprobs_content(result.logprobs)}, {"refusal", nullptr}};
  }
  return {
      {"index", index}, {"message", message}, {"logprobs", logprobs}, {"finish_reason", finish(result.finish_reason)}};
}

json chat_completion_marked(const ResponseIds& ids, const RunResult& result, const std::string* mark) {
  json body = head(ids, "chat.completion");
  body["choices"] = json::array({chat_choice(0, result, mark)});
  for (std::size_t i = 0; i < result.extra_choices.size(); ++i) {
    body["choices"].push_back(chat_choice(static_cast<int64_t>(i + 1), result.extra_choices[i], mark));
  }
  body["usage"] = result.usage.to_json();
  return body;
}

// {"content": [...], "refusal": null} as dump() writes logprobs_content's tree (keys in the same order), one
// entry's tree at a time.
void append_logprobs(std::string& out, const std::vector<StepLogprobs>& steps) {
  out += "{\"content\":[";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i > 0) out += ',';
    out += dump(logprobs_entry(steps[i]));
  }
  out += "],\"refusal\":null}";
}

// A mark no answer's text can hold: it is random, and the body is written before any client could see it.
std::string logprobs_mark() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  char text[64];
  std::snprintf(text, sizeof text, "orbit-logprobs-%016llx%016llx-", static_cast<unsigned long long>(random()),
                static_cast<unsigned long long>(random()));
  return text;
}

}  // namespace

json chat_completion(const ResponseIds& ids, const RunResult& result) {
  return chat_completion_marked(ids, result, nullptr);
}

std::string chat_completion_text(const ResponseIds& ids, const RunResult& result) {
  const std::string mark = logprobs_mark();
  const std::string body = dump(chat_completion_marked(ids, result, &mark));
  std::string out;
  std::size_t from = 0;
  for (std::size_t i = 0; i <= result.extra_choices.size(); ++i) {
    const std::string quoted = "\"" + mark + std::to_string(i) + "\"";
    const std::size_t at = body.find(quoted, from);
    if (at == std::string::npos) continue;  // no logprobs asked for
    const RunResult& choice = i == 0 ? result : result.extra_choices[i - 1];
    out.append(body, from, at - from);
    append_logprobs(out, choice.logprobs);
    from = at + quoted.size();
  }
  out.append(body, from, std::string::npos);
  return out;
}

json chat_chunk(const ResponseIds& ids, const std::string& content, bool first, const std::string& finish_reason,
                int64_t index, ChunkExtras extras) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!extras.reasoning.empty()) delta["reasoning_content"] = std::move(extras.reasoning);
  if (!content.empty() || (first && !delta.contains("reasoning_content"))) delta["content"] = content;
  if (first) delta["refusal"] = nullptr;  // as OpenAI opens a choice (the answer is never a refusal here)
  json body = head(ids, "chat.completion.chunk");
  body["choices"] = json::array({{{"index", index},
                                  {"delta", delta},
                                  {"logprobs", chunk_logprobs(extras.logprobs)},
                                  {"finish_reason", finish(finish_reason)}}});
  return body;
}

json tool_call_chunk(const ResponseIds& ids, const ToolCallDelta& piece, int64_t index, ChunkExtras extras) {
  json call = {{"index", piece.index}, {"function", {{"arguments", piece.arguments}}}};
  if (piece.opens) {
    call = {{"index", piece.index},
            {"id", piece.id},
            {"type", "function"},
            {"function", {{"name", piece.name}, {"arguments", piece.arguments}}}};
  }
  json delta = {{"tool_calls", json::array({std::move(call)})}};
  if (!extras.reasoning.empty()) delta["reasoning_content"] = std::move(extras.reasoning);
  json body = head(ids, "chat.completion.chunk");
  body["choices"] = json::array({{{"index", index},
                                  {"delta", delta},
                                  {"logprobs", chunk_logprobs(extras.logprobs)},
                                  {"finish_reason", nullptr}}});
  return body;
}

json usage_chunk(const ResponseIds& ids, const std::string& object, const json& usage) {
  json body = head(ids, object.c_str());
  body["choices"] = json::array();
  body["usage"] = usage;
  return body;
}

json text_completion(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                     const json& usage) {
  json body = head(ids, "text_completion");
  body["choices"] =
      json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}}});
  if (!usage.is_null()) body["usage"] = usage;
  return body;
}

json text_completion_usage(const RunUsage& usage) {
  json out = usage.to_json();
  out.erase("completion_tokens_details");
  return out;
}

std::string dump(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string as_written(const std::string& text) {
  if (is_valid_utf8(text)) return text;
  return json::parse(dump(json(text))).get<std::string>();
}

std::string sse(const json& body) { return "data: " + dump(body) + "\n\n"; }

}  // namespace orbit::serve
