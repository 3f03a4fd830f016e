// TensorView: how arrays cross the public API without torch (docs/ARCHITECTURE.md §2). A view borrows the caller's
// memory for the duration of one call; the SDK copies what it keeps. Row-major (C-contiguous) only.
//
//   embeddings   [n, hidden]  float32 / bfloat16 / float16     (a chunk's input embeddings)
//   grid         [3, n] or [n] int64                            (a chunk's position grid: M-RoPE (t, h, w)
//                                                               rows, or plain positions)
//
// orbit/interop/torch.h converts torch::Tensor <-> TensorView for users who have torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace orbit {

enum class DType { kFloat32, kBFloat16, kFloat16, kInt64 };
const char* dtype_name(DType dtype) noexcept;  // "float32", "bfloat16", "float16", "int64"
std::size_t dtype_size(DType dtype) noexcept;  // bytes per element

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;

  // The product of the shape (1 for no dimensions); throws orbit::Error on a negative dimension or a product past
  // int64, so bytes() below never wraps round.
  int64_t numel() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr || numel() == 0; }
};

// Builders for the common cases (the view borrows `values`); throw orbit::Error naming a negative dimension or a
// shape whose element count is not values.size().
TensorView view_of(const std::vector<float>& values, std::vector<int64_t> shape);
TensorView view_of(const std::vector<int64_t>& values, std::vector<int64_t> shape);

}  // namespace orbit
