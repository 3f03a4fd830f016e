// Internal to the runtime: one sequence of a forward (Model::forward_batch, forward_batch.cpp), prepared
// before the first layer. Everything here is per sequence; the batch runs the row-wise work of all its
// sequences at once and comes back here only for attention.
//
//   input_length        the input checked (tokens, or embeddings); input_hidden: as hidden states [T, hidden]
//   ForwardPast         the past attended over: paged (read in place) or contiguous (given or gathered)
//   check_past          its layers and positions against the config
//   select_recomputed   which input tokens are computed (all, or options.recompute) and their checks
//   key_rope            cos/sin of the keys' angles (the batch computes every sequence's queries' at once)
//   plan_paged          the paged kernel's per-forward inputs (slots, positions, frequencies, patch tables)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/paged_attention_op.h"
#include "ops/rope_op.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime::detail {

struct DecodeCacheState;  // decode_cache_state.h

// Why the paged kernel cannot run this model or input ("" when it can).
std::string paged_kernel_gap(const ModelConfig& c, const c10::Device& device, int64_t queries, bool partial);

// Positions as token-major int64 [S, rows] on `device` ([S] means every row equals it).
at::Tensor token_major(const at::Tensor& positions, int64_t rows, const c10::Device& device);

// Checks one layer's content tensors against the config's content shapes with `rows` tokens.
void check_content(const ModelConfig& c, const LayerKV& kv, int64_t rows, const std::string& what);

// The forward's input as hidden states [T, hidden] on the model's device and dtype.
at::Tensor input_hidden(const Model& m, const ForwardInput& input);

// T, the input's tokens, checked as input_hidden checks them (exactly one of tokens and embeddings; tokens
// inside the vocabulary; embeddings [T, hidden], floating point) without embedding anything.
int64_t input_length(const Model& m, const ForwardInput& input);

// Input positions as given or defaulted (past_len + 0..T-1), shape-checked against T tokens.
at::Tensor input_positions(const ModelConfig& c, const at::Tensor& given, int64_t past_len, int64_t T);

// The past one forward of T input tokens attends over. A paged past is read in place by the paged kernel
// where it applies and options.key_attention is not asked (its weights need the keys in attention form, which
// the kernel never makes); otherwise it is gathered here. Not copyable: `past` may point at `gathered`.
struct ForwardPast {
  ForwardPast(const Model& m, const PastKV* given, int64_t T, const ForwardOptions& options);
  ForwardPast(const ForwardPast&) = delete;
  ForwardPast& operator=(const ForwardPast&) = delete;

  const PastKV* past = nullptr;       // the past attended over (given, or gathered), or null
  const PastKV* paged = nullptr;      // the paged past the kernel reads in place, or null
  DecodeCacheState* cache = nullptr;  // a decode cache whose slot is the past (then `past` is null)
  int64_t slot = -1;
  PastKV gathered;
  bool announced = false;    // before_layer already called for every layer
  int64_t length = 0;        // past tokens
  int64_t paged_length = 0;  // of them, read in place from the pool
};

// Checks the past's layers (the tokens after the paged ones) and positions against the config.
void check_past(const ModelConfig& c, const ForwardPast& fp);

// Which input tokens a forward computes: every one, or (partial recompute) options.recompute.
struct Recompute {
  bool partial = false;
  at::Tensor selected;  // partial: int64 [R] on the model's device, the computed input indices, ascending
                        // (undefined otherwise: every input token is computed, in order)
};

// The selection for T input tokens, options.recompute and options.cached (for `num_layers` layers) checked.
Recompute select_recomputed(const Model& m, const ForwardOptions& options, int64_t T, int64_t num_layers);

// cos/sin of every key token's angles (undefined with a paged past, whose kernel rotates in place, or a
// decode cache's): every layer rotates by the same angles. The computed tokens' are the batch's
// BatchPass::query_tables, rows first_row[i] onwards.
struct ForwardRope {
  ops::RopeTables key;
};

// One angle function for the input and the (relocated) past; M-RoPE grids and 1-D positions alike.
// Angles are computed where the model runs (float64 there), never shipped per token from the host.
// The key tables only (undefined where the past is paged or a decode cache's slot): the batch computes every
// sequence's query tables at once (forward_batch.cpp). On the CPU, with 1-D positions where `table` (the
// model's, rope_table.h; may be null) applies, its rows: bit for bit the computed ones.
ops::RopeTables key_rope(const Model& m, const ForwardPast& fp, const at::Tensor& positions, int64_t window_len,
                         RopeTableCache* table = nullptr);

// The positions of the computed tokens: `positions` ([T] or [3, T]), or its recomputed columns.
at::Tensor computed_positions(const at::Tensor& positions, const Recompute& rc);

// The per-forward part of the paged kernel's inputs (slots, positions, frequencies, patch tables).
struct PagedPlan {
  ops::PagedAttentionInputs base;
  std::vector<at::Tensor> segment_tables;  // per layer
  std::vector<at::Tensor> keep_alive;      // factors moved to the device
  const KVPool* pool = nullptr;
  int64_t rows = 0;
};

PagedPlan plan_paged(const ModelConfig& c, const PastKV& past, const at::Tensor& input_positions, int64_t window_len,
                     const c10::Device& device, c10::ScalarType dtype);

// The paged kernel's inputs for layer l: the forward's, with the pool's layer-l pages and patch segments.
ops::PagedAttentionInputs paged_layer(const PagedPlan& plan, int64_t l);

// One sequence of a batched forward, prepared (and checked) before the first layer.
struct SequencePass {
  const ForwardOptions* options = nullptr;
  std::unique_ptr<ForwardPast> past;
  Recompute recompute;
  at::Tensor x;                      // the computed tokens' input hidden states [R, hidden] (moved into the batch);
                                     // undefined for tokens all computed, which the batch embeds in one lookup
  at::Tensor query_index;            // int64 [R]: the last key index each computed token sees; undefined
                                     // over a decode cache's slot, whose attention reads the slot's length
  ForwardRope rope;                  // the key tables
  std::unique_ptr<PagedPlan> paged;  // a paged past the kernel reads in place, else null
  at::Tensor positions;              // the input's positions ([T], or [3, T])
  int64_t window_len = 0;            // the RoPE window length (dynamic NTK)
  int64_t tokens = 0;                // T: input tokens (keys after the past)
  int64_t rows = 0;                  // R: computed tokens (T, or the recomputed ones)
  int64_t num_layers = 0;            // layers this forward runs
  bool mla_absorbed = false;         // MLA attends in the absorbed form (options.mla_form, mla_form_absorbed)
};

// Whether an MLA sequence of R computed tokens over S keys (past + input) attends in the absorbed form:
// over a decode cache's slot the cache's layout (latent: absorbed; expanded: naive), else options.mla_form, or
// for kAuto on the CPU mla_absorbed_cheaper. Throws naming options.mla_form where the form asked for does not
// run (see MlaForm, model.h).
bool mla_form_absorbed(const Model& m, const ForwardOptions& options, const ForwardPast& fp, int64_t R, int64_t S);

// Everything Model::forward did before its first layer, for one sequence. Throws orbit::Error as forward().
SequencePass prepare_sequence(const Model& m, const SequenceForward& s, RopeTableCache* table = nullptr);

// Layer l's keys of one sequence besides the paged ones: the contiguous past's, then the input's content.
LayerKV sequence_keys(const Model& m, const SequencePass& s, const LayerKV& content, int64_t l);

}  // namespace orbit::runtime::detail
