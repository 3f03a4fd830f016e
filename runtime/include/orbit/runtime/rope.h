// Rotary position embedding: the one angle function shared by the forward pass and by relocation
// (DESIGN.md §2, STYLE.md 9).
//
//   angle(p, i) = p · inv_freq[i]          i in [0, rotary_dim/2)
//
// inv_freq depends only on the RopeConfig (and, for dynamic NTK, on an explicit window length), so
// angles are linear in p and rotations compose exactly: rotate(rotate(x, p), δ) == rotate(x, p + δ).
// That is what makes stored position-free content relocatable.
//
// Layouts (per head, x has head_dim values; only the first rotary_dim rotate, the rest pass through):
//   interleaved:  (x[2i], x[2i+1])            rotate by angle(p, i)
//   half-split:   (x[i],  x[i + rotary_dim/2]) rotate by angle(p, i)
//
// Attention scaling: YaRN's attention factor multiplies HF's cos/sin; we keep rotations pure and
// return the factor separately (rope_attention_scaling). The forward multiplies the attention logits
// by its square, which is what HF's scaled cos/sin produce for q·k.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "orbit/runtime/config.h"

namespace orbit::runtime {

// Inverse frequencies, float64, shape [rotary_dim/2].
// `window_len` matters only for kDynamicNtk: the window's length in tokens (HF's seq_len); theta is
// enlarged when it exceeds max_position_embeddings. A window fixes it once so its relocations agree.
// Throws orbit::Error if the config is invalid (odd rotary_dim, rotary_dim > head_dim, factor < 1 ...).
at::Tensor rope_inv_freq(const RopeConfig& config, int64_t window_len = 0);

// Multiplier HF applies to cos and sin (1.0 except YaRN).
double rope_attention_scaling(const RopeConfig& config);

// Angles for `positions` (int64 or floating, shape [T]), float64, shape [T, rotary_dim/2].
at::Tensor rope_angles(const RopeConfig& config, const at::Tensor& positions, int64_t window_len = 0);

// Rotates x by per-token angles. x: [T, H, head_dim] (float32, bfloat16 or float64, any device the
// backend supports), angles: [T, rotary_dim/2] float64. Returns a new tensor of x's dtype; dims past
// rotary_dim are copied unchanged. Computation happens in float32 at least.
at::Tensor rope_rotate(const RopeConfig& config, const at::Tensor& x, const at::Tensor& angles);

// Convenience: rope_rotate(config, x, rope_angles(config, positions, window_len)).
at::Tensor rope_apply(const RopeConfig& config, const at::Tensor& x, const at::Tensor& positions,
                      int64_t window_len = 0);

}  // namespace orbit::runtime
