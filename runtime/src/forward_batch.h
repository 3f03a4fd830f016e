// Internal to the runtime: one Model::forward_batch (forward_batch.cpp) as its parts see it: the prepared
// sequences, and the groups of sequences that attend together on the CPU (each member's keys in its own
// slot of the group's buffers) or over a decode cache's buffers (cached_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "attention.h"
#include "decode_cache_state.h"
#include "forward_sequence.h"
#include "ops/rope_op.h"

namespace orbit::runtime::detail {

// Sequences that attend together on the CPU: the same number R > 0 of computed tokens, contiguous or paged
// pasts gathered. Each layer writes member j's keys (rotated; MLA's expanded from the latent) and values into
// its own slot of two buffers allocated once per forward, and the attention reads them as they lie. Where the
// CPU kernel takes the heads (cpu_attention_kernel_takes) a slot is token-major, a member's rows as its
// content, and attend_batch reads them:
//
//   keys_buffer   [B, S, H_k, d_k]    slot j:  rows [0, P_j)            its past (P_j tokens)
//   values_buffer [B, S, H_k, d_v]             rows [P_j, P_j + T_j)    its input (T_j tokens)
//                                              rows [P_j + T_j, S)      never written, uninitialised; the
//                                                                       kernel stops at each query's last key
//
// Wider heads (and float64) go to the blocked products (attend_slots), which take each (member, head) as one
// matrix and read every row of it. There a slot holds exactly a member's S_j = P_j + T_j keys, head-major, the
// slots one after another in two flat buffers (`slots`: HeadMajorSlots, attention.h), so that the products
// read them in place (keys as the transposed operand) with no copy in another layout and nothing padded:
//
//   slots.keys    member j, head h: rows [first_rows[j] + h·S_j, + S_j) of [rows, d_k]: its past, then its input
//   slots.values  the same rows of [rows, d_v]
//                 (views of two buffers of the forward that its blocked groups share, each group's layer
//                  writing them before it reads them)
//
// A blocked group's members have the same R and any numbers of keys; its slots take at most a budget of bytes
// that stays in cache (forward_batch.cpp). H_k is num_kv_heads (GQA) or num_heads (MLA); d_k head_dim, d_v
// v_head_dim().
struct AttentionGroup {
  std::vector<std::size_t> members;       // batch indices, ascending
  at::Tensor rows;                        // int64 [B·R]: their rows in the batch (undefined: every row, in order)
  int64_t queries = 0;                    // R
  int64_t keys = 0;                       // S: the most keys (past + input tokens) of a member
  at::Tensor query_index;                 // int64 [B, R]
  bool head_major = false;                // the blocked products' slots (above), else the kernel's buffers
  at::Tensor keys_buffer, values_buffer;  // the kernel's (undefined when head_major)
  HeadMajorSlots slots;                   // the blocked products' (empty unless head_major)

