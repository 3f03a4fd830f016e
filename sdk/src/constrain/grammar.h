// The grammar a constraint compiles to: a graph of nodes, each a small machine over bytes, held in one
// arena and named by index. Torch-free; immutable once built (finish()).
//
//   node kind     what it matches                                      children
//   kLiteral      fixed bytes                                          -
//   kLiteralSet   one of several byte strings (enum, const, true)     - (a trie of the strings)
//   kString       a JSON string, [min_count, max_count] characters     -
//   kNumber       a JSON number (integer: no fraction or exponent)     -
//   kObject       declared properties in their order, then (open)      one value per property, then
//                 extra members whose keys are none of their names;    (open) [extra key, extra value]
//                 [min_count, max_count] members where counted
//   kAnyObject    any object (string keys, any values), or a map;      [key string, any value]
//                 [min_count, max_count] members
//   kArray        an array of [min_count, max_count] items             [item]
//   kAnyValue     any JSON value, told apart by its first byte        [string, number, literals, object, array]
//   kChoice       one of its children                                  the alternatives
//   kSequence     its children one after another                       the parts
//   kDfa          a byte automaton's language (pattern, format, number  -
//                 bounds: schema_regular.h), at most max_count characters
//
// Whitespace: a container may carry `space`, which allows one ' ' after each of its '{', '[', ':' and ','
// and nowhere else; without it the container is written compactly.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "constrain/byte_dfa.h"
#include "orbit/constraint.h"

namespace orbit::constrain {

enum class NodeKind : uint8_t {
  kLiteral,
  kLiteralSet,
  kString,
  kNumber,
  kObject,
  kAnyObject,
  kArray,
  kAnyValue,
  kChoice,
  kSequence,
  kDfa,
};

// A trie of byte strings. Node 0 is the root; a node's `value` is the index of the string ending there
// (-1: none). `values_below` lists, sorted, the values of every string through the node.
struct ByteTrie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // by byte, sorted
    int32_t value = -1;
    int32_t depth = 0;
    int32_t min_remaining = 0;  // fewest bytes from here to the end of a string
    std::vector<int32_t> values_below;
    std::vector<int32_t> lengths_below;  // the byte lengths of the strings through the node, ascending
  };
  std::vector<Node> nodes;

  // Builds the trie of `strings` (distinct, non-empty); value i is strings[i].
  static ByteTrie of(const std::vector<std::string>& strings);
  // The child of `node` by `byte`, or -1.
  int32_t child(int32_t node, uint8_t byte) const;
  // Whether a string with a value in [lo, hi] passes through `node`.
  bool has_value_in(int32_t node, int32_t lo, int32_t hi) const;
};

