#include "serve/sessions/session_table.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace orbit::serve {

using nlohmann::json;

namespace {

// FNV-1a over length-prefixed fields, so no two field lists hash alike by shifting a boundary.
class Fnv {
 public:
  void add(std::string_view text) {
    add_int(static_cast<int64_t>(text.size()));
    for (const char c : text) byte(static_cast<unsigned char>(c));
  }
  void add_optional(const std::optional<std::string>& text) {
    add_int(text ? 1 : 0);
    if (text) add(std::string_view(*text));
  }
  void add_int(int64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  uint64_t value() const { return h_; }

 private:
  void byte(unsigned char c) { h_ = (h_ ^ c) * 0x100000001b3ULL; }
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

MessageDigest digest(const ChatMessage& m) {
  Fnv h;
  int64_t size = static_cast<int64_t>(m.role.size() + m.content.size());
  h.add(m.role);
  h.add(m.content);
  h.add_optional(m.name);
  h.add_optional(m.tool_call_id);
  h.add_optional(m.reasoning_content);
  h.add_int(static_cast<int64_t>(m.content_form));
  if (m.reasoning_content) size += static_cast<int64_t>(m.reasoning_content->size());
  h.add_int(static_cast<int64_t>(m.tool_calls.size()));
  for (const ChatToolCall& c : m.tool_calls) {
    h.add(c.id);
    h.add(c.name);
    h.add(c.arguments);
    size += static_cast<int64_t>(c.name.size() + c.arguments.size());
  }
  h.add_int(static_cast<int64_t>(m.parts.size()));
  for (const ContentPart& p : m.parts) {
    h.add(p.chunk ? std::string_view(p.chunk->key) : std::string_view(p.text));
    h.add_int(p.chunk ? 1 : 0);
    size += p.chunk ? 4 * p.chunk->length : static_cast<int64_t>(p.text.size());
  }
  return MessageDigest{h.value(), size};
}

MessageDigest digest_tools(const std::string& tools_json) {
  Fnv h;
  h.add(tools_json);
  return MessageDigest{h.value(), static_cast<int64_t>(tools_json.size())};
}

WindowMatch match_window(const LastRequest& last, const std::vector<MessageDigest>& request,
                         const MessageDigest& tools) {
  const std::vector<MessageDigest>& list = last.messages;
  WindowMatch m;
  const bool same_tools = last.tools == tools;
  // A template renders the tools before the first message: a prefix shared under other tools is not one.
  while (same_tools && m.leading < static_cast<int64_t>(std::min(list.size(), request.size())) &&
         list[m.leading] == request[m.leading]) {
    ++m.leading;
  }
  // Each message of the window's list matches at most one of the request's (a window holds it once).
  std::unordered_map<uint64_t, int64_t> held;
  for (const MessageDigest& d : list) ++held[d.hash];
  for (const MessageDigest& d : request) {
    auto it = held.find(d.hash);
    if (it == held.end() || it->second == 0) continue;
    --it->second;
    m.shared_size += d.size;
  }
  if (same_tools && m.shared_size > 0) m.shared_size += tools.size;  // the same tools alone are no match
  const std::size_t prompt = list.size() - (last.answered ? 1 : 0);
  const bool answer_back = last.answered && std::find(request.begin(), request.end(), list.back()) != request.end();
  const bool retry =
      same_tools && prompt > 0 && request.size() == prompt && static_cast<std::size_t>(m.leading) >= prompt;
  m.continues = answer_back || retry;
  return m;
}

namespace {

std::vector<MessageDigest> digests(const std::vector<ChatMessage>& messages) {
  std::vector<MessageDigest> out;
  out.reserve(messages.size());
  for (const ChatMessage& m : messages) out.push_back(digest(m));
  return out;
}

}  // namespace

// ---- WindowSlot ----

WindowSlot::WindowSlot(SessionTable* table, std::shared_ptr<Session> session, bool created)
    : table_(table), session_(std::move(session)), lock_(session_->run), created_(created) {}

WindowSlot::WindowSlot(WindowSlot&& other) noexcept
    : table_(std::exchange(other.table_, nullptr)),
      session_(std::move(other.session_)),
      lock_(std::move(other.lock_)),
      created_(other.created_),
      refused_(other.refused_) {}

WindowSlot& WindowSlot::operator=(WindowSlot&& other) noexcept {
  if (this != &other) {
    release();
    table_ = std::exchange(other.table_, nullptr);
    session_ = std::move(other.session_);
    lock_ = std::move(other.lock_);
    created_ = other.created_;
    refused_ = other.refused_;
  }
  return *this;
}

void WindowSlot::release() {
  if (table_ == nullptr) return;
  std::exchange(table_, nullptr)->release(*this);
}

// ---- SessionTable ----

SessionTable::SessionTable(ServeContext& context, std::function<void()> on_release)
    : context_(context), on_release_(std::move(on_release)) {}

WindowSlot SessionTable::acquire(const std::string& id) {
  std::shared_ptr<Session> s;
  bool created = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = sessions_[id];
    if (!entry) {
      entry = std::make_shared<Session>();
      entry->id = id;
      entry->lane = id;
      created = true;
    }
    s = entry;
    ++s->holders;
    s->last_used = ++clock_;
  }
  WindowSlot slot(this, s, created);  // waits for the session's earlier requests
  make_resident(*s);
  return slot;
}

void SessionTable::make_resident(Session& s) {
  if (s.window) return;
  Window window = context_.new_window();
  std::lock_guard<std::mutex> lock(mutex_);
  s.window.emplace(std::move(window));
}

WindowSlot SessionTable::acquire_anonymous(const std::vector<ChatMessage>& messages, const std::string& tools_json) {
  const std::vector<MessageDigest> request = digests(messages);
  const MessageDigest tools = digest_tools(tools_json);
  std::shared_ptr<Session> s;
  bool created = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Session> best;
    WindowMatch best_match;
    for (const auto& a : anonymous_) {
      if (a->holders > 0) continue;
      const WindowMatch m = match_window(a->last, request, tools);
      if (best && m < best_match) continue;
      // Equal continuations: the most recently used; equal strangers: the least (its owner is likeliest gone).
      const bool tie = best && !(best_match < m);
      if (tie && (m.continues ? a->last_used < best->last_used : a->last_used > best->last_used)) continue;
      best = a, best_match = m;
    }
    const bool room = static_cast<int64_t>(anonymous_.size()) < context_.options.anonymous_windows;
    if (best && (best_match.continues || !room)) s = best;
    if (!s) {
      s = std::make_shared<Session>();
      s->lane = "~anonymous:" + std::to_string(++clock_);
      created = true;
      if (room) anonymous_.push_back(s);
    }
    ++s->holders;
    s->last_used = ++clock_;
  }
  WindowSlot slot(this, s, created);
  make_resident(*s);
  return slot;
}

void SessionTable::release(WindowSlot& slot) {
  Session& s = *slot.session_;
  const WindowStats stats = s.window ? s.window->stats() : WindowStats{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --s.holders;
    s.last_used = ++clock_;
    if (slot.refused_ && slot.created_ && s.holders == 0) {
      drop_refused(s);
      s.window.reset();  // holding `run`: nobody else can see it
    } else {
      s.stats = stats;
      s.needs_idle = s.window.has_value();
    }
  }
  slot.lock_.unlock();
  count_release();
  enforce_budget(false);
  on_release_();
}

void SessionTable::count_release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++releases_;
  }
  released_.notify_all();  // a request waiting for pool pages tries again (wait_for_release)
}

