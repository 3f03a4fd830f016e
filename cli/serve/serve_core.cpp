#include "serve/serve_core.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/policy.h"
#include "serve/text_stream.h"

namespace orbit::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct ServeCore::Session {
  std::string id;                // "" for an anonymous window
  std::string lane;              // the gate lane its forwards queue in
  std::mutex run;                // held by the request using the window (one at a time) and by idle work
  std::optional<Window> window;  // nullopt: not resident
  // Guarded by sessions_mutex_:
  int64_t holders = 0;  // requests running or waiting for `run`
  uint64_t last_used = 0;
  bool needs_idle = false;
  // The list the next request will most likely send: this one's and the answer (ServeOptions::anticipate).
  std::optional<std::vector<ChatMessage>> anticipated;
  SyncOptions anticipated_options;
  double idle_forward_tokens = 0;  // forwarded in idle time for the next request's prompt, not yet reported
  std::vector<int64_t> last_read;  // the last read's prompt and generated tokens (anonymous matching)
  WindowStats stats;               // the window's, at the end of its last request
  int64_t requests = 0, evictions = 0, prompt_tokens = 0, completion_tokens = 0, radix_tokens = 0;
  double forward_tokens = 0, predicted_kl = 0, total_idle_forward_tokens = 0;
};

struct ServeCore::Slot {
  std::shared_ptr<Session> session;
  std::unique_lock<std::mutex> lock;  // session->run (declared after `session`: released before it)
};

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

ApiError api_error(int status, std::string message, std::string type, std::string code = "", std::string param = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

int64_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const auto mismatch =
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin());
  return mismatch.first - a.begin();
}

// Leaves the gate when the scope ends with it held.
struct HeldGate {
  FairGate& gate;
  bool held = false;
  ~HeldGate() {
    if (held) gate.leave();
  }
};

}  // namespace

json RunUsage::to_json() const {
  json orbit = {{"forward_tokens", forward_tokens},
                {"radix_cache_tokens", radix_cache_tokens},
                {"predicted_kl", predicted_kl},
                {"plan", plan},
                {"idle_forward_tokens", idle_forward_tokens}};
  if (!session.empty()) orbit["session"] = session;
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"orbit", orbit}};
}

ServeCore::ServeCore(const ServeOptions& options) : options_(options), radix_(planner::PrefixCacheOptions{}) {
  EngineOptions eo;
  eo.model = options.model;
  eo.store_dir = options.store_dir;
  eo.remote = options.remote;
  eo.pool_bytes = options.pool_bytes;
  eo.background = BackgroundMode::kDeferred;  // run by the idle worker, only while no request waits
  policy_ = options.policy.empty() ? WindowPolicy{} : parse_policy(options.policy);
  engine_ = Engine::open(eo);
  info_ = engine_->model_info();
  ORBIT_CHECK(engine_->has_tokenizer(), "serve: " << options.model << " has no tokenizer (the server takes text)");
  // The yardstick gets the KV memory orbit's pool has, in tokens.
  const int64_t capacity = info_.kv_bytes_per_token > 0 ? options.pool_bytes / info_.kv_bytes_per_token : 0;
  radix_ = planner::RadixCache(planner::PrefixCacheOptions{capacity, 16});
  model_name_ = options.model_name;
  if (model_name_.empty()) {
    std::filesystem::path p(options.model);
    model_name_ = (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
  }
  idle_thread_ = std::thread([this] { idle_loop(); });
}

ServeCore::~ServeCore() { close(); }

Window ServeCore::new_window() {
  WindowOptions wo;
  wo.policy = policy_;
  return engine_->new_window(wo);
}

bool ServeCore::enter_gate(const std::string& lane, const RunSink& sink) {
  const auto t0 = Clock::now();
  const bool ok = gate_.enter(lane, sink.cancelled);
  if (ok) metrics_.count_wait(seconds_since(t0));
  return ok;
}

ServeCore::Slot ServeCore::acquire_session(const std::string& id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    auto& entry = sessions_[id];
    if (!entry) {
      entry = std::make_shared<Session>();
      entry->id = id;
      entry->lane = id;
    }
    s = entry;
    ++s->holders;
    s->last_used = ++clock_;
  }
  Slot slot{s, std::unique_lock<std::mutex>(s->run)};
  if (!s->window) s->window.emplace(new_window());
  return slot;
}

