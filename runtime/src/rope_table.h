// A model's RoPE cos/sin per position, computed once and gathered by position (forward_batch's query tables).
//
// Row p is what ops::rope_tables(rope_angles(config, [p], window_len)) gives, computed by those same functions
// over positions [0, capacity) (float64 p · inv[i], then cos and sin in float64, then rounded to the table
// dtype: each element's value does not depend on the tensor it is computed in), so a gathered row is bit for
// bit the per-step one. The table grows geometrically to the largest position asked for. Dynamic NTK, whose
// frequencies depend on the window length, and M-RoPE grids keep the per-step computation.
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

  // Whether positions of `config` can be read from a table: every scaling but dynamic NTK.
  static bool applies(const RopeConfig& config);

  // cos/sin [positions.size(), rotary_dim/2] of `dtype` (float32 or float64) on the CPU for the positions
  // (each >= 0), or nullopt where the table does not apply (see applies) or would exceed kMaxBytes.
  std::optional<ops::RopeTables> gather(const RopeConfig& config, const std::vector<int64_t>& positions,
                                        at::ScalarType dtype);

  // Rows the table holds now (0 before the first gather).
  int64_t capacity() const;

 private:
  mutable std::mutex mutex_;
  at::ScalarType dtype_ = at::kFloat;
  ops::RopeTables table_;  // [capacity, rotary_dim/2] each
};

}  // namespace orbit::runtime::detail
