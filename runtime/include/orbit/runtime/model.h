// The decoder-only forward pass (docs/ARCHITECTURE.md §9) for every attention family the runtime executes:
// GQA/MHA (Llama, Qwen2/2.5), GQA with M-RoPE (Qwen2-VL / Qwen2.5-VL language model) and MLA
// (DeepSeek-V2).
//
// Per layer:  h = x + Wo·attn(n(x));   x' = h + W2·(silu(W1·n(h)) ⊙ W3·n(h))      n = RMSNorm
//   GQA/MHA:  attn over q = RoPE(Wq·n(x)), k = RoPE(Wk·n(x)), v = Wv·n(x)
//   MLA:      see MlaConfig (config.h): per head q = [q_nope ‖ RoPE(q_pe)], k = [k_nope ‖ RoPE(k_pe)],
//             with k_nope and v expanded from the latent c_KV by kv_b_proj
//
// Besides logits, the forward returns each layer's **content channel** (docs/ARCHITECTURE.md §7), split by one
// rule for every family: LayerKV::k = what gets rotated at placement (before rotation), LayerKV::v =
// what does not. Past KV is given in the same content form with its positions and is rotated (and, for
// MLA, expanded) on the fly, so stored content is never rewritten when it moves.
//
// Order, not position, decides causality: token i of the input sees every past token and input tokens
// 0..i. Positions only set the rotations (they may be any non-negative values below the model's limit).
// Positions are int64 [T], or for M-RoPE models int64 [3, T] (rows t, h, w; a 1-D position p means
// t = h = w = p).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/config.h"
#include "orbit/runtime/device.h"

namespace orbit::runtime {

// One layer's content channel for T tokens. k = what gets rotated at placement, before rotation;
// v = what does not. Shapes are ModelConfig::content_k_shape() / content_v_shape() per token:
//   GQA/MHA:  k = pre-RoPE keys [T, num_kv_heads, head_dim],  v = values [T, num_kv_heads, head_dim]
//   MLA:      k = pre-rotation k_pe [T, 1, qk_rope_head_dim], v = latent c_KV after kv_a_layernorm
//             [T, 1, kv_lora_rank] (k_nope and the values are kv_b_proj·c_KV, recomputed when attended)
struct LayerKV {
  at::Tensor k;
  at::Tensor v;
};

struct PagedPast;   // paged_past.h
class DecodeCache;  // decode_cache.h
namespace detail {
class RopeTableCache;  // rope_table.h (runtime/src)
}

// KV of tokens that precede the input, in content form. positions: int64 [T_past], or [3, T_past]
// for M-RoPE models (a 1-D tensor there means t = h = w). With `paged` set, the first
// paged->length() past tokens are read in place from a KVPool (paged_past.h) and `layers` holds only
// the tokens after them (or is empty when there are none). With `cache` set (DecodeCache::past), the past
// is that cache's slot, read in place, and a forward appends its input's rows to the slot (layers, positions
// and paged are unused; partial recompute is refused).
struct PastKV {
  std::vector<LayerKV> layers;  // one per model layer (all empty tensors for "no past")
  at::Tensor positions;
  std::shared_ptr<const PagedPast> paged;
  DecodeCache* cache = nullptr;
  int64_t cache_slot = -1;
  int64_t length() const;  // T_past (the cache slot's rows, else the last dimension of positions; 0 when undefined)
};

// Exactly one of `tokens` / `embeddings` is set.
struct ForwardInput {
  std::vector<int64_t> tokens;  // token ids in [0, vocab)
  at::Tensor embeddings;        // or input embeddings [T, hidden_size], any floating dtype
  // int64 [T]; for M-RoPE models also a position grid [3, T] (rows t, h, w), e.g. an image's
  // (t, row, column) grid from the caller's vision pipeline. Undefined = past_length + 0..T-1 (t = h = w).
  at::Tensor positions;
};

enum class LogitsMode { kNone, kLast, kAll };

// How an MLA model (AttentionKind::kMla) attends over its latent content (attention_mla.cpp):
//   kNaive      k_nope and v expanded from c_KV through W_kvb for every key token, then attention per head
//   kAbsorbed   W_UK folded into the queries and W_UV applied to the output: per head
//               scores = (q_nope·W_UK)·c_KVᵀ + q_pe·RoPE(k_pe)ᵀ,  out = W_UV·(softmax·c_KV); nothing per key
//               but the latent itself (cost per query, not per key)
//   kAuto       kAbsorbed on the CPU where it takes fewer multiply-adds (mla_absorbed_cheaper in
//               attention_mla.cpp: few queries against many keys, a decode step or a short query after a
//               long past), else kNaive. CUDA takes kNaive. A decode cache's past takes its layout's form
//               (decode_cache.h): kAbsorbed over latent rows (the CPU), kNaive over expanded ones (CUDA,
//               dynamic-NTK RoPE).
// kNaive and kAbsorbed compute the same attention up to float32 rounding. Asking for a form where it does not
// run is an error naming options.mla_form: kAbsorbed on CUDA or over a decode cache's expanded rows, kNaive over
// its latent rows, either on a model that is not MLA.
enum class MlaForm { kAuto, kNaive, kAbsorbed };

struct ForwardOptions {
  LogitsMode logits = LogitsMode::kLast;
  bool return_content = true;  // fill ForwardResult::content
  // Window length for dynamic-NTK RoPE (see rope.h); 0 = past + input length.
  int64_t rope_window_len = 0;
  // Run only layers [0, max_layers) (0 = all). Logits need every layer, so they must be kNone then.
  int64_t max_layers = 0;

