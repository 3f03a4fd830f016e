// Small int64 index ranges, made without ATen's arange.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <numeric>

namespace orbit::runtime {

// [start, start + n) as a 1-D int64 tensor on `device`: at::arange(start, start + n, int64) on `device`, value
// for value. On the CPU the values are written in place, without arange's TensorIterator: a decode step
// makes a few such ranges per sequence (its input's positions, its query rows), and arange cost more than
// the allocation. Requires n >= 0.
inline at::Tensor index_range(int64_t start, int64_t n, const c10::Device& device = c10::kCPU) {
  if (!device.is_cpu()) return at::arange(start, start + n, at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor out = at::empty({n}, at::kLong);
  int64_t* p = out.data_ptr<int64_t>();
  std::iota(p, p + n, start);
  return out;
}

}  // namespace orbit::runtime
