// Internal to the runtime: one Model::forward_batch (forward_batch.cpp) as its parts see it: the prepared
// sequences, and the groups of sequences that attend together on the CPU (over keys padded to the longest
// member's, or laid out for the CPU kernel: kernel_groups) or over a decode cache's buffers
// (cached_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "decode_cache_state.h"
#include "forward_sequence.h"
#include "ops/rope_op.h"

namespace orbit::runtime::detail {

// Sequences that attend together on the blocked path: the same number R > 0 of computed tokens, contiguous or
// paged pasts gathered.
struct AttentionGroup {
  std::vector<std::size_t> members;  // batch indices, ascending
  at::Tensor rows;                   // int64 [B·R]: their rows in the batch (undefined: every row, in order)
  int64_t queries = 0;               // R
  int64_t keys = 0;                  // S: the most keys (past + input tokens) of a member
  ops::RopeTables tables;            // the members' key angles, padded to S each: [B·S, rotary_dim/2]
                                     // (undefined for the kernel, which rotates each member by its own)
  at::Tensor query_index;            // int64 [B, R]
  // Attended by the CPU kernel (kernel_groups): each layer writes member j's keys, rotated, and values into
  // rows [0, its keys) of slot j of keys_buffer and values_buffer [B, S, H_kv, d], allocated once per forward;
  // the rows after a member's own keys are never written, nor read (a query reads rows up to its query_index).
  bool kernel = false;
  at::Tensor keys_buffer, values_buffer;
};

// Sequences whose pasts are slots of one decode cache, R computed tokens each: their new rows are written into
// their slots, and they attend over the buffers' slots [lo, lo + count) in one batched product.
struct CachedGroup {
  DecodeCacheState* cache = nullptr;
  std::vector<std::size_t> members;  // batch indices, ascending
  std::vector<int64_t> slots;        // per member
  std::vector<int64_t> lengths;      // per member: the slot's rows before this forward
  std::vector<int64_t> first_rows;   // per member: its first row in the batch
  bool kernel = false;               // attended by the CPU kernel (ops/cached_attention_op.h), else by ATen ops
  // ATen path only (below): the slots [lo, lo + count) attended together, padded to S keys.
  at::Tensor rows;              // int64 [B·R]: their rows in the batch (undefined: every row, in order)
  int64_t queries = 0;          // R
  int64_t lo = 0, count = 0;    // the slots attended
  int64_t keys = 0;             // S: the most rows of a member's slot after this forward
  at::Tensor write_index;       // int64 [B·R·H_a]: rows of keys[l] viewed [slots·H_a·capacity, d]
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
};

// Whether a forward on `m` attends its groups on the CPU through the CPU attention kernel (GQA at heads it
// takes: cpu_attention_kernel_takes), each member's keys rotated into its own slot of buffers kept for the
// forward (AttentionGroup::kernel), rather than as the blocked products do: every layer's keys copied into
// zero-filled buffers padded to the longest member's, and rotated whole with padded angle tables (MLA,
// wider heads). The padded copies cost more than the products' calls they save once a group's keys reach
// megabytes: fresh buffers every layer, mapped and faulted in afresh (bench/batch/README.md).
bool kernel_groups(const Model& m);

// The cached groups of a batch (every sequence whose past is a decode cache's slot), their slots grown to
// hold this forward's rows and those rows' positions written. Throws when one slot is read twice.
std::vector<CachedGroup> make_cached_groups(const BatchPass& b);
// Layer l's attention of a cached group's members into their rows of `out` [N, H·d_v] (which it may replace
// when they are every row); writes their new rows into the cache first.
void cached_attention(const BatchPass& b, int64_t l, const CachedGroup& g, const std::vector<LayerKV>& contents,
                      const at::Tensor& q, at::Tensor& out);
// After every layer ran: the members' slots hold their new rows.
void finish_cached(const BatchPass& b);

}  // namespace orbit::runtime::detail
