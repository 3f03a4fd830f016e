// The windows of `orbit serve`: which window a request runs on, which windows stay resident, which session
// records are kept. No forwards and no HTTP here: the request path (request_path.h) runs on the window a
// WindowSlot holds, the idle worker (idle_worker.h) takes idle ones.
//
// Sessions are created by the first request that names them and ended by end(). A request without a
// session gets one of the anonymous windows (ServeOptions::anonymous_windows). A request that continues a
// free window's conversation (it sends back that window's last answer) takes it: of several, the one sharing
// the most text, counted over whole messages wherever they sit (so an agent that trimmed, summarized or
// reordered its history still finds the window that holds the rest of it), then the longest run of leading
// messages (a radix cache's reuse), then the most recently used. Otherwise a new window while there is room
// (a shared system prompt or document alone does not make another conversation's window its own), else the
// free one sharing the most, the least recently used among equals. Anonymous windows get the idle work
// sessions get (the answer prefilled as the next request will send it back, Window::idle).
//
// Pool: a request whose sync the KV pool refuses makes room by letting the least recently used idle windows go
// the same way, one at a time, its sync tried again after each (RequestPath::sync_chat, let_go_idle); none left,
// its own window is renewed once (renew_window) and the sync planned from nothing. Still refused, the request waits
// outside the gate for a running request to release its window (wait_for_release, up to --pool-wait-ms).
//
// Budget: when the idle windows (of sessions and anonymous ones alike) hold more than
// ServeOptions::session_budget_bytes, or more than max_sessions windows are resident, the least recently
// used idle ones leave memory (their Window is closed; their chunks stay in the store, and the next request
// syncs a new window from it; an anonymous window keeps its last request, so a request continuing it still
// finds it). A session's record outlives its window without the list its idle work would prefill (the
// conversation: let_go drops it; the next request sends it again), and past max_known_sessions records
// (--max-known-sessions) the least recently used that are neither resident nor running are forgotten.
//
// Thread-safety: every SessionTable member may be called from any thread. A Session's `window` belongs to
// whoever holds its `run` mutex (a WindowSlot, or the idle worker); the table makes it resident or takes it
// out holding both `run` and its own mutex, so the table reads whether it is resident under its mutex
// alone. A Session's other fields are guarded by the table's mutex and read or changed only through the
// table.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orbit/engine.h"
#include "serve/serve_context.h"

