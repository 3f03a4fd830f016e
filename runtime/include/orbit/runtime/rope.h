// Rotary position embedding: the one angle function shared by the forward pass and by relocation
// (docs/ARCHITECTURE.md §7).
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
// M-RoPE (Qwen2-VL / Qwen2.5-VL; RopeConfig::mrope_section = {s_t, s_h, s_w}, Σ = rotary_dim/2):
// a position is a triple (t, h, w) and frequency i reads one coordinate,
//   angle((t, h, w), i) = c(i) · inv_freq[i],   c(i) = t for i < s_t, h for i < s_t + s_h, else w,
// in either layout (the pair of frequency i turns by it). Text tokens have t = h = w, where M-RoPE
// equals 1-D RoPE. Angles stay linear in the position, so moving by δ on all three coordinates
// composes exactly like the 1-D case: rotate(rotate(x, P), δ·(1,1,1)) == rotate(x, P + δ).
//
// Attention scaling: YaRN's attention factor multiplies HF's cos/sin; we keep rotations pure and
// return the factor separately (rope_attention_scaling). The forward multiplies the attention logits
// by its square, which is what HF's scaled cos/sin produce for q·k (GQA/MHA: the whole logit; MLA:
// the q_pe·k_pe part only, since only that part is rotated).
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

// DeepSeek's softmax-scale multiplier for MLA: m(factor, mscale_all_dim)² for YaRN with mscale_all_dim
// set (non-zero), else 1.0 (m as in rope.cpp's YaRN notes). The MLA forward multiplies
// 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) by it, as DeepSeek-V2's reference code does.
double rope_mla_softmax_scaling(const RopeConfig& config);

// Angles for `positions`, float64, shape [T, rotary_dim/2]. positions: int64 or floating, [T]; for an
// M-RoPE config also [3, T] (rows t, h, w), where a 1-D position p stands for (p, p, p). Throws
// orbit::Error on any other shape (2-D positions on a config without mrope_section included).
at::Tensor rope_angles(const RopeConfig& config, const at::Tensor& positions, int64_t window_len = 0);

// Rotates x by per-token angles. x: [T, H, head_dim] (float32, bfloat16 or float64, any device the
// backend supports), angles: [T, rotary_dim/2] float64. Returns a new tensor of x's dtype; dims past
// rotary_dim are copied unchanged. Computation happens in float32 at least.
at::Tensor rope_rotate(const RopeConfig& config, const at::Tensor& x, const at::Tensor& angles);

// Convenience: rope_rotate(config, x, rope_angles(config, positions, window_len)).
at::Tensor rope_apply(const RopeConfig& config, const at::Tensor& x, const at::Tensor& positions,
                      int64_t window_len = 0);

}  // namespace orbit::runtime
