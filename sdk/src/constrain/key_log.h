// Repeated keys. A grammar cannot tell an object's keys apart when they come from an unbounded set (no
// context-free grammar can), so the grammar admits `{"a": 1, "a": 2}` under a map. ConstraintMatcher (and so
// TokenConstraint) must never write such an object: it walks its text with a KeyLog beside the grammar's
// matcher. The log holds, per open object, the free keys written in it (a map's or any object's keys, an open
// object's extra keys; a declared name is written at most once by the grammar itself, and no extra key spells
// one), each as the text json_quote() writes for it, so two spellings of one text are one key. A walk refuses
//   - the byte that closes a free key its object already has, and
//   - the byte after which a free key can only be completed into keys its object already has (a key language
//     with few words: an enum of names, a short pattern); its shortest completion is then not one to take.
// The compiler keeps an object to the number of distinct keys its key language holds (schema_objects.cpp),
// so a ',' always leaves a new key to write.
//
// The fewest bytes left. Matcher::min_bytes costs the members an object still owes at its shortest distinct
// keys (grammar.h: key_counts), as if the object had none of them yet. need() is exact: it leaves out the keys
// each open object has (they are no longer free), and where a key is being written, it is one of the keys the
// object still needs: completing it to one of the shortest free keys, or to its own shortest free completion
// beside the shortest others, whichever is fewer (a key whose shortest free completion lies more than 6 bytes
// past the grammar's is costed at 6 more: then a lower bound).
//
// An object is named by the offset of its '{' in the text (Frame::start), which a walk writes into the frames
// of the objects that open during it. Thread-safety: a value; walk() and suspects() are const.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "constrain/matcher.h"

namespace orbit::constrain {

class VocabTrie;

class KeyLog {
 public:
  // Keys a walk closed: (object, key).
  using Closed = std::vector<std::pair<uint32_t, std::string>>;

  explicit KeyLog(const Grammar& grammar) : g_(grammar) {}

  // `from`, the state after `text`, after `bytes`, into `out`: the matcher's step with the two refusals above
  // (objects that open are stamped). Returns false, `out` unspecified, where a byte is refused. The keys closed
  // are appended to `closed` when given.
  bool walk(const Matcher& m, const StateSet& from, std::string_view text, std::string_view bytes, StateSet& out,
            Closed* closed = nullptr) const;
  // Adds the keys a walk closed, then forgets the objects no stack of `now` (the walk's `out`) holds open.
  void add(const Closed& closed, const StateSet& now);

  // The fewest bytes that complete `state` (the state after text + walked) where no object repeats a key, the
  // keys `closed` adds counted as the log's (0 when complete).
  int64_t need(const Matcher& m, const StateSet& state, std::string_view text, std::string_view walked = {},
               const Closed* closed = nullptr) const;

  // need() after a token for the tokens budget_suspects() leaves out, from the state's own: with one stack
  //   need(after t) = max(Matcher::min_bytes(after t) + add, floor - |t|)
  // and at least that with several (kNoFloor: no floor). Any token t leaves need(after t) at most
  // Matcher::min_bytes(after t) + most_add + (|t| + 1) * longest_key.
  static constexpr int64_t kNoFloor = INT64_MIN / 4;
  struct Slack {
    int64_t add = 0;
    int64_t floor = kNoFloor;
    int64_t most_add = 0;
    int64_t longest_key = 0;  // the longest key any object may need (grammar.h: key_counts)
  };
  Slack slack(const Matcher& m, const StateSet& state, std::string_view text) const;
  // The tokens after which need() may differ from what slack() says: those holding a '"' or a ',' (a key
  // begins or closes, a member is owed: VocabTrie::quotes_or_commas(1, true), which the caller reads itself)
  // and, inside a free key, those that write a prefix of the rest of a key its object has, which this
  // appends to `out`.
  void budget_suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                       std::vector<int32_t>& out) const;

  // Tokens (ids into `trie`'s vocabulary) that a walk from `state` may refuse where the grammar allows them:
  // those that can close a free key (they hold enough '"'; returned, a list of `trie`'s), and, inside a key
  // that could become one the object has, those that write a prefix of its rest (appended to `out`). `all`
  // is set instead when every token must be asked (a key near its maxLength that may repeat one). No other
  // token repeats a key.
  const std::vector<int32_t>& suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                                       std::vector<int32_t>& out, bool& all) const;

 private:
  // The stack [f, f + n) after the byte at offset `at` of text + walked: stamps its objects; false when it
  // repeats a key. A key it closes is appended to `closed`.
  bool keeps(Frame* f, std::size_t n, uint32_t at, std::string_view text, std::string_view walked,
             Closed& closed) const;
  // The key node of `object`'s free keys when it is a kAnyObject or an open kObject at its extra key's ':'
  // (at kColon, whose key is being written or has just closed); else null.
  const Node* free_key(const Frame& object) const;
  // need() of the stack [f, f + n) as its Matcher::stack_min_bytes and the two terms of slack(): there,
  // need = max(grammar + add + fresh, floor), `fresh` what the key being written costs past the grammar's
  // shortest completion for being new.
  struct StackNeed {
    int64_t grammar = 0;
    int64_t add = 0;
    int64_t fresh = 0;
    int64_t floor = kNoFloor;
  };
  StackNeed stack_need(const Matcher& m, const Frame* f, std::size_t n, std::string_view text, std::string_view walked,
                       const Closed* closed) const;
  // The free keys of `object`: the log's and those `closed` adds; whether `key` is one of them, and how many
  // there are (neither copies them).
  std::set<std::string> taken(uint32_t object, const Closed& closed) const;
  bool has_key(uint32_t object, const std::string& key, const Closed& closed) const;
  std::size_t key_count(uint32_t object, const Closed& closed) const;
  // Whether the key frame `f` (`prefix` its bytes so far, which are json_quote()'s spelling) has a completion
  // none of `taken` is.
  bool fresh_ahead(const Node& key, const Frame& f, std::string& prefix, const std::set<std::string>& taken) const;

  const Grammar& g_;
  std::map<uint32_t, std::set<std::string>> keys_;  // per object's '{' offset: its free keys, json_quote()d
};

}  // namespace orbit::constrain