namespace orbit::serve {

// A session's (or an anonymous window's) running totals, as GET /v1/sessions/{id} reports them.
struct SessionTotals {
  int64_t requests = 0;
  int64_t evictions = 0;  // times its window left memory
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t radix_cache_tokens = 0;  // Σ RunUsage::radix_cache_tokens
  double forward_tokens = 0;
  double predicted_kl = 0;  // the last request's
  double idle_forward_tokens = 0;
};

// A session's fidelity audits (audit.h) and whether it is served exactly because of them.
struct SessionAudit {
  int64_t audits = 0;
  int64_t violations = 0;  // audits past the budget
  int64_t top1_flips = 0;
  double last_measured_kl = -1;  // -1: never audited
  double max_measured_kl = 0;
  double predicted_sum = 0, measured_sum = 0;
  std::vector<AuditResult> unreported;  // not yet in a response's usage, oldest first (a few at most)
  int64_t exact_left = 0;               // requests still to serve exactly
  int64_t exact_span = 0;               // the last exact-mode span (0: never in exact mode)
  bool recheck = false;                 // audit the next request (exact mode just ended)
  int64_t exact_requests = 0;           // served exactly because of an audit, in all
  int64_t exact_kv_requests = 0;        // read from exact KV (exact mode's included): none of them sampled
  nlohmann::json to_json() const;
};

// What a chat request's sync left its window reading (RequestPath::sync_chat), for SessionTable::serving.
struct SyncedRead {
  bool exact_kv = false;  // every instance of the window exact (InstanceInfo::exact): nothing to lose
  // Messages kept behind a first unit the sync formed anew: the system turn changed (a handoff's other
  // instructions, tools added or changed) while the history stayed. The fidelity model prices such keeps by the
  // tokens changed alone and misses by content (bench/fidelity/handoff_losses.py: a tool's JSON on stories260K
  // measured 6-15x its prediction), so such a read is always audited (with --audit above 0).
  bool behind_new_front = false;
};

// How a chat request of a session is served (SessionTable::serving).
struct ServingMode {
  bool exact = false;  // heal before reading: the session's audited loss passed its budget
  bool audit = false;  // fork the window for an audit before decoding
  // The prompt is read from KV equal to a re-prefill's (every instance exact, or healed first: `exact`).
  bool exact_kv = false;
  int64_t request = 0;  // this request's number in its session (1 = its first)
};

// A message (or a tools list) as anonymous windows are matched by it: a hash of every field a template
// sees, and its size in characters (a chunk part counts 4 per token).
struct MessageDigest {
  uint64_t hash = 0;
  int64_t size = 0;
  bool operator==(const MessageDigest& o) const { return hash == o.hash && size == o.size; }
};
MessageDigest digest(const ChatMessage& m);
MessageDigest digest_tools(const std::string& tools_json);

// What an anonymous window served last: the request's messages, then its answer when it gave one (the list
// the next request most likely sends), and its tools.
struct LastRequest {
  std::vector<MessageDigest> messages;
  bool answered = false;
  MessageDigest tools;
};

// How a request matches an anonymous window's last request (SessionTable::acquire_anonymous). It continues
// the window's conversation when it sends back the answer the window gave, or resends that request as it
// was (a retry); then how much it shares: the size of its messages found anywhere in that list, plus the
// tools' when they are the same and a message is shared; then the leading messages it shares (none under
// other tools).
struct WindowMatch {
  bool continues = false;
  int64_t shared_size = 0;
  int64_t leading = 0;
  bool operator<(const WindowMatch& o) const {
    if (continues != o.continues) return o.continues;
    return shared_size != o.shared_size ? shared_size < o.shared_size : leading < o.leading;
  }
};
WindowMatch match_window(const LastRequest& last, const std::vector<MessageDigest>& request,
                         const MessageDigest& tools);

struct Session {
  std::string id;                // "" for an anonymous window
  std::string lane;              // the gate lane its forwards queue in
  std::mutex run;                // held by the request using the window (one at a time) and by idle work
  std::optional<Window> window;  // nullopt: not resident
  // Requests running or waiting for `run`: changed under the table's mutex; atomic so that the idle worker,
  // holding `run`, reads it without that mutex (its idle work stops for a request of this session).
  std::atomic<int64_t> holders{0};
  // Guarded by the table's mutex:
  uint64_t last_used = 0;
  bool needs_idle = false;
  // The list the next request will most likely send: the last one's and its answer (ServeOptions::anticipate).
  std::optional<std::vector<ChatMessage>> anticipated;
  SyncOptions anticipated_options;
  double idle_forward_tokens = 0;  // forwarded in idle time for the next request's prompt, not yet reported
  LastRequest last;                // anonymous windows: what the window served last
  WindowStats stats;               // the window's, at the end of its last request
  SessionTotals totals;
  SessionAudit audit;
};

// What a finished chat run leaves in its session's record (SessionTable::record).
struct RunRecord {
  RunUsage usage;
  // This request's messages, and its answer as an assistant message when it gave one (not cancelled, not
  // empty): the list the next request most likely sends.
  std::vector<ChatMessage> next;
  bool answered = false;
  SyncOptions options;  // the request's
};

class SessionTable;

// A request's hold on its window, from acquire to release: the session's `run` mutex is held, so nothing
// else touches the window. Move-only; released by release() or the destructor, on the thread that acquired
// it (it holds a std::mutex).
class WindowSlot {
 public:
  WindowSlot() = default;
  WindowSlot(WindowSlot&& other) noexcept;
  WindowSlot& operator=(WindowSlot&& other) noexcept;
  ~WindowSlot() { release(); }

  Session& session() const { return *session_; }
  std::shared_ptr<Session> shared_session() const { return session_; }
  Window& window() const { return *session_->window; }
  // The request was refused before it used the window: a session record or anonymous window this acquire
  // created leaves the table again at release, as if the request never came.
  void refuse() { refused_ = true; }
  void release();  // the window back to the table (its stats kept, idle work allowed); idempotent