  // Partial recompute (token-selective repair such as CacheBlend or EPIC). When `recompute` is defined
  // (int64 [R], strictly ascending indices into the input), only those input tokens are computed; every
  // other input token takes its KV at every layer from `cached` (one LayerKV per layer in content form
  // with T rows, e.g. a chunk's canonical). Recomputed tokens attend to the past, to the cached KV of
  // earlier input tokens and to each other, causally by input order. Logits (kLast/kAll) are for the
  // recomputed tokens only; ForwardResult::content holds all T tokens, cached rows with recomputed
  // rows written over them.
  at::Tensor recompute;
  std::vector<LayerKV> cached;

  // Called with l = 0, 1, ... before layer l reads the past (past.layers[l] or the paged pool's layer
  // l), on the thread that runs the forward. A caller that brings the past in layer by layer (a recall
  // from host or disk on a copy stream) makes the compute stream wait there for layer l's copy only, so
  // the copies of later layers overlap the compute of earlier ones. Empty: not called.
  // It may throw (the SDK's interruption points, orbit/interrupt.h, stop a long forward here between two
  // layers): the forward then ends with that exception and returns nothing. The past is only read (a
  // contiguous or paged past is unchanged); a decode cache's slot keeps its length, the rows this forward
  // wrote past it not part of it.
  std::function<void(int64_t layer)> before_layer;

  // Fill ForwardResult::key_attention: where the last computed token looks. A planner reads it to learn
  // which earlier content the next query depends on (a kept turn far back that a question refers to).
  // Costs one query row against the keys per layer (and, outside a decode cache or in one whose keys are
  // rotated when read, rotating the keys again); a paged past is then gathered instead of read in place by
  // the CUDA kernel.
  bool key_attention = false;

  // MLA only: the naive or the absorbed form of its attention (MlaForm above). kAuto for any model.
  MlaForm mla_form = MlaForm::kAuto;
};

struct ForwardResult {
  // float32 [1, vocab] (kLast), [T or R, vocab] (kAll), undefined (kNone); on the model's device.
  at::Tensor logits;
  std::vector<LayerKV> content;  // per layer run, when return_content; model's device and dtype
  // With options.key_attention: float32 [K] on the host, the softmax weight the last computed token puts on
  // each key it sees (past tokens, then input tokens up to itself), averaged over heads and layers; sums
  // to 1. Every past gives it: a decode cache of a dynamic-NTK model from its slot's keys rotated as its
  // attention read them, a paged past gathered (not read in place by the CUDA kernel) when it is asked.
  at::Tensor key_attention;
};

// One sequence of a batched forward (Model::forward_batch): its input, its own past (nullptr = none) and
// its options (nullptr = defaults). Pointers are borrowed for the call.
struct SequenceForward {
  const ForwardInput* input = nullptr;
  const PastKV* past = nullptr;
  const ForwardOptions* options = nullptr;
};

// After loading, every tensor is on the model's device in its compute dtype (Model::device(), dtype();
// float32 CPU unless a ComputeTarget says otherwise). H = num_heads; shapes per family (undefined where not used).
struct LayerWeights {
  at::Tensor attn_norm;  // [hidden]
  // GQA/MHA
  at::Tensor wq, wk, wv;  // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden]; MLA: wq only,
                          //   [H·(d_nope + d_rope), hidden], when q_lora_rank = 0
  at::Tensor bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim] when attention_bias, else undefined
  // MLA (MlaConfig in config.h)
  at::Tensor wq_a;       // [q_lora_rank, hidden]            (q_lora_rank > 0)
  at::Tensor q_a_norm;   // [q_lora_rank]                    (q_lora_rank > 0)
  at::Tensor wq_b;       // [H·(d_nope + d_rope), q_lora_rank] (q_lora_rank > 0)
  at::Tensor wkv_a;      // [r_kv + d_rope, hidden]           → [c ‖ k_pe]
  at::Tensor kv_a_norm;  // [r_kv]
  at::Tensor wkv_b;      // [H·(d_nope + d_v), r_kv]          → per head [k_nope ‖ v]
  // every family
  at::Tensor wo;                    // [hidden, H·v_head_dim()]
  at::Tensor ffn_norm;              // [hidden]
  at::Tensor w_gate, w_up, w_down;  // [inter, hidden], [inter, hidden], [hidden, inter]
};

