// Model and RoPE configuration: what the loaders produce and the forward pass, the generator,
// relocation and the fingerprint consume. Plain data; parsing lives in hf_config.h / llama2c.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orbit::runtime {

// Decoder-only families the runtime executes.
enum class Arch {
  kLlama,  // Llama / Llama-2/3, llama2.c checkpoints, Mistral-style GQA without biases
  kQwen2,  // Qwen2 / Qwen2.5: Llama with q/k/v projection biases
};

const char* arch_name(Arch arch) noexcept;  // "llama", "qwen2"

// How the rotary dimensions of one head are paired.
enum class RopeLayout {
  kInterleaved,  // pairs (2i, 2i+1): llama2.c and Meta's reference code
  kHalfSplit,    // pairs (i, i + rotary_dim/2): Hugging Face `rotate_half`
};

enum class RopeScaling {
  kNone,        // HF rope_type "default"
  kLinear,      // positions divided by `factor`
  kDynamicNtk,  // HF "dynamic": theta grows once the window passes max_position_embeddings
  kLlama3,      // HF "llama3": per-frequency smoothing between low_freq_factor and high_freq_factor
  kYarn,        // HF "yarn": ramp between interpolation and extrapolation plus an attention factor
};

const char* rope_layout_name(RopeLayout layout) noexcept;    // "interleaved", "half_split"
const char* rope_scaling_name(RopeScaling scaling) noexcept;  // "none", "linear", "dynamic", "llama3", "yarn"

// Everything that determines the rotary angle of a (position, frequency) pair. The same struct drives
// the forward pass and relocation (rope.h), so the two can never disagree.
struct RopeConfig {
  RopeLayout layout = RopeLayout::kHalfSplit;
  int64_t head_dim = 0;     // width of one key head
  int64_t rotary_dim = 0;   // leading dims of a head that rotate (== head_dim unless partial); even
  double theta = 10000.0;   // base
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                              // linear, dynamic, llama3, yarn
  int64_t max_position_embeddings = 0;              // the model's position limit (exclusive)
  int64_t original_max_position_embeddings = 0;     // llama3, yarn, dynamic (0: = max_position_embeddings)
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  double beta_fast = 32.0;                          // yarn
  double beta_slow = 1.0;                           // yarn
  double mscale = 0.0;                              // yarn (DeepSeek form; 0 = unset)
  double mscale_all_dim = 0.0;                      // yarn (DeepSeek form; 0 = unset)
  double attention_factor = 0.0;                    // yarn; 0 = derived from factor as HF does
  bool truncate = true;                             // yarn: floor/ceil the correction range (HF default)
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;             // usually hidden_size / num_heads
  double rms_norm_eps = 1e-5;
  bool attention_bias = false;      // q/k/v projection biases (Qwen2)
  bool tie_word_embeddings = false; // lm_head shares the token embedding
  int64_t max_position_embeddings = 0;
  RopeConfig rope;
  std::string source_format;        // "llama2c" or "hf"
  std::string weight_dtype;         // dtype on disk: "float32", "bfloat16", "float16"

  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t q_dim() const { return num_heads * head_dim; }
  // Throws orbit::Error naming `origin` (a file) and the offending field when sizes are inconsistent.
  void validate(const std::string& origin) const;
};

}  // namespace orbit::runtime