ServeCore::Slot ServeCore::acquire_anonymous(const std::vector<int64_t>& prompt) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    int64_t best = -1;
    for (const auto& a : anonymous_) {
      if (a->holders > 0) continue;
      const int64_t shared = common_prefix(a->last_read, prompt);
      if (shared > best) best = shared, s = a;
    }
    if (!s || (best == 0 && static_cast<int64_t>(anonymous_.size()) < options_.anonymous_windows)) {
      s = std::make_shared<Session>();
      s->lane = "~anonymous:" + std::to_string(++clock_);
      if (static_cast<int64_t>(anonymous_.size()) < options_.anonymous_windows) anonymous_.push_back(s);
    }
    ++s->holders;
    s->last_used = ++clock_;
  }
  Slot slot{s, std::unique_lock<std::mutex>(s->run)};
  if (!s->window) s->window.emplace(new_window());
  return slot;
}

void ServeCore::release(Slot& slot) {
  Session& s = *slot.session;
  const WindowStats stats = s.window ? s.window->stats() : WindowStats{};
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    s.stats = stats;
    --s.holders;
    s.last_used = ++clock_;
    s.needs_idle = s.window.has_value();
  }
  slot.lock.unlock();
  enforce_budget(false);
  idle_cv_.notify_all();
}

void ServeCore::forget_sessions() {
  while (static_cast<int64_t>(sessions_.size()) > options_.max_known_sessions) {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const bool idle = !it->second->window && it->second->holders == 0;
      if (idle && (oldest == sessions_.end() || it->second->last_used < oldest->second->last_used)) oldest = it;
    }
    if (oldest == sessions_.end()) return;
    sessions_.erase(oldest);
  }
}

void ServeCore::enforce_budget(bool wait) {
  std::set<const Session*> busy;  // candidates whose window the idle worker holds: skipped this time
  for (;;) {
    std::shared_ptr<Session> victim;
    {
      std::lock_guard<std::mutex> lock(sessions_mutex_);
      int64_t resident = 0, bytes = 0;
      for (const auto& [id, s] : sessions_) {
        if (!s->window) continue;
        ++resident;
        if (s->holders == 0) bytes += s->stats.device_bytes;
      }
      forget_sessions();
      if (resident <= options_.max_sessions && bytes <= options_.session_budget_bytes) return;
      for (const auto& [id, s] : sessions_) {
        const bool candidate = s->window && s->holders == 0 && !busy.count(s.get());
        if (candidate && (!victim || s->last_used < victim->last_used)) victim = s;
      }
      if (!victim) return;
    }
    std::unique_lock<std::mutex> run(victim->run, std::defer_lock);
    if (wait) {
      run.lock();  // the idle worker's slice ends
    } else if (!run.try_lock()) {
      busy.insert(victim.get());  // the idle worker enforces the budget again when it lets go
      continue;
    }
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    if (victim->holders > 0) {  // a request came for it meanwhile: keep it
      busy.insert(victim.get());
      continue;
    }
    victim->window.reset();  // its KV leaves the pool; its chunks stay in the store
    ++victim->evictions;
    victim->stats = WindowStats{};
  }
}

int64_t ServeCore::radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(radix_mutex_);
  return radix_.read(tokens, prompt_tokens).forwarded;
}

