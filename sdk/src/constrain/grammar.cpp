// The grammar's arena, its tries, and the builders of the nodes every constraint uses.
#include "constrain/grammar.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "orbit/common/error.h"
#include "orbit/common/json_string.h"

namespace orbit::constrain {

ByteTrie ByteTrie::of(const std::vector<std::string>& strings) {
  ByteTrie t;
  t.nodes.emplace_back();
  for (std::size_t i = 0; i < strings.size(); ++i) {
    int32_t at = 0;
    t.nodes[0].values_below.push_back(static_cast<int32_t>(i));
    for (const char c : strings[i]) {
      const uint8_t b = static_cast<uint8_t>(c);
      int32_t next = t.child(at, b);
      if (next < 0) {
        next = static_cast<int32_t>(t.nodes.size());
        Node n;
        n.depth = t.nodes[static_cast<std::size_t>(at)].depth + 1;
        t.nodes.push_back(std::move(n));
        auto& kids = t.nodes[static_cast<std::size_t>(at)].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1})), {b, next});
      }
      at = next;
      t.nodes[static_cast<std::size_t>(at)].values_below.push_back(static_cast<int32_t>(i));
    }
    ORBIT_CHECK(t.nodes[static_cast<std::size_t>(at)].value < 0, "constraint: the string set repeats a string");
    t.nodes[static_cast<std::size_t>(at)].value = static_cast<int32_t>(i);
  }
  for (Node& n : t.nodes) {
    for (const int32_t v : n.values_below)
      n.lengths_below.push_back(static_cast<int32_t>(strings[static_cast<std::size_t>(v)].size()));
    std::sort(n.lengths_below.begin(), n.lengths_below.end());
  }
  // Children are made after their parents: one backward pass finds the shortest way to an end.
  for (std::size_t i = t.nodes.size(); i-- > 0;) {
    Node& n = t.nodes[i];
    int32_t best = n.value >= 0 ? 0 : std::numeric_limits<int32_t>::max();
    for (const auto& [b, c] : n.children) best = std::min(best, t.nodes[static_cast<std::size_t>(c)].min_remaining + 1);
    n.min_remaining = best;
  }
  return t;
}

int32_t ByteTrie::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, c] : nodes[static_cast<std::size_t>(node)].children) {
    if (b == byte) return c;
    if (b > byte) break;
  }
  return -1;
}

bool ByteTrie::has_value_in(int32_t node, int32_t lo, int32_t hi) const {
  const std::vector<int32_t>& v = nodes[static_cast<std::size_t>(node)].values_below;
  const auto it = std::lower_bound(v.begin(), v.end(), lo);
  return it != v.end() && *it <= hi;
}

int32_t Grammar::add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<int32_t>(nodes.size()) - 1;
}

int32_t Grammar::import(const Grammar& other) {
  const int32_t offset = static_cast<int32_t>(nodes.size());
  for (Node n : other.nodes) {
    for (int32_t& c : n.children) c += offset;
    nodes.push_back(std::move(n));
  }
  return other.root + offset;
}

