// Hugging Face config.json <-> ModelConfig, and the canonical summary used by `orbit info` and the
// fingerprint.
#include <nlohmann/json.hpp>

#include <cmath>

#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"

namespace orbit::runtime {

namespace {

using nlohmann::json;

// Reads an optional field with a type check; `origin` and `field` name it in errors.
template <typename T>
T get_or(const json& object, const char* field, T fallback, const std::string& origin) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    ORBIT_FAIL(origin << ": field '" << field << "' has the wrong type (" << it->type_name() << ")");
  }
}

template <typename T>
T get_required(const json& object, const char* field, const std::string& origin) {
  auto it = object.find(field);
  ORBIT_CHECK(it != object.end() && !it->is_null(), origin << ": missing required field '" << field << "'");
  return get_or<T>(object, field, T{}, origin);
}

Arch parse_arch(const json& j, const std::string& origin) {
  std::string model_type = get_or<std::string>(j, "model_type", "", origin);
  std::string architecture;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    architecture = (*it)[0].get<std::string>();
  }
  if (model_type == "llama" || architecture == "LlamaForCausalLM") return Arch::kLlama;
  if (model_type == "qwen2" || architecture == "Qwen2ForCausalLM") return Arch::kQwen2;
  ORBIT_FAIL(origin << ": unsupported architecture (model_type '" << model_type << "', architectures[0] '"
                    << architecture << "'); supported: llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM)");
}

void parse_rope_scaling(const json& j, ModelConfig& c, const std::string& origin) {
  RopeConfig& r = c.rope;
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  ORBIT_CHECK(it->is_object(), origin << ": field 'rope_scaling' must be an object or null");
  const json& s = *it;
  const std::string where = origin + " (rope_scaling)";
  std::string type = get_or<std::string>(s, "rope_type", "", where);
  if (type.empty()) type = get_or<std::string>(s, "type", "", where);
  ORBIT_CHECK(!type.empty(), origin << ": field 'rope_scaling.rope_type' is missing");
  if (type == "default") return;
  if (type == "linear") {
    r.scaling = RopeScaling::kLinear;
  } else if (type == "dynamic") {
    r.scaling = RopeScaling::kDynamicNtk;
  } else if (type == "llama3") {
    r.scaling = RopeScaling::kLlama3;
    r.low_freq_factor = get_required<double>(s, "low_freq_factor", where);
    r.high_freq_factor = get_required<double>(s, "high_freq_factor", where);
    r.original_max_position_embeddings = get_required<int64_t>(s, "original_max_position_embeddings", where);
  } else if (type == "yarn") {
    r.scaling = RopeScaling::kYarn;
    r.beta_fast = get_or<double>(s, "beta_fast", 32.0, where);
    r.beta_slow = get_or<double>(s, "beta_slow", 1.0, where);
    r.mscale = get_or<double>(s, "mscale", 0.0, where);
    r.mscale_all_dim = get_or<double>(s, "mscale_all_dim", 0.0, where);
    r.attention_factor = get_or<double>(s, "attention_factor", 0.0, where);
    r.truncate = get_or<bool>(s, "truncate", true, where);
    r.original_max_position_embeddings = get_or<int64_t>(s, "original_max_position_embeddings", 0, where);
  } else {
    ORBIT_FAIL(origin << ": unsupported field value rope_scaling.rope_type = '" << type
                      << "'; supported: default, linear, dynamic, llama3, yarn");
  }
  r.factor = get_required<double>(s, "factor", where);
  ORBIT_CHECK(r.factor >= 1.0, origin << ": field 'rope_scaling.factor' must be >= 1, got " << r.factor);
  if (r.original_max_position_embeddings == 0) {
    r.original_max_position_embeddings =
        get_or<int64_t>(j, "original_max_position_embeddings", c.max_position_embeddings, origin);
  }
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& origin) {
  ORBIT_CHECK(j.is_object(), origin << ": config must be a JSON object");
  ModelConfig c;
  c.arch = parse_arch(j, origin);
  c.source_format = "hf";
  c.vocab_size = get_required<int64_t>(j, "vocab_size", origin);
  c.hidden_size = get_required<int64_t>(j, "hidden_size", origin);
  c.intermediate_size = get_required<int64_t>(j, "intermediate_size", origin);
  c.num_layers = get_required<int64_t>(j, "num_hidden_layers", origin);
  c.num_heads = get_required<int64_t>(j, "num_attention_heads", origin);
  c.num_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.num_heads, origin);
  ORBIT_CHECK(c.num_heads > 0, origin << ": field 'num_attention_heads' must be positive, got " << c.num_heads);
  c.head_dim = get_or<int64_t>(j, "head_dim", c.hidden_size / c.num_heads, origin);
  c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, origin);
  c.max_position_embeddings = get_required<int64_t>(j, "max_position_embeddings", origin);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);
  c.weight_dtype = get_or<std::string>(j, "torch_dtype", "float32", origin);
  c.attention_bias = c.arch == Arch::kQwen2 ? true : get_or<bool>(j, "attention_bias", false, origin);

  const std::string act = get_or<std::string>(j, "hidden_act", "silu", origin);
  ORBIT_CHECK(act == "silu", origin << ": unsupported field value hidden_act = '" << act << "' (only silu)");
  ORBIT_CHECK(!get_or<bool>(j, "mlp_bias", false, origin), origin << ": unsupported field value mlp_bias = true");
  if (c.arch == Arch::kQwen2) {
    ORBIT_CHECK(!get_or<bool>(j, "use_sliding_window", false, origin),
                origin << ": unsupported field value use_sliding_window = true (sliding-window attention)");
  }

  RopeConfig& r = c.rope;
  r.layout = RopeLayout::kHalfSplit;  // every HF checkpoint uses rotate_half
  r.head_dim = c.head_dim;
  r.theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  const double partial = get_or<double>(j, "partial_rotary_factor", 1.0, origin);
  ORBIT_CHECK(partial > 0.0 && partial <= 1.0,
              origin << ": field 'partial_rotary_factor' must be in (0, 1], got " << partial);
  r.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  r.max_position_embeddings = c.max_position_embeddings;
  parse_rope_scaling(j, c, origin);
  c.validate(origin);
  return c;
}

