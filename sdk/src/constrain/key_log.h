// Repeated keys. A grammar cannot tell an object's keys apart when they come from an unbounded set (no
// context-free grammar can), so the grammar admits `{"a": 1, "a": 2}` under a map. A decoder that must never
// write such an object (TokenConstraint) walks its text with a KeyLog beside the matcher: the log holds, per
// open object, the free keys written in it (a map's or any object's keys, an open object's extra keys; a
// declared name is written at most once by the grammar itself, and no extra key spells one), each as the
// text json_quote() writes for it, so two spellings of one text are one key. A walk refuses
//   - the byte that closes a free key its object already has, and
//   - the byte after which a free key can only be completed into keys its object already has (a key language
//     with few words: an enum of names, a short pattern); its shortest completion is then not one to take.
// The compiler keeps an object to the number of distinct keys its key language holds (schema_objects.cpp),
// so a ',' always leaves a new key to write.
//
// What stays the grammar's: Matcher::min_bytes counts the shortest key for every member still owed even where
// the object already has it, so the fewest bytes left may be a few more than it says; repeat_cost() is the
// difference, which TokenConstraint's budget holds back.
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

  // The bytes beyond the grammar's fewest (Matcher::min_bytes) that completing `state` (the state after
  // `text`) costs where no key may repeat: the members a map still owes at the shortest keys its map has not
  // written, distinct, and the key being written at its shortest new completion. Still a lower
  // bound (every member owed is costed at the one shortest new key; an open object's extra members are not
  // costed), which a budget subtracts from the bytes it has.
  int64_t repeat_cost(const Matcher& m, const StateSet& state, std::string_view text) const;

  // Tokens (ids into `trie`'s vocabulary) that a walk from `state` may refuse where the grammar allows them:
  // those that can close a free key (they hold enough '"'), and, inside a key that could become one the
  // object has, those that write a prefix of its rest. `all` is set instead when every token must be asked
  // (a key near its maxLength that may repeat one). No other token repeats a key.
  void suspects(const StateSet& state, std::string_view text, const VocabTrie& trie, std::vector<int32_t>& out,
                bool& all) const;

 private:
  // The stack [f, f + n) after the byte at offset `at` of text + walked: stamps its objects; false when it
  // repeats a key. A key it closes is appended to `closed`.
  bool keeps(Frame* f, std::size_t n, uint32_t at, std::string_view text, std::string_view walked,
             Closed& closed) const;
  // The key node of `object`'s free keys when it is a kAnyObject or an open kObject at its extra key's ':'
  // (at kColon, whose key is being written or has just closed); else null.
  const Node* free_key(const Frame& object) const;
  // repeat_cost() of the stack [f, f + n).
  int64_t stack_repeat_cost(const Matcher& m, const Frame* f, std::size_t n, std::string_view text) const;
  // The free keys of `object`: the log's and those `closed` adds.
  std::set<std::string> taken(uint32_t object, const Closed& closed) const;
  // Whether the key frame `f` (`prefix` its bytes so far, which are json_quote()'s spelling) has a completion
  // none of `taken` is.
  bool fresh_ahead(const Node& key, const Frame& f, std::string& prefix, const std::set<std::string>& taken) const;

  const Grammar& g_;
  std::map<uint32_t, std::set<std::string>> keys_;  // per object's '{' offset: its free keys, json_quote()d
};

}  // namespace orbit::constrain
