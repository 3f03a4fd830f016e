// The vocabulary trie and the mask walk (token_masks.h).
#include "constrain/token_masks.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "orbit/common/error.h"
#include "orbit/common/utf8.h"

namespace orbit::constrain {

PreorderTrie PreorderTrie::of(const std::vector<std::optional<std::string>>& bytes, std::vector<int32_t> ids) {
  PreorderTrie t;
  std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
    return *bytes[static_cast<std::size_t>(x)] < *bytes[static_cast<std::size_t>(y)];
  });
  // Strings in sorted order: a prefix comes before what extends it, so each string's last node is the node
  // made last, and its tokens can be appended in node order.
  t.byte.push_back(0);
  t.depth.push_back(0);
  t.end.push_back(0);
  t.token_begin.push_back(0);
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
      t.end[static_cast<std::size_t>(path.back())] = static_cast<int32_t>(t.byte.size());
      path.pop_back();
    }
    for (std::size_t k = lcp; k < s.size(); ++k) {
      path.push_back(static_cast<int32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(s[k]));
      t.depth.push_back(static_cast<uint16_t>(k + 1));
      t.end.push_back(0);
      t.token_begin.push_back(static_cast<int32_t>(t.tokens.size()));
    }
    t.tokens.push_back(id);
    t.max_len = std::max(t.max_len, static_cast<int64_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    t.end[static_cast<std::size_t>(path.back())] = static_cast<int32_t>(t.byte.size());
    path.pop_back();
  }
  t.token_begin.push_back(static_cast<int32_t>(t.tokens.size()));
  return t;
}

namespace {

// Whether a JSON string's body takes all of `s` and is back in its body after it (see VocabTrie).
// The characters of `s` when a JSON string's body takes all of it and is back in its body after it (see
// VocabTrie), else 0.
int64_t plain_string_chars(const std::string& s) {
  int64_t chars = 0;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    ++chars;
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return 0;
      ++i;
      continue;
    }
    const std::size_t n = utf8_char_at(s, i);  // a whole UTF-8 character: the bytes the matcher accepts
    if (n == 0) return 0;
    i += n;
  }
  return chars;
}

// Whether `s` holds a '"' and, read from a JSON string's body, each '"' of it follows a '\\' that escapes it.
bool quotes_escaped_in(const std::string& s) {
  bool escaped = false, quote = false;
  for (const char c : s) {
    if (escaped) {
      escaped = false;
      quote = quote || c == '"';
    } else if (c == '\\') {
      escaped = true;
    } else if (c == '"') {
      return false;  // it ends the string
    }
  }
  return quote;
}

// Read from a JSON string's body (not mid-escape): the offset past the '"' with which `s` opens a string after
// ending the one it begins in; -1 (VocabTrie::kOpenedWalk) where that string closes in `s` or holds a '\\';
// -2 where `s` opens none.
int32_t body_opening(const std::string& s) {
  bool in_string = true, escaped = false;
  int32_t opened = -2;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!in_string) {
      if (c == '"') {
        in_string = true;
        opened = static_cast<int32_t>(i + 1);
      }
    } else if (escaped) {
      escaped = false;
    } else if (c == '\\') {
      if (opened >= 0) return -1;  // an escape spells the key otherwise: walked
      escaped = true;
    } else if (c == '"') {
      if (opened >= 0) return -1;  // the string it opened closes: a key may repeat
      in_string = false;
    }
  }
  return opened;
}

// VocabTrie::closes_only of `s`.
bool closes_only_from_body(const std::string& s) {
  const std::size_t q1 = s.find('"');
  if (q1 == std::string::npos) return false;
  const bool plain = std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(q1),
                                 [](char c) { return c != '\\' && static_cast<unsigned char>(c) >= 0x20; });
  if (!plain) return false;
  const std::size_t q2 = s.find('"', q1 + 1);
  if (q2 == std::string::npos) return true;
  std::size_t colons = 0;
  for (std::size_t i = q1 + 1; i < q2; ++i) {
    const char c = s[i];
    if (c == ':') {
      ++colons;
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      return false;
    }
  }
  if (colons != 1) return false;  // the second quote opens no value
  bool escaped = false;
  for (std::size_t i = q2 + 1; i < s.size(); ++i) {  // the value's body, to its closing quote
    if (escaped) {
      escaped = false;
    } else if (s[i] == '\\') {
      escaped = true;
    } else if (s[i] == '"') {
      return s.find('"', i + 1) == std::string::npos;  // no string after the value
    }
  }
  return true;
}

}  // namespace