SessionTable::OutsideHold SessionTable::hold_outside() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++outside_holds_;
  return OutsideHold(this);
}

SessionTable::OutsideHold& SessionTable::OutsideHold::operator=(OutsideHold&& other) noexcept {
  if (this != &other) {
    OutsideHold gone(std::move(*this));  // released as it goes
    table_ = std::exchange(other.table_, nullptr);
  }
  return *this;
}

SessionTable::OutsideHold::~OutsideHold() {
  if (table_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(table_->mutex_);
    --table_->outside_holds_;
  }
  table_->count_release();
}

uint64_t SessionTable::releases() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return releases_;
}

SessionTable::Wait SessionTable::wait_for_release(const Session* self, uint64_t seen,
                                                  std::chrono::steady_clock::time_point deadline,
                                                  const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Not a request that will release pages for the others waiting here.
  if (self != nullptr) {
    pool_waiters_.insert(self);
  } else {
    ++outside_waiters_;
  }
  const auto done = [&](Wait w) {
    if (self != nullptr) {
      pool_waiters_.erase(pool_waiters_.find(self));
    } else {
      --outside_waiters_;
    }
    return w;
  };
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline)
      return done(Wait::kGiveUp);  // first: --pool-wait-ms 0 never tries again
    if (releases_ != seen) return done(Wait::kReleased);
    const auto tick = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    if (released_.wait_until(lock, tick, [&] { return releases_ != seen; })) return done(Wait::kReleased);
    // Another request holds or waits for a window (a completion's too): its release wakes this wait.
    bool running = outside_holds_ > outside_waiters_;
    for_each_window([&](const std::shared_ptr<Session>& s) {
      running = running || (s.get() != self && s->holders > static_cast<int64_t>(pool_waiters_.count(s.get())));
    });
    if (!running) return done(Wait::kIdle);  // what holds the pages is no request (the idle worker's window): try again
    if (cancelled) {
      lock.unlock();
      const bool left = cancelled();
      lock.lock();
      if (left) return done(Wait::kGiveUp);
    }
  }
}

