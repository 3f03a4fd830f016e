// The cost model (docs/ARCHITECTURE.md §10): what a forward, a relocation, a patch and a tier transfer
// cost on this machine, fitted from timings, and the load-vs-patch-vs-recompute decision it drives.
//
//   forward          seconds_forward(t, c) = a·t + b·t·c + f     t tokens forwarded after c context tokens
//                    (a: per-token work, b: attention over the context, f: fixed launch overhead)
//   relocate         bytes of KV whose keys are rotated to new positions, per second
//   patch_apply      bytes of KV a patch is applied to (the chunk's canonical bytes), per second
//   patch_form       bytes of KV a patch is formed from (deficit + truncated SVD), per second
//   transfer_<tier>  bytes read from a tier into device memory, per second (device: a device copy)
//
// Calibration: time those operations on the machine, one CostSample each, and fit(). All units are
// seconds, tokens and bytes. The planner knows tiers only as this enum (it never includes the SDK; the
// SDK maps its StoreTier onto Tier).
//
// The decision (choose) for one chunk about to enter a window, counted over its expected uses (this one
// and r = expected_reuse more under the same context), with B its canonical bytes:
//
//   load         = transfer(B, canonical_tier) + relocate(B)
//   patched use  = load + transfer(patch bytes, patch_tier) + patch_apply(B)
//   kLoadAndPatch  (1 + r) · patched use                     (+infinity without a stored patch)
//   kLoadAndForm   load + forward(t, c) + patch_form(B) + r · patched use (with the formed patch's bytes)
//   kRecompute     (1 + r) · forward(t, c)                    (nothing stored)
//
// With r = 0 forming never wins (it includes the forward a recompute does); it pays off through reuse.
// Store writes are asynchronous and not counted.
//
// Thread-safety: a CostModel is an immutable value; const methods may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace orbit::planner {

enum class Tier { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
const char* tier_name(Tier tier) noexcept;  // "device", "host", "disk", "remote"

// The sample kinds fit() understands (CostSample::what).
namespace sample_kind {
inline constexpr const char* kForward = "forward";         // tokens, context_tokens, seconds
inline constexpr const char* kRelocate = "relocate";       // bytes, seconds
inline constexpr const char* kPatchApply = "patch_apply";  // bytes, seconds
inline constexpr const char* kPatchForm = "patch_form";    // bytes, seconds
inline constexpr const char* kTransferDevice = "transfer_device";
inline constexpr const char* kTransferHost = "transfer_host";
inline constexpr const char* kTransferDisk = "transfer_disk";
inline constexpr const char* kTransferRemote = "transfer_remote";  // optional: the default stays without samples
}  // namespace sample_kind

// One timed operation. Unused fields stay 0 (tokens and context_tokens for bandwidth kinds, bytes for
// forward samples).
struct CostSample {
  std::string what;  // one of sample_kind
  int64_t tokens = 0;
  int64_t context_tokens = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

struct CostCoefficients {
  // Forward: seconds = per_token·t + per_token_context·t·c + fixed. Defaults: a ~1B model on an
  // H100-class GPU, erring slow.
  double forward_per_token = 1e-4;
  double forward_per_token_context = 1e-9;
  double forward_fixed = 5e-3;
  // Bandwidths in bytes per second, deliberately below what such a machine reaches (a default model
  // should not promise reuse the hardware cannot deliver): calibrate before trusting a decision.
  double relocate_bytes_per_s = 50e9;
  double patch_apply_bytes_per_s = 50e9;
  double patch_form_bytes_per_s = 5e9;
  std::array<double, 3> transfer_bytes_per_s = {500e9, 10e9, 1e9};  // indexed by Tier (device, host, disk)
  double transfer_remote_bytes_per_s = 100e6;                       // Tier::kRemote: a shared server over the network
};

// One chunk about to be placed in a window.
struct ReuseOption {
  int64_t tokens = 0;                  // the chunk's tokens
  int64_t context_tokens = 0;          // tokens before it in the window
  int64_t canonical_bytes = 0;         // bytes of its canonical KV
  Tier canonical_tier = Tier::kHost;   // where the canonical is read from
  std::optional<int64_t> patch_bytes;  // a stored patch for this context exists, of these bytes
  Tier patch_tier = Tier::kHost;       // where that patch is read from
  int64_t formed_patch_bytes = 0;      // bytes of a patch formed now (0: B, a full-rank upper bound)
  double expected_reuse = 0;           // further uses expected under the same context (≥ 0)
};

struct Decision {
  enum class Action { kLoadAndPatch = 0, kLoadAndForm = 1, kRecompute = 2 };
  Action action = Action::kRecompute;
  // Estimated seconds over 1 + expected_reuse uses, indexed by Action; +infinity when unavailable
  // (kLoadAndPatch without a stored patch).
  std::array<double, 3> seconds = {0, 0, 0};
  double chosen_seconds() const { return seconds[static_cast<int>(action)]; }
  std::string describe() const;  // "recompute 0.012 s (load+patch inf, load+form 0.020 s)"
};
const char* action_name(Decision::Action action) noexcept;  // "load+patch", "load+form", "recompute"

class CostModel {
 public:
  CostModel() = default;  // the documented defaults of CostCoefficients
  // Throws orbit::Error when a coefficient is negative or not finite, or a bandwidth is not positive.
  explicit CostModel(const CostCoefficients& coefficients);

  // Forward coefficients by non-negative least squares over the "forward" samples (exact over the 8
  // active sets of the 3 coefficients); a coefficient the samples cannot identify (e.g. every
  // context_tokens 0) comes out 0. Bandwidths: Σ bytes / Σ seconds per kind. Throws orbit::Error naming the
  // kind when one has no samples or zero total seconds, naming the sample's index on an unknown kind or a
  // negative field.
  static CostModel fit(const std::vector<CostSample>& samples);

  const CostCoefficients& coefficients() const { return c_; }
  double seconds_forward(int64_t tokens, int64_t context_tokens) const;  // 0 for 0 tokens
  double seconds_relocate(int64_t bytes) const;
  double seconds_patch_apply(int64_t bytes) const;
  double seconds_patch_form(int64_t bytes) const;
  double seconds_transfer(int64_t bytes, Tier tier) const;

  // The cheapest action for `option` (ties: the lower Action). Throws on negative fields.
  Decision choose(const ReuseOption& option) const;

  // The coefficients on one line, e.g. for `orbit replay --explain`.
  std::string describe() const;

 private:
  CostCoefficients c_;
};

}  // namespace orbit::planner