 private:
  friend class SessionTable;
  WindowSlot(SessionTable* table, std::shared_ptr<Session> session, bool created);

  SessionTable* table_ = nullptr;
  std::shared_ptr<Session> session_;
  std::unique_lock<std::mutex> lock_;  // session_->run (declared after session_: released before it)
  bool created_ = false;               // this acquire created the record (or the anonymous window)
  bool refused_ = false;
};

class SessionTable {
 public:
  // `on_release` runs after every release (the idle worker's wake-up).
  SessionTable(ServeContext& context, std::function<void()> on_release);
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // The session `id`'s window, created (or brought back) when needed; waits for the session's earlier
  // requests. Throws orbit::Error when the engine cannot make a window (it is closed).
  WindowSlot acquire(const std::string& id);
  // An anonymous window for a request with `messages` and `tools_json` (see above).
  WindowSlot acquire_anonymous(const std::vector<ChatMessage>& messages, const std::string& tools_json);

  // Takes the session's idle-time forwards not yet reported (RunUsage::idle_forward_tokens).
  double take_idle_forward_tokens(Session& s);
  // A finished chat run: its totals, what to anticipate (named sessions, ServeOptions::anticipate) or to
  // match the next anonymous request against (anonymous windows).
  void record(Session& s, RunRecord run);

  // For the idle worker: a resident session no request holds that asked for idle work (the flag cleared),
  // or nullptr.
  std::shared_ptr<Session> take_idle_target();
  // The list to prefill for the session's next request, and its options; nullopt when there is none.
  std::optional<std::pair<std::vector<ChatMessage>, SyncOptions>> take_anticipated(Session& s);
  void add_idle_forward(Session& s, double tokens);  // forwarded in idle time for its next request

  // Audits (audit.h; session_audit.cpp). How the session's next request is served: exactly while an audit's
  // violation lasts (counted down here), else audited when it is the recheck after exact mode or the
  // auditor's sample is due, or when it reads messages kept behind a new first turn (`read.behind_new_front`).
  // `read.exact_kv`: its synced window is exact already (Window::instances, every one InstanceInfo::exact); such
  // a request is neither sampled nor taken as the recheck (that waits for the session's first request read from
  // approximate KV) unless AuditOptions::exact. A request that may not heal
  // (`may_heal` false: a guest between another sync's pieces whose heal would run past one piece,
  // request_run.cpp) is served as it is, neither exact nor audited, and the exact request it would have been is
  // left to the session's next one (nothing counted down).
  ServingMode serving(Session& s, bool may_heal, const SyncedRead& read);
  // Whether the session's next request would be served exactly (exact mode: an audit's violation lasts).
  bool exact_pending(const Session& s) const;
  // An audit's result: the session's record and the next response's usage; a violation starts (or
  // doubles) exact mode, a recheck within the budget ends it.
  void record_audit(Session& s, const AuditResult& result);
  // The audit result not yet reported, once, if it is of a request before `request` (the one answering now).
  std::optional<AuditResult> take_audit(Session& s, int64_t request);
  // Runs the oldest waiting audit (owed_only: only if it is owed, audit.h), records it (record_audit) and
  // tells the engine what the model missed (Engine::observe_fidelity); false when none was run, or when
  // `stop` answered true during its reads (Auditor::run_one: the audit waits again). Holding the gate, not
  // mutex_.
  bool audit_one(bool owed_only, const std::function<bool()>& stop = {});