void SessionTable::drop_refused(const Session& s) {
  if (s.id.empty()) {
    anonymous_.erase(std::remove_if(anonymous_.begin(), anonymous_.end(),
                                    [&](const std::shared_ptr<Session>& a) { return a.get() == &s; }),
                     anonymous_.end());
    return;
  }
  const auto it = sessions_.find(s.id);
  if (it != sessions_.end() && it->second.get() == &s) sessions_.erase(it);
}

double SessionTable::take_idle_forward_tokens(Session& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(s.idle_forward_tokens, 0.0);
}

void SessionTable::record(Session& s, RunRecord run) {
  std::lock_guard<std::mutex> lock(mutex_);
  s.anticipated.reset();
  // Anonymous windows get the idle work named sessions get: their answer prefilled as the next request
  // will most likely send it back (and they are matched to requests by that list).
  if (context_.options.anticipate && run.answered) {
    s.anticipated = run.next;
    s.anticipated_options = run.options;
  }
  if (s.id.empty()) {
    s.last.messages = digests(run.next);
    s.last.answered = run.answered;
    s.last.tools = digest_tools(run.options.chat.tools_json);
  }
  SessionTotals& t = s.totals;
  t.predicted_kl = run.usage.predicted_kl;
  ++t.requests;
  t.prompt_tokens += run.usage.prompt_tokens;
  t.completion_tokens += run.usage.completion_tokens;
  t.forward_tokens += run.usage.forward_tokens;
  t.radix_cache_tokens += run.usage.radix_cache_tokens;
}

std::shared_ptr<Session> SessionTable::take_idle_target() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto ready = [](const std::shared_ptr<Session>& s) { return s->needs_idle && s->holders == 0 && s->window; };
  for (const auto& [id, s] : sessions_) {
    if (ready(s)) {
      s->needs_idle = false;
      return s;
    }
  }
  for (const std::shared_ptr<Session>& s : anonymous_) {
    if (ready(s)) {
      s->needs_idle = false;
      return s;
    }
  }
  return nullptr;
}

