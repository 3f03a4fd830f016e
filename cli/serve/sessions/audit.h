// The fidelity audit of `orbit serve` (--audit RATE): what an approximate window actually cost an answer,
// measured, not predicted.
//
// A sampled request's window is forked (copy-on-write, no forward) right before its decode: the fork holds
// exactly the KV the answer was generated from. In idle time (never on a request's path) the idle worker
// reads the generation prompt's logits twice on the fork: as served (Window::logits) and after a re-prefill
// of the same messages (Window::reference_logits). Their KL (reference ‖ served, nats) and whether the
// first answer token's argmax agrees are the audit; it also feeds the engine's fidelity correction
// (Engine::observe_fidelity), so later plans predict more where the model predicted too little. The fork is
// closed after; while it waits it keeps the
// pages it shares with its window, so at most AuditOptions::max_pending audits wait (the oldest is dropped
// past it, and counted).
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
};

// A read waiting for its audit.
struct AuditCase {
  std::shared_ptr<Session> session;
  int64_t request = 0;
  std::optional<Window> fork;  // the window as the answer read it
  std::vector<int64_t> query;  // the generation prompt
  double predicted_kl = 0;
  double budget = 0;
};

class Auditor {
 public:
  explicit Auditor(AuditOptions options);

  const AuditOptions& options() const { return options_; }
  // Whether the next chat request is audited: every 1/rate-th one (deterministic, so RATE 1 audits all).
  bool due();
  // Queues a case (dropping the oldest past max_pending).
  void submit(AuditCase c);
  bool pending() const;
  // Measures the oldest waiting case (two reads of its fork: the served prompt and a re-prefill), closes its
  // fork and records the result in the metrics; nullopt when none waits. The caller holds the gate.
  std::optional<std::pair<AuditCase, AuditResult>> run_one();
  // The audit's lines for /metrics (serve_metrics.h's format):
  //   orbit_audits_total, orbit_audits_dropped_total, orbit_audit_budget_violations_total,
  //   orbit_audit_top1_flips_total, orbit_audit_measured_kl (histogram, nats),
  //   orbit_audit_predicted_kl_total (Σ predicted; against orbit_audit_measured_kl_sum, how far the
  //   prediction is off), orbit_exact_requests_total (requests served exactly because an audit found a loss past
  //   budget).
  std::string render_metrics() const;
  void count_exact_request();

 private:
  AuditOptions options_;
  mutable std::mutex mutex_;
  double credit_ = 0;  // due(): rate accumulated per request
  std::deque<AuditCase> waiting_;
  int64_t audits_ = 0, dropped_ = 0, violations_ = 0, flips_ = 0, exact_requests_ = 0;
  double predicted_sum_ = 0, measured_sum_ = 0;
  std::vector<int64_t> buckets_;  // per kKlBounds bucket, not cumulative (the last: +Inf)
};

// KL(p ‖ q) of two logit rows (softmax of each), nats, in double.
double kl_of_logits(const float* p_logits, const float* q_logits, int64_t vocab);

}  // namespace orbit::serve
