// The budget's search (layout_planner.h: optimize_budget). Every slot starts at its cheapest action (kept
// instances kept); the instance whose next cheaper-in-KL action buys the most KL per second is upgraded
// until the window's predicted KL fits the policy's budget, or nothing is left to upgrade. Past that point
// an upgrade is still taken while it removes KL at a better rate than `free_rate`: the whole budget for the
// price of a one-token forward. A stored patch a microsecond dearer than blind reuse, say, is not worth
// leaving for a plan that happens to fit; forming a chunk again to shave a fraction of the budget is.
#include <algorithm>

#include "window/layout_planner.h"

namespace orbit::detail {

namespace {

// KL removed per second added by moving an instance from (kl, seconds) to (to_kl, to_seconds): what the
// budget's upgrades are ranked by, and what an action floor's bound is compared against.
double upgrade_gain(double kl, double seconds, double to_kl, double to_seconds) {
  return (kl - to_kl) / std::max(to_seconds - seconds, 1e-9);
}

struct Upgrade {
  double gain;
  std::size_t slot, candidate, from;  // from: the slot's choice when this entry was made
};

// Heap order: the highest gain on top, the earliest slot on a tie.
bool worse(const Upgrade& a, const Upgrade& b) { return a.gain != b.gain ? a.gain < b.gain : a.slot > b.slot; }

}  // namespace

// Each slot's best next upgrade (the most KL removed per second added, the first such candidate on a tie)
// depends only on what that slot has chosen, so a heap of one entry per slot, refreshed for the slot just
// upgraded, finds the window's best upgrade in O(log n) instead of a scan of every slot: the same choices
// (ties go to the earliest slot), without the quadratic cost when many slots upgrade.
//
// The kept instances that carry a loss may be upgraded too: over budget to fit it, under budget when the
// upgrade is nearly free (an exact patch a prepared move or recall stored). Enumerating every action of
// each (store lookups, patch keys, stale comparisons) is most of a large window's planning. Each is first
// given a bound on the gain its alternatives could offer (ActionFloor: no lookups); it is enumerated only
// once that bound reaches the best upgrade known, so the choices are the ones a full enumeration makes,
// and a window whose survivors lose next to nothing plans in time linear in its size with a small constant.
class BudgetSearch {
 public:
  explicit BudgetSearch(LayoutPlanner& p) : p_(p), info_(p.info_) {}

  void run() {
    double total_kl = 0;
    for (const SlotInfo& si : info_) total_kl += si.candidates[si.chosen].predicted_kl;
    for (std::size_t i = 0; i < info_.size(); ++i) {
      if (info_[i].candidates.size() > 1) push_best(i);
    }
    bound_kept_losses();
    const double budget = p_.policy_.kl_budget;
    const double free_rate = budget / std::max(p_.cost_.seconds_forward(1, 0), 1e-12);
    for (;;) {
      const double known = heap_.empty() ? -1.0 : heap_.front().gain;
      const double bound = next_pending_ < pending_.size() ? pending_[next_pending_].first : -1.0;
      const double best = std::max(known, bound);
      if (best < 0 || (total_kl <= budget && best < free_rate)) break;
      if (bound >= known) {
        expand();
        continue;
      }
      std::pop_heap(heap_.begin(), heap_.end(), worse);
      const Upgrade u = heap_.back();
      heap_.pop_back();
      SlotInfo& si = info_[u.slot];
      if (si.chosen != u.from) continue;  // stale: the slot was upgraded since
      total_kl += si.candidates[u.candidate].predicted_kl - si.candidates[si.chosen].predicted_kl;
      si.chosen = u.candidate;
      push_best(u.slot);
    }
  }

 private:
  // Queues slot i's best upgrade from its current choice, if it has one.
  void push_best(std::size_t i) {
    const PlanStep& cur = info_[i].candidates[info_[i].chosen];
    double best_gain = -1;
    std::size_t best = 0;
    for (std::size_t c = 0; c < info_[i].candidates.size(); ++c) {
      const PlanStep& alt = info_[i].candidates[c];
      if (alt.predicted_kl >= cur.predicted_kl) continue;
      const double gain =
          upgrade_gain(cur.predicted_kl, cur.estimated_seconds, alt.predicted_kl, alt.estimated_seconds);
      if (gain > best_gain) {
        best_gain = gain;
        best = c;
      }
    }
    if (best_gain < 0) return;
    heap_.push_back({best_gain, i, best, info_[i].chosen});
    std::push_heap(heap_.begin(), heap_.end(), worse);
  }

  // The kept instances with a loss, each with a bound on the gain any other action could offer, highest
  // first (pending_).
  void bound_kept_losses() {
    PlanContext none(p_.prefix_);
    for (std::size_t i = 0; i < info_.size(); ++i) {
      const SlotInfo& si = info_[i];
      if (si.candidates.size() != 1 || si.candidates.front().action != StepAction::kKeep ||
          si.candidates.front().predicted_kl <= 0) {
        continue;
      }
      const PlanStep& kept = si.candidates.front();
      const PlanInput in = p_.input_for(i, &none);
      double bound = 0;
      for (const ServeAction* a : all_actions()) {
        if (a->category() == StepAction::kKeep || !considered(*a)) continue;
        const ActionFloor f = a->floor(in);
        if (!f.applicable || f.kl >= kept.predicted_kl) continue;
        bound = std::max(bound, upgrade_gain(kept.predicted_kl, kept.estimated_seconds, f.kl, f.seconds));
      }
      if (bound > 0) pending_.emplace_back(bound, i);
    }
    std::sort(pending_.begin(), pending_.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
  }

  // Enumerates the pending slots whose bound is within a factor of the highest left (one pass over the
  // window's context, in slot order) and queues their best upgrades.
  void expand() {
    const double cut = pending_[next_pending_].first / 16;
    std::vector<std::size_t> batch;
    while (next_pending_ < pending_.size() && pending_[next_pending_].first >= cut) {
      batch.push_back(pending_[next_pending_++].second);
    }
    std::sort(batch.begin(), batch.end());
    PlanContext before(p_.prefix_);
    for (const std::size_t i : batch) {
      SlotInfo& si = info_[i];
      p_.enumerate(i, p_.input_for(i, p_.context_upto(before, i)), *p_.whys_[i]);
      // Keep first whatever its price: it is what the slot had, and the upgrade loop moves off it.
      for (std::size_t c = 0; c < si.candidates.size(); ++c) {
        if (si.candidates[c].action == StepAction::kKeep) si.chosen = c;
      }
      push_best(i);
    }
  }

  LayoutPlanner& p_;
  std::vector<SlotInfo>& info_;
  std::vector<Upgrade> heap_;
  std::vector<std::pair<double, std::size_t>> pending_;  // (gain bound, slot), highest first
  std::size_t next_pending_ = 0;
};

void LayoutPlanner::optimize_budget() { BudgetSearch(*this).run(); }

}  // namespace orbit::detail
