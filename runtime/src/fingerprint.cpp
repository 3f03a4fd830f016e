#include "orbit/runtime/fingerprint.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "orbit/common/sha256.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

std::string compute_fingerprint(const ModelConfig& config, const ModelWeights& weights) {
  Sha256 hash;
  hash.update("orbit-model-fingerprint-v1\n");
  hash.update(config_summary_json(config).dump());
  // The compute dtype is the weights' (float32 models keep the fingerprint they always had). Device
  // tensors are hashed one at a time through a host copy: same bytes, same fingerprint, any device.
  const at::ScalarType dtype = weights.embed.defined() ? weights.embed.scalar_type() : at::kFloat;
  hash.update("\ncompute_dtype=" + dtype_name(dtype) + "\n");
  for (const WeightSpec& spec : weight_specs(config)) {
    const at::Tensor t = weight_slot(weights, config, spec.name).to(at::kCPU).contiguous();
    hash.update_u64(spec.name.size()).update(spec.name);
    hash.update_u64(static_cast<uint64_t>(t.dim()));
    for (int64_t s : t.sizes()) hash.update_u64(static_cast<uint64_t>(s));
    hash.update(t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size());
  }
  return hash.hex_digest();
}

}  // namespace orbit::runtime
