#include "orbit/planner/budget_search.h"

#include <algorithm>
#include <utility>

namespace orbit::planner {

double upgrade_gain(double kl, double seconds, double to_kl, double to_seconds) {
  return (kl - to_kl) / std::max(to_seconds - seconds, 1e-9);
}

namespace {

struct Upgrade {
  double gain;
  std::size_t slot, candidate, from;  // from: the slot's choice when this entry was made
};

// Heap order: the highest gain on top, the earliest slot on a tie.
bool worse(const Upgrade& a, const Upgrade& b) { return a.gain != b.gain ? a.gain < b.gain : a.slot > b.slot; }

// Each slot's best next upgrade depends only on what that slot has chosen, so a heap of one entry per slot,
// refreshed for the slot just upgraded, finds the window's best upgrade in O(log n) instead of a scan of
// every slot: the same choices, without the quadratic cost when many slots upgrade.
class Search {
 public:
  Search(std::vector<BudgetSlot>& slots, const EnumerateSlots& enumerate) : slots_(slots), enumerate_(enumerate) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].candidates.size() > 1) push_best(i);
      if (slots_[i].pending_bound > 0) pending_.emplace_back(slots_[i].pending_bound, i);
    }
    std::sort(pending_.begin(), pending_.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
  }

  double run(const BudgetSearchOptions& options) {
    double total_kl = 0;
    for (const BudgetSlot& s : slots_) total_kl += s.candidates[s.chosen].kl;
    for (;;) {
      const double known = heap_.empty() ? -1.0 : heap_.front().gain;
      const double bound = next_pending_ < pending_.size() ? pending_[next_pending_].first : -1.0;
      const double best = std::max(known, bound);
      if (best < 0 || (total_kl <= options.kl_budget && best < options.free_rate)) break;
      if (bound >= known) {
        expand();
        continue;
      }
      std::pop_heap(heap_.begin(), heap_.end(), worse);
      const Upgrade u = heap_.back();
      heap_.pop_back();
      BudgetSlot& s = slots_[u.slot];
      if (s.chosen != u.from) continue;  // stale: the slot was upgraded since
      total_kl += s.candidates[u.candidate].kl - s.candidates[s.chosen].kl;
      s.chosen = u.candidate;
      push_best(u.slot);
    }
    return total_kl;
  }

 private:
  // Queues slot i's best upgrade from its current choice (the first candidate with the best rate), if any.
  void push_best(std::size_t i) {
    const BudgetSlot& s = slots_[i];
    const BudgetCandidate& cur = s.candidates[s.chosen];
    double best_gain = -1;
    std::size_t best = 0;
    for (std::size_t c = 0; c < s.candidates.size(); ++c) {
      const BudgetCandidate& alt = s.candidates[c];
      if (alt.kl >= cur.kl) continue;
      const double gain = upgrade_gain(cur.kl, cur.seconds, alt.kl, alt.seconds);
      if (gain > best_gain) {
        best_gain = gain;
        best = c;
      }
    }
    if (best_gain < 0) return;
    heap_.push_back({best_gain, i, best, s.chosen});
    std::push_heap(heap_.begin(), heap_.end(), worse);
  }

  // Enumerates the pending slots whose bound is within a factor 16 of the highest left, in slot order (the
  // caller builds their contexts in one pass), and queues their best upgrades.
  void expand() {
    const double cut = pending_[next_pending_].first / 16;
    std::vector<std::size_t> batch;
    while (next_pending_ < pending_.size() && pending_[next_pending_].first >= cut) {
      batch.push_back(pending_[next_pending_++].second);
    }
    std::sort(batch.begin(), batch.end());
    enumerate_(batch, slots_);
    for (const std::size_t i : batch) {
      slots_[i].pending_bound = 0;
      push_best(i);
    }
  }

  std::vector<BudgetSlot>& slots_;
  const EnumerateSlots& enumerate_;
  std::vector<Upgrade> heap_;
  std::vector<std::pair<double, std::size_t>> pending_;  // (gain bound, slot), highest first
  std::size_t next_pending_ = 0;
};

}  // namespace

double search_budget(std::vector<BudgetSlot>& slots, const BudgetSearchOptions& options,
                     const EnumerateSlots& enumerate) {
  return Search(slots, enumerate).run(options);
}

}  // namespace orbit::planner
