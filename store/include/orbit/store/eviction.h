// Eviction policies (docs/ARCHITECTURE.md §6): small strategy objects that rank a tier's evictable
// entries; the ChunkStore evicts (demotes) in that order until the request fits. Pinned entries and
// entries a tier refuses to let go (device pages held by windows) are never candidates.
// Policies are stateless and const: one instance may serve several tiers and threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace orbit::store {

struct EvictionCandidate {
  std::string_view key;       // the entry's key (a view: valid while the caller keeps the key alive)
  int64_t bytes = 0;          // charged in the tier being relieved
  uint64_t last_access = 0;   // the store's logical clock at the last put or get (larger = more recent)
  int64_t hits = 0;           // gets served since the entry was written
  double expected_reuse = 1;  // caller's estimate of future uses (PutOptions)
  double recompute_cost = 1;  // caller's cost to rebuild it (PutOptions; e.g. forward tokens or seconds)
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;
  // How much the entry is worth keeping; the lowest is evicted first. Pure; ties are broken by
  // last_access (older first), then by key, so the order is deterministic.
  virtual double keep_score(const EvictionCandidate& candidate) const = 0;
};

// Least recently used: keep_score = last_access.
class LruPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lru"; }
  double keep_score(const EvictionCandidate& c) const override { return static_cast<double>(c.last_access); }
};

// Cost-aware: keep_score = (expected_reuse + hits) × recompute_cost / bytes, the recompute cost each
// byte is expected to save. A small, often reused, expensive chunk outlives a large cheap one.
class CostAwarePolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "cost-aware"; }
  double keep_score(const EvictionCandidate& c) const override;
};

// "lru" or "cost-aware"; throws orbit::Error listing both on another name.
std::shared_ptr<const EvictionPolicy> make_eviction_policy(const std::string& name);

// The candidates in eviction order (the lowest keep_score first; ties by last_access, older first, then by
// key), taken one at a time: O(n) to score them, then O(log n) per take, so relieving a full tier of one
// entry costs no sort of everything it holds. Holds a pointer to `candidates`, which must outlive it.
class EvictionQueue {
 public:
  EvictionQueue(const EvictionPolicy& policy, const std::vector<EvictionCandidate>& candidates);
  bool empty() const { return heap_.empty(); }
  // The index into `candidates` of the next one to evict. Precondition: !empty().
  std::size_t take();

 private:
  bool evicted_after(std::size_t a, std::size_t b) const;  // a comes after b in eviction order

  const std::vector<EvictionCandidate>* candidates_;
  std::vector<double> scores_;
  std::vector<std::size_t> heap_;
};

// Indices into `candidates`, first to evict first (the whole EvictionQueue order).
std::vector<std::size_t> eviction_order(const EvictionPolicy& policy, const std::vector<EvictionCandidate>& candidates);

}  // namespace orbit::store
