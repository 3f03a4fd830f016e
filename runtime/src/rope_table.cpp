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

// L: the length dynamic NTK's frequencies are anchored to (rope.cpp's anchor_length).
int64_t anchor_length(const RopeConfig& c) {
  return c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings : c.max_position_embeddings;
}

}  // namespace

bool RopeTableCache::applies(const RopeConfig& config, int64_t window_len) {
  return config.scaling != RopeScaling::kDynamicNtk || window_len <= anchor_length(config);
}

int64_t RopeTableCache::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.cos.defined() ? table_.cos.size(0) : 0;
}

std::optional<ops::RopeTables> RopeTableCache::gather(const RopeConfig& config, const std::vector<int64_t>& positions,
                                                      at::ScalarType dtype, int64_t window_len) {
  return gather(config, {Run{positions.data(), static_cast<int64_t>(positions.size())}}, dtype, window_len);
}

std::optional<ops::RopeTables> RopeTableCache::gather(const RopeConfig& config, const std::vector<Run>& runs,
                                                      at::ScalarType dtype, int64_t window_len) {
  int64_t n = 0, lo = 0, hi = -1;
  for (const Run& run : runs) {
    if (run.count == 0) continue;
    const auto [l, h] = std::minmax_element(run.data, run.data + run.count);
    lo = n == 0 ? *l : std::min(lo, *l);
    hi = std::max(hi, *h);
    n += run.count;
  }
  if (!applies(config, window_len) || n == 0) return std::nullopt;
  ORBIT_CHECK(dtype == at::kFloat || dtype == at::kDouble,
              "rope table: argument 'dtype' must be float32 or float64, got " << dtype);
  ORBIT_CHECK(lo >= 0, "rope table: argument 'positions' holds a negative position " << lo);
  const int64_t half = config.rotary_dim / 2;
  const int64_t row_bytes = 2 * half * static_cast<int64_t>(at::elementSize(dtype));
  const int64_t need = hi + 1;
  if (need * row_bytes > kMaxBytes) return std::nullopt;
  ops::RopeTables table;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t have = table_.cos.defined() && dtype_ == dtype ? table_.cos.size(0) : 0;
    if (have < need) {
      const int64_t rows = std::min(std::max({need, 2 * have, kMinRows}), kMaxBytes / row_bytes);
      // The per-step path's own functions over every position of the table, at a window whose frequencies
      // every window the table applies to shares (dynamic NTK: its anchor length; the others ignore it).
      const at::Tensor all = at::arange(rows, at::TensorOptions().dtype(at::kLong));
      table_ = ops::rope_tables(rope_angles(config, all, anchor_length(config)), dtype, at::kCPU);
      dtype_ = dtype;
    }
    table = table_;  // a grown table replaces it; this one stays alive while read below
  }
  ops::RopeTables out{at::empty({n, half}, table.cos.options()), at::empty({n, half}, table.sin.options())};
  const auto bytes = static_cast<std::size_t>(row_bytes / 2);
  const auto* cos = static_cast<const char*>(table.cos.data_ptr());
  const auto* sin = static_cast<const char*>(table.sin.data_ptr());
  auto* cos_out = static_cast<char*>(out.cos.data_ptr());
  auto* sin_out = static_cast<char*>(out.sin.data_ptr());
  for (const Run& run : runs) {
    for (int64_t r = 0; r < run.count; ++r) {
      const auto from = static_cast<std::size_t>(run.data[r]) * bytes;
      std::memcpy(cos_out, cos + from, bytes);
      std::memcpy(sin_out, sin + from, bytes);
      cos_out += bytes;
      sin_out += bytes;
    }
  }
  return out;
}

std::optional<RopeTableCache::Run> position_run(const at::Tensor& positions) {
  if (!positions.defined() || positions.dim() != 1 || positions.scalar_type() != at::kLong || !positions.is_cpu() ||
      !positions.is_contiguous()) {
    return std::nullopt;
  }
  return RopeTableCache::Run{positions.data_ptr<int64_t>(), positions.size(0)};
}

}  // namespace orbit::runtime::detail
