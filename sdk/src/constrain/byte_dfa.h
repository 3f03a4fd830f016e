// Finite automata over bytes, for the parts of a schema that are regular languages: a string's `pattern` or
// `format`, a number's bounds and `multipleOf`. They are built as an NFA (regex.h writes one), made
// deterministic, intersected, wrapped in a JSON string's quotes, and pruned so that every state left can
// still reach an accepting one: a constrained generation that follows the DFA never paints itself into a
// corner. Torch-free.
//
//   ByteNfa   states joined by byte-range edges and empty moves; states inside a multi-byte character are
//             marked, so that a DFA knows where characters end (for minLength / maxLength). An empty move
//             may carry an assertion on the rest of the text (a lookahead, or '$'): a run that takes it holds
//             only where the bytes from there to the end are in (a negative one: not in) the assertion's
//             language, so a run is a thread with the assertions it has still to meet
//   ByteDfa   the deterministic, pruned automaton the grammar's kDfa node runs (grammar.h)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orbit::constrain {

struct ByteDfa;

struct ByteNfa {
  struct Edge {
    uint8_t lo = 0;
    uint8_t hi = 0;
    int32_t to = 0;
  };
  // An empty move under assertions[assertion].
  struct Asserted {
    int32_t assertion = 0;
    int32_t to = 0;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int32_t> empty;      // moves that take no byte
    std::vector<Asserted> asserted;  // moves that take no byte where an assertion holds
    bool mid_char = false;           // inside a character's bytes (a UTF-8 sequence or an escape)
  };
  // A condition on the rest of the text: `rest` accepts the texts (from the move to the end of the whole
  // text) where it holds; a lookahead (?=X) is X followed by any bytes, '$' the empty text. Negative: it holds
  // where `rest` does not accept. Assertions sit between characters, where the rest is whole characters.
  struct Assertion {
    std::shared_ptr<const ByteDfa> rest;
    bool negative = false;
  };
  std::vector<State> states;
  std::vector<Assertion> assertions;
  int32_t start = 0;
  int32_t accept = 0;

  int32_t add(bool mid_char = false);
  void edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to);
  void empty(int32_t from, int32_t to);
  void asserted(int32_t from, int32_t assertion, int32_t to);
};

// The deterministic automaton. State 0 is the start. Every state reaches an accepting state (pruned).
struct ByteDfa {
  struct Edge {
    uint8_t lo = 0;
    uint8_t hi = 0;
    int32_t to = 0;
  };
  std::vector<std::vector<Edge>> edges;  // per state: sorted by lo, disjoint
  std::vector<uint8_t> accepting;
  // Entering this state completes a character of a string's content: the quotes and bytes inside a
  // character do not. Numbers count every byte.
  std::vector<uint8_t> char_end;
  std::vector<int64_t> min_bytes;  // fewest bytes from the state to an accepting state
  std::vector<int64_t> min_chars;  // fewest characters (char_end entries) from the state to an accepting state
  int64_t max_min_chars = 0;       // the largest of min_chars
  // Per state, where no cycle is reachable from it: how many texts complete it (capped at kTextsCap) and the
  // most characters (char_end entries) one takes; kUnbounded for both where a cycle is, and empty until
  // count_ahead() fills them (Grammar's add_dfa does).
  static constexpr int64_t kTextsCap = int64_t{1} << 40;
  static constexpr int64_t kUnbounded = -1;
  std::vector<int64_t> texts_ahead;
  std::vector<int64_t> chars_ahead;
  // Per state, the fewest characters of a completion that passes a state with a one-character loop (an edge
  // to itself into a char_end state), or kUnbounded where none is reachable: with R characters left, the
  // state then has at least R - loop_chars + 1 completions (one per turn of the loop, each a character
  // longer). Filled by count_ahead() too.
  std::vector<int64_t> loop_chars;

  std::size_t size() const { return accepting.size(); }
  // The state after `byte`, or -1.
  int32_t next(int32_t state, uint8_t byte) const;
};

// Fills a.texts_ahead, a.chars_ahead and a.loop_chars.
void count_ahead(ByteDfa& a);

// Over this many states a construction throws (the schema keyword is too complex to constrain).
inline constexpr std::size_t kMaxDfaStates = 60000;

// The NFA made deterministic (subset construction) and pruned. `what` names the source in errors:
// "<what>: admits no value" when nothing is accepted, "<what>: too complex" past kMaxDfaStates or past a
// bound on the work. With assertions, a DFA state is a set of threads (an NFA state and the assertions its
// run has still to meet, each at the state its `rest` automaton has reached): exact, and bounded the same.
ByteDfa determinize(const ByteNfa& nfa, const std::string& what);
// The same, nullopt when nothing is accepted. `work`: the work bound's count, shared by the constructions of
// one source so that the bound holds for them together (a pattern's lookaheads); nullptr: this one's own.
std::optional<ByteDfa> determinize_or_empty(const ByteNfa& nfa, const std::string& what, std::size_t* work = nullptr);
// The texts both accept.
ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, const std::string& what);
// The same, nullopt when none.
std::optional<ByteDfa> intersect_or_empty(const ByteDfa& a, const ByteDfa& b, const std::string& what);
// The texts `a` accepts and `b` does not (a byte `b` has no edge for leaves it for good); nullopt when none.
std::optional<ByteDfa> subtract(const ByteDfa& a, const ByteDfa& b, const std::string& what);
// At least `min_chars` characters (counted at char_end states): the product with a counter that stops at
// min_chars.
ByteDfa with_min_chars(const ByteDfa& a, int64_t min_chars, const std::string& what);
// `content` between a JSON string's quotes: '"' + content + '"'. The quote entries are not characters.
ByteDfa quoted(const ByteDfa& content, const std::string& what);
// The texts `a` accepts but those in `texts` (a finite set: the product with their trie); nullopt when none is
// left.
std::optional<ByteDfa> without(const ByteDfa& a, const std::vector<std::string>& texts, const std::string& what);
// How many texts `a` accepts with at most `max_chars` characters (char_end entries), counted up to `cap`:
// min(that number, cap). Costs a pass per byte of length until `cap` texts are found or none is longer.
int64_t count_texts(const ByteDfa& a, int64_t max_chars, int64_t cap);
// The same texts by length: [L] how many have L bytes (each at most cap), for L from 0 until they add up to
// `cap` or none is longer (an automaton that loops without characters past 6 * max_chars + 2 bytes: `cap`
// more at the next length).
std::vector<int64_t> texts_by_bytes(const ByteDfa& a, int64_t max_chars, int64_t cap);
// The most bytes of a text `a` accepts: the longest path from the start to an accepting state, over the states
// some accepted path holds. nullopt where there is none (a cycle among those states: texts of every length) or
// `a` accepts nothing. Over a JSON string's bytes (regex.h) a text's escapes are counted as written.
std::optional<int64_t> longest_text_bytes(const ByteDfa& a);
// The fewest bytes L such that from every state of `a`, at least `count` of the texts that lead on to
// acceptance have at most L bytes, or all of them do (a state with fewer texts: its longest). nullopt where
// some state is not settled within `max_bytes` bytes. Costs a pass over the edges per byte of length.
std::optional<int64_t> bytes_for_texts(const ByteDfa& a, int64_t count, int64_t max_bytes);
// Whether `a` accepts `text`.
bool accepts(const ByteDfa& a, std::string_view text);

}  // namespace orbit::constrain
