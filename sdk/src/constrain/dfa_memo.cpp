#include "constrain/dfa_memo.h"

#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace orbit::constrain {

namespace {

class DfaMemo {
 public:
  std::shared_ptr<const ByteDfa> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->dfa;
  }

  std::shared_ptr<const ByteDfa> keep(const std::string& key, std::shared_ptr<const ByteDfa> dfa) {
    const std::size_t size = bytes_of(*dfa) + key.size();
    if (size > kMaxBytes / 8) return dfa;  // a huge language would push out many ordinary ones
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) return it->second->dfa;
    while (!lru_.empty() && (bytes_ + size > kMaxBytes || lru_.size() >= kMaxEntries)) {
      bytes_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    lru_.push_front(Entry{key, dfa, size});
    index_.emplace(key, lru_.begin());
    bytes_ += size;
    return dfa;
  }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const ByteDfa> dfa;
    std::size_t bytes = 0;
  };
  static constexpr std::size_t kMaxEntries = 1024;
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

  // The vectors' contents: per state its edge list, flags and counts; then the edges.
  static std::size_t bytes_of(const ByteDfa& d) {
    std::size_t n = d.size() * (sizeof(std::vector<ByteDfa::Edge>) + 2 + 7 * sizeof(int64_t));
    for (const auto& edges : d.edges) n += edges.size() * sizeof(ByteDfa::Edge);
    return n;
  }

  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t bytes_ = 0;
};

DfaMemo& memo() {
  static DfaMemo* m = new DfaMemo();  // never destroyed: a compile may run on a thread that outlives statics
  return *m;
}

}  // namespace

std::shared_ptr<const ByteDfa> memo_dfa(const std::string& key, const std::function<ByteDfa()>& build) {
  if (std::shared_ptr<const ByteDfa> known = memo().find(key)) return known;
  return memo().keep(key, std::make_shared<const ByteDfa>(build()));
}

std::string memo_part(const std::string& text) { return std::to_string(text.size()) + ":" + text; }

}  // namespace orbit::constrain
