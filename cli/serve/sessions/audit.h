// The fidelity audit of `orbit serve` (--audit RATE): what an approximate window actually cost an answer,
// measured, not predicted.
//
// Only requests read from approximate KV are sampled (a window with an instance not InstanceInfo::exact after its
// sync and repairs): one read from exact KV, as a session's first requests and an append-only session's are, has
// nothing to lose, and its audit would measure rounding (AuditOptions::exact samples those too). A read of
// messages kept behind a first turn its sync formed anew is always sampled (SessionTable::serving,
// SyncedRead::behind_new_front).
// A sampled request's window is forked (copy-on-write, no forward) right before its decode: the fork holds
// exactly the KV the answer was generated from. In idle time (or, when it is owed, on a later request's turn:
// below) the generation prompt's logits are read twice on the fork: as served (Window::logits) and after a
// re-prefill of the same messages (Window::reference_logits). Their KL (reference ‖ served, nats) and whether
// the first answer token's argmax agrees are the audit; it also feeds the engine's fidelity correction
// (Engine::observe_fidelity), so later plans predict more where the model predicted too little. The fork is
// closed after; while it waits it keeps the pages it shares with its window, so at most
// AuditOptions::max_pending audits wait (the oldest is dropped past it, and counted), and a request the KV pool
// refuses drops them, oldest first, one at a time, only those whose drop gives it pages, and only until it fits
// (drop_for_pool, with room_maker.h's drop_alone or drop_together); the others wait on.
//
// Owed audits: idle time may not come. A client that sends its next request as soon as it has read an
// answer leaves the idle worker only the moments between an answer and the next request, which the session's
// own idle work (its answer prefilled) takes first, so audits waited and were dropped: what those sessions
// were served went unmeasured, and a loss past budget never put them in exact mode. So an audit still
// waiting when the AuditOptions::owed_after-th chat request after its own starts (its sync's turn at the gate:
// RequestPath::sync_chat counts it) is owed: that request runs it once its answer is decoded, on a gate turn
// of its own (ServeCore::run, SessionTable::audit_one), before a stream's usage and end. Its first token no
// longer waits for the audit's two reads (the fork's prompt, a re-prefill of its window); the end of its
// answer does, and a request that waits for the gate meanwhile waits for them too. The audit measures its
// fork, the KV its own request was answered from, whenever it runs; a violation found so serves the
// session's next request exactly (the request that ran it was served already). owed_after = 0 leaves
// audits to idle time only (and to the drop). An audit in idle time stops for a request that comes for the
// gate during its reads (IdleWorker::slice passes run_one that stop): it waits again as it was, owed as before
// (with owed_after 1, to the request that stopped it, which runs it after its answer instead of waiting for
// both reads before its sync).
//
// Safe by default: an audit whose measured KL exceeds the session's budget (the policy's kl_budget, else
// kDefaultKlBudget) puts its session in exact mode: its next requests are healed before they are read
// (Window::heal, on the critical path: served as a re-prefill would be), `exact_requests` of them, then the
// next request is audited again; within the budget the session goes back to approximate serving, beyond it
// exact mode lasts twice as long (up to 64 requests). usage.orbit.exact says why a request was served
// exactly.
//
// Thread-safety: every Auditor member may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "orbit/window.h"
#include "serve/serve_types.h"

namespace orbit::serve {

struct Session;

struct AuditOptions {
  double rate = 0;             // the fraction of chat requests audited, in [0, 1]; 0 = none
  int64_t max_pending = 4;     // audits waiting for idle time at most
  int64_t exact_requests = 4;  // a session's first exact-mode span after a violation (doubling, ≤ 64)
  // An audit not run in idle time by the start of the owed_after-th chat request after its own is owed
  // (above): that request runs it after its answer. 0 = idle time only (`--audit-owed-after`).
  int64_t owed_after = 1;
  // Whether requests read from exact KV (every instance as a re-prefill forms it: an append-only session, a
  // fresh one) are sampled too. They have nothing to lose, so by default they are not: `rate` is the fraction
  // of the requests served from approximate KV that are audited (`--audit-exact` samples every request: a check
  // of the exactness bookkeeping itself, whose audits measure rounding only).
  bool exact = false;
  bool fail_reads = false;  // tests only (ServeOptions::test_fault "audit"): every audit's reads throw
};

// A read waiting for its audit.
struct AuditCase {
  std::shared_ptr<Session> session;
  int64_t request = 0;
  std::optional<Window> fork;  // the window as the answer read it
  std::vector<int64_t> query;  // the generation prompt
  double predicted_kl = 0;
  double budget = 0;
  int64_t sequence = 0;        // Auditor::count_request's count when it was submitted (set by submit)
  bool kept_for_pool = false;  // waiting when a request the pool refused dropped others, or could drop none
};

class Auditor {
 public:
  explicit Auditor(AuditOptions options);

