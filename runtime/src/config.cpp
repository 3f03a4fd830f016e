#include "orbit/runtime/config.h"

#include "orbit/common/error.h"

namespace orbit::runtime {

const char* arch_name(Arch arch) noexcept {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
  }
  return "unknown";
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
  ORBIT_CHECK(num_heads % num_kv_heads == 0, origin << ": field 'num_key_value_heads' (" << num_kv_heads
                                                    << ") must divide num_attention_heads (" << num_heads << ")");
  ORBIT_CHECK(rms_norm_eps > 0, origin << ": field 'rms_norm_eps' must be positive, got " << rms_norm_eps);
  ORBIT_CHECK(rope.head_dim == head_dim,
              origin << ": rope head_dim " << rope.head_dim << " disagrees with head_dim " << head_dim);
  ORBIT_CHECK(rope.rotary_dim > 0 && rope.rotary_dim <= head_dim && rope.rotary_dim % 2 == 0,
              origin << ": rotary dimension " << rope.rotary_dim << " (head_dim × partial_rotary_factor) must be even"
                     << " and in (0, head_dim=" << head_dim << "]");
  ORBIT_CHECK(rope.theta > 0, origin << ": field 'rope_theta' must be positive, got " << rope.theta);
}

}  // namespace orbit::runtime