std::optional<ApiError> ServeCore::check_lengths(int64_t prompt_tokens, const SamplingRequest& sampling) const {
  const int64_t context = info_.max_positions;
  if (prompt_tokens >= context) {
    return api_error(400,
                     "the prompt is " + std::to_string(prompt_tokens) + " tokens; the model's context is " +
                         std::to_string(context) + " tokens, and at least one must be left to generate",
                     "invalid_request_error", "context_length_exceeded", "messages");
  }
  if (sampling.max_tokens && *sampling.max_tokens > context - prompt_tokens) {
    return api_error(400,
                     "max_tokens = " + std::to_string(*sampling.max_tokens) + " is out of range: the prompt is " +
                         std::to_string(prompt_tokens) + " tokens of a " + std::to_string(context) +
                         "-token context, so at most " + std::to_string(context - prompt_tokens) + " can be generated",
                     "invalid_request_error", "context_length_exceeded", "max_tokens");
  }
  return std::nullopt;
}

int64_t ServeCore::max_tokens_for(int64_t prompt_tokens, const SamplingRequest& sampling) const {
  const int64_t room = info_.max_positions - prompt_tokens;
  return std::max<int64_t>(1, std::min(room, sampling.max_tokens.value_or(options_.default_max_tokens)));
}

RunResult ServeCore::decode(Window& window, const std::vector<int64_t>& query, const SamplingRequest& sampling,
                            const std::string& lane, const RunSink& sink) {
  const int64_t previous = query.back();
  TextStream stream([&](const std::vector<int64_t>& t) { return engine_->detokenize(t, previous); }, sampling.stop);
  GenerateOptions go;
  go.max_tokens = max_tokens_for(static_cast<int64_t>(window.tokens() + query.size()), sampling);
  go.temperature = sampling.temperature;
  go.top_p = sampling.top_p;
  go.seed = sampling.seed.value_or(0);
  for (int64_t stop : {info_.bos_token, info_.eos_token}) {
    if (stop >= 0) go.stop_tokens.push_back(stop);
  }
  bool gone = false;
  HeldGate gate{gate_};
  go.on_token = [&](int64_t token, int64_t index) {
    gate_.leave();
    gate.held = false;
    const std::string delta = stream.push(token);
    if (!delta.empty() && sink.on_text && !sink.on_text(delta)) return !(gone = true);
    if (stream.stopped()) return false;
    if (index + 1 >= go.max_tokens) return true;  // generate ends without another forward
    if (sink.cancelled && sink.cancelled()) return !(gone = true);
    gate.held = enter_gate(lane, sink);
    if (!gate.held) gone = true;
    return gate.held;
  };
  RunResult r;
  gate.held = enter_gate(lane, sink);
  if (!gate.held) {
    r.finish_reason = "cancelled";
    return r;
  }
  const Generation g = window.generate(query, go);
  const std::string rest = stream.finish();
  if (!gone && !rest.empty() && sink.on_text && !sink.on_text(rest)) gone = true;
  r.text = stream.released();
  r.tokens = stream.tokens();
  r.usage.completion_tokens = static_cast<int64_t>(r.tokens.size());
  r.prompt_forward_tokens = g.prompt_forward_tokens;
  if (gone) {
    r.finish_reason = "cancelled";
  } else if (stream.stopped() || g.stop_reason == "stop_token") {
    r.finish_reason = "stop";
  } else {
    r.finish_reason = "length";
  }
  return r;
}

