// The fidelity model: the next-token KL (against a re-prefill of the same window) that serving one chunk
// instance approximately adds, predicted from plan metadata alone. It sits beside the cost model
// (cost_model.h): the cost model says what an action costs, this one what it loses, and the planner picks
// per instance the cheapest action whose loss fits a policy's per-step KL budget.
//
// Every approximate action has one feature f in [0, 1] describing how far its KV is from the exact one,
// scaled by the instance's share s = length / window tokens (an instance's error reaches the next token
// through the attention it receives, roughly its share of the window):
//
//   keep        f = the token-weighted divergence between the antecedents it was formed on and its
//               antecedents now (1 − Σ min / Σ max over the two key multisets)   (removal / insertion)
//   blind       f = 1 (the canonical alone; its whole context is unseen)
//   orbit       f = 1 (an orbit patch: the mean over orderings applied to one ordering)
//   stale       f = the divergence of the stale patch's context from the current one
//   truncated   f = 1 − rank / full rank (an exact-context patch at less than full rank)
//   first-k     f = 1 − k / n (tokens left canonical)
//   cacheblend  f = 1 − r (tokens left canonical, after the deviation-ranked selection)
//
//   predicted KL = coefficient[kind] · f · s
//
// Exact actions (form, prefill, canonical at position 0, exact full-rank patch) predict 0. Coefficients
// come from measured deficits (FidelitySample: a measured KL with its f·s) by least squares through the
// origin per kind; kinds without samples keep the defaults (conservative values measured on the bundled
// stories260K, erring high).
//
// Thread-safety: an immutable value; const methods may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace orbit::planner {

enum class Loss { kKeep = 0, kBlind, kOrbit, kStale, kTruncated, kFirstK, kCacheBlend };
inline constexpr int kLossKinds = 7;
const char* loss_name(Loss kind) noexcept;  // "keep", "blind", ...

// One measurement: serving some instances approximately by `kind` gave next-token KL `kl`, and the
// features summed over those instances (Σ f·s) were `feature`.
struct FidelitySample {
  Loss kind = Loss::kKeep;
  double feature = 0;
  double kl = 0;
};

class FidelityModel {
 public:
  FidelityModel();  // the defaults
  // Least squares through the origin per kind over `samples` (kinds without a sample with feature > 0
  // keep the default). Throws orbit::Error naming the sample index on a negative or non-finite field.
  static FidelityModel fit(const std::vector<FidelitySample>& samples);

  double coefficient(Loss kind) const { return coef_[static_cast<std::size_t>(kind)]; }
  bool fitted(Loss kind) const { return fitted_[static_cast<std::size_t>(kind)]; }
  // coefficient(kind) · feature · share, with feature and share clamped to [0, 1].
  double predict(Loss kind, double feature, double share) const;
  std::string describe() const;  // "keep 3.1e-02 (fitted), blind 8.0e-02 (default), ..."

 private:
  std::array<double, kLossKinds> coef_{};
  std::array<bool, kLossKinds> fitted_{};
};

}  // namespace orbit::planner
