#include "orbit/planner/prefix_ledger.h"

#include "orbit/common/error.h"

namespace orbit::planner {

PrefixLedger::PrefixLedger(std::size_t capacity) : capacity_(capacity) {
  ORBIT_CHECK(capacity >= 1, "PrefixLedger: capacity must be >= 1");
}

int64_t PrefixLedger::read(const std::vector<PrefixSpan>& window) {
  std::size_t hit = 0;  // instances the cache holds the prefix of, from the start
  while (hit < window.size() && where_.count(window[hit].prefix) > 0) ++hit;
  int64_t recomputed = 0;
  for (std::size_t i = hit; i < window.size(); ++i) recomputed += window[i].tokens;
  // Deepest first, so the window's shortest prefixes end up the most recent: what is forgotten first is a
  // leaf, as in a radix tree, never a prefix that longer ones remembered here depend on.
  for (auto s = window.rbegin(); s != window.rend(); ++s) touch(s->prefix);
  return recomputed;
}

void PrefixLedger::touch(uint64_t prefix) {
  const auto it = where_.find(prefix);
  if (it != where_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(prefix);
  where_.emplace(prefix, lru_.begin());
  if (lru_.size() > capacity_) {
    where_.erase(lru_.back());
    lru_.pop_back();
  }
}

}  // namespace orbit::planner