VocabTrie::VocabTrie(const std::vector<std::optional<std::string>>& bytes)
    : vocab_size_(static_cast<int64_t>(bytes.size())) {
  std::vector<int32_t> ids, not_plain;
  plain_bits_.assign(static_cast<std::size_t>((vocab_size_ + 63) / 64), 0);
  plain_chars_.assign(bytes.size(), 0);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!bytes[i].has_value() || bytes[i]->empty()) continue;
    ids.push_back(static_cast<int32_t>(i));
    const int64_t chars = plain_string_chars(*bytes[i]);
    if (chars > 0 && chars < 256) {
      plain_bits_[i / 64] |= uint64_t{1} << (i % 64);
      plain_chars_[i] = static_cast<uint8_t>(chars);
      ++plain_count_;
    } else {
      not_plain.push_back(static_cast<int32_t>(i));
    }
  }
  all_ = PreorderTrie::of(bytes, std::move(ids));
  root_children_.assign(256, 0);
  for (std::size_t child = 1; child < all_.byte.size(); child = static_cast<std::size_t>(all_.end[child])) {
    root_children_[all_.byte[child]] = static_cast<int32_t>(child);  // the root's children, each subtree skipped
  }
  not_plain_ = PreorderTrie::of(bytes, std::move(not_plain));
  quoted_.resize(2 * kMaxQuotes);
  lengths_.assign(bytes.size(), 0);
  quotes_escaped_.assign(bytes.size(), 0);
  closes_only_.assign(bytes.size(), 0);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!bytes[i].has_value() || bytes[i]->empty()) continue;
    lengths_[i] = static_cast<uint16_t>(bytes[i]->size());  // PreorderTrie::of checked it fits
    const auto quotes = std::min<std::ptrdiff_t>(std::count(bytes[i]->begin(), bytes[i]->end(), '"'), kMaxQuotes);
    const bool comma = bytes[i]->find(',') != std::string::npos;
    const std::size_t quote = bytes[i]->find('"');
    const bool backslash = bytes[i]->find('\\') != std::string::npos;
    const auto printable = [](char c) {
      return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x80;
    };
    const auto at_quote = bytes[i]->begin() + static_cast<std::ptrdiff_t>(quote);
    const bool plain_one = quotes == 1 && !backslash && std::all_of(bytes[i]->begin(), at_quote, printable);
    if (backslash) backslashes_.push_back(static_cast<int32_t>(i));
    if (quotes > 0) quote_reach_ = std::max(quote_reach_, static_cast<int64_t>(bytes[i]->rfind('"') + 1));
    quotes_escaped_[i] = backslash && quotes > 0 && quotes_escaped_in(*bytes[i]) ? 1 : 0;
    closes_only_[i] = quotes > 0 && closes_only_from_body(*bytes[i]) ? 1 : 0;
    if (quotes > 0 && !plain_one) quoted_apart_.push_back(static_cast<int32_t>(i));
    if (plain_one && quote + 1 < bytes[i]->size()) {  // bytes after its quote
      const auto no_control = [](char c) { return static_cast<unsigned char>(c) >= 0x20; };
      (std::all_of(at_quote + 1, bytes[i]->end(), no_control) ? quoted_tails_ : tails_apart_)
          .push_back(static_cast<int32_t>(i));
    } else if (quotes > 0 && !plain_one) {
      tails_apart_.push_back(static_cast<int32_t>(i));
    }
    const int32_t opened = quotes > 1 ? body_opening(*bytes[i]) : -2;
    if (opened != -2) body_openers_.emplace_back(static_cast<int32_t>(i), opened);
    const std::size_t brace = bytes[i]->find('{');
    if (brace != std::string::npos && bytes[i]->find('"', brace) != std::string::npos) {
      braced_quotes_.push_back(static_cast<int32_t>(i));
    }
    for (std::size_t k = 0; k < static_cast<std::size_t>(kMaxQuotes); ++k) {
      const bool enough = static_cast<std::ptrdiff_t>(k) < quotes;
      if (enough) quoted_[2 * k].push_back(static_cast<int32_t>(i));
      if (enough || comma) quoted_[2 * k + 1].push_back(static_cast<int32_t>(i));
    }
  }
}

std::size_t VocabTrie::child_of(std::size_t node, char c) const {
  if (node == 0) return static_cast<std::size_t>(root_children_[static_cast<uint8_t>(c)]);
  // A node's children follow it, each child's subtree ending where its next begins.
  std::size_t child = node + 1;
  const auto end = static_cast<std::size_t>(all_.end[node]);
  while (child < end && all_.byte[child] != static_cast<uint8_t>(c)) child = static_cast<std::size_t>(all_.end[child]);
  return child < end ? child : 0;
}