struct ModelWeights {
  at::Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; aliases embed when tied
};

// An immutable loaded model. forward() is const and safe to call from several threads at once.
class Model {
 public:
  // Takes ownership of validated weights; computes the fingerprint. The model runs where its weights
  // are: every weight must share the embedding's device and floating dtype (float32, bfloat16 or
  // float16). Throws orbit::Error naming `origin` and the tensor when a shape, dtype or device disagrees.
  // A model on the CPU sets, once per process, glibc malloc's mmap threshold to 32 MiB and its trim threshold
  // to 64 MiB, so that the megabytes a forward frees stay mapped for the next (else each forward over hundreds
  // of rows faults them in again: a fifth of its time); not where the environment sets them (GLIBC_TUNABLES'
  // glibc.malloc.*, MALLOC_*_ variables). The process then keeps up to 64 MiB of freed heap per arena.
  Model(ModelConfig config, ModelWeights weights, std::string origin);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Where the model came from (a file or directory path).
  const std::string& origin() const { return origin_; }
  // Where the forward runs and its compute dtype (activations and content; logits are float32).
  c10::Device device() const { return device_; }
  c10::ScalarType dtype() const { return dtype_; }
  // SHA-256 hex over the canonical architecture/RoPE config, the compute dtype and every weight's
  // name, shape and bytes. Same weights and config ⇒ same fingerprint, in every process.
  const std::string& fingerprint() const { return fingerprint_; }
  int64_t parameter_count() const;

  // How a forward of `queries` input tokens attends over a past (paged: read in place from a pool, see
  // paged_past.h): one line naming the kernel, or the fallback and why, e.g. "paged CUDA kernel (fused
  // relocation + patch rows)" or "gathered past + PyTorch SDPA (MLA has no paged kernel)".
  std::string attention_path(int64_t queries, bool paged) const;

  // Token embeddings [T, hidden]. Throws on an id outside [0, vocab).
  at::Tensor embed(const std::vector<int64_t>& tokens) const;

  // Runs the layers over `input` after `past` (nullptr = no past). Inputs on any device and in any
  // floating dtype are moved to the model's; outputs are on the model's device. Throws orbit::Error for token ids
  // out of range, embeddings of the wrong width, positions negative or past the model's limit (any
  // coordinate of a grid), a position grid whose column count is not the token count, or past KV
  // whose shapes disagree with the config's content shapes.
  // forward_batch of this one sequence: a single forward is the batch of one, the same code path.
  ForwardResult forward(const ForwardInput& input, const PastKV* past = nullptr,
                        const ForwardOptions& options = {}) const;

  // One forward over several sequences, each with its own tokens (ragged: decode steps and prefills of any
  // lengths together), its own past (contiguous or paged, its own positions and patches) and its own
  // options. What is row-wise runs once over every sequence's computed tokens concatenated ([Σ R_i, hidden]:
  // the norms, the Q/K/V and output projections, the MLP, the LM head); attention is each sequence's
  // queries over its own past and its own earlier tokens. On CPU the sequences with the same number of
  // computed tokens attend together: each member's keys rotated (MLA's expanded from its own latent rows)
  // into its own slot of two buffers kept for the forward, then one attention per group over them (the CPU
  // attention kernel at heads of up to 32, reading each member's own rows; the blocked products at wider
  // heads, over members with as many keys, 2 MiB of them at a time); on CUDA each attends on its own (the
  // paged kernel, SDPA or the GEMM path, as a single forward would). Results are in batch order and equal the
  // sequences' single forwards up to the order of float reductions (tests/cpp/float_tolerance.h). Every
  // sequence must run the same number of layers (ForwardOptions::max_layers). Throws as forward() does, the
  // message naming the sequence ("forward: sequence 2: ...") when the batch holds more than one; an empty
  // batch throws.
  std::vector<ForwardResult> forward_batch(const std::vector<SequenceForward>& batch) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::string origin_;
  std::string fingerprint_;
  c10::Device device_ = c10::Device(c10::kCPU);
  c10::ScalarType dtype_ = c10::kFloat;
  // RoPE cos/sin per position for the CPU forward's queries, grown as positions are seen (shared by copies).
  std::shared_ptr<detail::RopeTableCache> rope_table_;

  friend class DecodeCache;  // DecodeCache::open reads rope_table_ for the keys it rotates
};

// Checks `positions` (int64 [T], or [3, T] for an M-RoPE config) against the model limit, every
// coordinate of a grid included; `what` names the argument in errors.
void check_positions(const ModelConfig& config, const at::Tensor& positions, const char* what);

}  // namespace orbit::runtime
