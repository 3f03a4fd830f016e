// The fidelity calibration's measurements (calibrate_fidelity.cpp), fitted by EngineCore::calibrate.
#pragma once

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

// Chunks sampled from the model over `seeds` seeds; the model's forward only.
FidelityCalibration measure_fidelity_samples(const EngineCore& core, int seeds);

}  // namespace orbit::detail
