// Model and RoPE configuration: what the loaders produce and the forward pass, the generator,
// relocation and the fingerprint consume. Plain data; parsing lives in hf_config.h / llama2c.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orbit::runtime {

// Decoder-only families the runtime executes.
enum class Arch {
  kLlama,       // Llama / Llama-2/3, llama2.c checkpoints, Mistral-style GQA without biases
  kQwen2,       // Qwen2 / Qwen2.5: Llama with q/k/v projection biases
  kDeepseekV2,  // DeepSeek-V2 multi-head latent attention (MLA), dense SwiGLU MLP in every layer
  kQwen2VL,     // Qwen2-VL's language model: Qwen2 with M-RoPE (3-D positions)
  kQwen25VL,    // Qwen2.5-VL's language model: the same computation as kQwen2VL
};

// "llama", "qwen2", "deepseek_v2", "qwen2_vl", "qwen2_5_vl" (the HF model_type).
const char* arch_name(Arch arch) noexcept;

// How attention reads the content channel (docs/ARCHITECTURE.md §7).
enum class AttentionKind {
  kGqa,  // MHA / GQA: content = pre-RoPE keys and values, [T, H_kv, head_dim] each
  kMla,  // multi-head latent attention: content = pre-rotation k_pe [T, 1, d_rope] and latent c_KV [T, 1, r_kv]
};
AttentionKind attention_kind(Arch arch) noexcept;

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

const char* rope_layout_name(RopeLayout layout) noexcept;     // "interleaved", "half_split"
const char* rope_scaling_name(RopeScaling scaling) noexcept;  // "none", "linear", "dynamic", "llama3", "yarn"

// Everything that determines the rotary angle of a (position, frequency) pair. The same struct drives
// the forward pass and relocation (rope.h), so the two can never disagree.
struct RopeConfig {
  RopeLayout layout = RopeLayout::kHalfSplit;
  int64_t head_dim = 0;    // width of one key head
  int64_t rotary_dim = 0;  // leading dims of a head that rotate (== head_dim unless partial); even
  double theta = 10000.0;  // base
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                           // linear, dynamic, llama3, yarn
  int64_t max_position_embeddings = 0;           // the model's position limit (exclusive)
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, dynamic (0: = max_position_embeddings)
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  double mscale = 0.0;                           // yarn (DeepSeek form; 0 = unset)
  double mscale_all_dim = 0.0;                   // yarn (DeepSeek form; 0 = unset)
  double attention_factor = 0.0;                 // yarn; 0 = derived from factor as HF does
  bool truncate = true;                          // yarn: floor/ceil the correction range (HF default)
  // M-RoPE (Qwen2-VL / Qwen2.5-VL). Empty: ordinary 1-D positions. Otherwise exactly three section
  // sizes (t, h, w) summing to rotary_dim/2: frequency i in [0, s_t) takes the t coordinate of the
  // position, [s_t, s_t + s_h) the h coordinate, the rest the w coordinate. Positions are then
  // int64 [3, T] (rows t, h, w); a 1-D position p means t = h = w = p.
  std::vector<int64_t> mrope_section;

  bool is_mrope() const { return !mrope_section.empty(); }
};

// Throws orbit::Error ("rope config: field ...") when a field is out of what the angles need (rope.cpp checks
// it too): a model's config is checked with it when it is read (ModelConfig::validate), not at its first forward.
void check_rope_config(const RopeConfig& c);

// Multi-head latent attention sizes (DeepSeek-V2; HF field names in quotes). Used when the arch is
// kDeepseekV2; all zero otherwise.
//
//   q      = W_q·x (q_lora_rank = 0)  or  W_qb·RMSNorm(W_qa·x)           per head [q_nope (d_nope) ‖ q_pe (d_rope)]
//   [c ‖ k_pe] = W_kva·x;  c_KV = RMSNorm(c)                               c_KV: r_kv, k_pe: d_rope (shared by heads)
//   [k_nope ‖ v] per head = W_kvb·c_KV                                     k_nope: d_nope, v: d_v
//   k per head = [k_nope ‖ RoPE(k_pe)],  q per head = [q_nope ‖ RoPE(q_pe)],  out = W_o·[attn(q, k, v)]
//
// The latent norms use ε = 1e-6 (HF's default for q_a_layernorm / kv_a_layernorm), not rms_norm_eps.
struct MlaConfig {
  int64_t q_lora_rank = 0;       // "q_lora_rank"; 0 = null (a full q_proj)
  int64_t kv_lora_rank = 0;      // "kv_lora_rank" (r_kv)
  int64_t qk_nope_head_dim = 0;  // "qk_nope_head_dim" (d_nope)
  int64_t qk_rope_head_dim = 0;  // "qk_rope_head_dim" (d_rope)
  int64_t v_head_dim = 0;        // "v_head_dim" (d_v)
};

// Shape of one stored content tensor per token: [heads, dim] (width = heads · dim values).
struct ContentShape {
  int64_t heads = 0;
  int64_t dim = 0;
  int64_t width() const { return heads * dim; }
  bool operator==(const ContentShape& o) const { return heads == o.heads && dim == o.dim; }
  bool operator!=(const ContentShape& o) const { return !(*this == o); }
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // MLA: == num_heads (every head has its own expanded k and v)
  int64_t head_dim = 0;      // width of one query/key head: usually hidden_size / num_heads;
                             // MLA: qk_nope_head_dim + qk_rope_head_dim
  double rms_norm_eps = 1e-5;
  bool attention_bias = false;       // q/k/v projection biases (Qwen2)
  bool tie_word_embeddings = false;  // lm_head shares the token embedding
  int64_t max_position_embeddings = 0;
  RopeConfig rope;            // MLA: head_dim = rotary_dim = qk_rope_head_dim, interleaved pairs
  MlaConfig mla;              // kDeepseekV2 only
  std::string source_format;  // "llama2c" or "hf"
  std::string weight_dtype;   // dtype on disk: "float32", "bfloat16", "float16"

  AttentionKind attention() const { return attention_kind(arch); }
  // Width of K (and of V) per token for GQA/MHA: num_kv_heads · head_dim. Not a content width for MLA;
  // use content_k_shape()/content_v_shape() in code that holds content of any family.
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t q_dim() const { return num_heads * head_dim; }
  // Width of one value head: head_dim (GQA/MHA), v_head_dim (MLA). The attention output is num_heads × this.
  int64_t v_head_dim() const;

  // The content channel per token and layer (LayerKV in model.h): k = what gets rotated at placement,
  // v = what does not.
  //   GQA/MHA: k [num_kv_heads, head_dim] (pre-RoPE keys),   v [num_kv_heads, head_dim] (values)
  //   MLA:     k [1, qk_rope_head_dim] (pre-rotation k_pe),   v [1, kv_lora_rank] (latent c_KV)
  ContentShape content_k_shape() const;
  ContentShape content_v_shape() const;
  // {k width, v width}: the widths of a KVPool holding this model's content (KVPoolOptions::widths).
  std::vector<int64_t> content_widths() const;
  // Rows of a position grid: 3 (t, h, w) for M-RoPE, else 1.
  int64_t position_rows() const { return rope.is_mrope() ? 3 : 1; }

  // Throws orbit::Error naming `origin` (a file) and the offending field when sizes are inconsistent.
  void validate(const std::string& origin) const;
};

}  // namespace orbit::runtime
