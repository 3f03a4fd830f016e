// The weight table: every tensor of a model by its Hugging Face name, in one canonical order, with the
// shape the config implies. Loaders, the generator, the fingerprint and shape validation all walk this
// one table, so they can never disagree about what a model contains.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/common/shape.h"  // shape_string, used with these tensors in messages
#include "orbit/runtime/config.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime {

struct WeightSpec {
  std::string name;            // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // implied by the config
  bool is_norm = false;        // RMSNorm gain (initialised near 1 by the generator)
};

// Canonical order: embed, per layer (input norm, attention, o, post-attention norm, mlp), final norm,
// lm_head (untied only). Attention is q/k/v[/biases] for GQA/MHA, and for MLA q_proj (q_lora_rank = 0)
// or q_a_proj, q_a_layernorm, q_b_proj, then kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj.
std::vector<WeightSpec> weight_specs(const ModelConfig& config);

// The slot in `weights` that holds the tensor called `name` (a name from weight_specs). Throws on an
// unknown name.
at::Tensor& weight_slot(ModelWeights& weights, const ModelConfig& config, const std::string& name);
const at::Tensor& weight_slot(const ModelWeights& weights, const ModelConfig& config, const std::string& name);

// Sizes `weights.layers` for the config (tensors left undefined).
void prepare_weights(ModelWeights& weights, const ModelConfig& config);

}  // namespace orbit::runtime
