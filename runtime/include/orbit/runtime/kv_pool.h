// Paged KV pool (docs/ARCHITECTURE.md §9): fixed-size pages with stable ids, reference counts and an
// O(1) free list. Stores the content channel (pre-RoPE) of tokens; positions are metadata kept by the
// owner of the pages (PagedSequence here, windows later), so relocation never rewrites a page.
//
// Memory layout, one storage tensor per stored kind s (for GQA/MHA: kind 0 = K, kind 1 = V, each of
// width num_kv_heads·head_dim):
//
//   storage[s] : [num_layers][num_pages][page_size][width_s]
//                             ^ page id p addresses row p of every layer and every kind
//
// A page is free (ref_count 0, on the free list) or live (ref_count ≥ 1, owned by that many holders).
// Writes to a page with ref_count > 1 are the owner's bug: PagedSequence copies on write.
// Thread-safety: none. One owner thread per pool (the window manager serialises access).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "orbit/common/status.h"

namespace orbit::runtime {

using PageId = int32_t;

struct KVPoolOptions {
  int64_t num_layers = 0;
  int64_t num_pages = 0;
  int64_t page_size = 16;       // tokens per page
  std::vector<int64_t> widths;  // width of each stored kind, e.g. {kv_dim, kv_dim}
  at::ScalarType dtype = at::kFloat;
  // Where the storage lives ("cpu", "cuda", "cuda:N"; see device.h). A CUDA pool is device memory:
  // pages are written, copied and read there, never staged through the host.
  std::string device = "cpu";
};

class KVPool {
 public:
  // Allocates all storage up front on options.device. Every page reads as zeros when first handed out: a
  // CUDA pool is zero-filled here (one fill), a CPU pool page by page as allocate() first hands each out, so
  // opening a large pool neither writes nor commits its memory (zero-filling a 256 MiB pool took most of an
  // engine's open). Throws orbit::Error on invalid options (naming the field) and when the device cannot
  // hold the pool.
  explicit KVPool(const KVPoolOptions& options);

  const KVPoolOptions& options() const { return options_; }
  // The storage's device (parsed from options().device).
  c10::Device device() const { return storage_.front().device(); }
  int64_t num_pages() const { return options_.num_pages; }
  int64_t page_size() const { return options_.page_size; }
  int64_t num_kinds() const { return static_cast<int64_t>(options_.widths.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t num_live() const { return num_pages() - num_free(); }
  // Bytes of one page across all layers and kinds.
  int64_t page_bytes() const;

  // Takes a page off the free list with ref_count 1 (zeros the first time the page is handed out); std::nullopt
  // when the pool is full. O(1).
  std::optional<PageId> allocate();
  // All-or-nothing: appends `count` pages to `out`, or returns out_of_capacity and changes nothing.
  Status allocate(int64_t count, std::vector<PageId>& out);
  // Adds a holder to a live page. Throws on a free or out-of-range id.
  void retain(PageId page);
  // Drops a holder; the page returns to the free list when its count reaches 0. O(1).
  // Throws on a free or out-of-range id (a double free is a bug, reported, never ignored).
  void release(PageId page);
  int32_t ref_count(PageId page) const;

  // View [page_size, width_kind] of one page of one layer. Writable; see the ref_count rule above.
  at::Tensor page(int64_t kind, int64_t layer, PageId page) const;
  // Whole storage of one kind: [num_layers, num_pages, page_size, width_kind]. A CPU pool's pages never
  // handed out hold whatever the memory held: read only the rows of pages allocate() gave.
  const at::Tensor& storage(int64_t kind) const { return storage_.at(static_cast<size_t>(kind)); }

  // Checks every invariant: free list entries unique, in range and with ref_count 0; live pages have
  // ref_count ≥ 1; free + live == num_pages. Throws orbit::Error describing the first violation.
  void verify_integrity() const;

 private:
  // Test hook: tests/cpp/test_kv_pool.cpp defines this to corrupt the private state on purpose and
  // check that verify_integrity() catches it. Nothing else defines or uses it.
  friend struct KVPoolTestAccess;

  void check_id(PageId page, const char* what) const;

  KVPoolOptions options_;
  std::vector<at::Tensor> storage_;
  std::vector<int32_t> ref_counts_;
  std::vector<PageId> free_list_;  // stack: allocate pops, release pushes
  std::vector<bool> unzeroed_;     // a CPU pool's pages never handed out yet (empty: all zero-filled)
};

}  // namespace orbit::runtime