namespace {

int64_t sum(int64_t a, int64_t b) { return std::min(kUnreachable, a + b); }

// count * each, kUnreachable where it would reach it (each may be kUnreachable itself before the fixpoint).
int64_t times(int64_t count, int64_t each) {
  return each > 0 && count > kUnreachable / each ? kUnreachable : count * each;
}

// Fills the tables of an object whose children's min_bytes are known (grammar.h). A member costs its key,
// ':' and value, and the ',' before it; rest[x][d] is '}' when nothing is owed, else ',' and after_comma[x][d],
// which is the cheapest of: property x and what follows it, skipping an optional x, or (nothing required left)
// an extra member.
void finish_object(Grammar& g, Node& n) {
  const int32_t count = declared_count(n);
  const auto ucount = static_cast<std::size_t>(count);
  n.next_required.assign(ucount + 1, count);
  n.required_left.assign(ucount + 1, 0);
  for (int32_t x = count - 1; x >= 0; --x) {
    const auto ux = static_cast<std::size_t>(x);
    n.next_required[ux] = n.required[ux] ? x : n.next_required[ux + 1];
    n.required_left[ux] = n.required_left[ux + 1] + (n.required[ux] ? 1 : 0);
  }
  n.extra_bytes = kUnreachable;
  if (n.open) n.extra_bytes = sum(g.at(n.children[ucount]).min_bytes + 1, g.at(n.children[ucount + 1]).min_bytes);
  // Extra members come last, as one block of distinct keys: after the ',' that starts it, the d members still
  // owed (at least the one the ',' begins) at the shortest keys, and the '}'.
  const auto extras = [&](int64_t d) { return members_bytes(g, n, std::max<int64_t>(d, 1)); };
  const int64_t width = n.need_cap + 1;
  n.rest.assign((ucount + 1) * static_cast<std::size_t>(width), kUnreachable);
  n.after_comma.assign(n.rest.size(), kUnreachable);
  const auto at = [&](int32_t x, int64_t d) { return static_cast<std::size_t>(x * width + d); };
  for (int32_t x = count; x >= 0; --x) {
    const auto ux = static_cast<std::size_t>(x);
    for (int64_t d = 0; d <= n.need_cap; ++d) {
      const int64_t owed = std::max<int64_t>(0, d - 1);  // after one more member
      const bool closes = n.required_left[ux] == 0 && d == 0;
      if (closes) n.rest[at(x, d)] = 1;  // before an extra member's entry reads it
      int64_t best = kUnreachable;
      if (x < count) {
        best = sum(n.key_bytes[ux] + 1, sum(g.at(n.children[ux]).min_bytes, n.rest[at(x + 1, owed)]));
        if (!n.required[ux]) best = std::min(best, n.after_comma[at(x + 1, d)]);
      }
      if (n.open && n.required_left[ux] == 0) best = std::min(best, extras(d));
      n.after_comma[at(x, d)] = best;
      if (!closes) n.rest[at(x, d)] = sum(1, best);
    }
  }
}

// The shortest map: min_count members at its shortest distinct keys, each with the shortest value.
int64_t map_min_bytes(const Grammar& g, const Node& n) {
  return n.min_count == 0 ? 2 : sum(1, members_bytes(g, n, n.min_count));
}

// The most bytes a pattern's key node writes, quotes included: its automaton's longest text where that is
// finite (escapes counted as written: "\u0001" is 6 bytes), else at most max_count characters, each at most 6
// bytes ("\u001f"). Never less than a key it writes (key_log.h: most_over rests on it).
int64_t longest_key_text(const Node& key) {
  const int64_t by_chars = 6 * std::min<int64_t>(key.max_count, INT32_MAX) + 2;
  if (key.kind != NodeKind::kDfa) return by_chars;
  const std::optional<int64_t> longest = longest_text_bytes(*key.dfa);
  return longest ? std::min(*longest, by_chars) : by_chars;
}

// A bound on the bytes a pattern's key costs past its grammar's shortest completion where some of its keys
// are taken (Grammar::shaped_extra), in an object of at most `members` keys. Never more than its longest text
// (longest_key_text), nor than what KeyLog::need() counts (kMaxKeyExtra). And from a state whose `members`
// + 1 shortest completions have at most L bytes (bytes_for_texts), one of them is free: within the key's
// character limit, at most L bytes; where the characters already written leave fewer than L, the key's
// remaining characters are fewer than L, each at most 6 bytes ("\u001f"). A key of every length, as
// ^[a-z]+$ in a map of 256 members, counts so 6 * 4 bytes (257 keys of '"', two letters and '"'), where its
// longest text is 6,146 bytes.
int64_t most_key_extra(const Node& key, int64_t members) {
  int64_t most = std::min(longest_key_text(key), kMaxKeyExtra);
  if (key.kind != NodeKind::kDfa) return most;
  const std::optional<int64_t> within = bytes_for_texts(*key.dfa, members + 1, kMaxKeyExtra);
  return within ? std::min(most, 6 * *within) : most;
}

// key_counts of the maps and open objects, enough for every member they may have and one more.
void count_object_keys(Grammar& g) {
  for (Node& n : g.nodes) {
    const bool map = n.kind == NodeKind::kAnyObject;
    if (!map && !(n.kind == NodeKind::kObject && n.open)) continue;
    const int32_t key = n.children[map ? 0 : n.required.size()];
    n.key_counts = count_keys(g.at(key), std::min<int64_t>(std::max(n.min_count, n.max_count), INT32_MAX) + 2);
    if (!n.key_counts.empty()) {
      g.longest_key = std::max(g.longest_key, n.key_counts.back().first);
      g.key_spread = std::max(g.key_spread, n.key_counts.back().first - n.key_counts.front().first);
    }
    g.few_keys = g.few_keys || (!map && n.extra_keys != Node::kNoKeyBound);
    const Node& k = g.at(key);
    if (k.kind == NodeKind::kLiteralSet) {
      for (const ByteTrie::Node& t : k.trie.nodes) g.shaped_extra = std::max<int64_t>(g.shaped_extra, t.depth + 2);
    } else if (k.kind != NodeKind::kString) {
      const int64_t members =
          std::min<int64_t>(std::max(n.min_count, n.max_count), INT32_MAX) + static_cast<int64_t>(n.children.size());
      g.shaped_extra = std::max(g.shaped_extra, most_key_extra(k, members));
    }
  }
}

}  // namespace

