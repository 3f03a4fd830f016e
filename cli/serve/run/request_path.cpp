// RequestPath's first half: a request checked and planned (prepare_chat, prepare_completion,
// count_chat_tokens) into the RunTicket that run (request_run.cpp) takes.
#include "serve/run/request_path.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "orbit/capacity.h"
#include "orbit/common/error.h"
#include "serve/run/decode.h"
#include "serve/run/reasoning.h"
#include "serve/run/request_ticket.h"

namespace orbit::serve {

RunTicket::RunTicket() = default;
RunTicket::RunTicket(ApiError refusal) : error_(std::move(refusal)) {}
RunTicket::RunTicket(RunTicket&&) noexcept = default;
RunTicket& RunTicket::operator=(RunTicket&&) noexcept = default;
RunTicket::~RunTicket() = default;

void RunTicket::refuse(ApiError refusal) {
  if (prepared_ && prepared_->chat) prepared_->slot.refuse();
  prepared_.reset();  // the window back to its session
  error_ = std::move(refusal);
}

namespace {

// The KV pool's size as a refusal names it, and what to raise. --pool-mb gives whole MiB: "--pool-mb N". A pool
// set otherwise (ServeOptions::pool_bytes, by a program that embeds the server or a test) may be less than 1 MiB,
// or not whole MiB: its size in KiB and pages (whole MiB read "--pool-mb 0" for 512 KiB), and the --pool-mb past it.
struct PoolSize {
  std::string size;    // "--pool-mb 1", "512 KiB, 25 pages"
  std::string larger;  // "a larger --pool-mb", "--pool-mb 1 or more"
};

PoolSize pool_size(int64_t bytes, int64_t pages) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (bytes % kMiB == 0) return {"--pool-mb " + std::to_string(bytes / kMiB), "a larger --pool-mb"};
  const std::string size = bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB" : std::to_string(bytes) + " bytes";
  return {size + ", " + std::to_string(pages) + " pages", "--pool-mb " + std::to_string(bytes / kMiB + 1) + " or more"};
}

ApiError template_refused(const std::string& why) {
  return api_error(400, "the chat template refused the messages: " + why, "invalid_request_error", "invalid_value",
                   "messages");
}

}  // namespace

std::optional<ApiError> RequestPath::check_model(const std::string& model) const {
  if (model != context_.model_name) {
    return api_error(404, "the model '" + model + "' does not exist; this server serves '" + context_.model_name + "'",
                     "invalid_request_error", "model_not_found", "model");
  }
  if (context_.closing) return api_error(503, "the server is shutting down", "server_error", "shutting_down");
  return std::nullopt;
}

std::optional<ApiError> RequestPath::check_lengths(int64_t prompt_tokens, const SamplingRequest& sampling,
                                                   const std::string& prompt_param) const {
  const int64_t context = context_.info.max_positions;
  if (prompt_tokens >= context) {
    return api_error(400,
                     "the prompt is " + std::to_string(prompt_tokens) + " tokens; the model's context is " +
                         std::to_string(context) + " tokens, and at least one must be left to generate",
                     "invalid_request_error", "context_length_exceeded", prompt_param);
  }
  if (sampling.max_tokens && *sampling.max_tokens > context - prompt_tokens) {
    return api_error(400,
                     "max_tokens = " + std::to_string(*sampling.max_tokens) + " is out of range: the prompt is " +
                         std::to_string(prompt_tokens) + " tokens of a " + std::to_string(context) +
                         "-token context, so at most " + std::to_string(context - prompt_tokens) + " can be generated",
                     "invalid_request_error", "context_length_exceeded", "max_tokens");
  }
  return check_logprobs(prompt_tokens, sampling);
}

std::optional<ApiError> RequestPath::check_logprobs(int64_t prompt_tokens, const SamplingRequest& sampling) const {
  if (!sampling.logprobs) return std::nullopt;
  const int64_t n = std::max<int64_t>(1, sampling.n);
  const int64_t tokens = max_tokens_for(context_, prompt_tokens, sampling);
  const int64_t entries = n * tokens * (1 + sampling.top_logprobs);
  const int64_t most = context_.options.limits.max_answer_logprobs;
  if (entries <= most) return std::nullopt;
  // Starts with the field's name, which the Responses API's errors rename (responses_errors.h).
  return api_error(400,
                   "max_tokens (" + std::to_string(tokens) + (sampling.max_tokens ? "" : ", the server's default") +
                       ")" + (n > 1 ? " x n (" + std::to_string(n) + ")" : "") + " x (1 + top_logprobs " +
                       std::to_string(sampling.top_logprobs) + ") = " + std::to_string(entries) +
                       " log-probability entries, more than this server holds for one answer (" + std::to_string(most) +
                       ", --max-answer-logprobs); lower " + (n > 1 ? "max_tokens, n" : "max_tokens") +
                       " or top_logprobs",
                   "invalid_request_error", "answer_too_large", "max_tokens");
}

