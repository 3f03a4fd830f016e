// Placement: the order of a window's chunks as a decision variable (docs/ARCHITECTURE.md §10).
//
// Reordering is free on the orbit (relocation only), so the window manager may choose the order of the
// chunks a window must hold. Placing item i after exactly the set S of other items costs cost(i, S): a
// stored patch keyed by S is a cheap hit, anything else has to be formed. Orbit patches are keyed by the
// antecedent *set*, so the cost depends on S, not on the order inside S, and the cost of an order is
//
//     cost(π) = Σ_k cost(π[k], {π[0], ..., π[k-1]})
//
// Items are 0..n-1; a set is a bit mask (bit i = item i), so n ≤ 63.
//
//   exact (n ≤ exact_up_to)   dynamic programming over subsets: f(∅) = 0,
//                             f(S) = min_{i ∈ S} f(S \ {i}) + cost(i, S \ {i}); the answer is f(all).
//                             n·2^(n-1) cost evaluations (each (item, set) pair once), 2^n states in memory.
//   greedy (beyond)           repeatedly append the cheapest next item given the set placed so far (ties:
//                             lowest index), n(n+1)/2 evaluations; then, optionally, local search: adjacent
//                             swaps (4 evaluations each, only the two swapped items' sets change) and
//                             pairwise swaps, first improvement, until no swap improves or the pass limit.
//
// Costs may be +infinity (a placement that is not allowed); an order that needs one costs +infinity. NaN
// and -infinity are bad input. Everything is deterministic: ties go to the lower index (DP: the lowest
// index as the last item of each set; greedy: the lowest index next). Thread-safety: place() calls
// `cost` from the calling thread only; concurrent place() calls are fine if `cost` is.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace orbit::planner {

struct PlacementProblem {
  int64_t num_items = 0;  // 0..63
  // Seconds (or any additive unit) to place `item` when exactly the items in `antecedent_mask` precede it.
  // Never called with `item` in the mask.
  std::function<double(int64_t item, uint64_t antecedent_mask)> cost;
};

struct PlacementOptions {
  int64_t exact_up_to = 12;          // exact DP for n ≤ this (at most 24: 2^24 states)
  bool local_search = true;          // greedy path: improve the greedy order by swaps
  int64_t local_search_passes = 16;  // greedy path: at most this many full sweeps of swaps
  // Greedy path: an order to beat (typically the window's current one), empty for none. Local search
  // starts from the cheaper of it and the greedy order, so the result never costs more than it. Must be a
  // permutation of 0..n-1.
  std::vector<int64_t> incumbent;
};

struct Placement {
  std::vector<int64_t> order;  // a permutation of 0..n-1: order[k] is the item at position k
  double cost = 0;             // cost(order), +infinity when every order needs a forbidden placement
  bool exact = false;          // true when `order` is proven optimal (DP or brute force)
  int64_t evaluations = 0;     // calls of problem.cost
};

// The cheapest order found (see the top of this file). Throws orbit::Error when num_items is outside
// 0..63, cost is empty, exact_up_to is outside 0..24, the incumbent is not a permutation, or a cost is NaN
// or -infinity (naming the item and mask).
Placement place(const PlacementProblem& problem, const PlacementOptions& options = {});

// Every one of the n! orders (n ≤ 9, else throws); ties go to the lexicographically first order. For tests.
Placement place_brute_force(const PlacementProblem& problem);

// cost(order) as defined above (n evaluations). Throws unless `order` is a permutation of 0..n-1.
double order_cost(const PlacementProblem& problem, const std::vector<int64_t>& order);

}  // namespace orbit::planner
