#include "orbit/runtime/config.h"

#include <cmath>

#include "orbit/common/error.h"

namespace orbit::runtime {

const char* arch_name(Arch arch) noexcept {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kDeepseekV2: return "deepseek_v2";
    case Arch::kQwen2VL: return "qwen2_vl";
    case Arch::kQwen25VL: return "qwen2_5_vl";
  }
  return "unknown";
}

AttentionKind attention_kind(Arch arch) noexcept {
  return arch == Arch::kDeepseekV2 ? AttentionKind::kMla : AttentionKind::kGqa;
}

const char* rope_layout_name(RopeLayout layout) noexcept {
  switch (layout) {
    case RopeLayout::kInterleaved: return "interleaved";
    case RopeLayout::kHalfSplit: return "half_split";
  }
  return "unknown";
}

const char* rope_scaling_name(RopeScaling scaling) noexcept {
  switch (scaling) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kDynamicNtk: return "dynamic";
    case RopeScaling::kLlama3: return "llama3";
    case RopeScaling::kYarn: return "yarn";
  }
  return "unknown";
}

int64_t ModelConfig::v_head_dim() const { return attention() == AttentionKind::kMla ? mla.v_head_dim : head_dim; }

ContentShape ModelConfig::content_k_shape() const {
  if (attention() == AttentionKind::kMla) return {1, mla.qk_rope_head_dim};
  return {num_kv_heads, head_dim};
}

ContentShape ModelConfig::content_v_shape() const {
  if (attention() == AttentionKind::kMla) return {1, mla.kv_lora_rank};
  return {num_kv_heads, head_dim};
}

std::vector<int64_t> ModelConfig::content_widths() const {
  return {content_k_shape().width(), content_v_shape().width()};
}

namespace {

void validate_mla(const ModelConfig& c, const std::string& origin) {
  const MlaConfig& m = c.mla;
  auto positive = [&](int64_t value, const char* field) {
    ORBIT_CHECK(value > 0, origin << ": field '" << field << "' must be positive for deepseek_v2, got " << value);
  };
  positive(m.kv_lora_rank, "kv_lora_rank");
  positive(m.qk_nope_head_dim, "qk_nope_head_dim");
  positive(m.qk_rope_head_dim, "qk_rope_head_dim");
  positive(m.v_head_dim, "v_head_dim");
  ORBIT_CHECK(m.q_lora_rank >= 0, origin << ": field 'q_lora_rank' must be positive or null, got " << m.q_lora_rank);
  ORBIT_CHECK(m.qk_rope_head_dim % 2 == 0,
              origin << ": field 'qk_rope_head_dim' must be even (rotated in pairs), got " << m.qk_rope_head_dim);
  ORBIT_CHECK(c.head_dim == m.qk_nope_head_dim + m.qk_rope_head_dim,
              origin << ": head_dim " << c.head_dim << " must equal qk_nope_head_dim + qk_rope_head_dim = "
                     << m.qk_nope_head_dim + m.qk_rope_head_dim << " for deepseek_v2");
  ORBIT_CHECK(c.num_kv_heads == c.num_heads, origin << ": field 'num_key_value_heads' (" << c.num_kv_heads
                                                    << ") must equal num_attention_heads (" << c.num_heads
                                                    << ") for deepseek_v2 (MLA expands k and v per head)");
  ORBIT_CHECK(!c.attention_bias, origin << ": unsupported field value attention_bias = true for deepseek_v2");
  ORBIT_CHECK(c.rope.head_dim == m.qk_rope_head_dim && c.rope.rotary_dim == m.qk_rope_head_dim,
              origin << ": rope head_dim/rotary_dim (" << c.rope.head_dim << "/" << c.rope.rotary_dim
                     << ") must equal qk_rope_head_dim (" << m.qk_rope_head_dim << ") for deepseek_v2");
  ORBIT_CHECK(!c.rope.is_mrope(), origin << ": field 'rope_scaling.mrope_section' is not supported for deepseek_v2");
}

void validate_gqa(const ModelConfig& c, const std::string& origin) {
  ORBIT_CHECK(c.mla.q_lora_rank == 0 && c.mla.kv_lora_rank == 0 && c.mla.qk_nope_head_dim == 0 &&
                  c.mla.qk_rope_head_dim == 0 && c.mla.v_head_dim == 0,
              origin << ": MLA fields (kv_lora_rank, q_lora_rank, qk_*_head_dim, v_head_dim) are only valid for "
                        "deepseek_v2, not "
                     << arch_name(c.arch));
  ORBIT_CHECK(c.rope.head_dim == c.head_dim,
              origin << ": rope head_dim " << c.rope.head_dim << " disagrees with head_dim " << c.head_dim);
  ORBIT_CHECK(c.rope.rotary_dim > 0 && c.rope.rotary_dim <= c.head_dim && c.rope.rotary_dim % 2 == 0,
              origin << ": rotary dimension " << c.rope.rotary_dim
                     << " (head_dim × partial_rotary_factor) must be even and in (0, head_dim=" << c.head_dim << "]");
  const bool vl = c.arch == Arch::kQwen2VL || c.arch == Arch::kQwen25VL;
  ORBIT_CHECK(vl == c.rope.is_mrope(),
              origin << (vl ? ": field 'rope_scaling.mrope_section' is required for "
                            : ": field 'rope_scaling.mrope_section' is only supported for qwen2_vl / qwen2_5_vl, not ")
                     << arch_name(c.arch));
  if (c.rope.is_mrope()) {
    const std::vector<int64_t>& s = c.rope.mrope_section;
    ORBIT_CHECK(s.size() == 3,
                origin << ": field 'rope_scaling.mrope_section' must have 3 entries (t, h, w), got " << s.size());
    int64_t sum = 0;
    for (int64_t v : s) {
      ORBIT_CHECK(v >= 0, origin << ": field 'rope_scaling.mrope_section' has a negative entry " << v);
      sum += v;
    }
    ORBIT_CHECK(sum == c.rope.rotary_dim / 2, origin << ": field 'rope_scaling.mrope_section' sums to " << sum
                                                     << ", but rotary_dim/2 = " << c.rope.rotary_dim / 2);
  }
}

// L: the context length the scaled variants are anchored to.
int64_t rope_anchor_length(const RopeConfig& c) {
  return c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings : c.max_position_embeddings;
}

}  // namespace