std::optional<std::pair<std::vector<ChatMessage>, SyncOptions>> SessionTable::take_anticipated(Session& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!s.anticipated) return std::nullopt;
  std::pair<std::vector<ChatMessage>, SyncOptions> next{std::move(*s.anticipated), s.anticipated_options};
  s.anticipated.reset();
  return next;
}

void SessionTable::add_idle_forward(Session& s, double tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  s.idle_forward_tokens += tokens;
  s.totals.idle_forward_tokens += tokens;
}

void SessionTable::forget_sessions() {
  while (static_cast<int64_t>(sessions_.size()) > context_.options.max_known_sessions) {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const bool idle = !it->second->window && it->second->holders == 0;
      if (idle && (oldest == sessions_.end() || it->second->last_used < oldest->second->last_used)) oldest = it;
    }
    if (oldest == sessions_.end()) return;
    sessions_.erase(oldest);
  }
}

template <typename F>
void SessionTable::for_each_window(F&& f) const {
  for (const auto& [id, s] : sessions_) f(s);
  for (const std::shared_ptr<Session>& s : anonymous_) f(s);
}

bool SessionTable::over_budget() const {
  int64_t resident = 0, bytes = 0;
  for_each_window([&](const std::shared_ptr<Session>& s) {
    if (!s->window) return;
    ++resident;
    if (s->holders == 0) bytes += s->stats.device_bytes + s->stats.past_bytes;
  });
  return resident > context_.options.max_sessions || bytes > context_.options.session_budget_bytes;
}

void SessionTable::enforce_budget(bool wait) {
  // Several threads may enforce at once (every release does): each evicts only while the budget is still
  // exceeded when it holds the victim, so two that saw the same excess evict one window between them.
  std::set<const Session*> busy;  // candidates whose window another thread holds: skipped this time
  for (;;) {
    std::shared_ptr<Session> victim;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      forget_sessions();
      if (!over_budget()) return;
      for_each_window([&](const std::shared_ptr<Session>& s) {
        const bool candidate = s->window && s->holders == 0 && !busy.count(s.get());
        if (candidate && (!victim || s->last_used < victim->last_used)) victim = s;
      });
      if (!victim) return;
    }
    std::unique_lock<std::mutex> run(victim->run, std::defer_lock);
    if (wait) {
      run.lock();  // the idle worker's slice ends
    } else if (!run.try_lock()) {
      busy.insert(victim.get());  // the idle worker enforces the budget again when it lets go
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!victim->window) continue;  // another thread evicted it
    if (!over_budget()) return;     // ... or another window
    if (victim->holders > 0) {      // a request came for it meanwhile: keep it
      busy.insert(victim.get());
      continue;
    }
    let_go(*victim);
  }
}

void SessionTable::let_go(Session& s) {
  s.window.reset();  // its KV leaves the pool; its chunks stay in the store
  ++s.totals.evictions;
  s.stats = WindowStats{};
  // The list its idle work would prefill (a copy of the whole conversation, and the answer): only a resident
  // window's is prefilled, and the next request sends the list again. A record out of memory keeps what GET
  // /v1/sessions/{id} reports and what its next request reads (totals, audits).
  s.anticipated.reset();
  SyncOptions none;
  std::swap(s.anticipated_options, none);  // its strings' buffers leave with `none` (assigning "" keeps them)
}

bool SessionTable::let_go_idle(const Session* keep, bool wait) {
  std::set<const Session*> busy;  // held by the idle worker: skipped
  for (;;) {
    std::shared_ptr<Session> victim;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for_each_window([&](const std::shared_ptr<Session>& s) {
        const bool candidate = s.get() != keep && s->window && s->holders == 0 && !busy.count(s.get());
        if (candidate && (!victim || s->last_used < victim->last_used)) victim = s;
      });
      if (!victim) return false;
    }
    std::unique_lock<std::mutex> run(victim->run, std::defer_lock);
    if (wait) {
      run.lock();  // the idle worker's slice ends
    } else if (!run.try_lock()) {
      busy.insert(victim.get());
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!victim->window || victim->holders > 0) {  // let go meanwhile, or a request came for it: keep it
      busy.insert(victim.get());
      continue;
    }
    let_go(*victim);
    return true;
  }
}

