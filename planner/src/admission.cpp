// AdmissionController: value-per-byte admission with pins, priorities and backpressure (see admission.h).
#include "orbit/planner/admission.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "orbit/common/error.h"

namespace orbit::planner {

double AdmissionItem::value() const {
  double gain = expected_reuse * cost_saved;
  if (bytes == 0) return gain > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return gain / static_cast<double>(bytes);
}

AdmissionController::AdmissionController(int64_t budget_bytes) : budget_(budget_bytes) {
  ORBIT_CHECK(budget_bytes >= 0, "AdmissionController: budget must be ≥ 0 bytes, got " << budget_bytes);
}

std::vector<std::string> AdmissionController::victims(int64_t extra, int64_t budget, const Rank* ceiling,
                                                      bool& ok) const {
  std::vector<std::string> out;
  int64_t used = used_;
  for (auto it = evictable_.begin(); it != evictable_.end() && used + extra > budget; ++it) {
    const auto& [priority, value, key] = *it;
    if (ceiling && !(std::tie(priority, value) < std::tie(std::get<0>(*ceiling), std::get<1>(*ceiling)))) break;
    out.push_back(key);
    used -= items_.at(key).bytes;
  }
  ok = used + extra <= budget;
  if (!ok) out.clear();
  return out;
}

AdmissionDecision AdmissionController::plan_admit(const AdmissionItem& item) const {
  ORBIT_CHECK(item.bytes >= 0, "AdmissionController: item '" << item.key << "' has negative bytes " << item.bytes);
  ORBIT_CHECK(
      std::isfinite(item.expected_reuse) && item.expected_reuse >= 0 && std::isfinite(item.cost_saved) &&
          item.cost_saved >= 0,
      "AdmissionController: item '" << item.key << "' needs finite, non-negative expected_reuse and cost_saved");
  ORBIT_CHECK(!contains(item.key), "AdmissionController: '" << item.key << "' is already resident");
  AdmissionDecision d;
  if (item.bytes > budget_) {
    d.reason = "'" + item.key + "' needs " + std::to_string(item.bytes) + " bytes, more than the whole budget of " +
               std::to_string(budget_);
    return d;
  }
  Rank rank = rank_of(item);
  bool ok = false;
  d.evict = victims(item.bytes, budget_, item.pinned ? nullptr : &rank, ok);
  d.admitted = ok;
  if (!ok) {
    std::ostringstream why;
    why << "'" << item.key << "' needs " << item.bytes << " bytes; budget " << budget_ << ", used " << used_
        << " (pinned " << pinned_ << "); evicting "
        << (item.pinned ? "every unpinned item" : "the unpinned items ranked below it") << " does not free enough";
    d.reason = why.str();
  }
  return d;
}

AdmissionDecision AdmissionController::admit(const AdmissionItem& item) {
  AdmissionDecision d = plan_admit(item);
  if (!d.admitted) return d;
  for (const std::string& key : d.evict) erase(key);
  items_.emplace(item.key, item);
  used_ += item.bytes;
  if (item.pinned) {
    pinned_ += item.bytes;
  } else {
    evictable_.insert(rank_of(item));
  }
  return d;
}

void AdmissionController::erase(const std::string& key) {
  auto it = items_.find(key);
  ORBIT_CHECK(it != items_.end(), "AdmissionController: '" << key << "' is not resident");
  const AdmissionItem& item = it->second;
  used_ -= item.bytes;
  if (item.pinned) {
    pinned_ -= item.bytes;
  } else {
    evictable_.erase(rank_of(item));
  }
  items_.erase(it);
}

void AdmissionController::release(const std::string& key) { erase(key); }

void AdmissionController::set_pinned(const std::string& key, bool pinned) {
  auto it = items_.find(key);
  ORBIT_CHECK(it != items_.end(), "AdmissionController::set_pinned: '" << key << "' is not resident");
  AdmissionItem& item = it->second;
  if (item.pinned == pinned) return;
  if (pinned) {
    evictable_.erase(rank_of(item));
    pinned_ += item.bytes;
  } else {
    evictable_.insert(rank_of(item));
    pinned_ -= item.bytes;
  }
  item.pinned = pinned;
}

AdmissionDecision AdmissionController::set_budget(int64_t budget_bytes) {
  ORBIT_CHECK(budget_bytes >= 0, "AdmissionController::set_budget: budget must be ≥ 0 bytes, got " << budget_bytes);
  AdmissionDecision d;
  bool ok = false;
  d.evict = victims(0, budget_bytes, nullptr, ok);
  if (!ok) {
    d.reason =
        "budget " + std::to_string(budget_bytes) + " bytes is below the " + std::to_string(pinned_) + " pinned bytes";
    return d;
  }
  for (const std::string& key : d.evict) erase(key);
  budget_ = budget_bytes;
  d.admitted = true;
  return d;
}

std::vector<std::string> AdmissionController::keys() const {
  std::vector<std::string> out;
  for (const Rank& rank : evictable_) out.push_back(std::get<2>(rank));
  for (const auto& [key, item] : items_)
    if (item.pinned) out.push_back(key);
  return out;
}

void AdmissionController::verify_integrity() const {
  int64_t used = 0, pinned = 0;
  size_t unpinned = 0;
  for (const auto& [key, item] : items_) {
    used += item.bytes;
    if (item.pinned) {
      pinned += item.bytes;
    } else {
      ++unpinned;
      ORBIT_CHECK(evictable_.count(rank_of(item)) == 1, "AdmissionController: '" << key << "' missing from the index");
    }
  }
  ORBIT_CHECK(unpinned == evictable_.size(), "AdmissionController: index holds " << evictable_.size() << " entries for "
                                                                                 << unpinned << " unpinned items");
  ORBIT_CHECK(used == used_ && pinned == pinned_, "AdmissionController: books say used "
                                                      << used_ << " pinned " << pinned_ << ", items sum to " << used
                                                      << " and " << pinned);
  ORBIT_CHECK(used_ <= budget_, "AdmissionController: used " << used_ << " > budget " << budget_);
}

}  // namespace orbit::planner
