// Hugging Face config.json <-> ModelConfig, and the canonical summary used by `orbit info` and the
// fingerprint.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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

// Integers: a JSON integer in int64 range, or a float with an integral value (4096.0); never a
// truncated 64.5, a wrapped 1e30 or an unsigned past int64.
template <>
int64_t get_or<int64_t>(const json& object, const char* field, int64_t fallback, const std::string& origin) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    ORBIT_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                origin << ": field '" << field << "' = " << u << " is too large");
    return static_cast<int64_t>(u);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    const double x = it->get<double>();
    ORBIT_CHECK(std::isfinite(x) && std::floor(x) == x,
                origin << ": field '" << field << "' must be an integer, got " << it->dump());
    ORBIT_CHECK(std::fabs(x) < 9.0e15, origin << ": field '" << field << "' = " << it->dump() << " is too large");
    return static_cast<int64_t>(x);
  }
  ORBIT_FAIL(origin << ": field '" << field << "' has the wrong type (" << it->type_name() << "; expected an integer)");
}

template <typename T>
T get_required(const json& object, const char* field, const std::string& origin) {
  auto it = object.find(field);
  ORBIT_CHECK(it != object.end() && !it->is_null(), origin << ": missing required field '" << field << "'");
  return get_or<T>(object, field, T{}, origin);
}

// The architecture a config's model_type names (transformers builds the model from it), if orbit loads it.
std::optional<Arch> arch_of_type(const std::string& model_type) {
  if (model_type == "llama") return Arch::kLlama;
  if (model_type == "qwen2") return Arch::kQwen2;
  if (model_type == "deepseek_v2") return Arch::kDeepseekV2;
  if (model_type == "qwen2_vl" || model_type == "qwen2_vl_text") return Arch::kQwen2VL;
  if (model_type == "qwen2_5_vl" || model_type == "qwen2_5_vl_text") return Arch::kQwen25VL;
  return std::nullopt;
}

// The architecture an architectures[0] class names, if orbit loads it.
std::optional<Arch> arch_of_class(const std::string& architecture) {
  if (architecture == "LlamaForCausalLM") return Arch::kLlama;
  if (architecture == "Qwen2ForCausalLM") return Arch::kQwen2;
  if (architecture == "DeepseekV2ForCausalLM") return Arch::kDeepseekV2;
  if (architecture == "Qwen2VLForConditionalGeneration") return Arch::kQwen2VL;
  if (architecture == "Qwen2_5_VLForConditionalGeneration") return Arch::kQwen25VL;
  return std::nullopt;
}

// The architecture from the top-level config (a nested text_config's model_type is a fallback only). Either
// field may name it; where both are given they must agree (a model_type orbit does not load beside a class it
// does is another model's config, whose weights would be read as the class's).
Arch parse_arch(const json& top, const json& merged, const std::string& origin) {
  std::string model_type = get_or<std::string>(top, "model_type", "", origin);
  if (model_type.empty()) model_type = get_or<std::string>(merged, "model_type", "", origin);
  std::string architecture;
  if (auto it = top.find("architectures"); it != top.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    architecture = (*it)[0].get<std::string>();
  }
  const std::optional<Arch> by_type = arch_of_type(model_type);
  const std::optional<Arch> by_class = arch_of_class(architecture);
  ORBIT_CHECK(!(by_class && !model_type.empty() && by_type != by_class),
              origin << ": model_type '" << model_type << "' and architectures[0] '" << architecture
                     << "' name different models; fix the config so that both name the same one");
  if (by_type) return *by_type;
  if (by_class) return *by_class;
  ORBIT_FAIL(origin << ": unsupported architecture (model_type '" << model_type << "', architectures[0] '"
                    << architecture << "'); supported: llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM), "
                    << "deepseek_v2 (DeepseekV2ForCausalLM), qwen2_vl (Qwen2VLForConditionalGeneration), "
                    << "qwen2_5_vl (Qwen2_5_VLForConditionalGeneration)");
}

const char* architecture_class(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "LlamaForCausalLM";
    case Arch::kQwen2: return "Qwen2ForCausalLM";
    case Arch::kDeepseekV2: return "DeepseekV2ForCausalLM";
    case Arch::kQwen2VL: return "Qwen2VLForConditionalGeneration";
    case Arch::kQwen25VL: return "Qwen2_5_VLForConditionalGeneration";
  }
  return "unknown";
}

bool is_qwen_vl(Arch arch) { return arch == Arch::kQwen2VL || arch == Arch::kQwen25VL; }