json hf_config_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {c.arch == Arch::kQwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = arch_name(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.weight_dtype.empty() ? "float32" : c.weight_dtype;
  if (c.arch == Arch::kLlama) j["attention_bias"] = c.attention_bias;
  j["rope_theta"] = c.rope.theta;
  if (c.rope.rotary_dim != c.head_dim) {
    j["partial_rotary_factor"] = static_cast<double>(c.rope.rotary_dim) / static_cast<double>(c.head_dim);
  }
  const RopeConfig& r = c.rope;
  if (r.scaling == RopeScaling::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    json s;
    s["rope_type"] = rope_scaling_name(r.scaling);
    s["factor"] = r.factor;
    if (r.scaling == RopeScaling::kLlama3) {
      s["low_freq_factor"] = r.low_freq_factor;
      s["high_freq_factor"] = r.high_freq_factor;
      s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    } else if (r.scaling == RopeScaling::kYarn) {
      s["beta_fast"] = r.beta_fast;
      s["beta_slow"] = r.beta_slow;
      if (r.mscale != 0.0) s["mscale"] = r.mscale;
      if (r.mscale_all_dim != 0.0) s["mscale_all_dim"] = r.mscale_all_dim;
      if (r.attention_factor != 0.0) s["attention_factor"] = r.attention_factor;
      s["truncate"] = r.truncate;
      s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    } else if (r.scaling == RopeScaling::kDynamicNtk && r.original_max_position_embeddings != 0 &&
               r.original_max_position_embeddings != c.max_position_embeddings) {
      j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }
  return j;
}

json config_summary_json(const ModelConfig& c) {
  const RopeConfig& r = c.rope;
  json rope = {{"layout", rope_layout_name(r.layout)},
               {"head_dim", r.head_dim},
               {"rotary_dim", r.rotary_dim},
               {"theta", r.theta},
               {"scaling", rope_scaling_name(r.scaling)},
               {"max_position_embeddings", r.max_position_embeddings}};
  if (r.scaling != RopeScaling::kNone) {
    rope["factor"] = r.factor;
    rope["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  if (r.scaling == RopeScaling::kLlama3) {
    rope["low_freq_factor"] = r.low_freq_factor;
    rope["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.scaling == RopeScaling::kYarn) {
    rope["beta_fast"] = r.beta_fast;
    rope["beta_slow"] = r.beta_slow;
    rope["mscale"] = r.mscale;
    rope["mscale_all_dim"] = r.mscale_all_dim;
    rope["attention_factor"] = r.attention_factor;
    rope["truncate"] = r.truncate;
  }
  // nlohmann's json object keeps keys sorted, so dump() is canonical.
  return json{{"arch", arch_name(c.arch)},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_layers", c.num_layers},
              {"num_heads", c.num_heads},
              {"num_kv_heads", c.num_kv_heads},
              {"head_dim", c.head_dim},
              {"rms_norm_eps", c.rms_norm_eps},
              {"attention_bias", c.attention_bias},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rope", rope}};
}

}  // namespace orbit::runtime
