#include "serve/run/request_path.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "orbit/common/error.h"
#include "serve/run/decode.h"
#include "serve/run/reasoning_sink.h"
#include "serve/run/tool_stream.h"

namespace orbit::serve {

// What run() needs of a prepared request: a chat request's window, options and plan, or a completion
// request's tokens.
struct RunTicket::Prepared {
  const ChatRequest* chat = nullptr;  // set for a chat request
  WindowSlot slot;
  SyncOptions options;
  SyncPlan plan;  // Window::plan_sync(chat->messages, options) of slot's window at its current version
  std::shared_ptr<const Constraint> constraint;  // what the answer must match; null: free text
  std::string trigger;                           // non-empty: the constraint applies from this text on
  TriggerBlock trigger_block;                    // where the trigger does not count (decode.h's DecodeRequest)
  bool calls_whole = false;                      // AnswerConstraint::calls_whole
  bool in_reasoning = false;  // under a reasoning parser, the answer begins inside the reasoning (reasoning.h)
  const CompletionRequest* completion = nullptr;  // set for a completion request
  std::vector<int64_t> tokens;                    // its prompt, tokenized with BOS (non-empty)
};

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

std::string plan_brief(const SyncPlan& plan) {
  std::string out;
  auto add = [&](const char* what, int64_t n) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::string(what) + " " + std::to_string(n);
  };
  add("keep", plan.count(SyncAction::kKeep));
  add("admit", plan.count(SyncAction::kAdmit));
  add("recall", plan.count(SyncAction::kRecall));
  add("turn", plan.count(SyncAction::kTurn));
  add("evict", static_cast<int64_t>(plan.evict.size()));
  if (plan.reorder) out += out.empty() ? "reorder" : ", reorder";
  return out.empty() ? "nothing" : out;
}

// The prompt a chat request reads: the rendering's tokens and the generation prompt after them.
int64_t prompt_tokens(const SyncPlan& plan) {
  return static_cast<int64_t>(plan.tokens.size() + plan.generation_prompt.size());
}

ApiError template_refused(const std::string& why) {
  return api_error(400, "the chat template refused the messages: " + why, "invalid_request_error", "", "messages");
}

// The repairs the sync deferred, run now in this quantum (the read would run them first), planned once.
// Returns that plan's predicted KL, which the window then carries (a keep plan's when none wait).
double run_deferred_repairs(Window& window) {
  const Plan plan = window.plan_flush();
  const std::vector<InstanceInfo> instances = window.instances();
  const bool waiting =
      std::any_of(instances.begin(), instances.end(), [](const InstanceInfo& i) { return i.deferred; });
  if (waiting) {  // else applying the keep plan would be an operation of its own
    const Result<ApplyReport> applied = window.apply(plan);
    ORBIT_CHECK(applied.is_ok(), "serve: the repairs the sync deferred could not run: " << applied.status().reason());
  }
  return plan.predicted_kl;
}

// The engine's radix yardstick for what a window read between two of its stats (serve_core.h).
int64_t radix_delta(const WindowStats& before, const WindowStats& after) {
  return std::llround(after.radix_cache_tokens - before.radix_cache_tokens);
}

// How many of `tokens` write the first `bytes` bytes of their text (read after `previous`, as decode reads
// them): the fewest whose text reaches that far, found by halving (a prefix's text grows with it).
int64_t tokens_writing(const Engine& engine, const std::vector<int64_t>& tokens, std::size_t bytes, int64_t previous) {
  std::size_t lo = 0, hi = tokens.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(mid));
    if (engine.detokenize(prefix, previous).size() >= bytes) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return static_cast<int64_t>(lo);
}

RunOutcome cancelled_before_decode() {
  RunOutcome out;
  out.result = RunResult{};
  out.result->finish_reason = "cancelled";
  return out;
}

// What choice `choice`'s ToolCallStream let out of `delta`, to `sink`: the content (to on_text, or with n > 1
// on_choice_text), then each piece of a call; false: the client left.
bool pass_on(ToolCallStream& calls, const RunSink& sink, int64_t choice, const std::string& delta) {
  const ToolStreamOut now = calls.push(delta);
  if (!now.content.empty() &&
      !(sink.on_choice_text ? sink.on_choice_text(choice, now.content) : sink.on_text(now.content))) {
    return false;
  }
  for (const ToolCallDelta& d : now.calls) {
    if (!sink.on_tool_call(choice, d)) return false;
  }
  return true;
}

