// The model fingerprint: SHA-256 (hex) over the canonical config summary (architecture, sizes, RoPE),
// the compute dtype and every weight in weight_specs order (name, shape, float32 bytes). Identical
// models give identical fingerprints in every process; any changed weight or config changes it.
#pragma once

#include <string>

#include "orbit/runtime/config.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime {

std::string compute_fingerprint(const ModelConfig& config, const ModelWeights& weights);

}  // namespace orbit::runtime
