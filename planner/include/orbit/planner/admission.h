// Admission under one byte budget (DESIGN.md §4): which chunks (or patches) a tier keeps.
//
// Each resident item has a value per byte,
//
//     value = expected_reuse × cost_saved / bytes        (+infinity for a 0-byte item with a positive gain)
//
// and a priority set by the caller (higher = kept longer). Eviction order: lowest (priority, value)
// first, then key; pinned items are never evicted. An incoming item may evict only residents strictly below
// it in (priority, value) — unless it is pinned itself, when any unpinned resident may go. If that cannot
// free enough bytes, the item is refused: backpressure is a value (admitted = false with a reason naming
// the bytes needed, the budget and the pinned bytes), never an exception and never an overrun.
//
// Invariant: used_bytes() ≤ budget_bytes() after every call (verify_integrity() checks it and the
// books). Plan, then apply (STYLE.md 2): plan_admit() is const and says what admit() would do; admit()
// does it. The controller only keeps the books: the caller drops the evicted keys from its store.
// Thread-safety: none (the owner serialises calls). Misuse (a duplicate or unknown key, negative bytes or
// non-finite gains) throws orbit::Error naming the key.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace orbit::planner {

struct AdmissionItem {
  std::string key;            // the store's key (unique among residents)
  int64_t bytes = 0;          // ≥ 0
  double expected_reuse = 0;  // expected future uses (≥ 0)
  double cost_saved = 0;      // seconds saved per use by keeping it (≥ 0)
  bool pinned = false;        // never evicted while resident
  int priority = 0;           // higher outranks lower regardless of value
  double value() const;       // see the top of this file
};

struct AdmissionDecision {
  bool admitted = false;
  std::vector<std::string> evict;  // keys the admission evicts, in eviction order (empty when refused)
  std::string reason;              // why refused; empty when admitted
};

class AdmissionController {
 public:
  explicit AdmissionController(int64_t budget_bytes);  // throws when budget_bytes < 0

  // What admit(item) would do; changes nothing.
  AdmissionDecision plan_admit(const AdmissionItem& item) const;
  // Admits `item` (evicting the listed keys and charging its bytes) or refuses it, changing nothing.
  // Throws if item.key is resident.
  AdmissionDecision admit(const AdmissionItem& item);
  // Uncharges a resident (pinned or not). Throws if `key` is not resident.
  void release(const std::string& key);
  // Pins or unpins a resident. Throws if `key` is not resident.
  void set_pinned(const std::string& key, bool pinned);

  // Changes the budget, evicting lowest-ranked unpinned items until used ≤ new budget. Refused (nothing
  // changes, reason given) when the pinned bytes alone exceed it. Throws when budget_bytes < 0.
  AdmissionDecision set_budget(int64_t budget_bytes);

  bool contains(const std::string& key) const { return items_.count(key) != 0; }
  int64_t used_bytes() const { return used_; }
  int64_t budget_bytes() const { return budget_; }
  int64_t pinned_bytes() const { return pinned_; }
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  // Resident keys in eviction order (unpinned first, lowest (priority, value) first), then pinned ones.
  std::vector<std::string> keys() const;
  // Throws orbit::Error when the books disagree (used or pinned ≠ Σ, the rank index out of sync, used >
  // budget). For tests.
  void verify_integrity() const;

 private:
  using Rank = std::tuple<int, double, std::string>;  // (priority, value, key): eviction order
  static Rank rank_of(const AdmissionItem& item) { return {item.priority, item.value(), item.key}; }
  // Unpinned residents to evict, lowest rank first, to bring used + extra ≤ budget; only residents
  // ranked below `ceiling` when one is given. Empty with `ok` false when that is not enough.
  std::vector<std::string> victims(int64_t extra, int64_t budget, const Rank* ceiling, bool& ok) const;
  void erase(const std::string& key);

  int64_t budget_ = 0;
  int64_t used_ = 0;
  int64_t pinned_ = 0;
  std::map<std::string, AdmissionItem> items_;
  std::set<Rank> evictable_;  // unpinned residents by rank
};

}  // namespace orbit::planner