// `sink` with each choice's text read for tool calls on its way (one ToolCallStream per choice, in `calls`,
// which must outlive the returned sink): content goes on only up to where a call may start; the calls go to
// sink.on_tool_call as they are written where `calls_whole` (AnswerConstraint::calls_whole) and the sink takes
// them, else whole at the choice's end (RunResult::unstreamed_calls).
RunSink tool_call_sink(const RunSink& sink, const ChatRequest& request, ToolCallFormat format, bool calls_whole,
                       std::vector<ToolCallStream>& calls) {
  const bool forced = request.tool_choice.mode == "required" || request.tool_choice.mode == "function";
  const bool progressive = calls_whole && sink.on_tool_call != nullptr;
  calls.assign(static_cast<std::size_t>(std::max<int64_t>(1, request.sampling.n)),
               ToolCallStream(format, forced, progressive, !request.parallel_tool_calls));
  RunSink out = sink;
  if (sink.on_text) {
    out.on_text = [&calls, sink](const std::string& delta) { return pass_on(calls[0], sink, 0, delta); };
  }
  if (sink.on_choice_text) {
    out.on_choice_text = [&calls, sink](int64_t choice, const std::string& delta) {
      return pass_on(calls[static_cast<std::size_t>(choice)], sink, choice, delta);
    };
  }
  return out;
}

// What the session keeps of a chat run (SessionTable::record): its usage, whether it answered, and, for an
// anonymous session or one that anticipates an answered request, the list the next request most likely
// sends (the messages and the answer as the client will send it back), kept to match anonymous requests and
// to anticipate.
RunRecord chat_record(const ChatRequest& request, const SyncOptions& options, const RunResult& r,
                      const std::string& session, bool anticipate) {
  RunRecord record;
  record.usage = r.usage;
  record.answered = r.finish_reason != "cancelled" &&
                    (!r.text.empty() || !r.tool_calls.empty() || (r.reasoning && !r.reasoning->empty()));
  record.options = options;
  if (session.empty() || (anticipate && record.answered)) {
    record.next = request.messages;
    if (record.answered) {
      ChatMessage answer;
      answer.role = "assistant";
      answer.content = r.text;
      answer.tool_calls = r.tool_calls;  // as the client will send them back
      if (r.reasoning && !r.reasoning->empty()) answer.reasoning_content = *r.reasoning;
      record.next.push_back(std::move(answer));
    }
  }
  return record;
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
    return RunTicket(api_error(500, std::string("the engine failed: ") + e.what(), "server_error", "engine_error"));
  }
  std::optional<ApiError> bad;
  try {
    p->plan = p->slot.window().plan_sync(request.messages, p->options);  // the one rendering of the list
    bad = check_lengths(prompt_tokens(p->plan), request.sampling, "messages");
    if (!bad && p->plan.generation_prompt.empty()) {
      bad = api_error(400, "the chat template adds no generation prompt: there is nothing to generate after");
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
                               "", "prompt"));
  }
  if (auto bad = check_lengths(static_cast<int64_t>(p->tokens.size()), request.sampling, "prompt")) {
    return RunTicket(*bad);
  }
  RunTicket ticket;
  ticket.prepared_ = std::move(p);
  return ticket;
}

RunOutcome RequestPath::run(RunTicket& ticket, const RunSink& sink) {
  RunOutcome out;
  if (!ticket.ok()) {
    out.error = ticket.error();
    return out;
  }
  try {
    out = ticket.prepared_->chat ? run_chat(*ticket.prepared_, sink) : run_completion(*ticket.prepared_, sink);
  } catch (const Error& e) {
    out = RunOutcome{};
    if (context_.closing) {
      // The server's close ended the engine under this run (a second signal ends the drain at once): the
      // answer was cut by the shutdown, which is what the client is told, not an engine failure.
      out.error = api_error(503,
                            std::string("the server shut down before this answer was complete (") + e.what() +
                                "); send the request again",
                            "server_error", "server_shutdown");
    } else {
      out.error = api_error(500, std::string("the engine failed: ") + e.what(), "server_error", "engine_error");
    }
  }
  ticket.prepared_.reset();  // the window back to its session
  ticket.error_ = api_error(500, "serve: this request has run already", "server_error");
  const bool cut = out.result && out.result->finish_reason == "cancelled";
  if (cut && context_.closing && !(sink.cancelled && sink.cancelled())) {
    // The server closed under a client that is still there: the answer is incomplete, and saying so is an
    // error, never an answer that looks whole.
    const int64_t made = out.result->usage.completion_tokens;
    out = RunOutcome{};
    out.error = api_error(503,
                          "the server shut down before this answer was complete (" + std::to_string(made) +
                              " token(s) generated); send the request again",
                          "server_error", "server_shutdown");
  } else if (cut) {
    context_.metrics.count_cancelled();
  }
  return out;
}

