// SharedPool: the KV pool every window of an engine keeps its pages in (runtime::KVPool) together with
// the mutex that guards it. KVPool is not thread-safe, and neither is a PagedSequence (it allocates,
// retains and releases the pool's pages): so every operation that reads or changes pages or reference
// counts — creating, appending to, forking, gathering and destroying a sequence, reading the free count —
// goes through a method here, each taking the lock for its whole duration. Callers never lock by hand.
//
// The sequences themselves are owned by their windows (Entry::kv); they must be created, forked and
// destroyed through this class (create, place, fork, destroy, clear), never directly.
//
// Shared canonicals (docs/ARCHITECTURE.md §13). A chunk served from its canonical (canonical, blind,
// stored-patch) is *placed*: the pool holds one canonical page set per chunk key, and each placement is a
// sequence sharing those pages by reference count with its own patch factors, which this class keeps
// beside the sequence (factors_) and adds whenever the sequence is read (gather):
//
//   canonical set of chunk B   pages p0 p1 p2 (ref = 1 + placements)   held here while a placement holds it
//   window 1's B               p0 p1 p2 + patch(B | A C)
//   window 2's B               p0 p1 p2 + patch(B | D)
//   window 3's B (first)       p0 p1 p2   (empty context: the canonical itself)
//
// A set no placement holds any more is destroyed at the next release (destroy, clear) or placement, so
// the pool's live pages are what windows hold. Everything else (forwards in context, conditioned or
// reused KV, recomputed tokens) is written in pages of its own (create).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/reuse.h"

namespace orbit::detail {

class SharedPool {
 public:
  // share_canonicals: placements read shared canonical pages (place); false: every placement is written
  // as a private copy (the caller uses create), as before shared canonicals existed.
  explicit SharedPool(const runtime::KVPoolOptions& options, bool share_canonicals = true);
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

  // Whether placements read shared canonical pages here (place); false when the engine turned sharing off
  // (every placement is then written as a private copy with create).
  bool shares() const { return share_canonicals_; }
  // One placement of chunk `key`: a sequence sharing the chunk's canonical page set (written from
  // `canonical` when no set for `key` is held) with `patch` attached (null: the canonical as it is). Null
  // when the pool cannot hold a new set; then *refused as for create. Throws when `canonical`'s length
  // differs from the held set's, or when `patch` does not fit it (rows, layers, widths). The placement
  // keeps its factors contiguous on the pool's device, in the pool's type where that is bfloat16 or float16
  // (half the bytes; every read still sums the products in float32) and float32 otherwise; factors not so
  // already are copied once, here, so every paged read on a CUDA pool finds them in place.
  std::unique_ptr<runtime::PagedSequence> place(const runtime::ModelConfig& config, const std::string& key,
                                                const runtime::Content& canonical,
                                                std::shared_ptr<const runtime::Patch> patch, Usage* refused = nullptr);
  // What sharing holds now, from the pool's reference counts: canonical sets and their pages, the
  // placements reading them (every holder but the set itself, forks' included), and the distinct patch
  // factors those placements carry (on the pool's device in the type place() keeps, outside its pages).
  struct Sharing {
    int64_t canonical_sets = 0;
    int64_t canonical_pages = 0;
    int64_t placements = 0;
    int64_t patches = 0;
    int64_t patch_bytes = 0;
  };
  Sharing sharing() const;

  // Whether a placement holds chunk `key`'s canonical page set now: a new placement of it reads those pages
  // and takes none (a set no placement holds is written again).
  bool holds_set(const std::string& key) const;

  // A child sharing every page of `seq` (reference counts) and its patch factors.
  std::unique_ptr<runtime::PagedSequence> fork(const runtime::PagedSequence& seq);
  // Destroys `seq` (its pages return to the pool when no other holder has them); null is a no-op.
  void destroy(std::unique_ptr<runtime::PagedSequence>& seq);
  // Clears `holders` (window entries: T has a `kv` sequence) under the lock: their sequences are destroyed.
  template <class T>
  void clear(std::vector<T>& holders) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const T& h : holders) factors_.erase(h.kv.get());
    holders.clear();
    release_unheld_sets();
  }

  // A contiguous copy of the sequence's content (patch factors added) and positions (PagedSequence::gather).
  runtime::PastKV gather(const runtime::PagedSequence& seq) const;
  // gather() of each of `seqs`, concatenated in order, in one copy per kind (PagedSequence::gather_all); positions
  // left undefined.
  runtime::PastKV gather_all(const std::vector<const runtime::PagedSequence*>& seqs) const;
  // The sequences, in order, as one past read in place from this pool: each one's pool rows
  // (PagedSequence::slots) and, for a placement, its patch factors at its first row (runtime::PlacedPatch),
  // so a paged read (the CUDA kernel, or runtime::materialize) sees what gather gives for each sequence.
  // The sequences must stay alive and unchanged while the past is read.
  std::shared_ptr<runtime::PagedPast> paged(const std::vector<const runtime::PagedSequence*>& seqs) const;
  // The sequence's page ids.
  std::vector<runtime::PageId> pages(const runtime::PagedSequence& seq) const;
  // How many of the sequences' pages have another holder too (a fork's, a sibling window's), the canonical
  // set a placement reads not counted as one.
  int64_t shared_pages(const std::vector<const runtime::PagedSequence*>& seqs) const;
  // How many distinct pages destroying every one of `seqs` together would return to the pool now: those no
  // other sequence holds. A canonical set's pages count once no placement but theirs holds it (the set is then
  // destroyed), unless its chunk key is in `kept_sets` (a caller about to place that chunk again would write the
  // set anew: no room for it). Each sequence at most once in `seqs`.
  int64_t freed_by(const std::vector<const runtime::PagedSequence*>& seqs,
                   const std::set<std::string>& kept_sets) const;

  // The pool itself, for a runtime::PagedPast that reads the pages of sequences the caller holds in place
  // (their rows cannot change while held: an append into a shared page copies it first). Nothing else.
  const runtime::KVPool& storage() const { return pool_; }

 private:
  // Destroys every canonical set no placement holds any more. mu_ held.
  void release_unheld_sets();
  // The set of `key`, written from `canonical` when none is held; null when the pool cannot hold it. mu_ held.
  runtime::PagedSequence* canonical_set(const runtime::ModelConfig& config, const std::string& key,
                                        const runtime::Content& canonical);

  runtime::KVPool pool_;
  bool share_canonicals_;
  // Declared after the pool: destroyed before it, so their pages are released into a live pool.
  std::map<std::string, std::unique_ptr<runtime::PagedSequence>> sets_;  // chunk key -> its canonical set
  // The placements' patch factors, by sequence. Every sequence made here (create, place, fork) sets or
  // erases its entry at birth, and destroy/clear erase it at death, so an entry never outlives its sequence
  // onto another at the same address.
  std::map<const runtime::PagedSequence*, std::shared_ptr<const runtime::Patch>> factors_;
  mutable std::mutex mu_;
};

}  // namespace orbit::detail
