// DecodeCache: the pasts of sequences being decoded, kept across forwards in the form attention reads them,
// in buffers every sequence (slot) of the cache shares, one pair per layer:
//
//   keys[l]    [slots, H_a, capacity, d_k]   rotated to their positions (GQA/MHA: H_a = num_kv_heads;
//   values[l]  [slots, H_a, capacity, d_v]   MLA: H_a = num_heads, k = [k_nope ‖ k_pe], both expanded from
//                                            the latent once, when the row is written)
//
// except MLA on the CPU (latent()), which keeps the latent itself, r_kv + d_rope numbers a token and layer
// (DeepSeek-V2-Lite: 576 instead of the expanded 16 · (192 + 128) = 5120):
//
//   keys[l]    [slots, 1, capacity, r_kv + d_rope]   [c_KV ‖ RoPE(k_pe)] (no values: the value is c_KV)
//
// and attends in the absorbed form (MlaForm::kAbsorbed, model.h): each query carried into the latent
// ([q_nope·W_UK ‖ q_pe] per head), multi-query attention over the one key head with c_KV as its value, and
// W_UV applied to the attended latent. With dynamic-NTK RoPE (keys rotated when read) the rows hold
// [c_KV ‖ k_pe], k_pe rotated at every forward at the window's length. MLA on CUDA keeps the expanded rows and
// the naive form.
//
// A forward over a slot (PastKV::cache, model.h) reads it in place and appends its input's rows to it, so a
// decode step costs its new rows, not a gather, rotation and copy of the whole past; and the sequences of one
// forward_batch that share a cache and a query count attend in one batched product over the buffers (rows
// past a slot's length are masked). Stored content is still what the model computed (Model::forward returns
// it in content form as always); the cache is a read-side copy, rotated once because a decode's positions do
// not move. Dynamic-NTK RoPE, whose angles change with the window's length, keeps keys before rotation and
// rotates the rows in use at every forward. Buffers grow by doubling (slots and capacity) as needed, and are
// fitted when a slot closes: while a slot is open, shrunk to twice what the open slots use (slots up to the
// last open one, the longest one's rows) once that is at most a quarter of them; when the last slot closes,
// kept for the next burst if the burst that ended (the slots closed since the cache was last empty) used at
// least a quarter of them in slots and in rows, else released. Slot numbers never change, so a long-lived
// slot opened late holds the slots before it.
//
// A slot opened with keep_content also keeps the rows forwards append to it in content form, in two more
// buffers per layer, [slots, kept capacity, heads, dim] (content_k_shape / content_v_shape), written with
// the attention-form rows (one index_copy per layer and group): what a decode saves for exact reuse. They
// grow by doubling and are fitted when a slot closes by the same rule: while an open slot keeps rows,
// shrunk to twice the longest kept once that is at most a quarter of their rows; once none does, kept for
// the next keeping slot if the slots closed since the cache was last empty kept at least a quarter of
// their rows (the most one slot kept), else released; and released with the main buffers. So a burst of
// sessions like the last does not grow them again, and an idle cache keeps at most about four times the
// rows one slot of its last burst kept, over the main buffers' slots.
//
// Thread-safety: none. One thread uses a cache, and runs the forwards that read it, at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "orbit/runtime/model.h"

namespace orbit::runtime {

namespace detail {
struct DecodeCacheState;
}  // namespace detail

class DecodeCache {
 public:
  // A cache for `model`'s forwards (which must outlive it), on the model's device and in its dtype.
  explicit DecodeCache(const Model& model);
  ~DecodeCache();
  DecodeCache(const DecodeCache&) = delete;
  DecodeCache& operator=(const DecodeCache&) = delete;

  const Model& model() const;

  // A new slot holding `past` (contiguous, or paged: gathered and patched; null: no rows), written once.
  // With keep_content the slot also keeps, in content form (ForwardResult::content), every row the forwards
  // append to it from now on (kept): a decode's query and answer KV, saved for exact reuse at its end without
  // a forward returning content at every step. A past that is a slot of this cache is forked (keeping what
  // that slot keeps, and with keep_content at least the rows appended from now on).
  // Throws orbit::Error for a past of the wrong shape (as Model::forward would).
  int64_t open(const PastKV* past, bool keep_content = false);
  // A new slot holding a copy of `slot`'s rows (and of its kept content): a branch of the same past.
  int64_t fork(int64_t slot);
  // Frees `slot` (its rows are reused by a later one) and fits the buffers to the slots still open (above).
  // Throws for a slot not open.
  void close(int64_t slot);

  // The PastKV that names `slot` for Model::forward / forward_batch: read in place, the input appended.
  PastKV past(int64_t slot);
  int64_t length(int64_t slot) const;  // rows the slot holds
  // Rows of `slot` kept in content form (open's keep_content): those forwards appended since it was opened.
  int64_t kept_rows(int64_t slot) const;
  // Kept rows [from, from + count) of `slot` (count >= 1), per layer: views of the cache's buffers, the same
  // values the forwards returned as content; valid until the slot is closed (a later slot may write there).
  // Throws for rows the slot does not keep.
  std::vector<LayerKV> kept(int64_t slot, int64_t from, int64_t count) const;
  int64_t open_slots() const;
  int64_t bytes() const;  // the buffers' size
  // Bytes one token's rows take in the main buffers, over every layer (keys and values; not its position, 8
  // bytes a position row, nor kept content): latent() MLA (r_kv + d_rope) · layers · the dtype's size.
  int64_t row_bytes() const;
  // Whether the cache holds an MLA model's rows in the latent layout (above).
  bool latent() const;

 private:
  friend struct detail::DecodeCacheState;
  std::unique_ptr<detail::DecodeCacheState> state_;
};

}  // namespace orbit::runtime
