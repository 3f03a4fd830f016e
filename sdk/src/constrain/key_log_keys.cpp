// The key log's per-object keys (key_log.h: KeyLog::Keys): the keys each open object has, the sorted lengths of
// those each key node writes, kept as keys close and copied on write where copies of the log share them.
#include "constrain/key_log.h"

#include <algorithm>
#include <atomic>

#include "constrain/key_log_parts.h"

namespace orbit::constrain {

KeySet::KeySet(const KeySet& other) {
  std::size_t bytes = 0;
  for (const std::string_view s : other.sorted_) bytes += s.size();
  sorted_.reserve(other.sorted_.size());
  if (bytes > 0) {
    blocks_.push_back(std::make_unique<char[]>(bytes));  // one block: the strings in order
    last_size_ = bytes;
    left_ = bytes;
  }
  for (const std::string_view s : other.sorted_) sorted_.push_back(store(s));
}

KeySet& KeySet::operator=(const KeySet& other) {
  if (this != &other) *this = KeySet(other);
  return *this;
}

std::string_view KeySet::store(std::string_view s) {
  if (s.empty()) return {};
  if (left_ < s.size()) {
    last_size_ = std::max<std::size_t>({256, 2 * last_size_, s.size()});
    blocks_.push_back(std::make_unique<char[]>(last_size_));
    left_ = last_size_;
  }
  char* at = blocks_.back().get() + (last_size_ - left_);
  std::copy(s.begin(), s.end(), at);
  left_ -= s.size();
  return {at, s.size()};
}

bool KeySet::insert(std::string_view s) {
  const auto it = std::lower_bound(sorted_.begin(), sorted_.end(), s);
  if (it != sorted_.end() && *it == s) return false;
  const std::ptrdiff_t at = it - sorted_.begin();
  const std::string_view kept = store(s);
  sorted_.insert(sorted_.begin() + at, kept);
  return true;
}

std::size_t KeySet::count(std::string_view s) const {
  return std::binary_search(sorted_.begin(), sorted_.end(), s) ? 1 : 0;
}

KeySet::const_iterator KeySet::lower_bound(std::string_view s) const {
  return std::lower_bound(sorted_.begin(), sorted_.end(), s);
}

KeySet::const_iterator KeySet::upper_bound(std::string_view s) const {
  return std::upper_bound(sorted_.begin(), sorted_.end(), s);
}

void KeySet::clear() {
  sorted_.clear();
  blocks_.clear();
  left_ = last_size_ = 0;
}

bool key_log::writes(const Node& key, std::string_view quoted) {
  if (key.kind == NodeKind::kLiteralSet) {
    int32_t at = 0;
    for (std::size_t i = 0; i < quoted.size() && at >= 0; ++i) at = key.trie.child(at, static_cast<uint8_t>(quoted[i]));
    return at >= 0 && key.trie.nodes[static_cast<std::size_t>(at)].value >= 0;
  }
  if (key.kind != NodeKind::kDfa) return true;  // a string of any text: every key the object has is one
  int32_t q = 0;
  int64_t chars = 0;
  for (std::size_t i = 0; i < quoted.size() && q >= 0; ++i) {
    q = key.dfa->next(q, static_cast<uint8_t>(quoted[i]));
    if (q >= 0) chars += key.dfa->char_end[static_cast<std::size_t>(q)];
  }
  return q >= 0 && key.dfa->accepting[static_cast<std::size_t>(q)] != 0 && chars <= key.max_count;
}

using key_log::writes;

bool KeyLog::Taken::contains(const std::string& k) const {
  if (log != nullptr && log->all.count(k) != 0 && (key == nullptr || writes(*key, k))) return true;
  return more.count(k) != 0;
}

bool KeyLog::Taken::any_begins(const std::string& prefix) const {
  const auto begins = [&](const auto& keys) {
    const auto it = keys.lower_bound(prefix);
    return it != keys.end() && it->compare(0, prefix.size(), prefix) == 0;
  };
  return (log != nullptr && begins(log->all)) || begins(more);
}

std::size_t KeyLog::Taken::count_begins(const std::string& prefix, std::size_t limit) const {
  const std::size_t logged = log != nullptr ? key_log::count_begins(log->all, prefix, limit) : 0;
  return logged + key_log::count_begins(more, prefix, limit - logged);
}

KeyLog::Taken KeyLog::taken(uint32_t object, const Closed& closed, const Node* key) const {
  Taken out;
  out.key = key;
  const auto it = keys_.find(object);
  if (it != keys_.end()) out.log = it->second.get();
  for (const auto& [o, k] : closed) {
    if (o != object || (out.log != nullptr && out.log->all.count(k) != 0)) continue;
    if (key == nullptr || writes(*key, k)) out.more.insert(k);
  }
  return out;
}

bool KeyLog::has_key(uint32_t object, const std::string& key, const Closed& closed) const {
  const auto it = keys_.find(object);
  if (it != keys_.end() && it->second->all.count(key) != 0) return true;
  return std::any_of(closed.begin(), closed.end(), [&](const auto& c) { return c.first == object && c.second == key; });
}

std::vector<int64_t> KeyLog::lengths_from_scratch(const Keys& keys, const Node& key) {
  std::vector<int64_t> out;
  for (const std::string_view k : keys.all) {
    if (writes(key, k)) out.push_back(static_cast<int64_t>(k.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<int64_t>& KeyLog::log_lengths(const Taken& taken, const Node& key,
                                                std::vector<int64_t>& scratch) const {
  scratch.clear();
  if (taken.log == nullptr) return scratch;
  for (const auto& [node, lengths] : taken.log->lengths) {
    if (node == &key) return lengths;
  }
  scratch = lengths_from_scratch(*taken.log, key);  // a node add() did not see read the object
  return scratch;
}

std::size_t KeyLog::key_count(uint32_t object, const Closed& closed, const Node& key) const {
  const Taken t = taken(object, closed, &key);
  std::vector<int64_t> scratch;
  return log_lengths(t, key, scratch).size() + t.more.size();
}

std::size_t KeyLog::WordLengths::find(uint64_t key) const {
  const std::size_t mask = slots_.size() - 1;  // a power of two
  uint64_t h = key;                            // splitmix64's finalizer: every bit of the key reaches the low bits
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  h ^= h >> 31;
  for (std::size_t i = static_cast<std::size_t>(h) & mask;; i = (i + 1) & mask) {
    if (slots_[i].first == key + 1 || slots_[i].first == 0) return i;
  }
}

void KeyLog::WordLengths::add(int32_t node, int32_t length) {
  if ((used_ + 1) * 2 > slots_.size()) {  // at most half full
    std::vector<std::pair<uint64_t, int64_t>> old(std::max<std::size_t>(64, slots_.size() * 2));
    old.swap(slots_);
    for (const auto& [k, n] : old) {
      if (k != 0) slots_[find(k - 1)] = {k, n};
    }
  }
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(length);
  std::pair<uint64_t, int64_t>& slot = slots_[find(key)];
  if (slot.first == 0) {
    slot.first = key + 1;
    ++used_;
  }
  ++slot.second;
}

int64_t KeyLog::WordLengths::count(int32_t node, int32_t length) const {
  if (slots_.empty()) return 0;
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(length);
  return slots_[find(key)].second;
}

void KeyLog::index_word(const Node& key, std::string_view quoted, WordLengths& words) {
  int32_t at = 0;
  for (std::size_t i = 0; i < quoted.size() && at >= 0; ++i) at = key.trie.child(at, static_cast<uint8_t>(quoted[i]));
  if (at < 0 || key.trie.nodes[static_cast<std::size_t>(at)].value < 0) return;  // not one of its words
  const auto length = static_cast<int32_t>(quoted.size());
  at = 0;
  for (const char c : quoted) {
    at = key.trie.child(at, static_cast<uint8_t>(c));
    words.add(at, length);
  }
}

void KeyLog::index_saturated(const Node& key, std::string_view quoted, const KeySet& all, Saturated& out) {
  Frame f;
  if (!out.indexed || key_log::key_byte(key, f, '"') != 0) return;
  for (std::size_t i = 1; i + 1 < quoted.size(); ++i) {  // its bytes after the opening quote, up to the closing one
    if (key_log::key_byte(key, f, static_cast<uint8_t>(quoted[i])) != 0) return;  // refused, or whole
    const int64_t ahead = key_log::completions_at_least(key, f);
    if (ahead <= 0) {
      out.indexed = false;  // a walk may refuse here with any number of keys: not indexed
      out.prefixes.clear();
      return;
    }
    if (ahead > static_cast<int64_t>(all.size())) continue;
    const std::string_view prefix = quoted.substr(0, i + 1);
    const auto limit = static_cast<std::size_t>(ahead);
    if (key_log::count_begins(all, prefix, limit) >= limit) out.prefixes.insert(prefix);
  }
}

KeyLog::Keys& KeyLog::own(uint32_t object) {
  std::shared_ptr<Keys>& keys = keys_[object];
  if (keys == nullptr) {
    keys = std::make_shared<Keys>();
  } else if (keys.use_count() > 1) {
    keys = std::make_shared<Keys>(*keys);  // a copy of the log shares them: it keeps its own
  } else {
    // The only holder: reads by copies released in other threads come before these writes.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *keys;
}

void KeyLog::add(const Closed& closed, const StateSet& now) {
  for (const auto& [object, key] : closed) {
    const auto it = keys_.find(object);
    if (it != keys_.end() && it->second->all.count(key) != 0) continue;
    Keys& keys = own(object);
    keys.all.insert(key);
    keys.shortest = std::min(keys.shortest, key.size());
    const auto length = static_cast<int64_t>(key.size());
    for (auto& [node, lengths] : keys.lengths) {
      if (writes(*node, key)) lengths.insert(std::upper_bound(lengths.begin(), lengths.end(), length), length);
    }
    for (auto& [node, words] : keys.words) index_word(*node, key, words);
    for (auto& [node, saturated] : keys.saturated) index_saturated(*node, key, keys.all, saturated);
  }
  // Forget the objects no stack holds open; give each that has keys the lengths of the key nodes reading it.
  std::set<uint32_t> open;
  for (std::size_t s = 0; s < now.size(); ++s) {
    for (std::size_t j = 0; j < now.length(s); ++j) {
      const Frame& f = now.begin(s)[j];
      open.insert(f.start);
      const auto it = keys_.find(f.start);
      const Node* key = it != keys_.end() ? key_node(g_.at(static_cast<int32_t>(f.node))) : nullptr;
      if (key == nullptr) continue;
      const auto& known = it->second->lengths;
      if (std::none_of(known.begin(), known.end(), [&](const auto& l) { return l.first == key; })) {
        Keys& keys = own(f.start);
        keys.lengths.emplace_back(key, lengths_from_scratch(keys, *key));
        if (key->kind != NodeKind::kLiteralSet && key->kind != NodeKind::kDfa) continue;
        keys.saturated.emplace_back(key, Saturated{});
        for (const std::string_view k : keys.all) index_saturated(*key, k, keys.all, keys.saturated.back().second);
        if (key->kind != NodeKind::kLiteralSet) continue;
        keys.words.emplace_back(key, WordLengths{});
        for (const std::string_view k : keys.all) index_word(*key, k, keys.words.back().second);
      }
    }
  }
  for (auto it = keys_.begin(); it != keys_.end();) it = open.count(it->first) != 0 ? std::next(it) : keys_.erase(it);
}
}  // namespace orbit::constrain