  // Member j's keys or values as [S, H_k, d] (S_j rows when head_major: a strided view), to be written.
  at::Tensor keys_of(std::size_t j) const {
    return head_major ? slots.keys_of(j) : keys_buffer.select(0, static_cast<int64_t>(j));
  }
  at::Tensor values_of(std::size_t j) const {
    return head_major ? slots.values_of(j) : values_buffer.select(0, static_cast<int64_t>(j));
  }
};

// Sequences whose pasts are slots of one decode cache, R computed tokens each: their new rows are written into
// their slots, and they attend over the buffers' slots [lo, lo + count) in one batched product.
struct CachedGroup {
  DecodeCacheState* cache = nullptr;
  std::vector<std::size_t> members;  // batch indices, ascending
  std::vector<int64_t> slots;        // per member
  std::vector<int64_t> lengths;      // per member: the slot's rows before this forward
  std::vector<int64_t> first_rows;   // per member: its first row in the batch
  bool in_order = false;             // the members' rows lie one after another in the batch, in member order
  bool kernel = false;               // attended by the CPU kernel (ops/cached_attention_op.h), else by ATen ops
  // Per member: the row of kept_k[l] viewed [slots·kept_capacity, heads, dim] that its first new row goes
  // to, or -1 where its slot keeps no content (DecodeCache::open's keep_content). Empty: no member keeps.
  std::vector<int64_t> kept_at;
  // The slots [lo, lo + count) the group reads, S rows at most each (every path). rows, member_index,
  // in_slot_order and hidden are the ATen path's (below, padded to S keys), built only where it runs: not for
  // the CPU kernel or the latent layout, whose members each read their own slot's rows.
  at::Tensor rows;              // int64 [B·R]: their rows in the batch (undefined: every row, in order)
  int64_t queries = 0;          // R
  int64_t lo = 0, count = 0;    // the slots attended
  int64_t keys = 0;             // S: the most rows of a member's slot after this forward
  at::Tensor write_index;       // int64 [B·R·H_a]: rows of keys[l] viewed [slots·H_a·capacity, d] (off the CPU)
  at::Tensor member_index;      // int64 [B]: the members' slots − lo
  bool in_slot_order = false;   // member j's slot is lo + j for every j (B == count): no scatter
  at::Tensor hidden;            // bool [count, 1, 1, R, S]: the keys each query does not see
  ops::RopeTables new_tables;   // the new rows' angles [B·R, rotary_dim/2] (undefined: rotate_at_read)
  ops::RopeTables read_tables;  // rotate_at_read: every attended row's [count·S, rotary_dim/2]
};

// A forward over the prepared sequences, fixed before the first layer.
struct BatchPass {
  const Model& model;
  std::vector<SequencePass> seqs;
  std::vector<int64_t> first_row;  // each sequence's first row in the batch
  int64_t total_rows = 0;          // N
  ops::RopeTables query_tables;    // [N, rotary_dim/2]: every computed token's, in batch order
  bool grouped = false;            // uncached sequences attend by groups (CPU), else alone
  std::vector<AttentionGroup> groups;
  std::vector<CachedGroup> cached;
  RopeTableCache* rope_table = nullptr;  // the model's RoPE table (rope_table.h)
};

// The cached groups of a batch (every sequence whose past is a decode cache's slot), their slots grown to
// hold this forward's rows and those rows' positions written. Throws when one slot is read twice.
std::vector<CachedGroup> make_cached_groups(const BatchPass& b);
// Layer l's attention of a cached group's members into their rows of `out` [N, H·d_v] (which it may replace
// when they are every row); writes their new rows into the cache first, read from `all`, the layer's content
// of every row of the batch (a cached member is never a partial recompute, so its rows there are its content).
void cached_attention(const BatchPass& b, int64_t l, const CachedGroup& g, const LayerKV& all, const at::Tensor& q,
                      at::Tensor& out);
// cached_attention's attention for a cache in the latent layout (MLA on the CPU, decode_cache.h), once the
// members' new rows are in their slots: the absorbed form over the slots' [c_KV ‖ RoPE(k_pe)] rows, read in
// place (cached_attention_mla.cpp).
void cached_latent_attention(const BatchPass& b, int64_t l, const CachedGroup& g, const at::Tensor& q, at::Tensor& out);
// After every layer ran: the members' slots hold their new rows.
void finish_cached(const BatchPass& b);
// A cache whose keys are rotated when read (rotate_at_read: dynamic-NTK RoPE), once layer l's new rows are in
// the slots: member j's first S rows of layer l's keys in attention form, rotated at its window by the group's
// read tables, the keys its attention read: [H_a, S, d_k] (MLA expanded: k_pe's part rotated), in the latent
// layout [1, S, r_kv + d_rope] = [c_KV ‖ RoPE(k_pe)]. key_attention.cpp reads them.
at::Tensor read_rotated_keys(const ModelConfig& c, const CachedGroup& g, int64_t l, std::size_t j, int64_t S);

}  // namespace orbit::runtime::detail