// What the sync under the gate leaves for the decode.
struct RequestPath::ChatSync {
  SyncReport report;
  double predicted_kl = 0;  // of the repairs the sync deferred, run at once (0 when healed)
  ServingMode mode;         // sessions_.serving: exact (healed) and audited or not
};

// Under the gate: the window synced to the messages by the plan prepare made, the deferred repairs run, and
// the session healed or queued for an audit as it is served. False: the client left before its turn.
bool RequestPath::sync_chat(RunTicket::Prepared& p, const RunSink& sink, ChatSync& out) {
  Session& s = p.slot.session();
  Window& window = p.slot.window();
  GateTurn turn(context_, s.lane, sink.cancelled);
  if (!turn.enter()) return false;
  context_.compute.run([&] {
    out.report = window.sync(p.chat->messages, p.plan);  // the plan prepare made: no second rendering
    out.predicted_kl = run_deferred_repairs(window);
    out.mode = sessions_.serving(s);
    if (out.mode.exact) {
      window.heal();  // an audit found this session's loss past its budget: read as a re-prefill would be
      out.predicted_kl = 0;
    }
    if (out.mode.audit) {
      queue_audit(p.slot.shared_session(), out.mode.request, out.report.generation_prompt, out.predicted_kl);
    }
  });
  return true;
}

// The chat answer decoded after `generation_prompt` on the synced window. With tools, each choice's answer is
// read for calls: content streams up to where a call may start, and the calls are read out as the choice
// ends. Under a reasoning parser the reasoning is split off first: calls and content are read after it.
RunResult RequestPath::decode_chat(RunTicket::Prepared& p, const std::vector<int64_t>& generation_prompt,
                                   const RunSink& sink) {
  const ChatRequest& request = *p.chat;
  std::vector<ToolCallStream> calls;
  RunSink out_sink =
      request.reads_tool_calls() ? tool_call_sink(sink, request, context_.tool_format, p.calls_whole, calls) : sink;
  std::optional<ReasoningRun> reasoning;
  if (context_.options.reasoning != ReasoningFormat::kNone) {
    const int64_t previous = generation_prompt.back();
    reasoning.emplace(p.in_reasoning, request.sampling.n,
                      [this, previous](const std::vector<int64_t>& tokens, std::size_t bytes) {
                        return tokens_writing(*context_.engine, tokens, bytes, previous);
                      });
    out_sink = reasoning->wrap(sink, out_sink);
  }
  DecodeRequest decoding{&generation_prompt, &request.sampling, p.constraint, p.trigger, p.trigger_block};
  if (!calls.empty() || reasoning) {
    decoding.read_choice = [this, &calls, &reasoning](int64_t choice, RunResult& r) {
      const bool past_reasoning = !reasoning || reasoning->finish(choice, r);
      if (calls.empty() || !past_reasoning) return;
      calls[static_cast<std::size_t>(choice)].finish(r);
      if (r.tool_stream_mismatch) report_mismatch(*r.tool_stream_mismatch, choice);
      if (r.tool_calls_dropped > 0) {  // parallel_tool_calls false over a free answer: said, not silent
        std::fprintf(stderr,
                     "orbit serve: choice %lld wrote %zu tool calls; parallel_tool_calls is false, so only the first "
                     "is answered\n",
                     static_cast<long long>(choice), r.tool_calls_dropped + 1);
      }
    };
  }
  RunResult r = decode(context_, p.slot.window(), decoding, out_sink);
  if (reasoning) {  // every choice's
    int64_t all = r.usage.reasoning_tokens.value_or(0);
    for (const RunResult& extra : r.extra_choices) all += extra.usage.reasoning_tokens.value_or(0);
    r.usage.reasoning_tokens = all;
  }
  return r;
}

