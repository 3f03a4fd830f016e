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
// beside the shortest others, whichever is fewer. The shortest free completion is searched byte by byte among
// those that can still close in the length tried (extra_for_fresh; only the bytes the key may take: a
// pattern's state's edges, an enum's trie node's children): exact up to 256 bytes past the grammar's and
// 65,536 bytes tried, a lower bound past that (a key language no test or schema of ours comes near).
//
// An object is named by the offset of its '{' in the text (Frame::start), which a walk writes into the frames
// of the objects that open during it. Thread-safety: a value (copies share each object's keys, read only, until
// one adds a key: it then copies them); walk() and suspects() are const.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "constrain/key_set.h"
#include "constrain/matcher.h"

namespace orbit::constrain {

class VocabTrie;

class KeyLog {
 public:
  // Keys a walk closed: (object, key).
  using Closed = std::vector<std::pair<uint32_t, std::string>>;

  explicit KeyLog(const Grammar& grammar) : g_(grammar) {}

  // An object's free keys, json_quote()d, and per key node that reads the object (alternatives that read one
  // '{' share its keys), the sorted lengths of those the node writes (which writes() tells: a key one node
  // reads as free may be a declared name of another). add() keeps both as keys close, so a step never re-reads
  // an object's keys; copies of the log share them until one adds a key. The keys (and saturated prefixes,
  // below) are a KeySet (key_set.h): an object that closes frees a few blocks, not two allocations a key.
  //
  // Per literal-set key node among those (an enum's names), `words` holds, per node of its trie, the byte
  // lengths, ascending, of the logged keys that are its words and pass through that node: a key being written
  // then counts its fresh completions of a length (need(): extra_for_fresh) as the trie node's words of that
  // length less the logged ones, without reading the keys.
  // How many logged words pass through each (trie node, byte length): open addressing in one array, so that
  // an object's index is one allocation to copy or free however many keys it holds.
  class WordLengths {
   public:
    void add(int32_t node, int32_t length);
    int64_t count(int32_t node, int32_t length) const;

   private:
    std::size_t find(uint64_t key) const;              // its slot, or the empty one where it would go
    std::vector<std::pair<uint64_t, int64_t>> slots_;  // (key + 1, count); key + 1 == 0: empty
    std::size_t used_ = 0;
  };
  //
  // Per pattern's or enum's key node, `saturated` holds the prefixes of logged keys (from the opening quote) at
  // which the node has no more completions than the object has keys that begin with them
  // (key_log::completions_at_least): the only points inside such a key where a walk may refuse a byte. They
  // change only as keys close, so suspects() looks up those past the key's bytes instead of reading every key
  // that begins with them. `indexed` false: some prefix's completions are not bounded (0), every key is read.
  struct Saturated {
    KeySet prefixes;
    bool indexed = true;
  };
  struct Keys {
    KeySet all;
    std::vector<std::pair<const Node*, std::vector<int64_t>>> lengths;
    std::vector<std::pair<const Node*, WordLengths>> words;
    std::vector<std::pair<const Node*, Saturated>> saturated;
    std::size_t shortest = SIZE_MAX;  // the bytes of the shortest of `all`
  };
  // The free keys of `object` at a byte of a walk: the log's and those `closed` adds past them (those `key`
  // writes, where given), without copying the log's.
  struct Taken {
    const Keys* log = nullptr;
    const Node* key = nullptr;
    std::set<std::string> more;  // the keys `closed` adds (json_quote()d), none of the log's
    bool empty() const { return (log == nullptr || log->all.empty()) && more.empty(); }
    bool contains(const std::string& k) const;
    bool any_begins(const std::string& prefix) const;  // a key (of any node's) begins with `prefix`
    // How many keys (of any node's) begin with `prefix`, counted up to `limit`: at least those of `key`'s.
    std::size_t count_begins(const std::string& prefix, std::size_t limit) const;
  };

  // `from`, the state after `text`, after `bytes`, into `out`: the matcher's step with the two refusals above
  // (objects that open are stamped). Returns false, `out` unspecified, where a byte is refused. The keys closed
  // are appended to `closed` when given; `dropped`, when given, is set where a byte's stack is refused while
  // another of that byte is kept.
  bool walk(const Matcher& m, const StateSet& from, std::string_view text, std::string_view bytes, StateSet& out,
            Closed* closed = nullptr, bool* dropped = nullptr) const;
  // Adds the keys a walk closed, then forgets the objects no stack of `now` (the walk's `out`) holds open.
  void add(const Closed& closed, const StateSet& now);