// plan_sync threw: the template refused the list, or its rendering is past the model's positions. The
// latter answers as the length check does, so here, on the way to an error only, the list is rendered
// again to count its tokens, with `chat`, the request's options and the time its plan read (ChatOptions::now).
ApiError RequestPath::plan_refusal(const ChatRequest& request, const ChatOptions& chat, const std::string& why) const {
  std::vector<int64_t> prompt;
  try {
    prompt = context_.engine->tokenize_chat(request.messages, true, chat);
  } catch (const Error& e) {
    // Engine::check_text_fits refuses a rendering too long for the positions before tokenizing it, with
    // the message engine.h states ("... positions can hold (at most B bytes per token)").
    if (std::string(e.what()).find("positions can hold") != std::string::npos) {
      return api_error(400, std::string("the prompt is longer than the model's context: ") + e.what(),
                       "invalid_request_error", "context_length_exceeded", "messages");
    }
    return template_refused(e.what());
  }
  if (auto bad = check_lengths(static_cast<int64_t>(prompt.size()), request.sampling, "messages")) return *bad;
  return template_refused(why);
}

ApiError RequestPath::engine_failure(const Error& e) const {
  std::string why = e.what();
  if (const auto* small = dynamic_cast<const PoolTooSmall*>(&e); small != nullptr) {
    const std::string& param = small->param();
    const PoolSize pool = pool_size(context_.options.pool_bytes, context_.engine->stats().pool_pages);
    return api_error(400,
                     param + ": " + why + " (this server's KV pool: " + pool.size +
                         "): no retry can hold it; send a shorter " + (param == "prompt" ? "prompt" : "conversation") +
                         ", or start the server with " + pool.larger,
                     "invalid_request_error", "context_length_exceeded", param);
  }
  const auto* refused = dynamic_cast<const CapacityRefused*>(&e);
  if (refused == nullptr) return api_error(500, "the engine failed: " + why, "server_error", "engine_error");
  if (refused->bound() == CapacityRefused::Bound::kWindowBytes) {
    // The window's own bound: no waiting cures it, so it is no 503 a client would retry.
    const std::string own_advice = " (evict or slide first)";  // the SDK's, which a client cannot follow
    const std::size_t own_at = why.find(own_advice);
    if (own_at != std::string::npos) why.erase(own_at, own_advice.size());
    return api_error(400, "messages: " + why + ": the conversation is over the bound of one window; send a shorter one",
                     "invalid_request_error", "invalid_value", "messages");
  }
  const std::string advice = "; evict, slide or close windows";  // the SDK's, which a client cannot follow
  const std::size_t at = why.find(advice);
  if (at != std::string::npos) why.erase(at, advice.size());
  const PoolSize pool = pool_size(context_.options.pool_bytes, context_.engine->stats().pool_pages);
  return api_error(503,
                   why + ": this server's KV pool (" + pool.size +
                       ") cannot hold this request's window beside the windows requests are using now (every idle "
                       "window was let go); send it again when they have ended, or start the server with " +
                       pool.larger,
                   "server_error", "kv_pool_full");
}

RunTicket RequestPath::prepare_chat(const ChatRequest& request, const std::string& session) {
  if (auto bad = check_model(request.model)) return RunTicket(*bad);
  AnswerConstraint forced = context_.constraints->for_request(request);
  if (forced.error) return RunTicket(*forced.error);
  auto p = std::make_unique<RunTicket::Prepared>();
  p->chat = &request;
  p->constraint = std::move(forced.constraint);
  p->trigger = std::move(forced.trigger);
  p->calls_whole = forced.calls_whole;
  p->options.chat = context_.chat;
  p->options.chat.tools_json = request.tools_json;
  p->options.chat.now = chat_clock();  // one time for the request's renderings, its refusal's too
  p->options.chunk_min_tokens = context_.options.chunk_min_tokens;
  try {
    p->slot = session.empty() ? sessions_.acquire_anonymous(request.messages, request.tools_json)
                              : sessions_.acquire(session);
  } catch (const Error& e) {
    return RunTicket(engine_failure(e));
  }
  std::optional<ApiError> bad;
  try {
    p->plan = p->slot.window().plan_sync(request.messages, p->options);  // the one rendering of the list
    bad = check_lengths(prompt_tokens(p->plan), request.sampling, "messages");
    if (!bad && p->plan.generation_prompt.empty()) {
      bad = api_error(400, "messages: the chat template adds no generation prompt: there is nothing to generate after",
                      "invalid_request_error", "invalid_value", "messages");
    }
    if (!bad) bad = read_reasoning(request, *p);
  } catch (const Error& e) {
    bad = plan_refusal(request, p->options.chat, e.what());
  }
  if (bad) {
    p->slot.refuse();
    return RunTicket(*bad);  // p's slot is released here
  }
  RunTicket ticket;
  ticket.prepared_ = std::move(p);
  return ticket;
}

