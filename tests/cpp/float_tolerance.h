// Tolerances for comparing two float32 evaluations of one model on one input that differ only in the order
// of their reductions: another process with another thread count, another BLAS blocking, a sequence split
// into other pieces. Neither result is wrong; they differ by rounding, and the bound below says by how much
// they may, from the sizes involved rather than from what one machine printed.
//
// Logits. A dot product of length K computed in float32 carries a rounding error that, modelling the
// roundings as independent (Higham and Mary, "A new approach to probabilistic rounding error analysis",
// SIAM J. Sci. Comput. 2019), stays below c·sqrt(K)·u of the magnitudes it sums, with u = 2^-24. A logit
// passes through `layers` blocks of a few such reductions each (attention scores, the attention-weighted
// sum, the projections and the FFN; K at most the model's widest reduction or the sequence length), so two
// evaluations' logits drift apart by at most about
//
//   delta = kReductionsPerLayer · layers · sqrt(K) · u · scale,     scale = the largest |logit|.
//
// KL. KL(p‖q) as a function of q's logits has gradient q − p, whose L1 norm is at most sqrt(2·KL) (Pinsker);
// p's logits have a gradient of the same order near p = q. Moving both sides' logits by at most delta
// therefore moves the KL by at most 2·delta·sqrt(2·KL) + delta² (the second-order term).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace orbit::test {

struct Float32Shape {
  int64_t layers = 1;
  int64_t reduction = 1;     // the longest reduction in a layer: max(hidden, intermediate, sequence length)
  double logit_scale = 1.0;  // the largest |logit| of the rows compared
};

// Reductions per layer whose errors add up in a logit, with headroom for the norms and the softmax.
constexpr double kReductionsPerLayer = 8.0;
constexpr double kFloat32UnitRoundoff = 5.9604644775390625e-08;  // 2^-24

// The largest drift expected between two float32 evaluations' logits (see the header comment).
inline double float32_logit_drift(const Float32Shape& s) {
  return kReductionsPerLayer * static_cast<double>(s.layers) * std::sqrt(static_cast<double>(s.reduction)) *
         kFloat32UnitRoundoff * std::max(1.0, s.logit_scale);
}

// The absolute margin for comparing a KL of about `kl` computed by two such evaluations.
inline double float32_kl_margin(double kl, const Float32Shape& s) {
  const double delta = float32_logit_drift(s);
  return 2 * delta * std::sqrt(2 * std::max(kl, 0.0)) + delta * delta;
}

}  // namespace orbit::test