// DeepSeek-V2: the MLA sizes, and a refusal of mixture-of-experts layers (dense MLPs only).
void parse_mla(const json& j, ModelConfig& c, const std::string& origin) {
  MlaConfig& m = c.mla;
  m.q_lora_rank = get_or<int64_t>(j, "q_lora_rank", 0, origin);  // null: a full q_proj
  ORBIT_CHECK(m.q_lora_rank >= 0, origin << ": field 'q_lora_rank' must be positive or null, got " << m.q_lora_rank);
  m.kv_lora_rank = get_required<int64_t>(j, "kv_lora_rank", origin);
  m.qk_nope_head_dim = get_required<int64_t>(j, "qk_nope_head_dim", origin);
  m.qk_rope_head_dim = get_required<int64_t>(j, "qk_rope_head_dim", origin);
  m.v_head_dim = get_required<int64_t>(j, "v_head_dim", origin);
  // HF's head_dim field means qk_rope_head_dim for DeepSeek; ours is the full query/key head.
  c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;

  const int64_t experts = get_or<int64_t>(j, "n_routed_experts", 0, origin);
  if (experts > 0) {
    const int64_t first_dense = get_or<int64_t>(j, "first_k_dense_replace", 0, origin);
    const int64_t freq = get_or<int64_t>(j, "moe_layer_freq", 1, origin);
    ORBIT_CHECK(freq > 0, origin << ": field 'moe_layer_freq' must be positive, got " << freq);
    for (int64_t l = std::max<int64_t>(first_dense, 0); l < c.num_layers; ++l) {
      ORBIT_CHECK(l % freq != 0, origin << ": unsupported: field 'n_routed_experts' = " << experts
                                        << " with first_k_dense_replace = " << first_dense
                                        << " < num_hidden_layers = " << c.num_layers << " makes layer " << l
                                        << " a mixture-of-experts layer; orbit runs deepseek_v2 with dense MLPs only "
                                           "(n_routed_experts null, or first_k_dense_replace >= num_hidden_layers)");
    }
  }
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
  // M-RoPE (Qwen2-VL): {"type": "mrope", "mrope_section": [...]}, which newer transformers rewrite as
  // {"rope_type": "default", "type": "default", "mrope_section": [...]}.
  if (auto sec = s.find("mrope_section"); sec != s.end() && !sec->is_null()) {
    ORBIT_CHECK(sec->is_array(), origin << ": field 'rope_scaling.mrope_section' must be an array of integers");
    for (const json& v : *sec) {
      ORBIT_CHECK(v.is_number_integer(), origin << ": field 'rope_scaling.mrope_section' must be an array of integers");
      r.mrope_section.push_back(v.get<int64_t>());
    }
    ORBIT_CHECK(!get_or<bool>(s, "mrope_interleaved", false, where),
                origin << ": unsupported field value rope_scaling.mrope_interleaved = true (interleaved M-RoPE)");
    if (type.empty() || type == "mrope") type = "default";
  }
  ORBIT_CHECK(type != "mrope", origin << ": rope_scaling type 'mrope' needs field 'rope_scaling.mrope_section'");
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
                      << "'; supported: default, linear, dynamic, llama3, yarn, mrope (with mrope_section)");
  }
  r.factor = get_required<double>(s, "factor", where);
  ORBIT_CHECK(r.factor >= 1.0, origin << ": field 'rope_scaling.factor' must be >= 1, got " << r.factor);
  if (r.original_max_position_embeddings == 0) {
    r.original_max_position_embeddings =
        get_or<int64_t>(j, "original_max_position_embeddings", c.max_position_embeddings, origin);
  }
}

}  // namespace

