// TensorView (public, torch-free) -> ATen tensors the runtime takes. Every function copies (the view only
// borrows the caller's memory for one call) and throws orbit::Error naming `what` on a bad shape/dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "orbit/tensor.h"

namespace orbit::detail {

// float32 [n, hidden] from a [n, hidden] float32/bfloat16/float16 view (n ≥ 1, finite values).
at::Tensor embeddings_from_view(const TensorView& view, int64_t hidden, const char* what);
// int64 [rows, n] relative to each row's minimum, from a [rows, n] or [n] int64 view (a [n] view on a
// 3-row model means t = h = w); undefined for an empty view.
at::Tensor grid_from_view(const TensorView& view, int64_t n, int64_t rows, const char* what);
// Token-major flattening of a [rows, n] grid: (row 0, row 1, ...) of token 0, then token 1, ...
std::vector<int64_t> grid_token_major(const at::Tensor& grid);

}  // namespace orbit::detail