struct Node {
  NodeKind kind = NodeKind::kLiteral;
  std::string literal;                 // kLiteral
  ByteTrie trie;                       // kLiteralSet (the strings), kObject (the keys, quoted as JSON)
  int64_t min_count = 0;               // kString characters, kArray items, kObject and kAnyObject members
  int64_t max_count = 0;               // kString, kNumber, kDfa characters; kArray items; object members
  bool integer = false;                // kNumber
  bool space = false;                  // containers: one optional ' ' after '{', '[', ':', ','
  int32_t max_depth = 0;               // kAnyValue: containers open only below this depth
  std::vector<int32_t> children;       // see the table above
  std::shared_ptr<const ByteDfa> dfa;  // kDfa (shared by the grammars a constraint is imported into)
  // kObject: `open` lets extra members follow the declared properties (children[n] their key, children[n + 1]
  // their value, n the declared count); `counted` keeps the number of members in the frame (an object that is
  // open or under minProperties / maxProperties: matcher_nodes.h).
  bool open = false;
  bool counted = false;
  // kObject, per property index p (declared order): required, the quoted key's length, and (filled by
  // finish()) the fewest bytes of its value.
  std::vector<bool> required;
  std::vector<int64_t> key_bytes;
  // kObject, filled by finish(), per next-allowed index x in [0, n]: the first required property at or after x
  // (n: none) and how many are required at or after x; and per x and need d in [0, need_cap] (members still
  // owed to min_count; object_table reads them), the fewest bytes that close the object after a value when
  // properties before x are spent (rest[x * (need_cap + 1) + d]), and the fewest bytes of one more member and
  // the close after a ',' (after_comma, alike). extra_bytes: the fewest bytes of one extra member.
  std::vector<int32_t> next_required;
  std::vector<int32_t> required_left;
  int64_t need_cap = 0;
  std::vector<int64_t> rest;
  std::vector<int64_t> after_comma;
  int64_t extra_bytes = 0;
  // kObject (open): how many distinct extra keys its key node writes, where that is finite (an enum, a short
  // pattern); kNoKeyBound where there are more than any object has members. A decoder that refuses repeated
  // keys counts on it (key_log.h).
  static constexpr int64_t kNoKeyBound = INT64_MAX;
  int64_t extra_keys = kNoKeyBound;
  // kAnyObject (its key node) and open kObject (its extra key node), filled by finish(): how many distinct keys
  // the key node writes per length in bytes, each in its shortest spelling, quotes included, as (length,
  // count), shortest first; counted (counts capped) until they hold more keys than the object has members, so
  // the shortest k keys it may still need are here even after every member it has took one (key_sums).
  std::vector<std::pair<int64_t, int64_t>> key_counts;
  // The shortest complete text of this node where no object repeats a key (filled by finish()): a map's or
  // an open object's members are costed at distinct keys, the shortest first.
  int64_t min_bytes = 0;
};

// A count of bytes that no text reaches (sums saturate at it).
inline constexpr int64_t kUnreachable = std::numeric_limits<int64_t>::max() / 4;

// The most bytes past the grammar's shortest that KeyLog::need() counts for a key being written whose short
// completions are taken (key_log.h: extra_for_fresh); past that, a lower bound.
inline constexpr int64_t kMaxKeyExtra = 256;

// A compiled constraint. Node indices are stable; `root` is what the whole text must match.
struct Grammar {
  std::vector<Node> nodes;
  int32_t root = -1;
  std::string description;
  int64_t longest_key = 0;  // the longest length in any node's key_counts (filled by finish())
  // The most the longest and the shortest length of one node's key_counts differ by, and whether some open
  // object has few extra keys (Node::extra_keys); both filled by finish(). The budget's bound reads them
  // (key_log.h: most_over).
  int64_t key_spread = 0;
  bool few_keys = false;
  // Where some map's or open object's keys are a pattern or a set of names rather than a string (of some
  // lengths), a key being written whose short completions are taken may cost more than 6 bytes past the
  // grammar's shortest (^(a|abcdefgh)$ with "a" taken: 7): a bound on that, for the budget's skip test
  // (key_log.h: most_over), so never below what it bounds. A name's length quoted; for a pattern the least of
  // its longest text as written (byte_dfa.h: longest_text_bytes; where it has texts of every length, its
  // maxLength characters at 6 bytes each), of kMaxKeyExtra, and of where one more key than its object may
  // hold is free (grammar.cpp: most_key_extra: 24 bytes for ^[a-z]+$, not 6,146); 0 where there is none.
  int64_t shaped_extra = 0;

  // The states of the distinct automata add_dfa put in kDfa nodes (at most kMaxGrammarDfaStates), and those
  // automata: what building them cost (an imported grammar's are not counted: built under their own bound).
  std::size_t dfa_states = 0;
  std::set<const ByteDfa*> counted_dfas;

  int32_t add(Node node);
  // Copies `other`'s nodes into this grammar; returns the index its root has here.
  int32_t import(const Grammar& other);
  // Fills the derived fields (min_bytes, the object tables). Call once after the last add/import.
  void finish();
  const Node& at(int32_t index) const { return nodes[static_cast<std::size_t>(index)]; }
};

