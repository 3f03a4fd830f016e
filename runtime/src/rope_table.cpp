#include "rope_table.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"

namespace orbit::runtime::detail {
namespace {

// First table size: a short chat's positions without regrowing.
constexpr int64_t kMinRows = 256;

}  // namespace

bool RopeTableCache::applies(const RopeConfig& config) { return config.scaling != RopeScaling::kDynamicNtk; }

int64_t RopeTableCache::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.cos.defined() ? table_.cos.size(0) : 0;
}

std::optional<ops::RopeTables> RopeTableCache::gather(const RopeConfig& config, const std::vector<int64_t>& positions,
                                                      at::ScalarType dtype) {
  if (!applies(config) || positions.empty()) return std::nullopt;
  ORBIT_CHECK(dtype == at::kFloat || dtype == at::kDouble,
              "rope table: argument 'dtype' must be float32 or float64, got " << dtype);
  const auto [lo, hi] = std::minmax_element(positions.begin(), positions.end());
  ORBIT_CHECK(*lo >= 0, "rope table: argument 'positions' holds a negative position " << *lo);
  const int64_t half = config.rotary_dim / 2;
  const int64_t row_bytes = 2 * half * static_cast<int64_t>(at::elementSize(dtype));
  const int64_t need = *hi + 1;
  if (need * row_bytes > kMaxBytes) return std::nullopt;
  ops::RopeTables table;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t have = table_.cos.defined() && dtype_ == dtype ? table_.cos.size(0) : 0;
    if (have < need) {
      const int64_t rows = std::min(std::max({need, 2 * have, kMinRows}), kMaxBytes / row_bytes);
      // The per-step path's own functions over every position of the table.
      const at::Tensor all = at::arange(rows, at::TensorOptions().dtype(at::kLong));
      table_ = ops::rope_tables(rope_angles(config, all, rows), dtype, at::kCPU);
      dtype_ = dtype;
    }
    table = table_;  // a grown table replaces it; this one stays alive while read below
  }
  const auto n = static_cast<int64_t>(positions.size());
  ops::RopeTables out{at::empty({n, half}, table.cos.options()), at::empty({n, half}, table.sin.options())};
  const auto bytes = static_cast<std::size_t>(row_bytes / 2);
  const auto* cos = static_cast<const char*>(table.cos.data_ptr());
  const auto* sin = static_cast<const char*>(table.sin.data_ptr());
  auto* cos_out = static_cast<char*>(out.cos.data_ptr());
  auto* sin_out = static_cast<char*>(out.sin.data_ptr());
  for (int64_t r = 0; r < n; ++r) {
    const auto from = static_cast<std::size_t>(positions[static_cast<std::size_t>(r)]) * bytes;
    std::memcpy(cos_out + static_cast<std::size_t>(r) * bytes, cos + from, bytes);
    std::memcpy(sin_out + static_cast<std::size_t>(r) * bytes, sin + from, bytes);
  }
  return out;
}

}  // namespace orbit::runtime::detail
