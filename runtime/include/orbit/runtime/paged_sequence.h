// A token sequence's content channel held in KVPool pages, with per-token positions (metadata).
//
//   block table: pages_[0] pages_[1] ... pages_[n-1]      token t lives in page t / page_size,
//                                                           slot t % page_size
//
// Forks share every page (reference counts); an append that would write into a page shared with
// another holder copies that page first (copy-on-write), so a fork never sees its sibling's writes.
// Not thread-safe.
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
  // The pool must outlive the sequence. The pool's kinds must be {kv_dim, kv_dim} (K then V).
  PagedSequence(KVPool& pool, int64_t num_kv_heads, int64_t head_dim);
  ~PagedSequence();
  PagedSequence(PagedSequence&& other) noexcept;
  PagedSequence& operator=(PagedSequence&& other) noexcept;
  PagedSequence(const PagedSequence&) = delete;
  PagedSequence& operator=(const PagedSequence&) = delete;

  int64_t length() const { return length_; }
  const std::vector<PageId>& pages() const { return pages_; }
  const std::vector<int64_t>& positions() const { return positions_; }

  // Appends T tokens: content per layer ([T, H_kv, d] each, as ForwardResult::content) and int64
  // positions [T]. Allocates pages as needed; returns out_of_capacity (and changes nothing) when the
  // pool cannot hold them. Throws on shape mismatches.
  Status append(const std::vector<LayerKV>& content, const at::Tensor& positions);

  // Drops tokens [new_length, length); frees pages no longer needed.
  void truncate(int64_t new_length);

  // A child sharing every page (O(pages) reference-count bumps, no copy).
  PagedSequence fork() const;

  // Contiguous copy of the content and positions, ready for Model::forward(..., &past).
  PastKV gather() const;

 private:
  void release_all() noexcept;

  KVPool* pool_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  std::vector<PageId> pages_;
  std::vector<int64_t> positions_;
  int64_t length_ = 0;
};

}  // namespace orbit::runtime