// The automaton states one grammar's distinct kDfa nodes hold in all (Grammar::dfa_states): each pattern, format or
// bounded number is bounded alone (kMaxDfaStates), and this bounds one schema's together, so that one request's
// keywords cannot hold a thread for long (a state costs ~5 us to build).
inline constexpr std::size_t kMaxGrammarDfaStates = 4 * kMaxDfaStates;
// Throws naming `what` when `g`'s automata already hold kMaxGrammarDfaStates states: checked before building
// another, and by add_dfa after.
void check_dfa_room(const Grammar& g, const std::string& what);

// kObject: the declared properties' count.
inline int32_t declared_count(const Node& n) { return static_cast<int32_t>(n.required.size()); }
// kObject: the table entry (rest or after_comma) for properties before x spent and `need` members still owed.
// Past need_cap every member owed costs one extra member at the shortest extra key and its ',' more (need_cap
// is min_count for an open object whose tables hold at most 4096 entries; else the declared count, at least 1,
// when min_count is above it: by then the cheapest completion takes every declared property it would, and
// one member is owed, so after_comma is rest without the ','). Extra members' keys are distinct, each at
// least as long as the one before, so past need_cap this is a lower bound.
int64_t object_table(const Node& n, const std::vector<int64_t>& table, int32_t x, int64_t need);

// The bytes of the `k` shortest distinct keys of `object` (its key_counts), leaving out keys of the lengths in
// `taken` and `more` (one entry per key the object already has, in one or the other; each sorted: a length is
// counted by binary search). kUnreachable-sized where it has fewer keys.
int64_t key_sums(const Node& object, int64_t k, const std::vector<int64_t>& taken = {},
                 const std::vector<int64_t>& more = {});
// The shortest text of `object` from a ',' or its '{' on when `k` more members (k >= 1) all come from its key
// node (a map's, or an open object's past its declared properties) and none of the lengths in `taken` is
// left: the keys (key_sums), ':' and the value node's fewest bytes each, ',' between, and '}'.
int64_t members_bytes(const Grammar& g, const Node& object, int64_t k, const std::vector<int64_t>& taken = {});
// The keys per length of the key node `key` (key_counts above), counted until they hold `cap` keys.
std::vector<std::pair<int64_t, int64_t>> count_keys(const Node& key, int64_t cap);

// Builders. Each adds nodes to `g` and returns the new node's index.
int32_t add_literal(Grammar& g, std::string text);
int32_t add_literal_set(Grammar& g, const std::vector<std::string>& strings);
int32_t add_string(Grammar& g, int64_t min_chars, int64_t max_chars);
// An integer has at most kMaxIntegerChars characters (sign included): every one fits int64_t.
inline constexpr int64_t kMaxIntegerChars = 18;
int32_t add_number(Grammar& g, bool integer, int64_t max_chars);
// The language of `dfa` in at most `max_chars` characters (its char_end entries). Throws naming `what` when
// its shortest text is longer.
int32_t add_dfa(Grammar& g, ByteDfa dfa, int64_t max_chars, const std::string& what);
// The same for a DFA count_ahead() has filled, shared with the caller (dfa_memo.h).
int32_t add_dfa(Grammar& g, std::shared_ptr<const ByteDfa> dfa, int64_t max_chars, const std::string& what);
// Any JSON value (kAnyValue and the nodes it dispatches to); objects and arrays under `limits`.
int32_t add_any_value(Grammar& g, const ConstraintLimits& limits);
// Any JSON object: a kAnyObject whose values are any values.
int32_t add_any_object(Grammar& g, const ConstraintLimits& limits);
int32_t add_any_array(Grammar& g, const ConstraintLimits& limits);

// A JSON Schema (the subset constraint.h lists) compiled into `g`; `path` names the schema in errors.
// Throws orbit::Error "<path>.<where>: ..." for anything outside the subset.
int32_t add_json_schema(Grammar& g, std::string_view schema_json, const ConstraintLimits& limits,
                        const std::string& path);

// `text` as a JSON string literal (quotes included, escapes as nlohmann writes them: orbit/common/json_string.h).
// Throws nlohmann::json's type_error when `text` is not valid UTF-8.
std::string json_quote(const std::string& text);

}  // namespace orbit::constrain