RunOutcome ServeCore::run_chat(Slot& slot, const ChatRequest& request, const RunSink& sink) {
  Session& s = *slot.session;
  Window& window = *s.window;
  SyncOptions so;
  so.chat.tools_json = request.tools_json;
  so.chunk_min_tokens = options_.chunk_min_tokens;
  const std::vector<ChatMessage>& messages = request.messages;
  RunOutcome out;
  const double before = window.stats().critical_forward_tokens;
  SyncReport report;
  double predicted_kl = 0;
  {
    HeldGate gate{gate_, enter_gate(s.lane, sink)};
    if (!gate.held) {
      out.result = RunResult{};
      out.result->finish_reason = "cancelled";
      return out;
    }
    report = window.sync(messages, so);
    // The repairs the edits deferred run now, in this quantum (the read would run them first): the KL the
    // window then carries is the flush plan's (a keep plan's when none wait).
    predicted_kl = window.plan_flush().predicted_kl;
    window.flush();
  }
  if (report.generation_prompt.empty()) {
    out.error = api_error(400, "the chat template adds no generation prompt: there is nothing to generate after",
                          "invalid_request_error");
    return out;
  }
  RunResult r = decode(window, report.generation_prompt, request.sampling, s.lane, sink);
  const WindowStats after = window.stats();
  std::vector<int64_t> read = report.plan.tokens;
  read.insert(read.end(), report.generation_prompt.begin(), report.generation_prompt.end());
  const std::size_t prompt = read.size();
  r.usage.prompt_tokens = static_cast<int64_t>(prompt);
  r.usage.forward_tokens = after.critical_forward_tokens - before + static_cast<double>(r.prompt_forward_tokens);
  r.usage.predicted_kl = predicted_kl;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    r.usage.idle_forward_tokens = s.idle_forward_tokens;
    s.idle_forward_tokens = 0;
  }
  r.usage.plan = plan_brief(report.plan);
  r.usage.session = s.id;
  // The model computed KV for every token it generated: the answer is part of the read.
  read.insert(read.end(), r.tokens.begin(), r.tokens.end());
  r.usage.radix_cache_tokens = radix_read(read, prompt);
  out.result = std::move(r);
  const RunResult& res = *out.result;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    if (s.id.empty()) s.last_read = std::move(read);  // only anonymous windows are matched by prefix
    s.anticipated.reset();
    if (options_.anticipate && !s.id.empty() && res.finish_reason != "cancelled" && !res.text.empty()) {
      s.anticipated = messages;
      ChatMessage answer;
      answer.role = "assistant";
      answer.content = res.text;
      s.anticipated->push_back(std::move(answer));
      s.anticipated_options = so;
    }
    s.predicted_kl = res.usage.predicted_kl;
    ++s.requests;
    s.prompt_tokens += res.usage.prompt_tokens;
    s.completion_tokens += res.usage.completion_tokens;
    s.forward_tokens += res.usage.forward_tokens;
    s.radix_tokens += res.usage.radix_cache_tokens;
  }
  return out;
}

std::optional<ApiError> ServeCore::check_common(const std::string& model) const {
  if (model != model_name_) {
    return api_error(404, "the model '" + model + "' does not exist; this server serves '" + model_name_ + "'",
                     "invalid_request_error", "model_not_found", "model");
  }
  if (closing_) return api_error(503, "the server is shutting down", "server_error", "shutting_down");
  return std::nullopt;
}

std::optional<ApiError> ServeCore::check_chat(const ChatRequest& request, std::vector<int64_t>* prompt) const {
  if (auto bad = check_common(request.model)) return bad;
  ChatOptions chat;
  chat.tools_json = request.tools_json;
  try {
    *prompt = engine_->tokenize_chat(request.messages, true, chat);
  } catch (const Error& e) {
    return api_error(400, std::string("the chat template refused the messages: ") + e.what(), "invalid_request_error",
                     "", "messages");
  }
  return check_lengths(static_cast<int64_t>(prompt->size()), request.sampling);
}

std::optional<ApiError> ServeCore::check_completion(const CompletionRequest& request,
                                                    std::vector<int64_t>* tokens) const {
  if (auto bad = check_common(request.model)) return bad;
  *tokens = engine_->tokenize(request.prompt, true);
  auto bad = check_lengths(static_cast<int64_t>(tokens->size()), request.sampling);
  if (bad && bad->param == "messages") bad->param = "prompt";
  return bad;
}