ModelConfig parse_hf_config(const json& top, const std::string& origin) {
  ORBIT_CHECK(top.is_object(), origin << ": config must be a JSON object");
  // Multimodal exports (Qwen2-VL in newer transformers) nest the language model's fields under
  // text_config; they win over top-level duplicates. Vision fields are not ours and are ignored.
  json j = top;
  if (auto it = top.find("text_config"); it != top.end() && !it->is_null()) {
    ORBIT_CHECK(it->is_object(), origin << ": field 'text_config' must be an object or null");
    for (auto field = it->begin(); field != it->end(); ++field) j[field.key()] = field.value();
  }
  ModelConfig c;
  c.arch = parse_arch(top, j, origin);
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
  ORBIT_CHECK(c.weight_dtype == "float32" || c.weight_dtype == "bfloat16" || c.weight_dtype == "float16" ||
                  c.weight_dtype == "float64",
              origin << ": unsupported field value torch_dtype = '" << c.weight_dtype
                     << "'; supported: float32, bfloat16, float16, float64 (quantized weights are not)");
  c.attention_bias =
      c.arch == Arch::kQwen2 || is_qwen_vl(c.arch) ? true : get_or<bool>(j, "attention_bias", false, origin);

  const std::string act = get_or<std::string>(j, "hidden_act", "silu", origin);
  ORBIT_CHECK(act == "silu", origin << ": unsupported field value hidden_act = '" << act << "' (only silu)");
  ORBIT_CHECK(!get_or<bool>(j, "mlp_bias", false, origin), origin << ": unsupported field value mlp_bias = true");
  if (c.arch == Arch::kQwen2 || is_qwen_vl(c.arch)) {
    ORBIT_CHECK(!get_or<bool>(j, "use_sliding_window", false, origin),
                origin << ": unsupported field value use_sliding_window = true (sliding-window attention)");
  }

  // transformers v5 writes RoPE as one object, "rope_parameters": {"rope_type", "rope_theta", the
  // scaling fields, "mrope_section", "partial_rotary_factor"}; it is read as rope_scaling plus those.
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    ORBIT_CHECK(rp->is_object(), origin << ": field 'rope_parameters' must be an object or null");
    for (const char* key : {"rope_theta", "partial_rotary_factor"}) {
      if (rp->contains(key) && !j.contains(key)) j[key] = (*rp)[key];
    }
    if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) j["rope_scaling"] = *rp;
  }
  RopeConfig& r = c.rope;
  r.theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  r.max_position_embeddings = c.max_position_embeddings;
  if (c.arch == Arch::kDeepseekV2) {
    parse_mla(j, c, origin);
    // DeepSeek-V2 rotates interleaved pairs of k_pe/q_pe (it permutes them to half-split before rotate_half).
    r.layout = RopeLayout::kInterleaved;
    r.head_dim = r.rotary_dim = c.mla.qk_rope_head_dim;
  } else {
    r.layout = RopeLayout::kHalfSplit;  // every other HF checkpoint uses rotate_half
    r.head_dim = c.head_dim;
    const double partial = get_or<double>(j, "partial_rotary_factor", 1.0, origin);
    ORBIT_CHECK(partial > 0.0 && partial <= 1.0,
                origin << ": field 'partial_rotary_factor' must be in (0, 1], got " << partial);
    r.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  }
  parse_rope_scaling(j, c, origin);
  c.validate(origin);
  return c;
}

json hf_config_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {architecture_class(c.arch)};
  j["model_type"] = arch_name(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  if (c.attention() == AttentionKind::kMla) {
    // No head_dim: HF's DeepSeek config uses that name for qk_rope_head_dim.
    const MlaConfig& m = c.mla;
    j["q_lora_rank"] = m.q_lora_rank > 0 ? json(m.q_lora_rank) : json(nullptr);
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_nope_head_dim"] = m.qk_nope_head_dim;
    j["qk_rope_head_dim"] = m.qk_rope_head_dim;
    j["v_head_dim"] = m.v_head_dim;
    j["n_routed_experts"] = nullptr;  // dense MLP in every layer
  } else {
    j["head_dim"] = c.head_dim;
  }
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.weight_dtype.empty() ? "float32" : c.weight_dtype;
  if (c.arch == Arch::kLlama || c.arch == Arch::kDeepseekV2) j["attention_bias"] = c.attention_bias;
  j["rope_theta"] = c.rope.theta;
  if (c.attention() == AttentionKind::kGqa && c.rope.rotary_dim != c.head_dim) {
    j["partial_rotary_factor"] = static_cast<double>(c.rope.rotary_dim) / static_cast<double>(c.head_dim);
  }
  const RopeConfig& r = c.rope;
  if (r.scaling == RopeScaling::kNone && r.is_mrope()) {
    j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", r.mrope_section}};
  } else if (r.scaling == RopeScaling::kNone) {
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
    if (r.is_mrope()) s["mrope_section"] = r.mrope_section;
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
  // Keys for the newer families only, so existing fingerprints are unchanged.
  if (r.is_mrope()) rope["mrope_section"] = r.mrope_section;
  // nlohmann's json object keeps keys sorted, so dump() is canonical.
  json summary{{"arch", arch_name(c.arch)},
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
  if (c.attention() == AttentionKind::kMla) {
    const MlaConfig& m = c.mla;
    summary["mla"] = {{"q_lora_rank", m.q_lora_rank},
                      {"kv_lora_rank", m.kv_lora_rank},
                      {"qk_nope_head_dim", m.qk_nope_head_dim},
                      {"qk_rope_head_dim", m.qk_rope_head_dim},
                      {"v_head_dim", m.v_head_dim}};
  }
  return summary;
}

}  // namespace orbit::runtime
