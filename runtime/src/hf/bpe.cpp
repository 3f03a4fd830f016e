// BPE over one word (hf/bpe.h).
#include "src/hf/bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <queue>

#include "src/hf/json_fields.h"
#include "src/hf/text.h"

namespace orbit::runtime::hf {

namespace {

std::pair<std::string, std::string> merge_parts(const nlohmann::json& m, const std::string& where) {
  if (m.is_string()) {  // the older form, "left right"
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    ORBIT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                where << ": merge '" << s << "' is not two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  ORBIT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
              where << ": merge " << m.dump() << " is neither \"a b\" nor [\"a\", \"b\"]");
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& model, const std::string& file) {
  const std::string type = type_of(model, file, "model");
  ORBIT_CHECK(type == "BPE", file << ": model '" << type << "' is not supported (supported: BPE)");
  const std::string where = file + ": model BPE";
  ORBIT_CHECK(!model.contains("dropout") || model["dropout"].is_null() ||
                  (model["dropout"].is_number() && model["dropout"].get<double>() == 0.0),
              where << ": dropout is not supported (it samples merges)");
  auto bpe = std::unique_ptr<BpeModel>(new BpeModel());
  if (const char* words = std::getenv("ORBIT_BPE_CACHE_WORDS")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(words, &end, 10);
    ORBIT_CHECK(*words != '\0' && *end == '\0' && words[0] != '-' && n <= 100000000ull,
                "ORBIT_BPE_CACHE_WORDS: '" << words << "' is not a count of words (0 to 100000000)");
    bpe->cache_words_ = static_cast<std::size_t>(n);
  }
  ORBIT_CHECK(model.contains("vocab") && model["vocab"].is_object(), where << ": 'vocab' is not an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    ORBIT_CHECK(id.is_number_unsigned() && id.get<uint64_t>() < (1ull << 31),
                where << ": vocab entry '" << token << "' has no valid id");
    bpe->vocab_[token] = id.get<uint32_t>();
    bpe->id_bound_ = std::max<int64_t>(bpe->id_bound_, int64_t{id.get<uint32_t>()} + 1);
  }
  bpe->by_id_.reserve(bpe->vocab_.size());
  for (const auto& [token, id] : bpe->vocab_) {
    const auto [at, fresh] = bpe->by_id_.emplace(id, &token);
    ORBIT_CHECK(fresh, where << ": vocab entries '" << *at->second << "' and '" << token << "' have the same id " << id
                             << " (decoding it would be ambiguous)");
  }
  bpe->continuing_subword_prefix_ = string_field(model, "continuing_subword_prefix", "", where);
  bpe->end_of_word_suffix_ = string_field(model, "end_of_word_suffix", "", where);
  bpe->fuse_unk_ = bool_field(model, "fuse_unk", false, where);
  bpe->byte_fallback_ = bool_field(model, "byte_fallback", false, where);
  bpe->ignore_merges_ = bool_field(model, "ignore_merges", false, where);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    bpe->byte_pieces_ += static_cast<int>(bpe->vocab_.count(name));
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    const auto it = bpe->vocab_.find(unk);
    ORBIT_CHECK(it != bpe->vocab_.end(), where << ": unk_token '" << unk << "' is not in the vocabulary");
    bpe->unk_id_ = it->second;
  }
  ORBIT_CHECK(model.contains("merges") && model["merges"].is_array(), where << ": 'merges' is not a list");
  uint32_t rank = 0;
  for (const auto& m : model["merges"]) {
    const auto [a, b] = merge_parts(m, where);
    const auto ia = bpe->vocab_.find(a), ib = bpe->vocab_.find(b);
    const std::string merged = a + b.substr(std::min(b.size(), bpe->continuing_subword_prefix_.size()));
    const auto im = bpe->vocab_.find(merged);
    ORBIT_CHECK(ia != bpe->vocab_.end() && ib != bpe->vocab_.end() && im != bpe->vocab_.end(),
                where << ": merge " << rank << " ('" << a << "' + '" << b << "') names a token not in the vocabulary");
    bpe->merges_[pair_key(ia->second, ib->second)] = {rank, im->second};
    bpe->merge_parts_.emplace_back(ia->second, ib->second);
    ++rank;
  }
  return bpe;
}

std::optional<int64_t> BpeModel::token_to_id(const std::string& token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int64_t id) const {
  if (id < 0 || id >= (int64_t{1} << 31)) return nullptr;
  const auto it = by_id_.find(static_cast<uint32_t>(id));
  return it == by_id_.end() ? nullptr : it->second;
}

