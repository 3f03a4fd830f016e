// The decoder-only forward pass (DESIGN.md §6) for GQA/MHA families (Llama, Qwen2/2.5).
//
// Per layer:  h = x + Wo·attn(RoPE(Wq·n(x)), RoPE(Wk·n(x)), Wv·n(x));   x' = h + W2·(silu(W1·n(h)) ⊙ W3·n(h))
// with n = RMSNorm. The forward returns, besides logits, each layer's **content channel**: keys before
// RoPE and values, [T, num_kv_heads, head_dim]. Past KV is given in the same content form with its
// positions and is rotated on the fly, so stored content is never rewritten when it moves.
//
// Order, not position, decides causality: token i of the input sees every past token and input tokens
// 0..i. Positions only set the rotations (they may be any non-negative values below the model's limit).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/config.h"

namespace orbit::runtime {

// One layer's content channel for T tokens: k pre-RoPE and v, each [T, num_kv_heads, head_dim].
struct LayerKV {
  at::Tensor k;
  at::Tensor v;
};

// KV of tokens that precede the input, in content form. positions: int64 [T_past].
struct PastKV {
  std::vector<LayerKV> layers;  // one per model layer (all empty tensors for "no past")
  at::Tensor positions;
  int64_t length() const;
};

// Exactly one of `tokens` / `embeddings` is set.
struct ForwardInput {
  std::vector<int64_t> tokens;  // token ids in [0, vocab)
  at::Tensor embeddings;        // or input embeddings [T, hidden_size], any floating dtype
  at::Tensor positions;         // int64 [T]; undefined = past_length + 0..T-1
};

enum class LogitsMode { kNone, kLast, kAll };

struct ForwardOptions {
  LogitsMode logits = LogitsMode::kLast;
  bool return_content = true;  // fill ForwardResult::content
  // Window length for dynamic-NTK RoPE (see rope.h); 0 = past + input length.
  int64_t rope_window_len = 0;
  // Run only layers [0, max_layers) (0 = all). Logits need every layer, so they must be kNone then.
  int64_t max_layers = 0;

  // Partial recompute (token-selective repair such as CacheBlend or EPIC). When `recompute` is defined
  // (int64 [R], strictly ascending indices into the input), only those input tokens are computed; every
  // other input token takes its KV at every layer from `cached` (one LayerKV per layer, content form
  // [T, H_kv, d], e.g. a chunk's canonical). Recomputed tokens attend to the past, to the cached KV of
  // earlier input tokens and to each other, causally by input order. Logits (kLast/kAll) are for the
  // recomputed tokens only; ForwardResult::content holds all T tokens, cached rows with recomputed
  // rows written over them.
  at::Tensor recompute;
  std::vector<LayerKV> cached;
};

struct ForwardResult {
  at::Tensor logits;             // float32 [1, vocab] (kLast), [T or R, vocab] (kAll), undefined (kNone)
  std::vector<LayerKV> content;  // per layer run, when return_content
};

struct LayerWeights {
  at::Tensor attn_norm;                 // [hidden]
  at::Tensor wq, wk, wv, wo;            // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden], [hidden, q_dim]
  at::Tensor bq, bk, bv;                // [q_dim], [kv_dim], [kv_dim] when attention_bias, else undefined
  at::Tensor ffn_norm;                  // [hidden]
  at::Tensor w_gate, w_up, w_down;      // [inter, hidden], [inter, hidden], [hidden, inter]
};

struct ModelWeights {
  at::Tensor embed;       // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; aliases embed when tied
};

// An immutable loaded model. forward() is const and safe to call from several threads at once.
class Model {
 public:
  // Takes ownership of validated weights; computes the fingerprint. Throws orbit::Error naming
  // `origin` and the tensor when a shape disagrees with the config.
  Model(ModelConfig config, ModelWeights weights, std::string origin);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Where the model came from (a file or directory path).
  const std::string& origin() const { return origin_; }
  // SHA-256 hex over the canonical architecture/RoPE config, the compute dtype and every weight's
  // name, shape and bytes. Same weights and config ⇒ same fingerprint, in every process.
  const std::string& fingerprint() const { return fingerprint_; }
  int64_t parameter_count() const;

  // Token embeddings [T, hidden]. Throws on an id outside [0, vocab).
  at::Tensor embed(const std::vector<int64_t>& tokens) const;

  // Runs the layers over `input` after `past` (nullptr = no past). Throws orbit::Error for token ids
  // out of range, embeddings of the wrong width, positions negative or past the model's limit, or past
  // KV whose shapes disagree with the config.
  ForwardResult forward(const ForwardInput& input, const PastKV* past = nullptr,
                        const ForwardOptions& options = {}) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::string origin_;
  std::string fingerprint_;
};

// Checks `positions` (int64 [T]) against the model limit; `what` names the argument in errors.
void check_positions(const ModelConfig& config, const at::Tensor& positions, const char* what);

}  // namespace orbit::runtime