  // Sends the least recently used idle windows out of memory until the budget holds. wait = false skips a
  // window the idle worker holds (it calls this again when it lets go); true waits for it.
  void enforce_budget(bool wait);
  // Room in the KV pool for `keep`'s request, which the pool refused (orbit::CapacityRefused): the least
  // recently used idle window (no request holds it or waits for it; never `keep`'s own) leaves memory as the
  // budget's do (its chunks stay in the store; its next request syncs a new window from them). A window the
  // idle worker holds is skipped (the caller holds the gate the worker may wait for). False when there was
  // none to let go.
  // wait = true (only where the caller holds no gate turn: RequestPath::waiting_for_pool) waits for a window the
  // idle worker holds instead of skipping it. `keep` null: the request has no window of the table (a completion).
  bool let_go_idle(const Session* keep, bool wait = false);
  // The requester's own window, when even letting every idle window go left the pool short: it leaves memory
  // as let_go_idle's do (counted an eviction; its chunks stay in the store) and a new, empty window takes its
  // place, so a sync whose old units hold the pages its new ones need is planned from nothing. Called by the
  // request that holds `s` (its WindowSlot: s.run is held).
  void renew_window(Session& s);
  // How many windows requests have released so far (release()): read before a sync, so that a pool refusal can
  // wait for the next (wait_for_release) without missing one released in between.
  uint64_t releases() const;
  // After a pool refusal of `self`'s request: kReleased once a request releases a window after `seen` releases;
  // kIdle after a tick of 100 ms in which no other request holds or waits for a window, other than those waiting here
  // too (what holds the pages then is no request: e.g. a window the idle worker holds, which let_go_idle(keep, true)
  // waits for); kGiveUp when `deadline` passes or `cancelled` answers true (the client left; asked every tick).
  // `self` null: a request whose window is outside the table (a completion's, held by an OutsideHold).
  enum class Wait { kReleased, kIdle, kGiveUp };
  Wait wait_for_release(const Session* self, uint64_t seen, std::chrono::steady_clock::time_point deadline,
                        const std::function<bool()>& cancelled);

  // A window a request holds outside the table (a completion's own, RequestPath::admit_first), counted by
  // wait_for_release as a running request's from hold_outside() until the hold is destroyed, which counts as a
  // release (the requests waiting for pages try again). Destroy it after the window is closed. Move-only.
  class OutsideHold {
   public:
    OutsideHold() = default;
    OutsideHold(OutsideHold&& other) noexcept : table_(std::exchange(other.table_, nullptr)) {}
    OutsideHold& operator=(OutsideHold&& other) noexcept;
    ~OutsideHold();

   private:
    friend class SessionTable;
    explicit OutsideHold(SessionTable* table) : table_(table) {}
    SessionTable* table_ = nullptr;
  };
  OutsideHold hold_outside();

  // GET /v1/sessions/{id}'s body (serve_core.h); nullopt for an unknown session.
  std::optional<nlohmann::json> info(const std::string& id) const;
  // Ends session `id`: kUnknown when there is none, kBusy (nothing changes) while requests run on it or wait
  // for it (they would otherwise run on a session that no longer exists).
  enum class End { kEnded, kUnknown, kBusy };
  End end(const std::string& id);
  MetricGauges counts() const;  // sessions and anonymous windows, known and resident (queue_depth left 0)
  // Takes every window out of the table and closes it, waiting for each one's holder.
  void close_all();

 private:
  friend class WindowSlot;
  void release(WindowSlot& slot);
  void make_resident(Session& s);  // holding s.run: a new window when it has none
  void forget_sessions();          // under mutex_: records past max_known_sessions, oldest first
  bool over_budget() const;        // under mutex_: more resident windows or idle bytes than allowed
  template <typename F>
  void for_each_window(F&& f) const;    // under mutex_: f(shared_ptr<Session>) for sessions, then anonymous ones
  void drop_refused(const Session& s);  // under mutex_: the record or anonymous window of a refused request
  void let_go(Session& s);              // under mutex_, holding s.run: its window leaves memory
  void count_release();                 // not under mutex_: a window released; the pool's waiters try again

  ServeContext& context_;
  std::function<void()> on_release_;
  mutable std::mutex mutex_;  // guards the tables below and the Sessions' guarded fields
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  std::vector<std::shared_ptr<Session>> anonymous_;
  uint64_t clock_ = 0;
  uint64_t releases_ = 0;                       // under mutex_: windows released by requests (release())
  std::condition_variable released_;            // notified on each
  std::multiset<const Session*> pool_waiters_;  // under mutex_: sessions whose request waits in wait_for_release
  int64_t outside_holds_ = 0;                   // under mutex_: OutsideHolds alive
  int64_t outside_waiters_ = 0;                 // under mutex_: their requests waiting in wait_for_release
};

}  // namespace orbit::serve