RunOutcome ServeCore::chat(const ChatRequest& request, const std::vector<int64_t>& prompt, const std::string& session,
                           const RunSink& sink) {
  RunOutcome out;
  Slot slot = session.empty() ? acquire_anonymous(prompt) : acquire_session(session);
  try {
    out = run_chat(slot, request, sink);
  } catch (const Error& e) {
    out = RunOutcome{};
    out.error = api_error(500, std::string("the engine failed: ") + e.what(), "server_error", "engine_error");
  }
  release(slot);
  if (out.result && out.result->finish_reason == "cancelled") metrics_.count_cancelled();
  return out;
}

RunOutcome ServeCore::complete(const CompletionRequest& request, const std::vector<int64_t>& tokens,
                               const RunSink& sink) {
  RunOutcome out;
  const std::string lane = "~completion:" + std::to_string(++lanes_);
  try {
    Window window = new_window();
    const std::vector<int64_t> prefix(tokens.begin(), tokens.end() - 1);
    if (!prefix.empty()) {
      // The prompt but its last token as one chunk: an identical prompt is served from the store.
      const ChunkRef chunk = engine_->add_tokens(prefix, ChunkOptions{});
      HeldGate gate{gate_, enter_gate(lane, sink)};
      if (!gate.held) {
        metrics_.count_cancelled();
        out.result = RunResult{};
        out.result->finish_reason = "cancelled";
        return out;
      }
      window.admit(chunk);
    }
    RunResult r = decode(window, {tokens.back()}, request.sampling, lane, sink);
    r.usage.prompt_tokens = static_cast<int64_t>(tokens.size());
    r.usage.forward_tokens = window.stats().critical_forward_tokens + static_cast<double>(r.prompt_forward_tokens);
    r.usage.plan = prefix.empty() ? "query only" : "prompt as one chunk";
    std::vector<int64_t> read = tokens;
    read.insert(read.end(), r.tokens.begin(), r.tokens.end());
    r.usage.radix_cache_tokens = radix_read(read, tokens.size());
    if (r.finish_reason == "cancelled") metrics_.count_cancelled();
    out.result = std::move(r);
  } catch (const Error& e) {
    out = RunOutcome{};
    out.error = api_error(500, std::string("the engine failed: ") + e.what(), "server_error", "engine_error");
  }
  return out;
}

std::optional<json> ServeCore::session_info(const std::string& id) {
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  const Session& s = *it->second;
  json window = nullptr;
  if (s.window) {
    window = {{"instances", s.stats.instances},
              {"chunk_instances", s.stats.chunk_instances},
              {"turns", s.stats.turns},
              {"tokens", s.stats.tokens},
              {"device_bytes", s.stats.device_bytes},
              {"evicted_chunks", s.stats.evicted}};
  }
  json savings = {{"forward_tokens", s.forward_tokens},
                  {"radix_cache_tokens", s.radix_tokens},
                  {"window_prefix_cache_tokens", s.stats.prefix_cache_tokens},
                  {"idle_forward_tokens", s.total_idle_forward_tokens},
                  {"saved_tokens", static_cast<double>(s.radix_tokens) - s.forward_tokens},
                  {"ratio", s.radix_tokens > 0 ? s.forward_tokens / static_cast<double>(s.radix_tokens) : 0.0}};
  return json{{"id", s.id},
              {"object", "orbit.session"},
              {"resident", s.window.has_value()},
              {"running", s.holders > 0},
              {"requests", s.requests},
              {"prompt_tokens", s.prompt_tokens},
              {"completion_tokens", s.completion_tokens},
              {"predicted_kl", s.predicted_kl},
              {"left_memory", s.evictions},
              {"window", window},
              {"savings", savings}};
}

void ServeCore::enforce_session_budget() { enforce_budget(true); }

bool ServeCore::end_session(const std::string& id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    s = it->second;
    sessions_.erase(it);
  }
  // A request still running keeps the session alive until it ends; the window closes with the last holder.
  std::unique_lock<std::mutex> run(s->run, std::try_to_lock);
  if (run.owns_lock()) s->window.reset();
  return true;
}

