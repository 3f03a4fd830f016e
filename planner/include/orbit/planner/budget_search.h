// The KL budget's search: which way of serving each instance of a window takes, so that the window's
// predicted KL fits a budget for the least time. Pure data, no model: the window's planner supplies every
// slot's candidates (predicted KL and estimated seconds per way of serving) and is called back to
// enumerate the slots it left unenumerated; tests drive it with hand-made slots.
//
// Every slot starts at its chosen candidate (the cheapest; a kept instance kept). The slot whose next
// candidate removes the most KL per second added is upgraded, again and again, until the window's KL fits
// the budget or nothing is left to upgrade. Past that point an upgrade is still taken while its rate beats
// `free_rate`: the whole budget for the price of a one-token forward, say. A stored patch a microsecond
// dearer than blind reuse is not worth leaving for a plan that happens to fit; forming a chunk again to
// shave a fraction of the budget is.
//
// Lazy enumeration: a kept instance carrying a loss may be upgraded too, but enumerating its alternatives
// (store lookups, patch keys) is most of a large window's planning. Such a slot comes with only its kept
// candidate and `pending_bound`, an upper bound on the rate any alternative could offer (from the actions'
// floors). It is enumerated only once that bound reaches the best upgrade known, so the choices are those a
// full enumeration would make, and a window whose survivors lose next to nothing plans in linear time.
//
// Ties: between slots the earliest wins; within a slot the first candidate with the best rate.
// Thread-safety: none needed (one call, one caller).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace orbit::planner {

struct BudgetCandidate {
  double kl = 0;       // predicted KL of serving the slot this way (nats)
  double seconds = 0;  // estimated seconds of serving it this way
};

struct BudgetSlot {
  std::vector<BudgetCandidate> candidates;  // at least one; the search never reorders them
  std::size_t chosen = 0;                   // index into candidates: the start, then the search's choice
  // > 0: a kept instance whose alternatives are not enumerated yet; a bound on the KL removed per second
  // added any of them could offer. The enumerate callback fills its candidates and sets `chosen` to the
  // kept one; the search sets pending_bound to 0 then.
  double pending_bound = 0;
};

struct BudgetSearchOptions {
  double kl_budget = 0;  // the window's predicted KL to fit (nats, > 0)
  double free_rate = 0;  // KL per second at which an upgrade is taken even under budget
};

// Enumerates the slots of `batch` (ascending indices, all with pending_bound > 0): fills each one's
// candidates and chosen.
using EnumerateSlots = std::function<void(const std::vector<std::size_t>& batch, std::vector<BudgetSlot>& slots)>;

// Runs the search on `slots` in place (their `chosen`); returns the window's predicted KL after it.
double search_budget(std::vector<BudgetSlot>& slots, const BudgetSearchOptions& options,
                     const EnumerateSlots& enumerate);

// KL removed per second added by moving from (kl, seconds) to (to_kl, to_seconds): the rate upgrades are
// ranked by (a time difference under 1 ns counts as 1 ns).
double upgrade_gain(double kl, double seconds, double to_kl, double to_seconds);

}  // namespace orbit::planner
