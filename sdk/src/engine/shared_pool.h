// SharedPool: the KV pool every window of an engine keeps its pages in (runtime::KVPool) together with
// the mutex that guards it. KVPool is not thread-safe, and neither is a PagedSequence (it allocates,
// retains and releases the pool's pages): so every operation that reads or changes pages or reference
// counts — creating, appending to, forking, gathering and destroying a sequence, reading the free count —
// goes through a method here, each taking the lock for its whole duration. Callers never lock by hand.
//
// The sequences themselves are owned by their windows (Entry::kv); they must be created, forked and
// destroyed through this class (create, fork, destroy, clear), never directly.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/paged_sequence.h"

namespace orbit::detail {

class SharedPool {
 public:
  explicit SharedPool(const runtime::KVPoolOptions& options);
  SharedPool(const SharedPool&) = delete;
  SharedPool& operator=(const SharedPool&) = delete;

  // The pool's geometry: fixed at construction, read without the lock.
  int64_t num_pages() const { return pool_.num_pages(); }
  int64_t page_size() const { return pool_.page_size(); }
  int64_t page_bytes() const { return pool_.page_bytes(); }

  int64_t num_free() const;
  // Pages in all, free and live, as one consistent reading.
  struct Usage {
    int64_t pages = 0;
    int64_t free = 0;
    int64_t live = 0;
  };
  Usage usage() const;

  // A new sequence of `config`'s content channel holding `content` at `positions` (PagedSequence::append).
  // Null when the pool cannot hold it; then *refused (when given) is the pool's usage at that moment and
  // nothing changed. Throws on shape mismatches (the half-made sequence is destroyed under the lock).
  std::unique_ptr<runtime::PagedSequence> create(const runtime::ModelConfig& config,
                                                 const std::vector<runtime::LayerKV>& content,
                                                 const at::Tensor& positions, Usage* refused = nullptr);
  // A child sharing every page of `seq` (reference counts).
  std::unique_ptr<runtime::PagedSequence> fork(const runtime::PagedSequence& seq);
  // Destroys `seq` (its pages return to the pool when no other holder has them); null is a no-op.
  void destroy(std::unique_ptr<runtime::PagedSequence>& seq);
  // Clears `holders` under the lock: whatever sequences they own (e.g. window entries) are destroyed.
  template <class T>
  void clear(std::vector<T>& holders) {
    std::lock_guard<std::mutex> lock(mu_);
    holders.clear();
  }

  // A contiguous copy of the sequence's content and positions (PagedSequence::gather).
  runtime::PastKV gather(const runtime::PagedSequence& seq) const;
  // The pool rows of each sequence's tokens (PagedSequence::slots), in order.
  std::vector<at::Tensor> slots(const std::vector<const runtime::PagedSequence*>& seqs) const;
  // The sequence's page ids.
  std::vector<runtime::PageId> pages(const runtime::PagedSequence& seq) const;
  // How many of the sequences' pages have another holder too (a fork's, or a sibling window's).
  int64_t shared_pages(const std::vector<const runtime::PagedSequence*>& seqs) const;

  // The pool itself, for a runtime::PagedPast that reads the pages of sequences the caller holds in place
  // (their rows cannot change while held: an append into a shared page copies it first). Nothing else.
  const runtime::KVPool& storage() const { return pool_; }

 private:
  runtime::KVPool pool_;
  mutable std::mutex mu_;
};

}  // namespace orbit::detail
