// A token sequence's content channel held in KVPool pages, with per-token positions (metadata).
//
//   block table: pages_[0] pages_[1] ... pages_[n-1]      token t lives in page t / page_size,
//                                                           slot t % page_size
//
// The pool holds two kinds per layer: kind 0 = LayerKV::k (what gets rotated at placement), kind 1 =
// LayerKV::v (what does not), each flattened to its width per token (ModelConfig::content_widths()):
// GQA/MHA {H_kv·d, H_kv·d}; MLA {d_rope (k_pe), r_kv (latent c_KV)}.
//
// Positions are metadata, `position_rows` values per token: 1 (a position) or 3 (an M-RoPE (t, h, w)
// triple). Forks share every page (reference counts); an append that would write into a page shared
// with another holder copies that page first (copy-on-write), so a fork never sees its sibling's
// writes. Not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime {

class PagedSequence {
 public:
  // The pool must outlive the sequence. Its widths must be {k.width(), v.width()} (K then V).
  // position_rows: 1, or 3 for M-RoPE grids.
  PagedSequence(KVPool& pool, ContentShape k, ContentShape v, int64_t position_rows = 1);
  // Shapes and position rows of `config`'s content channel (content_k_shape(), content_v_shape(),
  // position_rows()).
  PagedSequence(KVPool& pool, const ModelConfig& config);
  // GQA/MHA shorthand: k and v both [num_kv_heads, head_dim], 1-D positions.
  PagedSequence(KVPool& pool, int64_t num_kv_heads, int64_t head_dim);
  ~PagedSequence();
  PagedSequence(PagedSequence&& other) noexcept;
  PagedSequence& operator=(PagedSequence&& other) noexcept;
  PagedSequence(const PagedSequence&) = delete;
  PagedSequence& operator=(const PagedSequence&) = delete;

  int64_t length() const { return length_; }
  const std::vector<PageId>& pages() const { return pages_; }
  // position_rows() values per token, token-major: token t's position is
  // positions()[t·rows .. t·rows + rows). With one row this is simply one position per token.
  const std::vector<int64_t>& positions() const { return positions_; }
  int64_t position_rows() const { return position_rows_; }
  ContentShape k_shape() const { return k_shape_; }
  ContentShape v_shape() const { return v_shape_; }

  // Appends T tokens: content per layer (k [T, k.heads, k.dim], v [T, v.heads, v.dim], as
  // ForwardResult::content) and int64 positions [T] or, with 3 position rows, [3, T] ([T] there means
  // t = h = w). Allocates pages as needed; returns out_of_capacity (and changes nothing) when the pool
  // cannot hold them. Throws on shape mismatches.
  Status append(const std::vector<LayerKV>& content, const at::Tensor& positions);

  // Drops tokens [new_length, length); frees pages no longer needed.
  void truncate(int64_t new_length);

  // A child sharing every page (O(pages) reference-count bumps, no copy).
  PagedSequence fork() const;

  // The pool row (page · page_size + offset) of each token: int64 [length] on CPU, for a PagedPast.
  at::Tensor slots() const;

  // Contiguous copy of the content and positions ([T], or [3, T] with 3 rows), ready for
  // Model::forward(..., &past).
  PastKV gather() const;

  // The content of `sequences` (all on one pool, of one shape) one after another, as gather() of each then
  // concatenated, but in one index_select per kind over every layer: a window of many short chunks costs two
  // copies, not a few small tensors per chunk. Positions are left undefined (the caller places the rows).
  static PastKV gather_all(const std::vector<const PagedSequence*>& sequences);

 private:
  void release_all() noexcept;

  KVPool* pool_;
  ContentShape k_shape_;
  ContentShape v_shape_;
  int64_t position_rows_;
  std::vector<PageId> pages_;
  std::vector<int64_t> positions_;
  int64_t length_ = 0;
};

}  // namespace orbit::runtime
