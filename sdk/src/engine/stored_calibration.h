// The fidelity calibration kept in the chunk store (EngineOptions::stored_calibration): the deficits
// measure_fidelity_samples measured (calibrate_fidelity.h), stored as one small value, so that an engine
// opening the same model on the same store directory, or on the same remote tier, fits its fidelity model
// from them without measuring. Written to the local tiers (the disk directory) and, with a remote tier,
// queued for it too. Read in two steps (EngineCore::load_stored_calibration, read_remote_calibration): at
// Engine::open from the local tiers only, and from the remote tier only when they miss, at the first plan or
// fidelity question (again at a later one while the remote does not answer), never at open: an open would
// otherwise wait for a remote that does not answer, and warn of it before the caller's own start check
// (orbit::ping_remote) could. The local entry wins when
// both exist; a remote hit is copied into the local tiers (the store promotes it). The remote tier checks
// the value before returning it (remote_values.h: decode_fidelity_calibration). The deficits are stored, not
// the fitted model: a later fit or blend (planner::FidelityModel::fit, kCalibrationWeight) applies to them
// as it would to a fresh measurement.
//
//   key     SHA-256 over the tag "orbit/fidelity-calibration", kFidelityMeasureVersion,
//           kFidelityCalibrationSeeds and the model fingerprint (which covers the dtype)
//   value   kind "other"; tensors "kind" int64 [n] (planner::Loss), "feature" float64 [n], "kl" float64 [n];
//           attrs "content" = "fidelity-calibration", "fingerprint" (the model's), "reference_sensitivity"
//           (%.17g, finite and > 0), "version" (kFidelityMeasureVersion)
//
// Every read is GetOptions::internal: the engine's own, counted in StoreStats::internal_reads (and the remote's)
// rather than in the user's hits and misses, however often a down remote makes the engine read again.
//
// Thread-safety: pure functions, except save and the loads, which use the store (thread-safe) and stderr.
#pragma once

#include <optional>
#include <string>

#include "engine/calibrate_fidelity.h"
#include "orbit/common/status.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/value.h"

namespace orbit::detail {

// The store key of the model's calibration (see above).
std::string fidelity_calibration_key(const std::string& fingerprint);

// The value stored under that key.
store::ValuePtr fidelity_calibration_value(const FidelityCalibration& calibration, const std::string& fingerprint);

// True when `value` says it is a stored calibration (its "content" attribute), whatever else it holds.
bool is_fidelity_calibration(const store::StoredValue& value);

// The most a stored sample's feature and KL may be: past them the value is no measurement (a fit over it would
// overflow, or predict any loss free).
inline constexpr double kMaxCalibrationFeature = 1e6;
inline constexpr double kMaxCalibrationKl = 1e4;

// The calibration `value` holds, or refused naming what does not fit the layout above: another model's
// fingerprint, another version, a missing or misshapen tensor, a loss kind outside planner::Loss, a negative,
// non-finite or out-of-range (kMaxCalibrationFeature, kMaxCalibrationKl) feature or KL, a reference sensitivity
// that is not positive.
Result<FidelityCalibration> decode_fidelity_calibration(const store::StoredValue& value,
                                                        const std::string& fingerprint);

// Writes `calibration` under the model's key in the local tiers, replacing what is there, and, when
// `remote`, queues it for the remote tier (a store without one ignores that). Returns whether the local
// tiers took it.
bool save_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint,
                               const FidelityCalibration& calibration, bool remote);

// The calibration stored for the model in the local tiers; nullopt when none is (a miss), or when the value there does
// not decode: then a warning naming the key and the reason is printed on stderr and the caller keeps its defaults.
// *found (when non-null) says whether the local tiers hold an entry under the key, decoded or not: one that does
// not decode is the store's answer too (it would be found and warned about again before the remote is asked).
std::optional<FidelityCalibration> load_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint,
                                                             bool* found = nullptr);

// What load_remote_fidelity_calibration found.
struct RemoteCalibrationRead {
  std::optional<FidelityCalibration> calibration;  // nullopt: none found (or refused)
  bool from_remote = false;  // the calibration came from the remote tier (else a local tier held it)
  // The remote tier did not answer (down: within its retry_after_ms, or the call failed): a later read may
  // find one. false on a hit and on a clean miss (the remote answered: no entry, or one it refused).
  bool unavailable = false;
};

// The calibration stored for the model, asking the remote tier when the local tiers miss (a remote hit is
// then copied into them). None without a remote tier, on a miss, while the remote is down (unavailable
// set), or when the server held an entry under the key that the remote tier refused (corrupt, another key
// or model inside, not a calibration of this model and version: removed from the server, counted in its
// stats' corrupt): then a warning giving the remote tier's reason (which names the key) is printed on stderr
// and the caller keeps its defaults.
RemoteCalibrationRead load_remote_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint);

}  // namespace orbit::detail
