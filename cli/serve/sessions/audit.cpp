#include "serve/sessions/audit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/interrupt.h"

namespace orbit::serve {

namespace {

// Histogram bounds of the measured KL, nats: the default budget (3e-3) and a decade either side of it.
constexpr std::array<double, 8> kKlBounds = {1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 1e-1, 1.0};

// log Σ exp(x) over a row, in double.
double log_sum_exp(const float* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

}  // namespace

nlohmann::json AuditResult::to_json() const {
  return {{"request", request},       {"measured_kl", measured_kl}, {"predicted_kl", predicted_kl},
          {"top1_match", top1_match}, {"budget", budget},           {"within_budget", within_budget()}};
}

double kl_of_logits(const float* p_logits, const float* q_logits, int64_t vocab) {
  const double lp = log_sum_exp(p_logits, vocab), lq = log_sum_exp(q_logits, vocab);
  double kl = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double log_p = p_logits[i] - lp;
    const double p = std::exp(log_p);
    if (p > 0) kl += p * (log_p - (q_logits[i] - lq));
  }
  return std::max(kl, 0.0);  // rounding may leave a tiny negative for equal rows
}

Auditor::Auditor(AuditOptions options) : options_(options), buckets_(kKlBounds.size() + 1, 0) {
  ORBIT_CHECK(options_.rate >= 0 && options_.rate <= 1,
              "serve: --audit must be a fraction in [0, 1] (got " << options_.rate << ")");
  ORBIT_CHECK(options_.max_pending >= 1, "serve: the audit queue needs room for one read");
  ORBIT_CHECK(options_.owed_after >= 0,
              "serve: --audit-owed-after must be 0 or more requests (got " << options_.owed_after << ")");
}

bool Auditor::due() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.rate <= 0) return false;
  credit_ += options_.rate;
  if (credit_ < 1 - 1e-9) return false;
  credit_ -= 1;
  return true;
}

void Auditor::count_request() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_;
}

void Auditor::submit(AuditCase c) {
  std::lock_guard<std::mutex> lock(mutex_);
  c.sequence = requests_;
  waiting_.push_back(std::move(c));
  while (static_cast<int64_t>(waiting_.size()) > options_.max_pending) {
    waiting_.pop_front();  // its fork closes here
    ++dropped_;
  }
}

bool Auditor::drop_for_pool(const PoolDrop& choose) {
  AuditCase dropped;  // its fork closes after the lock: the pages it held go back to the pool
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const Window*> forks;
    for (AuditCase& c : waiting_) {
      c.kept_for_pool = true;
      forks.push_back(c.fork ? &*c.fork : nullptr);
    }
    const std::optional<std::size_t> chosen = choose(forks);
    if (!chosen || *chosen >= waiting_.size()) return false;
    const auto at = waiting_.begin() + static_cast<std::ptrdiff_t>(*chosen);
    dropped = std::move(*at);
    waiting_.erase(at);
    ++dropped_;
    ++pool_dropped_;
  }
  return true;
}

bool Auditor::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !waiting_.empty();
}

bool Auditor::front_owed() const {
  return options_.owed_after > 0 && !waiting_.empty() && requests_ - waiting_.front().sequence >= options_.owed_after;
}

bool Auditor::owed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return front_owed();
}

