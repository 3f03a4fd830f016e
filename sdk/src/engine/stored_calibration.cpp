// The fidelity calibration kept in the chunk store (stored_calibration.h).
#include "engine/stored_calibration.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/sha256.h"
#include "orbit/planner/fidelity_model.h"

namespace orbit::detail {

namespace {

constexpr char kCalibrationContent[] = "fidelity-calibration";

Status calibration_refused(const std::string& why) {
  return Status::refused("stored fidelity calibration refused: " + why);
}

// The 1-D tensor `name` of `n` elements and `dtype`, or null.
const at::Tensor* calibration_column(const store::StoredValue& value, const char* name, at::ScalarType dtype,
                                     int64_t n) {
  const at::Tensor* t = value.find(name);
  if (t == nullptr || t->dim() != 1 || t->size(0) != n || t->scalar_type() != dtype) return nullptr;
  return t;
}

// A finite double written by fidelity_calibration_value, or nullopt.
std::optional<double> calibration_number(const store::StoredValue& value, const char* name) {
  const auto it = value.attrs.find(name);
  if (it == value.attrs.end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(it->second.c_str(), &end);
  if (end == nullptr || *end != '\0' || !std::isfinite(x)) return std::nullopt;
  return x;
}

}  // namespace

std::string fidelity_calibration_key(const std::string& fingerprint) {
  Sha256 h;
  const std::string tag = "orbit/fidelity-calibration";
  h.update_u64(tag.size()).update(tag);
  h.update_u64(static_cast<uint64_t>(kFidelityMeasureVersion));
  h.update_u64(static_cast<uint64_t>(kFidelityCalibrationSeeds));
  h.update_u64(fingerprint.size()).update(fingerprint);
  return h.hex_digest();
}

store::ValuePtr fidelity_calibration_value(const FidelityCalibration& calibration, const std::string& fingerprint) {
  const int64_t n = static_cast<int64_t>(calibration.samples.size());
  at::Tensor kind = at::empty({n}, at::kLong);
  at::Tensor feature = at::empty({n}, at::kDouble);
  at::Tensor kl = at::empty({n}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const planner::FidelitySample& s = calibration.samples[static_cast<std::size_t>(i)];
    kind.data_ptr<int64_t>()[i] = static_cast<int64_t>(s.kind);
    feature.data_ptr<double>()[i] = s.feature;
    kl.data_ptr<double>()[i] = s.kl;
  }
  char reference[64];
  std::snprintf(reference, sizeof reference, "%.17g", calibration.reference_sensitivity);
  return store::make_value(EntryKind::kOther, {{"kind", kind}, {"feature", feature}, {"kl", kl}},
                           {{"content", kCalibrationContent},
                            {"fingerprint", fingerprint},
                            {"reference_sensitivity", reference},
                            {"version", std::to_string(kFidelityMeasureVersion)}},
                           /*copy=*/false);
}

bool is_fidelity_calibration(const store::StoredValue& value) {
  const auto it = value.attrs.find("content");
  return it != value.attrs.end() && it->second == kCalibrationContent;
}

Result<FidelityCalibration> decode_fidelity_calibration(const store::StoredValue& value,
                                                        const std::string& fingerprint) {
  if (value.kind != EntryKind::kOther || !is_fidelity_calibration(value))
    return calibration_refused("it is not a calibration (kind other, content 'fidelity-calibration')");
  const auto fp = value.attrs.find("fingerprint");
  if (fp == value.attrs.end() || fp->second != fingerprint) return calibration_refused("another model's calibration");
  const auto version = value.attrs.find("version");
  if (version == value.attrs.end() || version->second != std::to_string(kFidelityMeasureVersion))
    return calibration_refused("version is not " + std::to_string(kFidelityMeasureVersion));
  const std::optional<double> reference = calibration_number(value, "reference_sensitivity");
  if (!reference || *reference <= 0)
    return calibration_refused("attribute 'reference_sensitivity' is missing or not a positive number");
  const at::Tensor* kinds = value.find("kind");
  if (kinds == nullptr || kinds->dim() != 1) return calibration_refused("tensor 'kind' is missing or not [n]");
  const int64_t n = kinds->size(0);
  const at::Tensor* kind = calibration_column(value, "kind", at::kLong, n);
  const at::Tensor* feature = calibration_column(value, "feature", at::kDouble, n);
  const at::Tensor* kl = calibration_column(value, "kl", at::kDouble, n);
  if (kind == nullptr || feature == nullptr || kl == nullptr || value.tensors.size() != 3)
    return calibration_refused("it does not hold exactly 'kind' int64, 'feature' and 'kl' float64, each [n]");
  FidelityCalibration out;
  out.reference_sensitivity = *reference;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = kind->data_ptr<int64_t>()[i];
    const double f = feature->data_ptr<double>()[i], loss = kl->data_ptr<double>()[i];
    if (k < 0 || k >= planner::kLossKinds)
      return calibration_refused("sample " + std::to_string(i) + " has loss kind " + std::to_string(k));
    if (!std::isfinite(f) || !std::isfinite(loss) || f < 0 || loss < 0)
      return calibration_refused("sample " + std::to_string(i) + " has a negative or non-finite feature or KL");
    // A measurement's features are fractions (or a shortfall's small square) and its KLs a few nats at most:
    // far past either, the value is not one (a fit over it would overflow to NaN coefficients).
    if (f > kMaxCalibrationFeature || loss > kMaxCalibrationKl)
      return calibration_refused("sample " + std::to_string(i) + " has feature " + std::to_string(f) + " or KL " +
                                 std::to_string(loss) + " past what a measurement gives (" +
                                 std::to_string(kMaxCalibrationFeature) + ", " + std::to_string(kMaxCalibrationKl) +
                                 ")");
    out.samples.push_back({static_cast<planner::Loss>(k), f, loss});
  }
  return out;
}

bool save_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint,
                               const FidelityCalibration& calibration, bool remote) {
  store::PutOptions po;
  po.replace = true;           // a new measurement (another device's rounding) replaces the old one
  po.recompute_cost = 1000.0;  // seconds of forwards to measure again: kept before a chunk's KV
  po.remote = remote;
  return store.put(fidelity_calibration_key(fingerprint), fidelity_calibration_value(calibration, fingerprint), po)
      .is_ok();
}

