// How many distinct keys an object's key node writes per length, and what its shortest distinct keys cost
// (grammar.h: key_counts, key_sums, members_bytes). A decoder never repeats a key (key_log.h), so an object
// that owes k members pays for k different keys: the k shortest, not k copies of the shortest.
#include <algorithm>

#include "constrain/grammar.h"

namespace orbit::constrain {

namespace {

int64_t capped_sum(int64_t a, int64_t b, int64_t cap) { return std::min(cap, a + b); }

// A plain string key of [min_chars, max_chars] characters: texts by the bytes of their shortest spelling (the
// one json_quote() writes). A character's shortest spelling has 1 byte (printable ASCII and DEL but '"' and
// '\'), 2 (\" \\ \b \f \n \r \t and U+0080..U+07FF), 3 (U+0800..U+FFFF but the surrogates), 4 (U+10000 up)
// or 6 (the other control characters, \u00XX).
std::vector<std::pair<int64_t, int64_t>> string_key_counts(int64_t min_chars, int64_t max_chars, int64_t cap) {
  static constexpr std::pair<int64_t, int64_t> kChars[] = {{1, 94}, {2, 7 + 1920}, {3, 61440}, {4, 1048576}, {6, 27}};
  std::vector<std::pair<int64_t, int64_t>> out;
  std::vector<std::vector<int64_t>> ways{{1}};  // ways[L][c]: texts of c characters in L bytes (at most cap)
  int64_t total = 0;
  for (int64_t bytes = 0; total < cap && bytes <= 6 * max_chars; ++bytes) {
    if (bytes > 0) {
      std::vector<int64_t> row(static_cast<std::size_t>(std::min(bytes, max_chars) + 1), 0);
      for (const auto& [width, count] : kChars) {
        if (width > bytes) continue;
        const std::vector<int64_t>& from = ways[static_cast<std::size_t>(bytes - width)];
        for (std::size_t c = 1; c < row.size() && c - 1 < from.size(); ++c) {
          row[c] = capped_sum(row[c], std::min(cap, from[c - 1] * count), cap);
        }
      }
      ways.push_back(std::move(row));
    }
    const std::vector<int64_t>& row = ways.back();
    int64_t here = 0;
    for (std::size_t c = static_cast<std::size_t>(min_chars); c < row.size(); ++c) here = capped_sum(here, row[c], cap);
    if (here > 0) out.emplace_back(bytes + 2, here);
    total = capped_sum(total, here, cap);
  }
  return out;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> count_keys(const Node& key, int64_t cap) {
  std::vector<std::pair<int64_t, int64_t>> out;
  switch (key.kind) {
    case NodeKind::kLiteralSet: {  // quoted strings, one spelling each
      std::vector<int64_t> lengths;
      for (const ByteTrie::Node& t : key.trie.nodes) {
        if (t.value >= 0) lengths.push_back(t.depth);
      }
      std::sort(lengths.begin(), lengths.end());
      for (const int64_t l : lengths) {
        if (out.empty() || out.back().first != l) out.emplace_back(l, 0);
        ++out.back().second;
      }
      return out;
    }
    case NodeKind::kDfa: {  // one spelling per text (canonical_string_dfa)
      const std::vector<int64_t> by_bytes = texts_by_bytes(*key.dfa, key.max_count, cap);
      for (std::size_t l = 0; l < by_bytes.size(); ++l) {
        if (by_bytes[l] > 0) out.emplace_back(static_cast<int64_t>(l), by_bytes[l]);
      }
      return out;
    }
    case NodeKind::kString: return string_key_counts(key.min_count, key.max_count, cap);
    default: return {{key.min_bytes, cap}};  // not a key node the compiler writes: its fewest bytes, for all
  }
}

int64_t key_sums(const Node& object, int64_t k, const std::vector<int64_t>& taken, const std::vector<int64_t>& more) {
  const auto of = [](const std::vector<int64_t>& lengths, int64_t length) {
    const auto [from, to] = std::equal_range(lengths.begin(), lengths.end(), length);
    return static_cast<int64_t>(to - from);
  };
  int64_t sum = 0;
  for (const auto& [length, count] : object.key_counts) {
    if (k <= 0) break;
    const int64_t had = of(taken, length) + of(more, length);
    const int64_t take = std::min(k, std::max<int64_t>(0, count - had));
    if (take > 0 && length > (kUnreachable - sum) / take) return kUnreachable;
    sum += take * length;
    k -= take;
  }
  return k > 0 ? kUnreachable : sum;
}

int64_t members_bytes(const Grammar& g, const Node& object, int64_t k, const std::vector<int64_t>& taken) {
  if (k <= 0) return 1;
  const std::size_t value = object.kind == NodeKind::kAnyObject ? 1 : object.required.size() + 1;
  const int64_t each = g.at(object.children[value]).min_bytes + 2;  // ':' and the value, then ',' or '}'
  const int64_t keys = key_sums(object, k, taken);
  if (keys >= kUnreachable || each >= kUnreachable || k > (kUnreachable - keys) / each) return kUnreachable;
  return keys + k * each;
}

}  // namespace orbit::constrain