void VocabTrie::prefixes_of(std::string_view s, std::vector<int32_t>& out) const {
  std::size_t node = 0;  // the root
  for (const char c : s) {
    node = child_of(node, c);
    if (node == 0) return;
    for (int32_t k = all_.token_begin[node]; k < all_.token_begin[node + 1]; ++k) {
      out.push_back(all_.tokens[static_cast<std::size_t>(k)]);
    }
  }
}

void VocabTrie::extensions_of(std::string_view s, std::vector<int32_t>& out) const {
  std::size_t node = 0;
  for (const char c : s) {
    node = child_of(node, c);
    if (node == 0) return;
  }
  // Preorder: the subtree's tokens are those of its nodes, in a row.
  const auto first = static_cast<std::size_t>(all_.token_begin[node]);
  const auto last = static_cast<std::size_t>(all_.token_begin[static_cast<std::size_t>(all_.end[node])]);
  out.insert(out.end(), all_.tokens.begin() + static_cast<std::ptrdiff_t>(first),
             all_.tokens.begin() + static_cast<std::ptrdiff_t>(last));
}

const std::vector<int32_t>& VocabTrie::quotes_or_commas(int quotes, bool commas) const {
  return quoted_[2 * static_cast<std::size_t>(std::clamp(quotes, 1, kMaxQuotes) - 1) + (commas ? 1 : 0)];
}

int64_t MaskEntry::delta(int32_t id, int64_t length) const {
  const auto it = std::lower_bound(differs.begin(), differs.end(), id,
                                   [](const std::pair<int64_t, int32_t>& d, int32_t t) { return d.second < t; });
  return it != differs.end() && it->second == id ? it->first : unlisted(length);
}

void MaskEntry::copy_bits(std::vector<uint64_t>& out) const {
  if (dense.size() == words) {
    out = dense;
    return;
  }
  out.assign(words, 0);
  for (const int32_t t : ids) out[static_cast<std::size_t>(t) / 64] |= uint64_t{1} << (t % 64);
}

void MaskEntry::compact() {
  if (dense.size() != words || static_cast<std::size_t>(allowed) * sizeof(int32_t) >= words * sizeof(uint64_t)) return;
  ids.reserve(static_cast<std::size_t>(allowed));
  for (std::size_t w = 0; w < dense.size(); ++w) {
    for (uint64_t b = dense[w]; b != 0; b &= b - 1) {
      ids.push_back(static_cast<int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(b))));
    }
  }
  std::vector<uint64_t>().swap(dense);  // its capacity too: the entry may be kept
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
    : trie_(trie), matcher_(grammar), max_bytes_(max_bytes) {}

std::size_t MaskCache::entry_bytes(const std::vector<uint32_t>& key, const MaskEntry& e) {
  // An unordered_map node holds the pair, a next pointer and the cached hash; its bucket one pointer more.
  constexpr std::size_t kNode =
      sizeof(std::vector<uint32_t>) + sizeof(std::shared_ptr<const MaskEntry>) + 3 * sizeof(void*);
  constexpr std::size_t kControlBlock = 2 * sizeof(void*);  // make_shared's counts beside the entry
  return kNode + kControlBlock + sizeof(MaskEntry) + key.capacity() * sizeof(uint32_t) +
         e.dense.capacity() * sizeof(uint64_t) + e.ids.capacity() * sizeof(int32_t) +
         e.differs.capacity() * sizeof(e.differs[0]);
}

std::size_t MaskCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

// What MaskCache::compute gathers beside an entry's differs: the allowed tokens whose change is other than minus
// their bytes, as (change, token), while they are at most kMaxDiffers (complete), to stand for the differs where
// those are more (MaskEntry::by_length).
struct ByLengthDiffers {
  std::vector<std::pair<int64_t, int32_t>> differs;
  bool complete = true;
};

