// The fidelity calibration kept in the chunk store (EngineOptions::stored_calibration): the deficits
// measure_fidelity_samples measured (calibrate_fidelity.h), stored as one small value in the local tiers
// (the disk directory), so that an engine opening the same model on the same store directory fits its
// fidelity model from them without measuring. Never written to or read from the remote tier: an engine's
// open would otherwise wait for a remote that does not answer, and warn of it before the caller's own check
// (orbit::ping_remote) could. The deficits are stored, not the fitted model: a later fit or blend
// (planner::FidelityModel::fit, kCalibrationWeight) applies to them as it would to a fresh measurement.
//
//   key     SHA-256 over the tag "orbit/fidelity-calibration", kFidelityMeasureVersion,
//           kFidelityCalibrationSeeds and the model fingerprint (which covers the dtype)
//   value   kind "other"; tensors "kind" int64 [n] (planner::Loss), "feature" float64 [n], "kl" float64 [n];
//           attrs "content" = "fidelity-calibration", "fingerprint" (the model's), "reference_sensitivity"
//           (%.17g, finite and > 0), "version" (kFidelityMeasureVersion)
//
// Thread-safety: pure functions, except save and load, which use the store (thread-safe) and stderr.
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

// The calibration `value` holds, or refused naming what does not fit the layout above: another model's
// fingerprint, another version, a missing or misshapen tensor, a loss kind outside planner::Loss, a negative
// or non-finite feature, KL or reference sensitivity.
Result<FidelityCalibration> decode_fidelity_calibration(const store::StoredValue& value,
                                                        const std::string& fingerprint);

// Writes `calibration` under the model's key in the local tiers, replacing what is there. Returns whether the
// store took it.
bool save_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint,
                               const FidelityCalibration& calibration);

// The calibration stored for the model in the local tiers; nullopt when none is (a miss), or when the value there does
// not decode: then a warning naming the key and the reason is printed on stderr and the caller keeps its defaults.
std::optional<FidelityCalibration> load_fidelity_calibration(store::ChunkStore& store, const std::string& fingerprint);

}  // namespace orbit::detail
