// The read's own look before a read (WindowPolicy::read_attention_weight): the query forwarded over the window as
// it stands, each entry's share of its key attention, and the window re-planned by those shares (window_ops.h).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <utility>
#include <vector>

#include "engine/interruptible.h"
#include "orbit/common/error.h"
#include "window/window_ops.h"

namespace orbit::detail {

std::vector<double> attention_by_entry(const WindowState& state, const at::Tensor& mass) {
  if (!mass.defined()) return {};
  int64_t total = 0;
  for (const Entry& e : state.entries) total += e.length;
  if (mass.size(0) < total) return {};
  // One pass over the host copy (a tensor op per entry costs more than the sums on a long window).
  const at::Tensor weights = mass.narrow(0, 0, total).to(at::kDouble).contiguous();
  const double* row = weights.data_ptr<double>();
  std::vector<double> out;
  out.reserve(state.entries.size());
  for (const Entry& e : state.entries) {
    double sum = 0;
    for (int64_t t = 0; t < e.length; ++t) sum += *row++;
    out.push_back(sum);
  }
  return out;
}

namespace {

// The read's query forwarded over the window as it stands (the look of plan_read): each entry's share of its
// key attention. Nothing is kept; the caller counts the tokens.
std::vector<double> probe_read_attention(WindowState& state, const std::vector<int64_t>& query) {
  c10::InferenceMode guard;
  int64_t start = 0;
  const runtime::PastKV past = read_past(state, &start);
  const runtime::ForwardInput in = state.core->registry().input_for_tokens(query, start);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kLast;
  fo.return_content = false;
  fo.key_attention = true;
  fo = interruptible(fo);  // a stopped probe changes nothing and counts nothing
  const runtime::ForwardResult r = state.core->model().forward(in, past.length() > 0 ? &past : nullptr, fo);
  return attention_by_entry(state, r.key_attention);
}

// What the window's cached rows are: each entry's KV state (kv_state.h: equal states, equal KV) and length.
std::vector<std::pair<KvState, int64_t>> cached_rows(const WindowState& state) {
  std::vector<std::pair<KvState, int64_t>> rows;
  rows.reserve(state.entries.size());
  for (const Entry& e : state.entries) rows.emplace_back(e.state, e.length);
  return rows;
}

}  // namespace

bool looks_before_read(const WindowState& state) {
  const WindowPolicy& policy = state.options.policy;
  return policy.read_attention_weight > 0 && policy.kl_budget > 0 && !state.entries.empty();
}

bool replan_for_read(WindowState& state, const std::vector<double>& shares, const char* what) {
  // The shares weigh this plan only: cleared on every way out, before the plan is applied.
  struct Clear {
    WindowState& s;
    ~Clear() {
      for (Entry& e : s.entries) e.read_attention = -1;
    }
  } clear{state};
  for (std::size_t i = 0; i < shares.size(); ++i) state.entries[i].read_attention = shares[i];
  const bool deferred = state.has_deferred();
  Layout l = current_layout(state, Operation::kFlush);
  l.change_reason = deferred ? "repair deferred by an earlier edit" : "priced by the read's own attention";
  const Plan plan = plan_layout(state, l);
  for (Entry& e : state.entries) e.read_attention = -1;
  if (!deferred && served_again(plan) == 0) return false;
  // A plan can re-serve an instance with the very KV it holds (a stored patch it was served from, priced
  // anew below what its keep carried): applied, it leaves every row the query's forward read as it was.
  const std::vector<std::pair<KvState, int64_t>> before = cached_rows(state);
  const Result<ApplyReport> r = apply_plan(state, plan);
  ORBIT_CHECK(r.is_ok(), what << ": the repairs the read's plan chose could not run: " << r.status().reason());
  return cached_rows(state) != before;
}

int64_t plan_read(WindowState& state, const std::vector<int64_t>& query, const char* what) {
  if (!looks_before_read(state) || query.empty()) {
    run_deferred(state, what);
    return 0;
  }
  replan_for_read(state, probe_read_attention(state, query), what);
  return static_cast<int64_t>(query.size());
}

}  // namespace orbit::detail
