// The prefix-cache yardsticks over one policy's replay: what SGLang's radix cache and vLLM's automatic
// prefix caching (planner/prefix_cache.h) would forward for the same model reads, beside what the window
// forwarded. One per PolicyRun, engine-wide like the caches they model, so branches share what a parent
// computed.
//
// Which steps are reads: the steps the engine's live yardstick (planner::PrefixLedger) charges, one read
// per step:
//   - admit, recall, turn, when the window applied them: the window after the step, no query, computed
//     only (planner::PrefixRead::kPrefill: every held token reused);
//   - generate: the window before the step, the query, and the answer (the transcript's when the step
//     appends it, so the cache holds what the exact model produced; otherwise this policy's tokens);
//   - disposable: the window before the step, the query, and the greedy answer with the window as it is.
// Generate and disposable are model calls (PrefixRead::kLogits): the prompt's last token is forwarded even
// when the cache holds it, as orbit forwards at least the query's last token (StepResult::
// query_forward_tokens), so the two count the same tokens.
// A second bounded radix cache, radix_call_tokens, reads the model calls alone (a server's peer computes only
// when a request comes): admit, recall and turn are not reads there.
// Edits (evict, slide, reorder, place) and branch operations are not reads: a prefix cache computes when the
// model is called (place is a reorder the planner chooses; its repairs, like a reorder's, wait for the next
// read under a deferring policy). The window's tokens are Window::token_ids(): its instances' in window order, a
// turn's ids, a token chunk's ids, and for an embedding chunk a stand-in id per row that names the content, not a
// token (the same ids the engine's live yardstick reads).
#pragma once

#include <cstdint>
#include <vector>

#include "orbit/planner/prefix_cache.h"
#include "orbit/trace.h"
#include "orbit/window.h"

namespace orbit::trace_detail {

class ReplayYardstick {
 public:
  // capacity_tokens: the KV memory orbit's engine has for windows (its pool, in tokens); the bounded
  // caches get the same. 0 = unbounded.
  explicit ReplayYardstick(int64_t capacity_tokens = 0);
  int64_t capacity_tokens() const { return capacity_; }

  // Before the step runs: remembers the window a model call (generate, disposable) reads.
  void before(const TraceStep& step, const Window& window);
  // After it: when the step is a read, runs it through the caches and fills r's yardstick fields.
  void after(const TraceStep& step, const Window& window, const std::vector<int64_t>& query,
             const std::vector<int64_t>& answer, StepResult* r);

 private:
  int64_t capacity_;
  planner::RadixCache radix_;
  planner::RadixCache radix_unbounded_;
  planner::BlockPrefixCache blocks_;
  planner::RadixCache radix_calls_;  // read at model calls only (StepResult::radix_call_tokens)
  std::vector<int64_t> before_;
};

// Adds a step's yardstick counts to the policy's totals.
void add_yardstick_totals(const StepResult& s, PolicyTotals* t);

}  // namespace orbit::trace_detail