  // The fewest bytes that complete `state` (the state after text + walked) where no object repeats a key, the
  // keys `closed` adds counted as the log's (0 when complete).
  int64_t need(const Matcher& m, const StateSet& state, std::string_view text, std::string_view walked = {},
               const Closed* closed = nullptr) const;

  // need() after a token for the tokens budget_suspects() leaves out, from the state's own: with one stack
  //   need(after t) = max(Matcher::min_bytes(after t) + add, floor - |t|)
  // (kNoFloor: no floor). With several, each stack p before t has its own add_p and floor_p, and for a token
  // that drops no stack by the key log (most_over's (e)), need(after t) is the least, over the stacks s after
  // t, of max(g_s + add_p, floor_p - |t|), g_s the stack's grammar bytes and p the stack it comes from.
  // So need(after t), with g = Matcher::min_bytes(after t) = the least g_s, is
  //   at least max(g + add, floor - |t|)         (add, floor: the least add_p, floor_p; kNoFloor where some
  //                                                stack has none), and
  //   at most  max(g + top_add, top_floor - |t|) (the most add_p, and floor_p of the stacks that have one:
  //                                                the term of the s of g, whichever p it comes from).
  // Exact where the two agree (one stack, or stacks of the same slack); in between only the walk tells. After
  // {" of an object with a declared "a" and extra keys of ^(a|b|c|abcdefgh)$, minProperties 3, the declared
  // key's stack has no floor and the extra key's has one: after 'b' only the latter is left, need 23, where
  // the lower formula kept 'b' with 16 left. most_add: the most need() exceeds a stack's stack_min_bytes by,
  // over the state's stacks. A token t after which the walk drops no
  // stack (most_over's (e)) leaves need(after t) at most Matcher::min_bytes(after t) + most_add +
  // (|t| + 1) * longest_key + max(0, shaped_extra - 6) (most_over's (a)-(d): a key written past its '"' costs
  // at most 6 more where keys are strings, at most Grammar::shaped_extra where they are a pattern or names,
  // longest_key is at least 3, and a ',' or '"' at most longest_key): TokenConstraint::allowed's test of
  // whether the budget binds at all, which it does not take where some allowed token drops a stack
  // (TokenConstraint::repeats walks each that may).
  static constexpr int64_t kNoFloor = INT64_MIN / 4;
  struct Slack {
    int64_t add = 0;
    int64_t floor = kNoFloor;
    int64_t top_add = 0;           // the most add_s over the stacks
    int64_t top_floor = kNoFloor;  // the most floor_s over the stacks that have one
    int64_t most_add = 0;
    int64_t longest_key = 0;   // the longest key any object may need (grammar.h: key_counts)
    int64_t spread = 0;        // Grammar::key_spread
    bool few = false;          // Grammar::few_keys
    int64_t shaped_extra = 0;  // Grammar::shaped_extra
    bool has_keys = false;     // some open object has a free key
    bool in_key = false;       // some stack is inside a free key
    bool in_string = false;    // every stack is in the body of a string that is not a free key
  };
  Slack slack(const Matcher& m, const StateSet& state, std::string_view text) const;
  // A bound on need(after t) - Matcher::min_bytes(after t) for a token of bytes `t` that budget_suspects()
  // does not list, or -1 where only a walk tells. Write over = need - stack_min_bytes of one stack: over =
  // A + X (stack_need), A the sum over its open objects of a(k, L) = key_sums(k, L) - key_sums(k) (k members
  // owed, L the lengths of the keys the object has), X = 0 but where the stack writes a free key: then
  // X = max(fresh, l(k+1) - c), l(k+1) the (k+1)th shortest free key, c the grammar's shortest key that
  // begins with the bytes written (need = max(grammar + A + fresh, floor)). most_add is the most over of the
  // state's stacks. D = spread. Then:
  //  (a) a(k, L) >= 0, and grows by at most D when k grows by one or L gains a key: one of the k shortest
  //      free keys gives way to the next, no longer than the longest counted (key_counts holds a key more
  //      than any object's members), for one no shorter than the shortest.
  //  (b) L grows only at a '"' that closes a free key; k grows only at a ',' (kComma owes a member; a key's
  //      opening '"' counts its member, so k does not grow there); a '{' adds an object with L empty, a '}'
  //      takes one away. No other byte moves A.
  //  (c) X <= D where the key's object has no key (fresh 0: the grammar's shortest completion is free) or
  //      only the key's opening '"' is written (fresh: the shortest free key less the shortest key), as
  //      l(k+1) - c <= D (c is no shorter than the shortest key). Past that, in an object with keys, fresh
  //      may reach 6 (shaped_extra for shaped keys: extra_for_fresh) however short the keys: the walk tells.
  //  (d) Bytes without a '"' that go on with a key keep k, L and its object; c does not shrink, and fresh
  //      stays 0 where the object has no key: X does not grow.
  //  (e) A walk drops a stack (keeps) only at a '"' that closes a key its object has, inside a key of an
  //      object that has keys (the bytes written can only complete to its keys; a '\\' escape spells them
  //      otherwise), or at a ',' or key's '"' of an object with few keys. need(after t) is then another
  //      stack's, whose grammar bytes may exceed min_bytes(after t): such tokens are walked.
  // A token is settled here when no object may have few keys and it holds at most one '"' (counted after the
  // first where every stack is in a string and no '\\' comes before it: that one closes the string, which
  // moves no A), that one not closing a key (no stack writes one) and, where an object has keys, the token's
  // last byte; or no '"', and no stack writes a key where an object has one. Then no stack is dropped (e)
  // and no key closes (b), so the stack after t of the fewest grammar bytes comes from one whose over is at
  // most most_add, and by (a)-(d)
  //   need(after t) <= min_bytes(after t) + most_add + D * (its ',' + its '"').
  // (A ',' or '"' inside a string is counted as if it were not: a bound.)
  static int64_t most_over(const Slack& slack, std::string_view t);
  // The tokens after which need() may differ from what slack() says: those holding a '"' or a ',' (a key
  // begins or closes, a member is owed: VocabTrie::quotes_or_commas(1, true), which the caller reads itself)
  // and, inside a free key of an object that has keys, those that write a prefix of the rest of one of them
  // or hold a '\\' (an escape spells a key otherwise: "\u0061" is "a"), which this appends to `out`.
  // Returns true instead where the key being written holds a '\\' already: then any token may.
  bool budget_suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                       std::vector<int32_t>& out) const;