std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view word, std::vector<Bytes>& bytes) const {
  std::vector<Symbol> symbols;
  uint32_t char_begin = 0, char_end = 0;  // the character being read
  uint32_t unk_len = 0;                   // bytes of a pending unknown run (0: none)
  Bytes unk_at{0, 0};                     // from its first character to its last
  const auto add = [&](uint32_t id, uint32_t len, Bytes at) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, len});
    bytes.push_back(at);
  };
  const auto add_unk = [&]() {
    add(*unk_id_, unk_len, unk_at);
    unk_len = 0;
  };
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    std::string s(word.substr(i, n));
    if (i > 0) s = continuing_subword_prefix_ + s;
    if (i + n == word.size()) s += end_of_word_suffix_;
    char_begin = static_cast<uint32_t>(i);
    char_end = static_cast<uint32_t>(i + n);
    i += n;
    const auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      if (unk_len > 0) add_unk();
      add(it->second, static_cast<uint32_t>(n), {char_begin, char_end});
      continue;
    }
    if (byte_fallback_) {
      std::vector<uint32_t> fallback;
      for (unsigned char c : s) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", c);
        const auto b = vocab_.find(name);
        if (b == vocab_.end()) break;
        fallback.push_back(b->second);
      }
      if (fallback.size() == s.size()) {  // a pending unknown run stays pending, as in the Rust library
        for (uint32_t b : fallback) add(b, 1, {char_begin, char_end});
        continue;
      }
    }
    if (!unk_id_) continue;
    if (unk_len > 0 && !fuse_unk_) add_unk();
    if (unk_len == 0) unk_at.begin = char_begin;
    unk_len += static_cast<uint32_t>(n);
    unk_at.end = char_end;
  }
  if (unk_len > 0) add_unk();
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

template <class Offer>
bool BpeModel::merge_at(std::vector<Symbol>& symbols, std::size_t pos, uint32_t rank, Offer&& offer) const {
  Symbol& left = symbols[pos];
  if (left.len == 0 || left.next == -1) return false;  // merged away, or the word's last symbol
  const auto right_pos = static_cast<std::size_t>(left.next);
  const Symbol right = symbols[right_pos];
  const auto it = merges_.find(pair_key(left.id, right.id));
  // A stale entry: its pair changed since. A rank names one merge (one pair, one token), so the rank alone
  // tells whether the pair standing there is the one the entry was made for.
  if (it == merges_.end() || it->second.rank != rank) return false;
  left.id = it->second.new_id;
  left.len += right.len;
  left.next = right.next;
  symbols[right_pos].len = 0;
  if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<int32_t>(pos);
  if (left.prev >= 0) offer(static_cast<std::size_t>(left.prev), pos);
  if (left.next >= 0) offer(pos, static_cast<std::size_t>(left.next));
  return true;
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  if (symbols.size() >= kRankListSymbols) {
    merge_by_rank_lists(symbols);
    return;
  }
  // (rank << 32 | position): lowest rank first; among equal ranks the leftmost.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> queue;
  const auto offer = [&](std::size_t left, std::size_t right) {
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push(uint64_t{it->second.rank} << 32 | left);
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) offer(i, i + 1);
  while (!queue.empty()) {
    const uint64_t top = queue.top();
    queue.pop();
    merge_at(symbols, static_cast<std::size_t>(top & 0xFFFFFFFFu), static_cast<uint32_t>(top >> 32), offer);
  }
}

// The heap's order without the heap (bpe.h): rank r's list holds the positions where a pair of rank r was
// offered, the ranks with a list wait in a small heap of ranks, and the lowest rank's list is taken whole and
// sorted, so its positions are merged leftmost first. That is the heap's order while every rank offered is
// above the one being merged, which a merge's new pairs are in a merges list learned in order (a pair with
// a merged token was learned after the merge that made it). Where a new pair's rank is not above it (any
// merges list is accepted), the rest of the sorted list goes back to its rank's list and the lowest rank is
// taken again, so the order stays the heap's for any list.
void BpeModel::merge_by_rank_lists(std::vector<Symbol>& symbols) const {
  constexpr uint32_t kNone = 0xFFFFFFFFu;
  struct Entry {
    uint32_t pos, next;  // a position offered at the entry's rank; the list's next entry
  };
  std::vector<uint32_t> head(merge_parts_.size(), kNone);  // rank -> its list's latest entry
  std::vector<Entry> entries;
  entries.reserve(symbols.size() * 3);
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> ranks;  // those with a list
  const auto enlist = [&](uint32_t rank, std::size_t pos) {
    if (head[rank] == kNone) ranks.push(rank);
    entries.push_back({static_cast<uint32_t>(pos), head[rank]});
    head[rank] = static_cast<uint32_t>(entries.size() - 1);
  };
  uint32_t merging = kNone;  // the rank being merged (kNone: none yet)
  bool lower = false;        // a pair was offered at or below it
  const auto offer = [&](std::size_t left, std::size_t right) {
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    enlist(it->second.rank, left);
    if (merging != kNone && it->second.rank <= merging) lower = true;
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) offer(i, i + 1);
  std::vector<uint32_t> batch;
  while (!ranks.empty()) {
    const uint32_t rank = ranks.top();
    ranks.pop();
    batch.clear();
    for (uint32_t e = head[rank]; e != kNone; e = entries[e].next) batch.push_back(entries[e].pos);
    head[rank] = kNone;
    std::sort(batch.begin(), batch.end());
    merging = rank;
    lower = false;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      if (!merge_at(symbols, batch[b], rank, offer) || !lower) continue;
      for (std::size_t k = b + 1; k < batch.size(); ++k) enlist(rank, batch[k]);
      break;
    }
  }
}

