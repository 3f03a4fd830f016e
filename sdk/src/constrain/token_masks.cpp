// The vocabulary trie and the mask walk (token_masks.h).
#include "constrain/token_masks.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "orbit/common/error.h"

namespace orbit::constrain {

VocabTrie::VocabTrie(const std::vector<std::optional<std::string>>& bytes)
    : vocab_size_(static_cast<int64_t>(bytes.size())) {
  std::vector<int32_t> ids;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i].has_value() && !bytes[i]->empty()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
    return *bytes[static_cast<std::size_t>(x)] < *bytes[static_cast<std::size_t>(y)];
  });
  // Strings in sorted order: a prefix comes before what extends it, so each string's last node is the node
  // made last, and its tokens can be appended in node order.
  byte_.push_back(0);
  depth_.push_back(0);
  end_.push_back(0);
  token_begin_.push_back(0);
  std::vector<int32_t> path{0};
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = *bytes[static_cast<std::size_t>(id)];
    ORBIT_CHECK(s.size() < std::numeric_limits<uint16_t>::max(),
                "token vocabulary: token " << id << " has " << s.size() << " bytes");
    std::size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (path.size() > lcp + 1) {
      end_[static_cast<std::size_t>(path.back())] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (std::size_t k = lcp; k < s.size(); ++k) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[k]));
      depth_.push_back(static_cast<uint16_t>(k + 1));
      end_.push_back(0);
      token_begin_.push_back(static_cast<int32_t>(tokens_.size()));
    }
    tokens_.push_back(id);
    max_len_ = std::max(max_len_, static_cast<int64_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    end_[static_cast<std::size_t>(path.back())] = static_cast<int32_t>(byte_.size());
    path.pop_back();
  }
  token_begin_.push_back(static_cast<int32_t>(tokens_.size()));
}

std::size_t MaskCache::KeyHash::operator()(const std::vector<uint32_t>& k) const noexcept {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t w : k) {
    h ^= w;
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return static_cast<std::size_t>(h);
}

MaskCache::MaskCache(const Grammar& grammar, const VocabTrie& trie, std::size_t max_bytes)
    : grammar_(grammar), trie_(trie), matcher_(grammar) {
  const std::size_t per_mask = static_cast<std::size_t>((trie.vocab_size() + 63) / 64) * 8 + 64;
  max_entries_ = std::max<std::size_t>(16, max_bytes / per_mask);
}

MaskEntry MaskCache::compute(const StateSet& state) const {
  MaskEntry e;
  e.bits.assign(static_cast<std::size_t>((trie_.vocab_size() + 63) / 64), 0);
  e.complete = matcher_.can_end(state);
  e.need = matcher_.min_bytes(state);
  std::vector<StateSet> at(static_cast<std::size_t>(trie_.max_token_bytes()) + 1);
  at[0] = state;
  const std::size_t n = trie_.byte_.size();
  for (std::size_t i = 1; i < n;) {
    const std::size_t d = trie_.depth_[i];
    if (!matcher_.step(at[d - 1], trie_.byte_[i], at[d])) {
      i = static_cast<std::size_t>(trie_.end_[i]);  // no token through this node can be allowed
      continue;
    }
    const int32_t first = trie_.token_begin_[i], last = trie_.token_begin_[i + 1];
    if (first < last) {
      const int64_t need = matcher_.min_bytes(at[d]);
      for (int32_t k = first; k < last; ++k) {
        const int32_t t = trie_.tokens_[static_cast<std::size_t>(k)];
        e.bits[static_cast<std::size_t>(t) / 64] |= uint64_t{1} << (t % 64);
        ++e.allowed;
        if (need != e.need) e.differs.emplace_back(need, t);
      }
    }
    ++i;
  }
  std::sort(e.differs.begin(), e.differs.end());
  return e;
}

std::shared_ptr<const MaskEntry> MaskCache::get(const StateSet& state) const {
  std::vector<uint32_t> key;
  matcher_.key(state, trie_.max_token_bytes(), key);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      return it->second;
    }
  }
  auto entry = std::make_shared<const MaskEntry>(compute(state));
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  if (entries_.size() >= max_entries_) entries_.clear();
  return entries_.emplace(std::move(key), std::move(entry)).first->second;
}

std::size_t MaskCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

std::size_t MaskCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

}  // namespace orbit::constrain