namespace {

// Appends (delta, t) to `list` while it holds fewer than kMaxDiffers; past that empties it, `complete` false.
void note(std::vector<std::pair<int64_t, int32_t>>& list, bool& complete, int64_t delta, int32_t t) {
  if (!complete) return;
  if (list.size() < MaskEntry::kMaxDiffers) {
    list.emplace_back(delta, t);
  } else {
    std::vector<std::pair<int64_t, int32_t>>().swap(list);  // its capacity too: the entry is kept
    complete = false;
  }
}

// Counts one more allowed token `t` of `length` bytes with `need` bytes left after it.
void allow(MaskEntry& e, ByLengthDiffers& by_length, int32_t t, int64_t length, int64_t need) {
  e.dense[static_cast<std::size_t>(t) / 64] |= uint64_t{1} << (t % 64);
  ++e.allowed;
  const int64_t delta = need - e.need;
  e.min_delta = std::min(e.min_delta, delta);
  e.max_delta = std::max(e.max_delta, delta);
  if (delta != 0) note(e.differs, e.differs_complete, delta, t);
  if (delta != -length) note(by_length.differs, by_length.complete, delta, t);
}

}  // namespace

void MaskCache::walk(const PreorderTrie& trie, const StateSet& state, MaskEntry& e, ByLengthDiffers& by_length) const {
  std::vector<StateSet> at(static_cast<std::size_t>(trie.max_len) + 1);
  at[0] = state;
  const std::size_t n = trie.byte.size();
  for (std::size_t i = 1; i < n;) {
    const std::size_t d = trie.depth[i];
    if (!matcher_.step(at[d - 1], trie.byte[i], at[d])) {
      i = static_cast<std::size_t>(trie.end[i]);  // no token through this node can be allowed
      continue;
    }
    const int32_t first = trie.token_begin[i], last = trie.token_begin[i + 1];
    if (first < last) {
      const int64_t need = matcher_.min_bytes(at[d]);
      for (int32_t k = first; k < last; ++k) {
        allow(e, by_length, trie.tokens[static_cast<std::size_t>(k)], static_cast<int64_t>(d), need);
      }
    }
    ++i;
  }
}

MaskEntry MaskCache::compute(const StateSet& state) const {
  MaskEntry e;
  e.complete = matcher_.can_end(state);
  e.need = matcher_.min_bytes(state);
  e.words = static_cast<std::size_t>((trie_.vocab_size() + 63) / 64);
  e.dense.assign(e.words, 0);
  ByLengthDiffers by_length;
  const int64_t room = matcher_.string_room(state);
  if (room >= 0) {
    // Inside a string: the plain tokens whose characters fit, then a walk of the others.
    if (room >= trie_.max_token_bytes() && trie_.plain_count_ > 0) {
      e.dense = trie_.plain_bits_;
      e.allowed = trie_.plain_count_;
      e.min_delta = std::min<int64_t>(e.min_delta, 0);
      e.max_delta = std::max<int64_t>(e.max_delta, 0);
      by_length.complete = false;  // each of them changes the fewest bytes by 0, not minus its bytes: not listed
    } else {
      for (std::size_t t = 0; t < trie_.plain_chars_.size(); ++t) {
        const int64_t chars = trie_.plain_chars_[t];
        if (chars > 0 && chars <= room) allow(e, by_length, static_cast<int32_t>(t), trie_.lengths_[t], e.need);
      }
    }
    walk(trie_.not_plain_, state, e, by_length);
  } else {
    walk(trie_.all_, state, e, by_length);
  }
  if (!e.differs_complete && by_length.complete) {  // e.g. inside a key of ^[a-z]{40}$: each letter writes one
    e.differs = std::move(by_length.differs);
    e.differs_complete = e.by_length = true;
  }
  std::sort(e.differs.begin(), e.differs.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  e.compact();
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
  MaskEntry computed = compute(state);
  computed.differs.shrink_to_fit();  // kept as long as the entry: no slack from its growth
  key.shrink_to_fit();
  const std::size_t cost = entry_bytes(key, computed);
  auto entry = std::make_shared<const MaskEntry>(std::move(computed));
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  const auto found = entries_.find(key);
  if (found != entries_.end()) return found->second;  // another thread's copy came first
  if (bytes_ + cost > max_bytes_) make_room(cost);
  bytes_ += cost;
  return entries_.emplace(std::move(key), std::move(entry)).first->second;
}

void MaskCache::make_room(std::size_t cost) const {
  const std::size_t target = max_bytes_ - max_bytes_ / 4;
  // The lowest key hashes go first: a fixed order unrelated to when a mask was computed or read.
  std::vector<std::pair<std::size_t, const std::vector<uint32_t>*>> order;
  order.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) order.emplace_back(KeyHash{}(key), &key);
  std::sort(order.begin(), order.end());
  for (const auto& [hash, key] : order) {
    if (bytes_ + cost <= target) break;
    const auto it = entries_.find(*key);
    bytes_ -= entry_bytes(it->first, *it->second);
    entries_.erase(it);
  }
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