void BpeModel::split(std::string_view word, std::vector<int64_t>& out, std::vector<Bytes>& bytes) const {
  std::vector<Bytes> at;
  std::vector<Symbol> symbols = initial_symbols(word, at);
  merge_all(symbols);
  // A merged symbol keeps its left part's index, and its parts run up to the next symbol left standing.
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].len == 0) continue;
    const std::size_t last = symbols[i].next < 0 ? symbols.size() - 1 : static_cast<std::size_t>(symbols[i].next) - 1;
    bytes.push_back({at[i].begin, at[last].end});
  }
  for (const Symbol& s : symbols)
    if (s.len != 0) out.push_back(s.id);
}

void BpeModel::tokenize(std::string_view word, std::vector<int64_t>& out, std::vector<Bytes>* bytes) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      if (bytes) bytes->push_back({0, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  Split made;
  if (cache_words_ == 0 || word.size() > kCachedWordBytes) {
    split(word, made.ids, made.bytes);
    out.insert(out.end(), made.ids.begin(), made.ids.end());
    if (bytes) bytes->insert(bytes->end(), made.bytes.begin(), made.bytes.end());
    return;
  }
  std::string key(word);
  {
    std::shared_lock<std::shared_mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.ids.begin(), it->second.ids.end());
      if (bytes) bytes->insert(bytes->end(), it->second.bytes.begin(), it->second.bytes.end());
      return;
    }
  }
  split(word, made.ids, made.bytes);
  out.insert(out.end(), made.ids.begin(), made.ids.end());
  if (bytes) bytes->insert(bytes->end(), made.bytes.begin(), made.bytes.end());
  // What the entry holds: its containers' capacities and its map node (the pair, the link and the hash).
  const std::size_t size = key.capacity() + made.ids.capacity() * sizeof(int64_t) +
                           made.bytes.capacity() * sizeof(Bytes) + sizeof(std::pair<const std::string, Split>) +
                           2 * sizeof(void*);
  std::unique_lock<std::shared_mutex> lock(cache_mutex_);
  if (cache_.size() >= cache_words_ || cache_bytes_ + size > kCacheBytes) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  if (cache_.emplace(std::move(key), std::move(made)).second) cache_bytes_ += size;
}

std::optional<std::string> BpeModel::symbol_of(std::string_view ch, bool last, bool& unk) const {
  unk = false;
  if (vocab_.count(std::string(ch)) > 0) return std::string(ch);
  if (byte_fallback_ && byte_pieces_ == 256) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(last ? ch.back() : ch.front()));
    return std::string(name);
  }
  if (!unk_id_) return std::nullopt;
  unk = true;
  return *by_id_.at(*unk_id_);
}

bool BpeModel::separates(std::string_view left, std::string_view right) const {
  if (left.empty() || right.empty()) return false;
  bool left_unk = false, right_unk = false;
  const std::optional<std::string> l = symbol_of(left, true, left_unk);
  const std::optional<std::string> r = symbol_of(right, false, right_unk);
  if (!l || !r || (left_unk && right_unk && fuse_unk_)) return false;
  std::call_once(pairs_once_, [this] {
    for (const auto& [a, b] : merge_parts_) merge_pairs_.add(*by_id_.at(a), *by_id_.at(b));
  });
  return !merge_pairs_.holds(*l, *r);
}

std::size_t BpeModel::words_cached() const {
  std::shared_lock<std::shared_mutex> lock(cache_mutex_);
  return cache_.size();
}

std::size_t BpeModel::bytes_cached() const {
  std::shared_lock<std::shared_mutex> lock(cache_mutex_);
  return cache_bytes_;
}

void BpeModel::set_cache_words(std::size_t words) {
  std::unique_lock<std::shared_mutex> lock(cache_mutex_);
  cache_words_ = words;
  cache_.clear();
  cache_bytes_ = 0;
}

}  // namespace orbit::runtime::hf