void Grammar::finish() {
  // A node's children come before it except where the builders made a cycle (any value inside any object
  // or array), and those nodes' sizes do not depend on their children: one pass per level of nesting
  // settles everything, so iterate until nothing changes.
  count_object_keys(*this);
  for (Node& n : nodes) n.min_bytes = kUnreachable;
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& n : nodes) {
      int64_t m = kUnreachable;
      switch (n.kind) {
        case NodeKind::kLiteral: m = static_cast<int64_t>(n.literal.size()); break;
        case NodeKind::kLiteralSet: m = n.trie.nodes[0].min_remaining; break;
        case NodeKind::kString: m = 2 + n.min_count; break;
        case NodeKind::kNumber: m = 1; break;
        case NodeKind::kAnyObject: m = map_min_bytes(*this, n); break;
        case NodeKind::kAnyValue: m = 1; break;
        case NodeKind::kArray:
          m = n.min_count == 0 ? 2 : sum(2 + (n.min_count - 1), times(n.min_count, at(n.children[0]).min_bytes));
          break;
        case NodeKind::kObject:
          finish_object(*this, n);
          m = n.required_left[0] == 0 && n.min_count == 0 ? 2 : sum(1, object_table(n, n.after_comma, 0, n.min_count));
          break;
        case NodeKind::kChoice:
          for (int32_t c : n.children) m = std::min(m, at(c).min_bytes);
          break;
        case NodeKind::kDfa: m = n.dfa->min_bytes[0]; break;
        case NodeKind::kSequence:
          m = 0;
          for (int32_t c : n.children) m = std::min(kUnreachable, m + at(c).min_bytes);
          break;
      }
      if (m != n.min_bytes) {
        n.min_bytes = m;
        changed = true;
      }
    }
  }
}

int64_t object_table(const Node& n, const std::vector<int64_t>& table, int32_t x, int64_t need) {
  const int64_t d = std::min(need, n.need_cap);
  const int64_t base = table[static_cast<std::size_t>(x * (n.need_cap + 1) + d)];
  if (need == d) return base;
  const int64_t each = sum(n.extra_bytes, 1);
  if (base >= kUnreachable || each >= kUnreachable || need - d > kUnreachable / each) return kUnreachable;
  return sum(base, (need - d) * each);
}

int32_t add_literal(Grammar& g, std::string text) {
  Node n;
  n.kind = NodeKind::kLiteral;
  n.literal = std::move(text);
  return g.add(std::move(n));
}

