// The helpers the key log's files share (key_log.cpp: the walk; key_log_keys.cpp: the per-object keys;
// key_log_need.cpp: the fewest bytes left; key_log_suspects.cpp: the tokens a walk may refuse). Private to
// orbit_constrain.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "constrain/matcher.h"

namespace orbit::constrain::key_log {

inline bool is_object(const Node& n) { return n.kind == NodeKind::kObject || n.kind == NodeKind::kAnyObject; }

inline bool has_few_keys(const Node& n) {
  return n.kind == NodeKind::kObject && n.open && n.extra_keys != Node::kNoKeyBound;
}

// The bytes of text + walked, read as one text.
struct Joined {
  std::string_view text, walked;
  char operator[](std::size_t i) const { return i < text.size() ? text[i] : walked[i - text.size()]; }
  // The bytes [from, to].
  std::string span(std::size_t from, std::size_t to) const {
    std::string s;
    for (std::size_t i = from; i <= to; ++i) s += (*this)[i];
    return s;
  }
  // The offset of the '"' that opens the JSON string whose bytes run through `last`: the nearest '"' at or
  // before it with an even run of backslashes before it (inside a string a '"' is always escaped).
  std::size_t opening_quote(std::size_t last) const {
    for (std::size_t q = last + 1; q-- > 0;) {
      if ((*this)[q] != '"') continue;
      std::size_t slashes = 0;
      while (slashes < q && (*this)[q - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return q;
    }
    return 0;  // not reached: a key's bytes follow its opening quote
  }
};

// A whole key (quotes included, any spelling the grammar allows) as json_quote() writes its text.
// ASCII without a '\\' or a control byte is its own: json_quote() escapes only those.
std::string canonical(const std::string& quoted);

// A lower bound on how many texts complete the key frame `f` of `key` (kDfa or kLiteralSet) within its
// maxLength: a literal set's words below the frame's trie node (one spelling each), a pattern's texts ahead
// of a state with no cycle ahead (where they fit the maxLength) or, past a one-character loop, one per
// character left beyond ByteDfa::loop_chars; 0 where neither tells (capped at ByteDfa::kTextsCap).
int64_t completions_at_least(const Node& key, const Frame& f);

// How many of `keys` (json_quote()d: each begins with its '"'; a KeySet or a std::set<std::string>) begin with
// `prefix` (of the type they look up: std::string for a std::set<std::string>), counted up to `limit`.
template <typename Keys, typename Prefix>
std::size_t count_begins(const Keys& keys, const Prefix& prefix, std::size_t limit) {
  if (prefix == "\"") return std::min(limit, keys.size());  // every key: not read one by one
  std::size_t n = 0;
  for (auto it = keys.lower_bound(prefix); n < limit && it != keys.end() && it->compare(0, prefix.size(), prefix) == 0;
       ++it) {
    ++n;
  }
  return n;
}

// One byte of a key (kString, kDfa or kLiteralSet): -1 refused, 0 the key goes on (`f` updated), 1 it is whole.
int key_byte(const Node& key, Frame& f, uint8_t c);

// Calls f(b), ascending, for each byte b that key_byte may take at the key frame `top` of `key`: a pattern's
// state's edges, a literal set's trie node's children, every byte for another key; until f returns true.
// Returns whether it did. (key_byte refuses every other byte.)
template <typename F>
bool any_key_byte(const Node& key, const Frame& top, F f) {
  if (key.kind == NodeKind::kDfa) {
    for (const ByteDfa::Edge& e : key.dfa->edges[static_cast<std::size_t>(top.a)]) {
      for (int b = e.lo; b <= e.hi; ++b) {
        if (f(b)) return true;
      }
    }
    return false;
  }
  if (key.kind == NodeKind::kLiteralSet) {
    for (const auto& [b, child] : key.trie.nodes[static_cast<std::size_t>(top.a)].children) {
      if (f(static_cast<int>(b))) return true;
    }
    return false;
  }
  for (int b = 0; b < 256; ++b) {
    if (f(b)) return true;
  }
  return false;
}

// Whether the key node `key` writes `quoted` (json_quote()'s spelling). The log holds an object's keys by its
// '{', so alternatives that read the same object share them, and a key one reads as free may be a declared
// name in another, where its extra keys spell no such key: counted there, it would take the place of a key
// the object may still write.
bool writes(const Node& key, std::string_view quoted);

}  // namespace orbit::constrain::key_log
