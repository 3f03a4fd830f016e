#include "orbit/runtime/weights.h"

#include "orbit/common/error.h"

namespace orbit::runtime {

namespace {
// Splits "model.layers.<i>.<rest>" into (i, rest); returns false for other names.
bool parse_layer_name(const std::string& name, int64_t* layer, std::string* rest) {
  static const std::string kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  std::size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return false;
  int64_t value = 0;
  for (std::size_t i = kPrefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    value = value * 10 + (name[i] - '0');
  }
  *layer = value;
  *rest = name.substr(dot + 1);
  return true;
}
}  // namespace

std::vector<WeightSpec> weight_specs(const ModelConfig& c) {
  std::vector<WeightSpec> specs;
  const int64_t hidden = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate_size;
  const bool mla = c.attention() == AttentionKind::kMla;
  const MlaConfig& m = c.mla;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, hidden}, false});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {hidden}, true});
    if (mla) {
      if (m.q_lora_rank == 0) {
        specs.push_back({p + "self_attn.q_proj.weight", {q, hidden}, false});
      } else {
        specs.push_back({p + "self_attn.q_a_proj.weight", {m.q_lora_rank, hidden}, false});
        specs.push_back({p + "self_attn.q_a_layernorm.weight", {m.q_lora_rank}, true});
        specs.push_back({p + "self_attn.q_b_proj.weight", {q, m.q_lora_rank}, false});
      }
      specs.push_back(
          {p + "self_attn.kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, hidden}, false});
      specs.push_back({p + "self_attn.kv_a_layernorm.weight", {m.kv_lora_rank}, true});
      specs.push_back({p + "self_attn.kv_b_proj.weight",
                       {c.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
                       false});
    } else {
      specs.push_back({p + "self_attn.q_proj.weight", {q, hidden}, false});
      specs.push_back({p + "self_attn.k_proj.weight", {kv, hidden}, false});
      specs.push_back({p + "self_attn.v_proj.weight", {kv, hidden}, false});
      if (c.attention_bias) {
        specs.push_back({p + "self_attn.q_proj.bias", {q}, false});
        specs.push_back({p + "self_attn.k_proj.bias", {kv}, false});
        specs.push_back({p + "self_attn.v_proj.bias", {kv}, false});
      }
    }
    specs.push_back({p + "self_attn.o_proj.weight", {hidden, c.num_heads * c.v_head_dim()}, false});
    specs.push_back({p + "post_attention_layernorm.weight", {hidden}, true});
    specs.push_back({p + "mlp.gate_proj.weight", {inter, hidden}, false});
    specs.push_back({p + "mlp.up_proj.weight", {inter, hidden}, false});
    specs.push_back({p + "mlp.down_proj.weight", {hidden, inter}, false});
  }
  specs.push_back({"model.norm.weight", {hidden}, true});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, hidden}, false});
  return specs;
}

void prepare_weights(ModelWeights& weights, const ModelConfig& config) {
  weights.layers.resize(static_cast<std::size_t>(config.num_layers));
}

at::Tensor& weight_slot(ModelWeights& w, const ModelConfig& c, const std::string& name) {
  if (name == "model.embed_tokens.weight") return w.embed;
  if (name == "model.norm.weight") return w.final_norm;
  if (name == "lm_head.weight") return w.lm_head;
  int64_t layer = 0;
  std::string rest;
  if (parse_layer_name(name, &layer, &rest) && layer < c.num_layers && layer < static_cast<int64_t>(w.layers.size())) {
    LayerWeights& lw = w.layers[static_cast<std::size_t>(layer)];
    if (rest == "input_layernorm.weight") return lw.attn_norm;
    if (rest == "post_attention_layernorm.weight") return lw.ffn_norm;
    if (rest == "self_attn.q_proj.weight") return lw.wq;
    if (rest == "self_attn.k_proj.weight") return lw.wk;
    if (rest == "self_attn.v_proj.weight") return lw.wv;
    if (rest == "self_attn.o_proj.weight") return lw.wo;
    if (rest == "self_attn.q_proj.bias") return lw.bq;
    if (rest == "self_attn.k_proj.bias") return lw.bk;
    if (rest == "self_attn.v_proj.bias") return lw.bv;
    if (rest == "self_attn.q_a_proj.weight") return lw.wq_a;
    if (rest == "self_attn.q_a_layernorm.weight") return lw.q_a_norm;
    if (rest == "self_attn.q_b_proj.weight") return lw.wq_b;
    if (rest == "self_attn.kv_a_proj_with_mqa.weight") return lw.wkv_a;
    if (rest == "self_attn.kv_a_layernorm.weight") return lw.kv_a_norm;
    if (rest == "self_attn.kv_b_proj.weight") return lw.wkv_b;
    if (rest == "mlp.gate_proj.weight") return lw.w_gate;
    if (rest == "mlp.up_proj.weight") return lw.w_up;
    if (rest == "mlp.down_proj.weight") return lw.w_down;
  }
  ORBIT_FAIL("unknown weight name '" << name << "'");
}

const at::Tensor& weight_slot(const ModelWeights& w, const ModelConfig& c, const std::string& name) {
  return weight_slot(const_cast<ModelWeights&>(w), c, name);
}

}  // namespace orbit::runtime
