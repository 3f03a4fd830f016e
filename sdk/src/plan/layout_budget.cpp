// The budget's search (layout_planner.h: optimize_budget): the slots' candidates go to
// planner::search_budget (planner/budget_search.h, which says how it chooses) as plain KL and seconds; the
// kept instances that carry a loss go unenumerated, with a bound from their actions' floors, and are
// enumerated when the search asks.
#include <algorithm>

#include "orbit/planner/budget_search.h"
#include "plan/layout_planner.h"

namespace orbit::detail {

namespace {

std::vector<planner::BudgetCandidate> priced(const std::vector<PlanStep>& candidates) {
  std::vector<planner::BudgetCandidate> out;
  out.reserve(candidates.size());
  for (const PlanStep& s : candidates) out.push_back({s.predicted_kl, s.estimated_seconds});
  return out;
}

}  // namespace

// A kept instance that carries a loss and has not been enumerated: a bound on the KL removed per second
// added that any other action could offer (ActionFloor: no lookups); 0 for every other slot, and for one the
// read's look leaves kept (look_pinned_), which the search then never enumerates.
double LayoutPlanner::kept_loss_bound(std::size_t i, const PlanContext& none) const {
  const SlotInfo& si = info_[i];
  if (look_pinned_[i] != 0 || si.candidates.size() != 1 || si.candidates.front().action != StepAction::kKeep ||
      si.candidates.front().predicted_kl <= 0) {
    return 0;
  }
  const PlanStep& kept = si.candidates.front();
  const PlanInput in = input_for(i, &none);
  double bound = 0;
  for (const ServeAction* a : all_actions()) {
    if (a->category() == StepAction::kKeep || !considered(*a, policy_, i == 0 && plan_.rope_window > 0)) continue;
    const ActionFloor f = a->floor(in);
    if (!f.applicable || f.kl >= kept.predicted_kl) continue;
    bound = std::max(bound, planner::upgrade_gain(kept.predicted_kl, kept.estimated_seconds, f.kl, f.seconds));
  }
  return bound;
}

void LayoutPlanner::optimize_budget() {
  std::vector<planner::BudgetSlot> slots(info_.size());
  const PlanContext none(prefix_);
  for (std::size_t i = 0; i < info_.size(); ++i) {
    slots[i].candidates = priced(info_[i].candidates);
    slots[i].chosen = info_[i].chosen;
    slots[i].pending_bound = kept_loss_bound(i, none);
  }
  planner::BudgetSearchOptions options;
  options.kl_budget = policy_.kl_budget;
  options.free_rate = policy_.kl_budget / std::max(cost_.seconds_forward(1, 0), 1e-12);
  // One pass over the window's context for a batch, in slot order.
  const planner::EnumerateSlots enumerate = [this](const std::vector<std::size_t>& batch,
                                                   std::vector<planner::BudgetSlot>& out) {
    PlanContext before(prefix_);
    for (const std::size_t i : batch) {
      SlotInfo& si = info_[i];
      this->enumerate(i, input_for(i, context_upto(before, i)), *whys_[i]);
      // Keep first whatever its price: it is what the slot had, and the search moves off it.
      for (std::size_t c = 0; c < si.candidates.size(); ++c) {
        if (si.candidates[c].action == StepAction::kKeep) si.chosen = c;
      }
      out[i].candidates = priced(si.candidates);
      out[i].chosen = si.chosen;
    }
  };
  planner::search_budget(slots, options, enumerate);
  for (std::size_t i = 0; i < info_.size(); ++i) info_[i].chosen = slots[i].chosen;
}

}  // namespace orbit::detail
