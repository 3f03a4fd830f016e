// Offline bounds over a demand trace: compulsory, Belady/MIN, and LRU for comparison (see offline.h).
#include "orbit/planner/offline.h"

#include <cmath>
#include <limits>
#include <list>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "orbit/common/error.h"

namespace orbit::planner {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

void validate(const std::vector<Demand>& demands, int64_t capacity_bytes) {
  ORBIT_CHECK(capacity_bytes >= 0, "offline: capacity must be ≥ 0 bytes, got " << capacity_bytes);
  std::unordered_map<std::string, int64_t> bytes_of;
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    ORBIT_CHECK(d.bytes >= 0, "offline: demand " << i << " ('" << d.key << "') has negative bytes " << d.bytes);
    ORBIT_CHECK(std::isfinite(d.form_cost) && d.form_cost >= 0,
                "offline: demand " << i << " ('" << d.key << "') has form_cost " << d.form_cost);
    ORBIT_CHECK(i == 0 || d.step >= demands[i - 1].step,
                "offline: demand " << i << " has step " << d.step << " before " << demands[i - 1].step);
    auto [it, fresh] = bytes_of.emplace(d.key, d.bytes);
    ORBIT_CHECK(fresh || it->second == d.bytes, "offline: demand " << i << " asks '" << d.key << "' with " << d.bytes
                                                                   << " bytes, earlier " << it->second);
  }
}

// next[i]: index of the next demand of demands[i].key after i, or kNever.
std::vector<int64_t> next_uses(const std::vector<Demand>& demands) {
  std::vector<int64_t> next(demands.size(), kNever);
  std::unordered_map<std::string, int64_t> later;
  for (int64_t i = static_cast<int64_t>(demands.size()) - 1; i >= 0; --i) {
    auto it = later.find(demands[i].key);
    if (it != later.end()) next[i] = it->second;
    later[demands[i].key] = i;
  }
  return next;
}

}  // namespace

OfflineBound optimise_offline(const std::vector<Demand>& demands, int64_t capacity_bytes) {
  validate(demands, capacity_bytes);
  OfflineBound out;
  std::unordered_set<std::string> seen;
  for (const Demand& d : demands) {
    if (seen.insert(d.key).second || d.bytes > capacity_bytes) {
      out.compulsory_cost += d.form_cost;
      ++out.compulsory_misses;
    }
  }
  // Belady/MIN over residents ordered by next use. A never-reused item is not stored (it cannot hit).
  const std::vector<int64_t> next = next_uses(demands);
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> resident;  // key -> (next use, bytes)
  std::set<std::pair<int64_t, std::string>> by_next;                      // (next use, key), ascending
  int64_t used = 0;
  for (size_t i = 0; i < demands.size(); ++i) {
    const Demand& d = demands[i];
    auto hit = resident.find(d.key);
    if (hit != resident.end()) {
      by_next.erase({hit->second.first, d.key});
      hit->second.first = next[i];
      by_next.insert({next[i], d.key});
      continue;
    }
    out.belady_cost += d.form_cost;
    ++out.belady_misses;
    if (d.bytes > capacity_bytes || next[i] == kNever) continue;
    // Evict furthest-first until the item fits; if the item itself is needed no sooner than the furthest
    // remaining resident, keep the residents and do not store it.
    std::vector<std::string> evict;
    int64_t room = capacity_bytes - used;
    for (auto it = by_next.rbegin(); room < d.bytes; ++it) {
      if (next[i] >= it->first) break;
      evict.push_back(it->second);
      room += resident.at(it->second).second;
    }
    if (room < d.bytes) continue;
    for (const std::string& key : evict) {
      auto victim = resident.find(key);
      by_next.erase({victim->second.first, key});
      used -= victim->second.second;
      resident.erase(victim);
    }
    resident[d.key] = {next[i], d.bytes};
    by_next.insert({next[i], d.key});
    used += d.bytes;
  }
  return out;
}

PolicyCost simulate_lru(const std::vector<Demand>& demands, int64_t capacity_bytes) {
  validate(demands, capacity_bytes);
  PolicyCost out;
  std::list<std::pair<std::string, int64_t>> recency;  // most recent first: (key, bytes)
  std::unordered_map<std::string, std::list<std::pair<std::string, int64_t>>::iterator> where;
  int64_t used = 0;
  for (const Demand& d : demands) {
    auto hit = where.find(d.key);
    if (hit != where.end()) {
      recency.splice(recency.begin(), recency, hit->second);
      continue;
    }
    out.cost += d.form_cost;
    ++out.misses;
    if (d.bytes > capacity_bytes) continue;
    while (used + d.bytes > capacity_bytes) {
      used -= recency.back().second;
      where.erase(recency.back().first);
      recency.pop_back();
    }
    recency.emplace_front(d.key, d.bytes);
    where[d.key] = recency.begin();
    used += d.bytes;
  }
  return out;
}

}  // namespace orbit::planner
