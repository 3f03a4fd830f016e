// How a reorder changes what precedes each kept instance.
//
// An instance's KV depends on its antecedents: the instances before it. A reorder changes them in two ways
// that cost fidelity very differently. Moving an instance later puts new content right before it (it now
// attends to instances it never saw); moving another one from before it to after it removes content from
// its context. Only an instance whose antecedents stay the same set, in another order, loses what an
// orbit patch (the mean over orderings) would. The fidelity model prices the first two as the keep loss of
// an insertion or a removal (fidelity_model.h keep_change), the third as the orbit loss (added to the keep
// loss of an instance that had drifted before).
//
// Given the kept instances in their new order with their old rank, old and new positions and token
// counts, antecedent_changes() returns per instance the tokens inserted before it and removed from before
// it, each with the gap (positions) between the nearest such instance and it:
//
//   inserted   instances j now before i that were after it:  Σ tokens(j); gap = new_position(i) − the
//              largest new end (new_position + extent) among them
//   removed    instances j that were before i and now follow: Σ tokens(j); gap = old_position(i) − the
//              largest old end among them
//
// The instances between the nearest one and i are unchanged antecedents in both cases, so each gap is the
// context i keeps between itself and the change. O(n log n) (Fenwick trees over old ranks); an order that
// keeps every old rank ascending returns all zeros in O(n).
#pragma once

#include <cstdint>
#include <vector>

namespace orbit::planner {

struct KeptInstance {
  int64_t old_rank = 0;      // its index among the kept instances in the old order (a permutation of 0..n-1)
  int64_t old_position = 0;  // its first position before the operation
  int64_t new_position = 0;  // and after
  int64_t tokens = 0;        // its tokens (what joins or leaves another's context)
  int64_t extent = 0;        // the positions it spans (>= tokens for image chunks)
};

struct AntecedentChange {
  int64_t inserted = 0;      // tokens of instances that moved from after it to before it
  int64_t inserted_gap = 0;  // positions between the nearest of them and it (0 when none)
  int64_t removed = 0;       // tokens of instances that moved from before it to after it
  int64_t removed_gap = 0;   // positions (old order) between the nearest of them and it (0 when none)
};

// `kept` in the new order. Throws orbit::Error when old_rank is not a permutation of 0..n-1.
std::vector<AntecedentChange> antecedent_changes(const std::vector<KeptInstance>& kept);

}  // namespace orbit::planner
