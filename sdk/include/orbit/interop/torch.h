// Optional interop for users who have torch (the rest of the public API never includes it):
// at::Tensor (torch::Tensor is the same type) <-> orbit::TensorView and the SDK's result types.
//
//   orbit::EmbeddingChunk c;
//   c.embeddings = orbit::interop::view(image_embeddings);   // no copy: borrows the tensor's memory
//   c.grid = orbit::interop::view(grid);
//   engine->add_embeddings(c);                                 // the engine copies what it keeps
//   at::Tensor logits = orbit::interop::to_tensor(window.logits(query, true));
//
// Header-only; include it from code that already builds against libtorch.
#pragma once

#include <ATen/ATen.h>

#include "orbit/common/error.h"
#include "orbit/window.h"

namespace orbit::interop {

// A view of a CPU, contiguous float32 / bfloat16 / float16 / int64 tensor. The view borrows the tensor's
// memory: keep the tensor alive for the call that takes the view. Throws orbit::Error otherwise.
inline TensorView view(const at::Tensor& t) {
  ORBIT_CHECK(t.defined(), "interop::view: undefined tensor");
  ORBIT_CHECK(t.device().is_cpu(), "interop::view: tensor on " << t.device() << "; move it to the CPU first");
  ORBIT_CHECK(t.is_contiguous(), "interop::view: tensor is not contiguous; call .contiguous() first");
  TensorView v;
  switch (t.scalar_type()) {
    case at::kFloat: v.dtype = DType::kFloat32; break;
    case at::kBFloat16: v.dtype = DType::kBFloat16; break;
    case at::kHalf: v.dtype = DType::kFloat16; break;
    case at::kLong: v.dtype = DType::kInt64; break;
    default:
      ORBIT_FAIL("interop::view: dtype " << t.scalar_type() << " (expected float32, bfloat16, float16 or int64)");
  }
  v.data = t.data_ptr();
  v.shape.assign(t.sizes().begin(), t.sizes().end());
  return v;
}

// Logits as a float32 tensor [rows, vocab] (a copy).
inline at::Tensor to_tensor(const Logits& logits) {
  return at::tensor(logits.values, at::kFloat).reshape({logits.rows, logits.vocab});
}

}  // namespace orbit::interop