RunOutcome RequestPath::run_chat(RunTicket::Prepared& p, const RunSink& sink) {
  Session& s = p.slot.session();
  Window& window = p.slot.window();
  const WindowStats before = window.stats();
  ChatSync synced;
  if (!sync_chat(p, sink, synced)) return cancelled_before_decode();
  RunResult r = decode_chat(p, synced.report.generation_prompt, sink);
  const WindowStats after = window.stats();
  RunUsage& u = r.usage;
  u.prompt_tokens = prompt_tokens(synced.report.plan);
  u.forward_tokens =
      after.critical_forward_tokens - before.critical_forward_tokens + static_cast<double>(r.prompt_forward_tokens);
  u.radix_cache_tokens = radix_delta(before, after);
  u.predicted_kl = synced.predicted_kl;
  u.idle_forward_tokens = sessions_.take_idle_forward_tokens(s);
  u.plan = plan_brief(synced.report.plan);
  u.session = s.id;
  u.audit = sessions_.take_audit(s, synced.mode.request);
  if (synced.mode.exact) u.exact = "audit";
  sessions_.record(s, chat_record(*p.chat, p.options, r, s.id, context_.options.anticipate));
  RunOutcome out;
  out.result = std::move(r);
  return out;
}

// A streamed call its answer does not hold as it went out: counted in /metrics and logged with both texts.
void RequestPath::report_mismatch(const ToolStreamMismatch& m, int64_t choice) {
  context_.metrics.count_tool_stream_mismatch(m.what);
  const ApiError e = tool_stream_error(m, choice);
  std::fprintf(stderr, "orbit serve: %s (streamed name '%s', arguments %s; the answer's name '%s', arguments %s)\n",
               e.message.c_str(), m.name.c_str(), m.streamed.c_str(), m.answered_name.c_str(), m.answered.c_str());
}

// The window as the answer reads it, forked for an audit in idle time (audit.h). Holding the gate.
void RequestPath::queue_audit(std::shared_ptr<Session> s, int64_t request, const std::vector<int64_t>& query,
                              double predicted_kl) {
  AuditCase c;
  c.fork.emplace(s->window->fork());
  c.session = std::move(s);
  c.request = request;
  c.query = query;
  c.predicted_kl = predicted_kl;
  c.budget = context_.policy.kl_budget > 0 ? context_.policy.kl_budget : kDefaultKlBudget;
  context_.auditor.submit(std::move(c));
}

RunOutcome RequestPath::run_completion(RunTicket::Prepared& p, const RunSink& sink) {
  const std::vector<int64_t>& tokens = p.tokens;
  const std::string lane = "~completion:" + std::to_string(++lanes_);
  Window window = context_.new_window();
  const WindowStats before = window.stats();
  const std::vector<int64_t> prefix(tokens.begin(), tokens.end() - 1);
  if (!prefix.empty()) {
    // The prompt but its last token as one chunk: an identical prompt is served from the store. Registered
    // once the turn is ours, right before the admit (a chunk no window holds may be forgotten meanwhile,
    // ServeOptions::max_idle_chunks).
    GateTurn turn(context_, lane, sink.cancelled);
    if (!turn.enter()) return cancelled_before_decode();
    context_.compute.run([&] { window.admit(context_.engine->add_tokens(prefix, ChunkOptions{})); });
  }
  const std::vector<int64_t> query{tokens.back()};
  RunResult r = decode(context_, window, DecodeRequest{&query, &p.completion->sampling}, sink);
  const WindowStats after = window.stats();
  r.usage.prompt_tokens = static_cast<int64_t>(tokens.size());
  r.usage.forward_tokens =
      after.critical_forward_tokens - before.critical_forward_tokens + static_cast<double>(r.prompt_forward_tokens);
  r.usage.radix_cache_tokens = radix_delta(before, after);
  r.usage.plan = prefix.empty() ? "query only" : "prompt as one chunk";
  RunOutcome out;
  out.result = std::move(r);
  return out;
}

}  // namespace orbit::serve