void check_rope_config(const RopeConfig& c) {
  const char* type = rope_scaling_name(c.scaling);
  ORBIT_CHECK(c.head_dim > 0, "rope config: field 'head_dim' must be positive, got " << c.head_dim);
  ORBIT_CHECK(c.rotary_dim > 0, "rope config: field 'rotary_dim' must be positive, got " << c.rotary_dim);
  ORBIT_CHECK(c.rotary_dim % 2 == 0, "rope config: field 'rotary_dim' must be even, got " << c.rotary_dim);
  ORBIT_CHECK(c.rotary_dim <= c.head_dim,
              "rope config: field 'rotary_dim' (" << c.rotary_dim << ") exceeds 'head_dim' (" << c.head_dim << ")");
  ORBIT_CHECK(std::isfinite(c.theta) && c.theta > 0,
              "rope config: field 'theta' (rope_theta) must be positive and finite, got " << c.theta);
  ORBIT_CHECK(c.max_position_embeddings >= 0 && c.original_max_position_embeddings >= 0,
              "rope config: fields 'max_position_embeddings' ("
                  << c.max_position_embeddings << ") and 'original_max_position_embeddings' ("
                  << c.original_max_position_embeddings << ") must be >= 0");
  if (c.is_mrope()) {
    ORBIT_CHECK(c.mrope_section.size() == 3,
                "rope config: field 'mrope_section' must have 3 entries (t, h, w), got " << c.mrope_section.size());
    int64_t sum = 0;
    for (int64_t s : c.mrope_section) {
      ORBIT_CHECK(s >= 0, "rope config: field 'mrope_section' has a negative entry " << s);
      sum += s;
    }
    ORBIT_CHECK(sum == c.rotary_dim / 2,
                "rope config: field 'mrope_section' sums to " << sum << ", but rotary_dim/2 = " << c.rotary_dim / 2);
  }
  if (c.scaling == RopeScaling::kNone) return;

  ORBIT_CHECK(std::isfinite(c.factor) && c.factor >= 1.0,
              "rope config: field 'factor' must be >= 1 for rope type '" << type << "', got " << c.factor);
  switch (c.scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kLinear: break;
    case RopeScaling::kDynamicNtk:
      ORBIT_CHECK(rope_anchor_length(c) > 0,
                  "rope config: rope type 'dynamic' needs field 'max_position_embeddings' "
                  "(or 'original_max_position_embeddings') > 0");
      ORBIT_CHECK(c.rotary_dim > 2,
                  "rope config: rope type 'dynamic' needs field 'rotary_dim' > 2 (exponent "
                  "d/(d-2)), got "
                      << c.rotary_dim);
      break;
    case RopeScaling::kLlama3:
      ORBIT_CHECK(rope_anchor_length(c) > 0,
                  "rope config: rope type 'llama3' needs field "
                  "'original_max_position_embeddings' > 0");
      ORBIT_CHECK(std::isfinite(c.low_freq_factor) && c.low_freq_factor > 0,
                  "rope config: field 'low_freq_factor' must be positive, got " << c.low_freq_factor);
      ORBIT_CHECK(std::isfinite(c.high_freq_factor) && c.high_freq_factor > c.low_freq_factor,
                  "rope config: field 'high_freq_factor' (" << c.high_freq_factor << ") must exceed 'low_freq_factor' ("
                                                            << c.low_freq_factor << ")");
      break;
    case RopeScaling::kYarn:
      ORBIT_CHECK(rope_anchor_length(c) > 0,
                  "rope config: rope type 'yarn' needs field "
                  "'original_max_position_embeddings' > 0");
      ORBIT_CHECK(c.theta != 1.0, "rope config: rope type 'yarn' needs field 'theta' != 1 (divides by ln theta)");
      ORBIT_CHECK(std::isfinite(c.beta_fast) && c.beta_fast > 0,
                  "rope config: field 'beta_fast' must be positive, got " << c.beta_fast);
      ORBIT_CHECK(std::isfinite(c.beta_slow) && c.beta_slow > 0,
                  "rope config: field 'beta_slow' must be positive, got " << c.beta_slow);
      ORBIT_CHECK(c.beta_fast >= c.beta_slow, "rope config: field 'beta_fast' ("
                                                  << c.beta_fast << ") must be >= 'beta_slow' (" << c.beta_slow << ")");
      ORBIT_CHECK(std::isfinite(c.mscale) && c.mscale >= 0,
                  "rope config: field 'mscale' must be >= 0 (0 = unset), got " << c.mscale);
      ORBIT_CHECK(std::isfinite(c.mscale_all_dim) && c.mscale_all_dim >= 0,
                  "rope config: field 'mscale_all_dim' must be >= 0 (0 = unset), got " << c.mscale_all_dim);
      ORBIT_CHECK(std::isfinite(c.attention_factor) && c.attention_factor >= 0,
                  "rope config: field 'attention_factor' must be >= 0 (0 = derived), got " << c.attention_factor);
      break;
  }
}

