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

std::vector<std::size_t> eviction_order(const EvictionPolicy& policy,
                                        const std::vector<EvictionCandidate>& candidates) {
  std::vector<double> scores(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) scores[i] = policy.keep_score(candidates[i]);
  std::vector<std::size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (scores[a] != scores[b]) return scores[a] < scores[b];
    if (candidates[a].last_access != candidates[b].last_access)
      return candidates[a].last_access < candidates[b].last_access;
    return candidates[a].key < candidates[b].key;
  });
  return order;
}

}  // namespace orbit::store