int32_t add_literal_set(Grammar& g, const std::vector<std::string>& strings) {
  ORBIT_CHECK(!strings.empty(), "constraint: an empty set of literals");
  Node n;
  n.kind = NodeKind::kLiteralSet;
  n.trie = ByteTrie::of(strings);
  return g.add(std::move(n));
}

int32_t add_string(Grammar& g, int64_t min_chars, int64_t max_chars) {
  Node n;
  n.kind = NodeKind::kString;
  n.min_count = min_chars;
  n.max_count = max_chars;
  return g.add(std::move(n));
}

int32_t add_number(Grammar& g, bool integer, int64_t max_chars) {
  Node n;
  n.kind = NodeKind::kNumber;
  n.integer = integer;
  // An integer of at most 18 characters fits a signed 64-bit integer, so parsers read it as one.
  n.max_count = integer ? std::min<int64_t>(max_chars, kMaxIntegerChars) : max_chars;
  return g.add(std::move(n));
}

int32_t add_dfa(Grammar& g, ByteDfa dfa, int64_t max_chars, const std::string& what) {
  count_ahead(dfa);
  return add_dfa(g, std::make_shared<const ByteDfa>(std::move(dfa)), max_chars, what);
}

void check_dfa_room(const Grammar& g, const std::string& what) {
  ORBIT_CHECK(g.dfa_states < kMaxGrammarDfaStates,
              what << ": the schema's patterns, formats and bounded numbers are too complex to constrain together "
                   << "(their automata hold over " << kMaxGrammarDfaStates << " states in all)");
}

int32_t add_dfa(Grammar& g, std::shared_ptr<const ByteDfa> dfa, int64_t max_chars, const std::string& what) {
  if (g.counted_dfas.insert(dfa.get()).second) {
    g.dfa_states += dfa->size();
    check_dfa_room(g, what);
  }
  ORBIT_CHECK(dfa->min_chars[0] <= max_chars, what << ": the shortest value allowed has " << dfa->min_chars[0]
                                                   << " characters, over the limit of " << max_chars);
  Node n;
  n.kind = NodeKind::kDfa;
  n.max_count = max_chars;
  n.dfa = std::move(dfa);
  return g.add(std::move(n));
}

int32_t add_any_value(Grammar& g, const ConstraintLimits& limits) {
  const bool space = limits.whitespace == Whitespace::kSingleSpace;
  Node value;
  value.kind = NodeKind::kAnyValue;
  value.max_depth = limits.max_depth;
  const int32_t v = g.add(std::move(value));
  const int32_t str = add_string(g, 0, limits.max_string_chars);
  const int32_t num = add_number(g, false, limits.max_number_chars);
  const int32_t lit = add_literal_set(g, {"true", "false", "null"});
  Node object;
  object.kind = NodeKind::kAnyObject;
  object.space = space;
  object.max_count = limits.max_object_members;
  object.children = {add_string(g, 0, limits.max_string_chars), v};
  const int32_t obj = g.add(std::move(object));
  Node array;
  array.kind = NodeKind::kArray;
  array.space = space;
  array.min_count = 0;
  array.max_count = limits.max_array_items;
  array.children = {v};
  const int32_t arr = g.add(std::move(array));
  g.nodes[static_cast<std::size_t>(v)].children = {str, num, lit, obj, arr};
  return v;
}

int32_t add_any_object(Grammar& g, const ConstraintLimits& limits) {
  const int32_t v = add_any_value(g, limits);
  return g.at(v).children[3];
}

int32_t add_any_array(Grammar& g, const ConstraintLimits& limits) {
  const int32_t v = add_any_value(g, limits);
  return g.at(v).children[4];
}

std::string json_quote(const std::string& text) {
  std::string out;
  if (append_json_string(out, text, InvalidUtf8::kRefuse)) return out;
  return nlohmann::json(text).dump();  // not UTF-8: dump() throws its type_error, as it always has here
}

}  // namespace orbit::constrain
