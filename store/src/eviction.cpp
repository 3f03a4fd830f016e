#include "orbit/store/eviction.h"

#include <algorithm>
#include <numeric>

#include "orbit/common/error.h"

namespace orbit::store {

double CostAwarePolicy::keep_score(const EvictionCandidate& c) const {
  const double bytes = static_cast<double>(std::max<int64_t>(c.bytes, 1));
  return (std::max(c.expected_reuse, 0.0) + static_cast<double>(c.hits)) * std::max(c.recompute_cost, 0.0) / bytes;
}

std::shared_ptr<const EvictionPolicy> make_eviction_policy(const std::string& name) {
  if (name == "lru") return std::make_shared<LruPolicy>();
  if (name == "cost-aware") return std::make_shared<CostAwarePolicy>();
  ORBIT_FAIL("eviction policy '" << name << "' is unknown (known: lru, cost-aware)");
}

EvictionQueue::EvictionQueue(const EvictionPolicy& policy, const std::vector<EvictionCandidate>& candidates)
    : candidates_(&candidates), scores_(candidates.size()), heap_(candidates.size()) {
  for (std::size_t i = 0; i < candidates.size(); ++i) scores_[i] = policy.keep_score(candidates[i]);
  std::iota(heap_.begin(), heap_.end(), std::size_t{0});
  std::make_heap(heap_.begin(), heap_.end(), [this](std::size_t a, std::size_t b) { return evicted_after(a, b); });
}

bool EvictionQueue::evicted_after(std::size_t a, std::size_t b) const {
  if (scores_[a] != scores_[b]) return scores_[a] > scores_[b];
  const EvictionCandidate& x = (*candidates_)[a];
  const EvictionCandidate& y = (*candidates_)[b];
  if (x.last_access != y.last_access) return x.last_access > y.last_access;
  return x.key > y.key;
}

std::size_t EvictionQueue::take() {
  ORBIT_CHECK(!heap_.empty(), "EvictionQueue::take: no candidate left");
  std::pop_heap(heap_.begin(), heap_.end(), [this](std::size_t a, std::size_t b) { return evicted_after(a, b); });
  const std::size_t next = heap_.back();
  heap_.pop_back();
  return next;
}

std::vector<std::size_t> eviction_order(const EvictionPolicy& policy,
                                        const std::vector<EvictionCandidate>& candidates) {
  EvictionQueue queue(policy, candidates);
  std::vector<std::size_t> order;
  order.reserve(candidates.size());
  while (!queue.empty()) order.push_back(queue.take());
  return order;
}

}  // namespace orbit::store
