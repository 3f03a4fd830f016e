// A model's RoPE cos/sin per position, computed once and gathered by position (forward_batch's query tables,
// a plain past's key tables, dynamic NTK's read tables of a decode cache).
//
// Row p is what ops::rope_tables(rope_angles(config, [p], window_len)) gives, computed by those same functions
// over positions [0, capacity) (float64 p · inv[i], then cos and sin in float64, then rounded to the table
// dtype: each element's value does not depend on the tensor it is computed in), so a gathered row is bit for
// bit the per-step one. The table grows geometrically to the largest position asked for. Dynamic NTK's
// frequencies depend on the window length n only through max(n, L) (L its anchor length, rope.cpp): the
// table holds those of n <= L, the same for every such window; past L they change with every step's length,
// so those windows (and M-RoPE grids) keep the per-step computation.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "ops/rope_op.h"
#include "orbit/runtime/config.h"

namespace orbit::runtime::detail {

class RopeTableCache {
 public:
  // The most bytes (cos and sin together) a table may take; positions past it take the per-step path.
  static constexpr int64_t kMaxBytes = int64_t{64} << 20;

  // A run of `count` positions at `data` (int64, each >= 0).
  struct Run {
    const int64_t* data;
    int64_t count;
  };

  // Whether positions of `config` at RoPE window length `window_len` can be read from a table: every
  // scaling but dynamic NTK, and dynamic NTK at windows of at most its anchor length.
  static bool applies(const RopeConfig& config, int64_t window_len);

  // cos/sin [positions.size(), rotary_dim/2] of `dtype` (float32 or float64) on the CPU for the positions
  // (each >= 0) at window length `window_len`, or nullopt where the table does not apply (see applies) or
  // would exceed kMaxBytes.
  std::optional<ops::RopeTables> gather(const RopeConfig& config, const std::vector<int64_t>& positions,
                                        at::ScalarType dtype, int64_t window_len = 0);
  // The same for the runs' positions one after another.
  std::optional<ops::RopeTables> gather(const RopeConfig& config, const std::vector<Run>& runs, at::ScalarType dtype,
                                        int64_t window_len);

  // Rows the table holds now (0 before the first gather).
  int64_t capacity() const;

 private:
  mutable std::mutex mutex_;
  at::ScalarType dtype_ = at::kFloat;
  ops::RopeTables table_;  // [capacity, rotary_dim/2] each
};

// A 1-D int64 contiguous CPU tensor's positions as a run; nullopt for any other tensor (a grid, another
// device or dtype).
std::optional<RopeTableCache::Run> position_run(const at::Tensor& positions);

}  // namespace orbit::runtime::detail
