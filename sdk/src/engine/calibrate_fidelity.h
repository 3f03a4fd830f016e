// The fidelity calibration's measurements (calibrate_fidelity.cpp), fitted by EngineCore::calibrate.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "orbit/planner/fidelity_model.h"

namespace orbit::detail {

class EngineCore;

// Measured deficits of each approximate serving action. Each sample's feature is already scaled by the
// sensitivity of the instances it serves against `reference_sensitivity` (their geometric mean), as
// FidelityModel::fit expects.
struct FidelityCalibration {
  std::vector<planner::FidelitySample> samples;
  double reference_sensitivity = 0;
};

// The seeds calibrate() and calibrate_fidelity() measure over.
inline constexpr int kFidelityCalibrationSeeds = 3;
// The measurement's version, part of the stored calibration's key (stored_calibration.h): bump it with any
// change to what measure_fidelity_samples measures, so that engines stop fitting deficits measured the old way.
inline constexpr int kFidelityMeasureVersion = 1;

// The largest dynamic-NTK anchor (tokens) the calibration measures the shortfall at: its window is 2L tokens,
// sampled from the model one token at a time. A model anchored further keeps the default coefficient.
inline constexpr int64_t kShortfallMaxAnchor = 512;

// Chunks sampled from the model over `seeds` seeds (and, on a dynamic-NTK model, a shortfall window per seed:
// calibrate_fidelity.cpp); the model's forward only. `progress` (when set) is
// called after each seed's deficits are measured, with the seeds done and `seeds`; what it throws stops
// the measurement and propagates.
FidelityCalibration measure_fidelity_samples(const EngineCore& core, int seeds,
                                             const std::function<void(int64_t, int64_t)>& progress = {});

// The fidelity model calibrate_fidelity() makes of `deficits`: their fit, taken halfway from the defaults
// in log space (planner::kCalibrationWeight says why), except the shortfall's, taken whole.
planner::FidelityModel calibrated_fidelity_model(const FidelityCalibration& deficits);

}  // namespace orbit::detail
