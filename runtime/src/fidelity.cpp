#include "orbit/runtime/fidelity.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "orbit/common/error.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

double relative_error(const at::Tensor& arm, const at::Tensor& exact, std::size_t layer, const char* which) {
  ORBIT_CHECK(arm.defined() && exact.defined(), "relative_kv_error: layer " << layer << " " << which << " is missing");
  ORBIT_CHECK(arm.sizes() == exact.sizes(), "relative_kv_error: layer "
                                                << layer << " " << which << " has shape " << shape_string(arm.sizes())
                                                << " in the arm but " << shape_string(exact.sizes()) << " exact");
  const at::Tensor ref = exact.to(at::kDouble);
  const double num = at::linalg_vector_norm(arm.to(at::kDouble) - ref).item<double>();
  const double den = at::linalg_vector_norm(ref).item<double>();
  if (den > 0) return num / den;
  return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
}

void check_logits(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ORBIT_CHECK(a.defined() && b.defined(), what << ": logits are missing");
  ORBIT_CHECK(a.dim() == 2 && a.sizes() == b.sizes() && a.size(0) > 0,
              what << ": logits must be two non-empty [N, vocab] tensors of one shape, got " << shape_string(a.sizes())
                   << " and " << shape_string(b.sizes()));
}

}  // namespace

std::vector<LayerKvError> relative_kv_error(const std::vector<LayerKV>& arm, const std::vector<LayerKV>& exact) {
  ORBIT_CHECK(arm.size() == exact.size(),
              "relative_kv_error: the arm has " << arm.size() << " layers, the exact content " << exact.size());
  c10::InferenceMode guard;
  std::vector<LayerKvError> out(arm.size());
  for (std::size_t l = 0; l < arm.size(); ++l) {
    out[l].k = relative_error(arm[l].k, exact[l].k, l, "k");
    out[l].v = relative_error(arm[l].v, exact[l].v, l, "v");
  }
  return out;
}

std::vector<double> kl_per_position(const at::Tensor& exact_logits, const at::Tensor& arm_logits) {
  check_logits(exact_logits, arm_logits, "kl_per_position");
  c10::InferenceMode guard;
  const at::Tensor log_p = at::log_softmax(exact_logits.to(at::kDouble), -1);
  const at::Tensor log_q = at::log_softmax(arm_logits.to(at::kDouble), -1);
  // p·(log p − log q); rows where p underflows to 0 contribute 0 (0·finite), and log_softmax never
  // returns −∞ for finite logits, so no 0·∞ appears.
  const at::Tensor kl = (log_p.exp() * (log_p - log_q)).sum(-1).contiguous().cpu();
  std::vector<double> out(static_cast<std::size_t>(kl.size(0)));
  const double* data = kl.data_ptr<double>();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(0.0, data[i]);
  return out;
}

double mean_kl(const at::Tensor& exact_logits, const at::Tensor& arm_logits) {
  const std::vector<double> kl = kl_per_position(exact_logits, arm_logits);
  double sum = 0;
  for (double x : kl) sum += x;
  return sum / static_cast<double>(kl.size());
}

double eta(double kl_arm, double kl_blind) {
  ORBIT_CHECK(!(kl_arm < 0) && !(kl_blind < 0),
              "eta: KL values must be non-negative, got " << kl_arm << " and " << kl_blind);
  if (kl_blind <= kEtaZeroKl) return kl_arm <= kEtaZeroKl ? 1.0 : -std::numeric_limits<double>::infinity();
  return 1.0 - kl_arm / kl_blind;
}

double top1_agreement(const at::Tensor& exact_logits, const at::Tensor& arm_logits) {
  check_logits(exact_logits, arm_logits, "top1_agreement");
  c10::InferenceMode guard;
  const at::Tensor same = exact_logits.argmax(-1) == arm_logits.argmax(-1);
  return same.to(at::kDouble).mean().item<double>();
}

FlipRecover flip_recover(const at::Tensor& exact_logits, const at::Tensor& blind_logits, const at::Tensor& arm_logits) {
  check_logits(exact_logits, blind_logits, "flip_recover (exact vs blind)");
  check_logits(exact_logits, arm_logits, "flip_recover (exact vs arm)");
  c10::InferenceMode guard;
  const at::Tensor top_exact = exact_logits.argmax(-1);
  const at::Tensor flipped = blind_logits.argmax(-1) != top_exact;
  const at::Tensor restored = flipped & (arm_logits.argmax(-1) == top_exact);
  FlipRecover out;
  out.flips = flipped.sum().item<int64_t>();
  out.recovered = restored.sum().item<int64_t>();
  return out;
}

Fidelity measure_fidelity(const FidelityInputs& in) {
  ORBIT_CHECK(in.exact_content != nullptr && in.arm_content != nullptr,
              "measure_fidelity: exact_content and arm_content must be set");
  Fidelity f;
  f.kv_error = relative_kv_error(*in.arm_content, *in.exact_content);
  f.kl = mean_kl(in.exact_logits, in.arm_logits);
  f.kl_blind = mean_kl(in.exact_logits, in.blind_logits);
  f.eta = eta(f.kl, f.kl_blind);
  f.top1 = top1_agreement(in.exact_logits, in.arm_logits);
  f.flips = flip_recover(in.exact_logits, in.blind_logits, in.arm_logits);
  return f;
}

}  // namespace orbit::runtime