void ModelConfig::validate(const std::string& origin) const {
  auto positive = [&](int64_t value, const char* field) {
    ORBIT_CHECK(value > 0, origin << ": field '" << field << "' must be positive, got " << value);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  // Sizes multiply one another (heads by head_dim, vocab by hidden): each bounded far past any real model, so no
  // product can wrap into a shape the weights seem to match.
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  for (const auto& [value, field] : {std::pair<int64_t, const char*>{vocab_size, "vocab_size"},
                                     {hidden_size, "hidden_size"},
                                     {intermediate_size, "intermediate_size"},
                                     {num_heads, "num_attention_heads"},
                                     {num_kv_heads, "num_key_value_heads"},
                                     {head_dim, "head_dim"},
                                     {mla.q_lora_rank, "q_lora_rank"},
                                     {mla.kv_lora_rank, "kv_lora_rank"},
                                     {mla.qk_nope_head_dim, "qk_nope_head_dim"},
                                     {mla.qk_rope_head_dim, "qk_rope_head_dim"},
                                     {mla.v_head_dim, "v_head_dim"},
                                     {rope.rotary_dim, "rotary_dim"}}) {
    ORBIT_CHECK(value <= kMaxSize,
                origin << ": field '" << field << "' = " << value << " is past the limit of " << kMaxSize);
  }
  // Every layer is a list of weight specs and a slot in every KV structure: a count past any real
  // model (the largest have a few hundred) is a corrupt config, refused before anything is sized by it.
  constexpr int64_t kMaxLayers = 4096;
  ORBIT_CHECK(num_layers <= kMaxLayers, origin << ": field 'num_hidden_layers' = " << num_layers
                                               << " is past the limit of " << kMaxLayers << " layers");
  ORBIT_CHECK(num_heads % num_kv_heads == 0, origin << ": field 'num_key_value_heads' (" << num_kv_heads
                                                    << ") must divide num_attention_heads (" << num_heads << ")");
  ORBIT_CHECK(rms_norm_eps > 0, origin << ": field 'rms_norm_eps' must be positive, got " << rms_norm_eps);
  ORBIT_CHECK(rope.theta > 0, origin << ": field 'rope_theta' must be positive, got " << rope.theta);
  if (attention() == AttentionKind::kMla) {
    validate_mla(*this, origin);
  } else {
    validate_gqa(*this, origin);
  }
  try {
    check_rope_config(rope);
  } catch (const Error& e) {
    ORBIT_FAIL(origin << ": " << e.what());
  }
}

}  // namespace orbit::runtime
