// UsageMeter: an engine's usage counters (what Engine::stats() reports) and the two engine-wide
// yardsticks its windows are measured against: the PrefixLedger (what a chunk-granular prefix cache would
// have forwarded for the same reads, planner/prefix_ledger.h) and the RadixCache (what SGLang's radix cache
// over the same KV memory would have forwarded for the same model calls, planner/prefix_cache.h). Both are
// engine-wide so that forks share what their parent computed.
//
// Thread-safety: every method may be called from any thread; one mutex of its own guards all of it, and
// no method calls out while holding it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "orbit/engine.h"
#include "orbit/planner/prefix_cache.h"
#include "orbit/planner/prefix_ledger.h"

namespace orbit::detail {

struct Counters {
  int64_t canonicals_encoded = 0;
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;
  double forward_tokens = 0;             // every token-forward (critical and background)
  double critical_forward_tokens = 0;    // reported by apply (informational; not summed into the above)
  double background_forward_tokens = 0;  // of forward_tokens: run by background jobs
  // Not in forward_tokens: the reads' query forwards, on the critical path. Those of the model calls that decode
  // (generate's prompt forward, Generation::prompt_forward_tokens; disposable's two greedy decodes' queries), the
  // calls radix_cache_tokens counts; and Window::logits()'s queries, which it does not count.
  double query_forward_tokens = 0;
  double logits_forward_tokens = 0;
  double critical_seconds = 0;  // wall time of apply() calls
  double background_seconds = 0;
  int64_t background_jobs = 0;
  int64_t media_found = 0;  // find_media answered from a registration or the embedding cache
  int64_t media_missed = 0;
  double prefix_cache_tokens = 0;  // what a prefix cache would have forwarded for the same reads (PrefixLedger)
  double radix_cache_tokens = 0;   // what a radix cache would have forwarded for the same model calls
};

class UsageMeter {
 public:
  // radix_capacity_tokens: the KV memory orbit has, pool and host tier, in tokens (the radix yardstick's budget: it
  // holds at most that many tokens, evicting the least recently read, as SGLang's cache in that memory would, so a
  // long-running server's conversations do not grow it; the prefix ledger keeps its 65,536 most recent prefixes).
  explicit UsageMeter(int64_t radix_capacity_tokens);
  UsageMeter(const UsageMeter&) = delete;
  UsageMeter& operator=(const UsageMeter&) = delete;

  // Adds `delta` to the counters (critical_forward_tokens is informational and not summed).
  void count(const Counters& delta);
  Counters counters() const;
  // The tokens a prefix cache forwards to hold `window`, read as the engine's windows are read.
  int64_t prefix_cache_read(const std::vector<planner::PrefixSpan>& window);
  // One model call through the radix yardstick: `tokens` is the window, the query and what was generated,
  // the first `prompt_tokens` of them the prompt. Returns the prompt tokens it forwards.
  int64_t radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens);
  // The two yardsticks' tables: the prefix ledger's prefixes, the radix cache's tokens (EngineStats).
  TableUsage prefix_ledger_usage() const;
  TableUsage radix_usage() const;

 private:
  mutable std::mutex mu_;
  Counters counters_;
  planner::PrefixLedger prefix_ledger_;
  planner::RadixCache radix_;
};

}  // namespace orbit::detail