json ServeCore::models() const {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_name_},
                                 {"object", "model"},
                                 {"created", 0},
                                 {"owned_by", "orbit"},
                                 {"context_length", info_.max_positions}}})}};
}

MetricGauges ServeCore::gauges() {
  MetricGauges g;
  g.queue_depth = gate_.waiting();
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  g.sessions = static_cast<int64_t>(sessions_.size());
  for (const auto& [id, s] : sessions_) g.resident_sessions += s->window.has_value() ? 1 : 0;
  return g;
}

bool ServeCore::idle_slice() {
  if (!gate_.try_enter_idle()) return false;
  GateHold hold(gate_);
  if (engine_->stats().background_pending > 0) {
    engine_->run_background(0.02);
    return true;
  }
  std::shared_ptr<Session> target;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    for (const auto& [id, s] : sessions_) {
      if (s->needs_idle && s->holders == 0 && s->window) {
        target = s;
        break;
      }
    }
    if (!target) return false;
    target->needs_idle = false;
  }
  {
    std::unique_lock<std::mutex> run(target->run, std::try_to_lock);
    if (!run.owns_lock() || !target->window) return false;
    prefill_anticipated(*target);
    target->window->idle();
  }
  enforce_budget(false);  // a release meanwhile may have skipped this session's window
  return true;
}

void ServeCore::prefill_anticipated(Session& s) {
  std::optional<std::vector<ChatMessage>> next;
  SyncOptions so;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    next.swap(s.anticipated);
    so = s.anticipated_options;
  }
  if (!next) return;
  // The answer as the next request will render it: prefilled now, in idle time, so that request keeps it
  // (a radix cache keeps the KV its decode computed). A client that sends something else evicts it.
  Window& window = *s.window;
  const double before = window.stats().critical_forward_tokens;
  try {
    window.sync(*next, so);
    window.flush();
  } catch (const Error& e) {
    std::fprintf(stderr, "orbit serve: prefilling session %s's answer failed: %s\n", s.id.c_str(), e.what());
  }
  const double spent = window.stats().critical_forward_tokens - before;
  metrics_.count_idle_forward(spent);
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  s.idle_forward_tokens += spent;
  s.total_idle_forward_tokens += spent;
}

int64_t ServeCore::run_idle_work() {
  std::lock_guard<std::mutex> lock(idle_work_mutex_);
  int64_t slices = 0;
  while (idle_slice()) ++slices;
  return slices;
}

void ServeCore::idle_loop() {
  while (!closing_) {
    bool worked = false;
    try {
      std::lock_guard<std::mutex> lock(idle_work_mutex_);
      worked = idle_slice();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "orbit serve: idle work failed: %s\n", e.what());
    }
    if (worked) continue;
    std::unique_lock<std::mutex> lock(idle_mutex_);
    idle_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void ServeCore::close() {
  std::lock_guard<std::mutex> lock(close_mutex_);
  if (closed_) return;
  closing_ = true;
  idle_cv_.notify_all();
  if (idle_thread_.joinable()) idle_thread_.join();
  gate_.close();
  {
    // Wait for the forward in flight: the gate is free once its holder leaves.
    while (gate_.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::map<std::string, std::shared_ptr<Session>> sessions;
  std::vector<std::shared_ptr<Session>> anonymous;
  {
    std::lock_guard<std::mutex> guard(sessions_mutex_);
    sessions.swap(sessions_);
    anonymous.swap(anonymous_);
  }
  for (auto* table : {&anonymous}) {
    for (auto& s : *table) {
      std::lock_guard<std::mutex> run(s->run);
      s->window.reset();
    }
  }
  for (auto& [id, s] : sessions) {
    std::lock_guard<std::mutex> run(s->run);
    s->window.reset();
  }
  engine_->close();
  closed_ = true;
}

}  // namespace orbit::serve
