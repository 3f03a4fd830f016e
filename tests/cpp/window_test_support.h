// Shared by the window tests that check a window against its re-prefill: the bundled stories260K on a
// 64 MiB pool of 4-token pages, and the largest logit difference from the oracle.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "orbit/engine.h"
#include "test_helpers.h"

namespace orbit::test {

inline std::shared_ptr<Engine> open_stories_small_pages(BackgroundMode background = EngineOptions{}.background) {
  EngineOptions o;
  o.model = stories_path();
  o.pool_bytes = int64_t{64} << 20;
  o.page_size = 4;
  o.background = background;
  return Engine::open(o);
}

// An exact window's logits against its re-prefill: the same sums over KV computed in other pieces (chunk by
// chunk, decode steps, another row blocking), so they differ by float32 rounding only. Worst 1.3e-5 over the
// CPU kernels, BLAS cores and thread counts tried (no-AVX, AVX2, AVX-512; 1 to 8 threads); reusing a chunk's
// KV without its context is off by > 1e-2 (test_window's blind window: 2.9).
inline constexpr double kExactWindowTolerance = 2e-4;

// max |logits - reference logits| over the query's positions.
inline double window_error(const Window& w, const std::vector<int64_t>& query) {
  return max_abs_diff(w.logits(query, true).values, w.reference_logits(query, true).values);
}

}  // namespace orbit::test
