// The offline optimiser (docs/ARCHITECTURE.md §10): over a known trace of patch demands, how well could
// any caching policy have done, and how does an online policy (LRU) compare?
//
// A trace is a sequence of demands, each for one stored patch (or chunk) `key` of `bytes`. A demand hits
// when the key is resident; otherwise it misses and costs its `form_cost` (the patch is formed), after
// which the policy may store it, evicting residents to stay within `capacity_bytes`. The cache starts
// empty. An item larger than the capacity is never stored: every demand for it misses.
//
//   compulsory  the first demand of every key, plus every demand of an item larger than the capacity:
//               misses for every policy, so compulsory_cost is a true lower bound on any policy's cost.
//   Belady      MIN: on a miss, if the item would not fit, evict the resident whose next demand lies
//               furthest in the future; the incoming item competes too (if its own next demand is the
//               furthest it is formed and not stored). Optimal — equal to the best of all policies — when
//               every item has the same size and every demand the same form cost; with unequal sizes or
//               costs it is a strong heuristic, not a bound (it may even lose to LRU).
//   LRU         on a miss, store the item, evicting the least recently used residents until it fits.
//
// Demands are processed in trace order; `step` must not decrease (it is the caller's clock, for reports).
// Pure functions; misuse (negative bytes or capacity, a non-finite or negative cost, a key demanded with
// different sizes, decreasing steps) throws orbit::Error naming the demand's index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orbit::planner {

struct Demand {
  int64_t step = 0;
  std::string key;
  int64_t bytes = 0;
  double form_cost = 0;  // cost of this demand when it misses (seconds)
};

struct OfflineBound {
  double compulsory_cost = 0;
  double belady_cost = 0;
  int64_t compulsory_misses = 0;
  int64_t belady_misses = 0;
};

struct PolicyCost {
  double cost = 0;
  int64_t misses = 0;
};

OfflineBound optimise_offline(const std::vector<Demand>& demands, int64_t capacity_bytes);
PolicyCost simulate_lru(const std::vector<Demand>& demands, int64_t capacity_bytes);

}  // namespace orbit::planner