namespace {

// `value` decoded, or nullopt after a warning on stderr naming `key` and why it does not decode.
std::optional<FidelityCalibration> decoded_or_warned(const store::StoredValue& value, const std::string& fingerprint,
                                                     const std::string& key) {
  Result<FidelityCalibration> decoded = decode_fidelity_calibration(value, fingerprint);
  if (!decoded.is_ok()) {
    std::fprintf(stderr, "orbit: warning: ignoring the store's entry %s: %s; the fidelity model keeps its defaults\n",
                 key.c_str(), decoded.status().reason().c_str());
    return std::nullopt;
  }
  return std::move(decoded).value();
}

}  // namespace

std::optional<FidelityCalibration> load_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint,
                                                             bool* found) {
  const std::string key = fidelity_calibration_key(fingerprint);
  store::GetOptions go;
  go.remote = false;   // the local tiers only: Engine::open asks no remote (stored_calibration.h)
  go.internal = true;  // the engine's read, not its user's
  Result<store::ValuePtr> hit = store.get(key, go);
  if (found != nullptr) *found = hit.is_ok();
  if (!hit.is_ok()) return std::nullopt;
  return decoded_or_warned(*hit.value(), fingerprint, key);
}

RemoteCalibrationRead load_remote_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint) {
  RemoteCalibrationRead read;
  if (!store.has_remote()) return read;
  const std::string key = fidelity_calibration_key(fingerprint);
  // The local tiers first, on their own: an entry there (another process wrote it to the store directory
  // since open) is the store's, not the remote's; the get below would serve it without saying where it was.
  store::GetOptions local;
  local.remote = false;
  local.internal = true;
  if (Result<store::ValuePtr> there = store.get(key, local); there.is_ok()) {
    read.calibration = decoded_or_warned(*there.value(), fingerprint, key);
    return read;
  }
  // The store serves a value the remote tier refuses (corrupt, another model's or version's calibration) as a
  // miss, removing it from the server; remote_refusal says why, naming the key.
  std::string refusal;
  store::GetOptions go;
  go.remote_refusal = &refusal;
  go.remote_unavailable = &read.unavailable;
  go.internal = true;  // however often a down remote makes the engine ask again, its user's counters stay its own
  Result<store::ValuePtr> hit = store.get(key, go);  // the remote (a hit is copied into the local tiers)
  if (!hit.is_ok()) {
    if (!refusal.empty()) {
      std::fprintf(stderr,
                   "orbit: warning: ignoring the remote tier's fidelity calibration: %s (removed from the server); "
                   "the fidelity model keeps its defaults\n",
                   refusal.c_str());
    }
    return read;
  }
  read.calibration = decoded_or_warned(*hit.value(), fingerprint, key);
  read.from_remote = read.calibration.has_value();
  return read;
}

}  // namespace orbit::detail