  const AuditOptions& options() const { return options_; }
  // Whether the next chat request that may be sampled is audited: every 1/rate-th one (deterministic, so RATE 1
  // audits all). Only requests read from approximate KV are offered, unless AuditOptions::exact.
  bool due();
  // A chat request starts being served (its sync's turn at the gate): what owed audits count.
  void count_request();
  // Queues a case (dropping the oldest past max_pending).
  void submit(AuditCase c);
  // Which waiting case a request the KV pool refused drops: given the waiting cases' forks, oldest first (null for a
  // case without one), the index of the one to drop, or nullopt for none. Called under the queue's lock.
  using PoolDrop = std::function<std::optional<std::size_t>(const std::vector<const Window*>& forks)>;
  // Drops the waiting case `choose` names for a request the KV pool refused (request_run.cpp's RoomMaker once no
  // idle window is left to let go, with room_maker.h's drop_alone; RequestPath::waiting_for_pool once nothing is
  // left to wait for, with drop_together); the caller tries again after each, so it drops only as many as the
  // request lacks pages for. The cases left waiting are marked kept for the pool, and counted in
  // orbit_audits_kept_for_pool_total once they run. Counted in orbit_audits_dropped_total and
  // orbit_audits_dropped_for_pool_total. False when none was dropped.
  bool drop_for_pool(const PoolDrop& choose);
  bool pending() const;
  // Whether the oldest waiting case is owed: count_request() counted owed_after requests since it was
  // submitted (owed_after > 0).
  bool owed() const;
  // Measures the oldest waiting case (two reads of its fork: the served prompt and a re-prefill), closes its
  // fork and records the result in the metrics; nullopt when none waits, or with `owed_only` when the oldest
  // is not owed (an owed one run is counted in orbit_audits_owed_total). With `stop`, the reads end at their
  // interruption points (orbit/interrupt.h: before each layer of either forward) once it answers true: the case
  // goes back to the front of the queue as it was (its fork unchanged, not measured, not counted as failed) and
  // nullopt is returned. The caller holds the gate.
  std::optional<std::pair<AuditCase, AuditResult>> run_one(bool owed_only = false,
                                                           const std::function<bool()>& stop = {});
  // The audit's lines for /metrics (serve_metrics.h's format):
  //   orbit_audits_total, orbit_audits_dropped_total, orbit_audits_dropped_for_pool_total (those of them dropped
  //   for a request the KV pool refused: drop_for_pool), orbit_audits_kept_for_pool_total (those measured, or
  //   failed, after a request the pool refused left them waiting), orbit_audit_budget_violations_total,
  //   orbit_audits_owed_total (audits idle time did not run, run by a later request after its answer),
  //   orbit_audits_waiting (gauge: audits waiting now), orbit_audits_failed_total (reads that threw: logged,
  //   not measured; in idle time or after the answer of the request that owed it, which goes on),
  //   orbit_audit_top1_flips_total, orbit_audit_measured_kl (histogram, nats),
  //   orbit_audit_predicted_kl_total (Σ predicted; against orbit_audit_measured_kl_sum, how far the
  //   prediction is off), orbit_exact_requests_total (requests served exactly because an audit found a loss past
  //   budget).
  //   orbit_exact_kv_requests_total (chat requests read from KV equal to a re-prefill's: not sampled unless
  //   AuditOptions::exact).
  std::string render_metrics() const;
  void count_exact_request();
  void count_exact_kv_request();

 private:
  bool front_owed() const;  // under mutex_: owed() without the lock

  AuditOptions options_;
  mutable std::mutex mutex_;
  double credit_ = 0;  // due(): rate accumulated per request
  std::deque<AuditCase> waiting_;
  int64_t requests_ = 0;  // count_request()
  int64_t audits_ = 0, dropped_ = 0, pool_dropped_ = 0, pool_kept_ = 0, owed_ = 0, failed_ = 0, violations_ = 0,
          flips_ = 0, exact_requests_ = 0, exact_kv_requests_ = 0;
  double predicted_sum_ = 0, measured_sum_ = 0;
  std::vector<int64_t> buckets_;  // per kKlBounds bucket, not cumulative (the last: +Inf)
};

// KL(p ‖ q) of two logit rows (softmax of each), nats, in double.
double kl_of_logits(const float* p_logits, const float* q_logits, int64_t vocab);

}  // namespace orbit::serve
