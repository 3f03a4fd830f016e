// Fidelity of a reused chunk against full re-prefill of the same window (docs/ARCHITECTURE.md §7).
//
// Every measure compares an *arm* (a repair strategy's result) with the *exact* answer (B prefilled in
// context) and, for η and flip-recover, with *blind* reuse (the canonical relocated, no repair):
//
//   per-layer KV error   ‖K_arm − K_exact‖_F / ‖K_exact‖_F, and the same for V, over B's tokens
//   KL                   mean over query positions of KL(p_exact ‖ p_arm), softmax in float64
//   η                    1 − KL(arm)/KL(blind): the fraction of the blind-reuse gap the arm closes
//   top-1                fraction of query positions where argmax(arm) == argmax(exact)
//   flip-recover         over positions where argmax(blind) ≠ argmax(exact) (the "flips"), the fraction
//                        where argmax(arm) == argmax(exact)
//
// KV errors are measured in the content channel (keys before RoPE). RoPE rotates each token's key by an
// orthogonal map, so the relative error of the rotated keys at the window's positions is the same number.
//
// All functions are pure: they read their tensors (any floating dtype, any device that at:: supports),
// copy nothing they keep, and throw orbit::Error on mismatched shapes. Logits are [N, vocab]: row i is
// the next-token distribution at query position i. argmax ties go to the lowest token id.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "orbit/runtime/model.h"

namespace orbit::runtime {

// Relative error of one layer's content. 0 when the reference is all zeros and the arm equals it; +inf
// when the reference is zero and the arm is not.
struct LayerKvError {
  double k = 0;
  double v = 0;
};

// One entry per layer. `arm` and `exact` must have the same number of layers and, per layer, the same
// k/v shapes ([n, H_kv, d]).
std::vector<LayerKvError> relative_kv_error(const std::vector<LayerKV>& arm, const std::vector<LayerKV>& exact);

// KL(softmax(exact_logits[i]) ‖ softmax(arm_logits[i])) for each row i, in nats, float64 throughout.
// Tiny negative values from rounding are clamped to 0. Shapes must match: [N, vocab].
std::vector<double> kl_per_position(const at::Tensor& exact_logits, const at::Tensor& arm_logits);
// Mean of kl_per_position over the N rows (N ≥ 1).
double mean_kl(const at::Tensor& exact_logits, const at::Tensor& arm_logits);

// KL values at or below this are "no gap" for η (float64 rounding of identical distributions is far below).
constexpr double kEtaZeroKl = 1e-12;

// η = 1 − kl_arm / kl_blind. When blind already matches exactly (kl_blind ≤ kEtaZeroKl) there is no gap
// to close: η = 1 if the arm matches too (kl_arm ≤ kEtaZeroKl), else −∞ (the arm opened a gap where blind
// reuse had none; the limit of the formula). Negative η means the arm is worse than blind reuse.
double eta(double kl_arm, double kl_blind);

// Fraction of rows whose argmax agrees.
double top1_agreement(const at::Tensor& exact_logits, const at::Tensor& arm_logits);

struct FlipRecover {
  int64_t flips = 0;      // rows where argmax(blind) ≠ argmax(exact)
  int64_t recovered = 0;  // of those, rows where argmax(arm) == argmax(exact)
  // recovered / flips; NaN when there are no flips (nothing to recover: report the count, not a rate).
  double fraction() const {
    return flips > 0 ? static_cast<double>(recovered) / static_cast<double>(flips)
                     : std::numeric_limits<double>::quiet_NaN();
  }
};
FlipRecover flip_recover(const at::Tensor& exact_logits, const at::Tensor& blind_logits, const at::Tensor& arm_logits);

// Everything above for one arm. The tensors are borrowed for the call only.
struct FidelityInputs {
  const std::vector<LayerKV>* exact_content = nullptr;  // KV(B|C)
  const std::vector<LayerKV>* arm_content = nullptr;    // the arm's B
  at::Tensor exact_logits;                              // [N, vocab] query logits over [C, B exact]
  at::Tensor blind_logits;                              // [N, vocab] over [C, B canonical]
  at::Tensor arm_logits;                                // [N, vocab] over [C, B arm]
};

struct Fidelity {
  std::vector<LayerKvError> kv_error;  // per layer
  double kl = 0;                       // mean KL(exact ‖ arm), nats
  double kl_blind = 0;                 // mean KL(exact ‖ blind), nats
  double eta = 0;
  double top1 = 0;
  FlipRecover flips;
};

// Throws orbit::Error when a pointer is null or shapes disagree.
Fidelity measure_fidelity(const FidelityInputs& inputs);

}  // namespace orbit::runtime