std::optional<std::pair<AuditCase, AuditResult>> Auditor::run_one(bool owed_only, const std::function<bool()>& stop) {
  AuditCase c;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (waiting_.empty()) return std::nullopt;
    if (owed_only && !front_owed()) return std::nullopt;
    owed_ += owed_only ? 1 : 0;
    c = std::move(waiting_.front());
    waiting_.pop_front();
  }
  Logits served, exact;
  try {
    const InterruptScope scope(stop);  // a null stop installs no check
    if (options_.fail_reads) throw std::runtime_error("an audit's reads failed (fault injected for tests)");
    served = c.fork->logits(c.query);
    exact = c.fork->reference_logits(c.query);
  } catch (const Interrupted&) {
    // Stopped for a request (the idle worker's stop): the fork is as it was (a stopped read keeps nothing), so
    // the case waits again where it was, with its sequence: owed as if it had never been taken.
    std::lock_guard<std::mutex> lock(mutex_);
    owed_ -= owed_only ? 1 : 0;
    waiting_.push_front(std::move(c));
    return std::nullopt;
  } catch (...) {  // counted, then the caller's: an owed audit's request goes on (ServeCore::run_owed_audit)
    std::lock_guard<std::mutex> lock(mutex_);
    ++failed_;
    pool_kept_ += c.kept_for_pool ? 1 : 0;
    throw;
  }
  c.fork.reset();  // its pages go back now
  AuditResult r;
  r.request = c.request;
  r.predicted_kl = c.predicted_kl;
  r.budget = c.budget;
  r.measured_kl = kl_of_logits(exact.values.data(), served.values.data(), exact.vocab);
  r.top1_match = argmax(exact.values.data(), exact.vocab) == argmax(served.values.data(), served.vocab);
  std::lock_guard<std::mutex> lock(mutex_);
  ++audits_;
  pool_kept_ += c.kept_for_pool ? 1 : 0;
  violations_ += r.within_budget() ? 0 : 1;
  flips_ += r.top1_match ? 0 : 1;
  predicted_sum_ += r.predicted_kl;
  measured_sum_ += r.measured_kl;
  const auto bucket = std::lower_bound(kKlBounds.begin(), kKlBounds.end(), r.measured_kl) - kKlBounds.begin();
  ++buckets_[static_cast<std::size_t>(bucket)];
  return std::make_pair(std::move(c), r);
}

void Auditor::count_exact_request() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++exact_requests_;
}

void Auditor::count_exact_kv_request() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++exact_kv_requests_;
}

std::string Auditor::render_metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out.precision(10);
  const auto counter = [&](const char* name, const char* help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n" << name << ' ' << value << '\n';
  };
  counter("orbit_audits_total", "requests whose served logits were measured against a re-prefill",
          static_cast<double>(audits_));
  counter("orbit_audits_dropped_total",
          "sampled requests not audited (no idle time before newer ones, or their window copy's KV pages needed by a "
          "request the pool refused)",
          static_cast<double>(dropped_));
  counter("orbit_audits_dropped_for_pool_total",
          "sampled requests not audited because a request the KV pool refused needed the pages their window copy held",
          static_cast<double>(pool_dropped_));
  counter("orbit_audits_kept_for_pool_total",
          "sampled requests audited (or failed) after a request the KV pool refused found them waiting and did not "
          "drop them (their window copy held no page it needed, or older ones gave it enough)",
          static_cast<double>(pool_kept_));
  counter("orbit_audits_owed_total",
          "audits that had no idle time by the --audit-owed-after-th request after theirs, run after its answer",
          static_cast<double>(owed_));
  counter("orbit_audits_failed_total", "audits whose reads threw (logged; not measured, the request goes on)",
          static_cast<double>(failed_));
  out << "# HELP orbit_audits_waiting sampled requests whose audit waits for idle time or a later request\n"
      << "# TYPE orbit_audits_waiting gauge\norbit_audits_waiting " << waiting_.size() << '\n';
  counter("orbit_audit_budget_violations_total", "audits whose measured KL exceeded the session's budget",
          static_cast<double>(violations_));
  counter("orbit_audit_top1_flips_total", "audits where the first answer token's argmax differed",
          static_cast<double>(flips_));
  counter("orbit_audit_predicted_kl_total", "the predicted KL of the audited requests, summed", predicted_sum_);
  counter("orbit_exact_requests_total", "requests served exactly because an audit found a loss past budget",
          static_cast<double>(exact_requests_));
  counter("orbit_exact_kv_requests_total",
          "chat requests read from KV equal to a re-prefill's (nothing to lose: not sampled for an audit unless "
          "--audit-exact)",
          static_cast<double>(exact_kv_requests_));
  out << "# HELP orbit_audit_measured_kl measured KL of audited requests vs a re-prefill, nats\n"
      << "# TYPE orbit_audit_measured_kl histogram\n";
  int64_t cumulative = 0;
  for (std::size_t i = 0; i < kKlBounds.size(); ++i) {
    cumulative += buckets_[i];
    out << "orbit_audit_measured_kl_bucket{le=\"" << kKlBounds[i] << "\"} " << cumulative << '\n';
  }
  cumulative += buckets_.back();
  out << "orbit_audit_measured_kl_bucket{le=\"+Inf\"} " << cumulative << '\n'
      << "orbit_audit_measured_kl_sum " << measured_sum_ << '\n'
      << "orbit_audit_measured_kl_count " << audits_ << '\n';
  return out.str();
}

}  // namespace orbit::serve
