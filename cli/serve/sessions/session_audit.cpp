// SessionTable's part in the fidelity audit (audit.h): which requests are served exactly or audited, and
// what an audit's result does to its session.
#include "serve/sessions/session_table.h"

#include <algorithm>

namespace orbit::serve {

namespace {

constexpr int64_t kMaxExactSpan = 64;

}  // namespace

nlohmann::json SessionAudit::to_json() const {
  nlohmann::json out = {{"audits", audits},
                        {"violations", violations},
                        {"top1_flips", top1_flips},
                        {"max_measured_kl", max_measured_kl},
                        {"predicted_kl_sum", predicted_sum},
                        {"measured_kl_sum", measured_sum},
                        {"exact_mode", exact_left > 0},
                        {"exact_requests", exact_requests},
                        {"exact_kv_requests", exact_kv_requests}};
  out["last_measured_kl"] = last_measured_kl < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_measured_kl);
  return out;
}

ServingMode SessionTable::serving(Session& s, bool may_heal, const SyncedRead& read) {
  std::lock_guard<std::mutex> lock(mutex_);
  SessionAudit& a = s.audit;
  ServingMode mode;
  mode.request = s.totals.requests + 1;  // record() counts it after the run
  mode.exact_kv = read.exact_kv;
  Auditor& auditor = context_.auditor;
  if (a.exact_left > 0 && may_heal) {
    mode.exact = mode.exact_kv = true;
    ++a.exact_requests;
    if (--a.exact_left == 0) a.recheck = true;
    auditor.count_exact_request();
  }
  if (mode.exact_kv) {
    ++a.exact_kv_requests;
    auditor.count_exact_kv_request();
  }
  // In exact mode, healed or not (exact mode goes on from the next request): no audit meanwhile.
  if (a.exact_left > 0 || mode.exact) return mode;
  // Read from exact KV: nothing to measure; a recheck waits for the first read that is not.
  if (read.exact_kv && !auditor.options().exact) return mode;
  // A recheck after exact mode, and a read kept behind a new first turn (SyncedRead::behind_new_front), are
  // audited whatever the rate's sample says (--audit 0 audits nothing).
  const bool forced = std::exchange(a.recheck, false) || (read.behind_new_front && auditor.options().rate > 0);
  mode.audit = forced || auditor.due();
  return mode;
}

bool SessionTable::exact_pending(const Session& s) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return s.audit.exact_left > 0;
}

void SessionTable::record_audit(Session& s, const AuditResult& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  SessionAudit& a = s.audit;
  ++a.audits;
  a.violations += r.within_budget() ? 0 : 1;
  a.top1_flips += r.top1_match ? 0 : 1;
  a.last_measured_kl = r.measured_kl;
  a.max_measured_kl = std::max(a.max_measured_kl, r.measured_kl);
  a.predicted_sum += r.predicted_kl;
  a.measured_sum += r.measured_kl;
  a.unreported.push_back(r);
  if (a.unreported.size() > 8) a.unreported.erase(a.unreported.begin());
  if (r.within_budget()) {
    if (a.exact_left == 0) a.exact_span = 0;  // a recheck passed: back to approximate serving
    return;
  }
  // Past the budget: exact from the next request on, longer each time a recheck fails again.
  a.exact_span =
      a.exact_span == 0 ? context_.auditor.options().exact_requests : std::min(a.exact_span * 2, kMaxExactSpan);
  a.exact_left = a.exact_span;
  a.recheck = false;
}

bool SessionTable::audit_one(bool owed_only, const std::function<bool()>& stop) {
  const auto done = context_.auditor.run_one(owed_only, stop);
  if (!done) return false;
  record_audit(*done->first.session, done->second);
  // What the model missed, every later plan of the engine corrects for (as Window::idle's self-checks do).
  context_.engine->observe_fidelity(done->second.measured_kl, done->second.predicted_kl);
  return true;
}

std::optional<AuditResult> SessionTable::take_audit(Session& s, int64_t request) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The newest audit of a request before this one. Idle work may finish this request's own audit before its
  // response is put together (the decode has ended, the gate is free): that one stays for the next response.
  std::vector<AuditResult>& waiting = s.audit.unreported;
  const auto later =
      std::find_if(waiting.begin(), waiting.end(), [&](const AuditResult& r) { return r.request >= request; });
  if (later == waiting.begin()) return std::nullopt;
  AuditResult r = *std::prev(later);
  waiting.erase(waiting.begin(), later);
  return r;
}

}  // namespace orbit::serve
