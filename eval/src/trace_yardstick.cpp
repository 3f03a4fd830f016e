#include "trace_yardstick.h"

namespace orbit::trace_detail {

namespace {

bool reads_window_before(TraceOp op) { return op == TraceOp::kGenerate || op == TraceOp::kDisposable; }

bool reads_window_after(TraceOp op) { return op == TraceOp::kAdmit || op == TraceOp::kRecall || op == TraceOp::kTurn; }

}  // namespace

ReplayYardstick::ReplayYardstick(int64_t capacity_tokens)
    : capacity_(capacity_tokens),
      radix_(planner::PrefixCacheOptions{capacity_tokens}),
      radix_unbounded_(),
      blocks_(planner::PrefixCacheOptions{capacity_tokens}),
      radix_calls_(planner::PrefixCacheOptions{capacity_tokens}) {}

void ReplayYardstick::before(const TraceStep& step, const Window& window) {
  before_.clear();
  if (reads_window_before(step.op)) before_ = window.token_ids();
}

void ReplayYardstick::after(const TraceStep& step, const Window& window, const std::vector<int64_t>& query,
                            const std::vector<int64_t>& answer, StepResult* r) {
  YardstickRead read;
  if (reads_window_before(step.op)) {
    read.window = before_;
    read.query = query;
    read.generated = answer;
  } else if (reads_window_after(step.op) && r->status == "ok") {
    read.window = window.token_ids();
  } else {
    return;
  }
  std::vector<int64_t> tokens = read.window;
  tokens.insert(tokens.end(), read.query.begin(), read.query.end());
  const std::size_t prompt = tokens.size();
  tokens.insert(tokens.end(), read.generated.begin(), read.generated.end());
  // A model call forwards at least the query's last token for its logits, as orbit's generate does; the window
  // of an admit or turn is only computed.
  const planner::PrefixRead kind =
      reads_window_before(step.op) ? planner::PrefixRead::kLogits : planner::PrefixRead::kPrefill;
  r->radix_tokens = static_cast<double>(radix_.read(tokens, prompt, kind).forwarded);
  r->radix_unbounded_tokens = static_cast<double>(radix_unbounded_.read(tokens, prompt, kind).forwarded);
  r->block_cache_tokens = static_cast<double>(blocks_.read(tokens, prompt, kind).forwarded);
  if (kind == planner::PrefixRead::kLogits) {
    r->radix_call_tokens = static_cast<double>(radix_calls_.read(tokens, prompt, kind).forwarded);
  }
  r->yardstick_read = std::move(read);
}

void add_yardstick_totals(const StepResult& s, PolicyTotals* t) {
  if (!s.yardstick_read) return;
  ++t->yardstick_reads;
  t->radix_tokens += s.radix_tokens;
  t->radix_unbounded_tokens += s.radix_unbounded_tokens;
  t->block_cache_tokens += s.block_cache_tokens;
  t->radix_call_tokens += s.radix_call_tokens;
}

}  // namespace orbit::trace_detail