  // Tokens (ids into `trie`'s vocabulary) that a walk from `state` may refuse where the grammar allows them:
  // those that can close a free key (they hold enough '"'; returned, a list of `trie`'s), and, inside a key
  // that could become one the object has, those that write a prefix of its rest (appended to `out`; under a
  // pattern or an enum, only those long enough to reach a point with no more completions than the object has
  // keys that begin with the key's bytes there: key_log::completions_at_least), and
  // where the grammar has an object with few keys that no stack holds yet, those that may open one and a key
  // in it (VocabTrie::braced_quotes, appended to `out`). `all` is set instead when every token must be asked
  // (a key near its maxLength that may repeat one). No other token is refused or drops a stack.
  const std::vector<int32_t>& suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                                       std::vector<int32_t>& out, bool& all) const;

  // Where a walk from `state` can refuse a token that holds one '"' after printable ASCII and no '\\' (one
  // VocabTrie::quoted_apart leaves out) only inside a key the token is in at its start, by closing it with its
  // quote as a key its object has logged, or inside a pattern's or an enum's key that its quote opens: some key
  // is logged (else suspects() lists tokens of three quotes or more only), no object of a stack has few keys (a
  // ',' or an opening quote may be refused; an object the token opens is one only where it holds a '{' before
  // its quote, which suspects() lists apart), a stack outside a key has no object whose key node is a plain
  // string that a token can fill to its maxLength (the token's quote may open one), a stack inside a free key
  // writes a plain string key that a token cannot fill to its maxLength, a pattern's or an enum's (the quote
  // closes it; no key opens after it), and the key being written, if any, is printable ASCII without a '\\'
  // so far. Then `objects` are the objects of the stacks inside a free key and `prefix` that key's bytes from
  // its opening quote; the token's bytes up to its quote write it on, as json_quote() writes it. `outside`
  // are the objects with logged keys that stacks outside a key hold whose key node is a pattern or an enum,
  // each with its key's frame after the opening quote, where that quote is not refused (a fresh key can follow
  // it: else `applies` is false). A token whose quote opens a key in an object the stack does not hold opens it
  // in one the token itself opens, which has no key logged. `applies` false: every suspect is walked.
  struct Outside {
    uint32_t object = 0;
    const Node* key = nullptr;
    Frame at_quote;
  };
  struct OneQuote {
    bool applies = false;
    std::string prefix;
    std::vector<uint32_t> objects;
    std::vector<Outside> outside;
  };
  OneQuote one_quote(const StateSet& state, std::string_view text, int64_t max_token_bytes) const;
  // Where `q` applies, the tokens VocabTrie::quoted_apart leaves out that may be refused: those that begin
  // with the rest of a key an object of `q` has logged, its closing quote included (appended to `out`). Inside
  // a pattern's or an enum's key a walk refuses a byte only where the key's completions are all taken; the
  // key that the grammar lets the token close with its quote is then one of them, so the token begins with
  // its rest too.
  void one_quote_suspects(const OneQuote& q, const VocabTrie& trie, std::vector<int32_t>& out) const;
  // Where `q` applies, whether a walk may refuse a token of VocabTrie::quoted_tails whose bytes after its quote
  // are `tail` (or of VocabTrie::body_openers, read from a string value's body: its bytes after the quote that
  // opens a string), in a key that quote opens in an object of `q.outside`: the key's bytes so far begin a key
  // the object has logged and have no completion that is not one (the walk's own test, on those bytes alone;
  // bytes past ASCII are compared as written, as json_quote() leaves them). A token for which this is false is
  // refused by no walk (given `q`); one for which it is true is walked.
  bool tail_refusable(const OneQuote& q, std::string_view tail) const;
  // Whether every stack of `state` is in the body of a string (not mid-escape nor mid-character): a value's,
  // or a free key's whose key node is a plain string that no token of at most `max_token_bytes` bytes fills to
  // its maxLength. A token that writes no quote ending the string (VocabTrie::quotes_escaped) then leaves every
  // stack in its string: it closes no key and opens none, moves no object, and a plain key's bytes below its
  // maxLength are never refused, so no walk refuses it.
  bool in_string_bodies(const StateSet& state, int64_t max_token_bytes) const;

 private:
  // The stack [f, f + n) after the byte at offset `at` of text + walked: stamps its objects; false when it
  // repeats a key the log or `closed` (the walk's keys before this byte) holds. A key it closes is appended
  // to `here` (once: alternatives of one object close the same key at the same byte).
  bool keeps(Frame* f, std::size_t n, uint32_t at, std::string_view text, std::string_view walked, const Closed& closed,
             Closed& here) const;
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
  Taken taken(uint32_t object, const Closed& closed, const Node* key = nullptr) const;
  bool has_key(uint32_t object, const std::string& key, const Closed& closed) const;
  // How many of `object`'s free keys (the log's and those `closed` adds) the key node `key` writes.
  std::size_t key_count(uint32_t object, const Closed& closed, const Node& key) const;
  // The sorted lengths of the log's keys in `taken` that `key` writes: add()'s, else counted into `scratch`.
  const std::vector<int64_t>& log_lengths(const Taken& taken, const Node& key, std::vector<int64_t>& scratch) const;
  // Where `keys` has no lengths for `key`: those of its keys that `key` writes, sorted, counted from scratch.
  static std::vector<int64_t> lengths_from_scratch(const Keys& keys, const Node& key);
  // Adds the logged key `quoted` to the word lengths of the literal set `key` where it is one of its words.
  static void index_word(const Node& key, std::string_view quoted, WordLengths& words);
  // Adds the prefixes of the logged key `quoted` that `key` (kDfa or kLiteralSet) reaches and that `all` (the
  // object's keys, `quoted` among them) saturates to `out`.
  static void index_saturated(const Node& key, std::string_view quoted, const KeySet& all, Saturated& out);
  // The node that writes an object's free keys: a map's key, an open object's extra key; null for another.
  const Node* key_node(const Node& object) const;
  // Whether the key frame `f` (`prefix` its bytes so far, which are json_quote()'s spelling) has a completion
  // none of `taken` is.
  bool fresh_ahead(const Node& key, const Frame& f, std::string& prefix, const Taken& taken) const;
  // The object's keys as they are to change: its own where no copy of the log shares them.
  Keys& own(uint32_t object);

  const Grammar& g_;
  std::map<uint32_t, std::shared_ptr<Keys>> keys_;  // per object's '{' offset: its free keys
};

}  // namespace orbit::constrain