void SessionTable::renew_window(Session& s) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    let_go(s);  // first: the old window's pages go back to the pool before the new window asks for any
  }
  make_resident(s);
}

std::optional<json> SessionTable::info(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  const Session& s = *it->second;
  const SessionTotals& t = s.totals;
  json window = nullptr;
  if (s.window) {
    window = {{"instances", s.stats.instances},
              {"chunk_instances", s.stats.chunk_instances},
              {"turns", s.stats.turns},
              {"tokens", s.stats.tokens},
              {"device_bytes", s.stats.device_bytes},
              {"past_bytes", s.stats.past_bytes},
              {"evicted_chunks", s.stats.evicted}};
  }
  const auto radix = static_cast<double>(t.radix_cache_tokens);
  json savings = {{"forward_tokens", t.forward_tokens},
                  {"radix_cache_tokens", t.radix_cache_tokens},
                  {"window_prefix_cache_tokens", s.stats.prefix_cache_tokens},
                  {"idle_forward_tokens", t.idle_forward_tokens},
                  // Against all of orbit's work: idle-time forwards moved off the critical path are not saved
                  // (on an append-only chat they are what the radix cache computes at the next request).
                  {"saved_tokens", radix - t.forward_tokens - t.idle_forward_tokens},
                  // The critical path's: what requests waited for, against the radix cache's.
                  {"ratio", radix > 0 ? t.forward_tokens / radix : 0.0},
                  {"total_ratio", radix > 0 ? (t.forward_tokens + t.idle_forward_tokens) / radix : 0.0}};
  return json{{"id", s.id},
              {"object", "orbit.session"},
              {"resident", s.window.has_value()},
              {"running", s.holders > 0},
              {"requests", t.requests},
              {"prompt_tokens", t.prompt_tokens},
              {"completion_tokens", t.completion_tokens},
              {"predicted_kl", t.predicted_kl},
              {"left_memory", t.evictions},
              {"window", window},
              {"savings", savings},
              {"audit", s.audit.to_json()}};
}

SessionTable::End SessionTable::end(const std::string& id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) return End::kUnknown;
    if (it->second->holders > 0) return End::kBusy;
    s = it->second;
    sessions_.erase(it);
  }
  // No holder was left when it left the table, and a new request cannot find it now; an idle-time job that
  // holds `run` closes the window when it is done with it.
  std::unique_lock<std::mutex> run(s->run, std::try_to_lock);
  if (run.owns_lock()) {
    std::lock_guard<std::mutex> lock(mutex_);
    s->window.reset();
  }
  return End::kEnded;
}

MetricGauges SessionTable::counts() const {
  MetricGauges g;
  std::lock_guard<std::mutex> lock(mutex_);
  g.sessions = static_cast<int64_t>(sessions_.size());
  for (const auto& [id, s] : sessions_) g.resident_sessions += s->window.has_value() ? 1 : 0;
  g.anonymous_windows = static_cast<int64_t>(anonymous_.size());
  for (const auto& s : anonymous_) g.resident_anonymous_windows += s->window.has_value() ? 1 : 0;
  for_each_window([&](const std::shared_ptr<Session>& s) {
    if (s->window) g.window_past_bytes += s->stats.past_bytes;
  });
  return g;
}

void SessionTable::close_all() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(anonymous_);
    for (auto& [id, s] : sessions_) all.push_back(std::move(s));
    sessions_.clear();
  }
  for (auto& s : all) {
    std::lock_guard<std::mutex> run(s->run);
    std::lock_guard<std::mutex> lock(mutex_);
    s->window.reset();
  }
}

}  // namespace orbit::serve