// Under a reasoning parser: whether the answer begins inside the reasoning (its generation prompt's text). A
// trigger (tool_choice "auto"'s call mark) then counts only after the reasoning, as the splitter reads it: a
// mark the model writes while it thinks is not a call. Where the answer begins inside the reasoning, a
// constraint that would apply from the first byte applies from the reasoning's end on instead
// (ConstraintCache::for_request's `after`), so the model thinks freely and answers under it; where the model
// may open the reasoning itself, from the first byte or from the end of the reasoning it opened.
std::optional<ApiError> RequestPath::read_reasoning(const ChatRequest& request, RunTicket::Prepared& p) {
  const ReasoningFormat format = context_.options.reasoning;
  if (format == ReasoningFormat::kNone) return std::nullopt;
  const std::string prompt = context_.engine->detokenize(p.plan.generation_prompt);
  p.in_reasoning = starts_in_reasoning(format, prompt);
  if (!p.trigger.empty()) {
    p.trigger_block.open = p.in_reasoning ? "" : std::string(kReasoningOpen);
    p.trigger_block.close = std::string(kReasoningClose);
    return std::nullopt;
  }
  if (!p.constraint) return std::nullopt;
  if (may_open_reasoning(format, prompt)) {
    // Either the answer from the first byte, or the model's reasoning first and the answer after it.
    AnswerConstraint gap = context_.constraints->for_request(request, std::string());
    if (gap.error) return gap.error;
    p.constraint = std::move(gap.constraint);
    p.trigger_block = {std::string(kReasoningOpen), std::string(kReasoningClose)};
    return std::nullopt;
  }
  if (!p.in_reasoning) return std::nullopt;
  AnswerConstraint after = context_.constraints->for_request(request, std::string(kReasoningClose));
  if (after.error) return after.error;
  p.constraint = std::move(after.constraint);
  p.trigger = std::move(after.trigger);
  return std::nullopt;
}

Parsed<int64_t> RequestPath::count_chat_tokens(const ChatRequest& request) const {
  Parsed<int64_t> out;
  if (auto bad = check_model(request.model)) {
    out.error = *bad;
    return out;
  }
  AnswerConstraint forced = context_.constraints->for_request(request);
  if (forced.error) {
    out.error = *forced.error;
    return out;
  }
  ChatOptions chat = context_.chat;
  chat.tools_json = request.tools_json;
  chat.now = chat_clock();  // the count and a refusal's render the list at one time
  try {
    out.value = static_cast<int64_t>(context_.engine->tokenize_chat(request.messages, true, chat).size());
  } catch (const Error& e) {
    out.error = plan_refusal(request, chat, e.what());
  }
  return out;
}

RunTicket RequestPath::prepare_completion(const CompletionRequest& request) {
  if (auto bad = check_model(request.model)) return RunTicket(*bad);
  auto p = std::make_unique<RunTicket::Prepared>();
  p->completion = &request;
  p->tokens = context_.engine->tokenize(request.prompt, true);
  if (p->tokens.empty()) {
    return RunTicket(api_error(400, "prompt: the prompt has no tokens (the model adds no BOS)", "invalid_request_error",
                               "invalid_value", "prompt"));
  }
  p->completion_sampling = request.sampling;
  if (!p->completion_sampling.max_tokens) {
    const int64_t room = context_.info.max_positions - static_cast<int64_t>(p->tokens.size());
    p->completion_sampling.max_tokens =
        std::max<int64_t>(1, std::min(context_.options.default_completion_max_tokens, room));
  }
  if (auto bad = check_lengths(static_cast<int64_t>(p->tokens.size()), p->completion_sampling, "prompt")) {
    return RunTicket(*bad);
  }
  RunTicket ticket;
  ticket.prepared_ = std::move(p);
  return ticket;
}

}  // namespace orbit::serve
