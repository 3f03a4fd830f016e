// Matching bytes against a Grammar (grammar.h): a pushdown machine whose state is a set of stacks (the
// byte transitions of each node kind are matcher_nodes.h).
//
//   stack   [ Sequence a=1 | Object phase=kNext a=2 | String phase=kBody a=17 ]     top last
//
// Each frame is one node being matched: its node index, a phase within it and two counters (what a and b
// mean depends on the node kind: matcher_nodes.h says). A frame's nesting depth is not stored: it is the
// number of frames below it that are not sequences (a sequence's parts sit at its own depth). A container sets its own
// phase to what follows a child before pushing the child, so a frame below the top always stands for
// "what remains after the child above me completes". A finished frame is popped at once.
//
// The state is a *set* of stacks because a choice (anyOf, one sequence per tool) is followed along every
// alternative until the bytes tell them apart, and because a complete-but-extendable value (a number, an
// enum string that prefixes another) may either go on or end. Stacks are kept sorted and unique, so equal
// states have equal representations (StateSet::key).
//
// Thread-safety: a Matcher is immutable; StateSets are values.
#pragma once

#include <cstdint>
#include <vector>

#include "constrain/grammar.h"

namespace orbit::constrain {

namespace nodes {
struct Step;
}

// `start`: for an object, the offset in the text of its '{' once a KeyLog's walk has seen it (key_log.h), else
// kNoStart. It names the object whose keys a decoder tracks; the grammar never reads it, and key() leaves it
// out, so masks are shared by states that differ only in it.
//
//   bits   0..27 node   28..31 phase   | a (32) | b (32) | start (32)      16 bytes
//
// A grammar has fewer than kMaxNodes nodes (Constraint refuses a larger one) and a node kind fewer than 16
// phases (matcher_nodes.h).
inline constexpr uint32_t kNoStart = UINT32_MAX;
inline constexpr uint32_t kMaxNodes = uint32_t{1} << 28;
struct Frame {
  uint32_t node : 28;
  uint32_t phase : 4;
  uint32_t a = 0;
  uint32_t b = 0;
  uint32_t start = kNoStart;
  Frame() : node(0), phase(0) {}
};
static_assert(sizeof(Frame) == 16, "a frame is four words");
bool operator==(const Frame& x, const Frame& y);
bool operator<(const Frame& x, const Frame& y);

// Several stacks, stored flat: stack i is frames [begin(i), end(i)).
class StateSet {
 public:
  std::size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  const Frame* begin(std::size_t i) const { return frames_.data() + (i == 0 ? 0 : ends_[i - 1]); }
  Frame* begin(std::size_t i) { return frames_.data() + (i == 0 ? 0 : ends_[i - 1]); }
  std::size_t length(std::size_t i) const { return ends_[i] - (i == 0 ? 0 : ends_[i - 1]); }
  void clear() {
    frames_.clear();
    ends_.clear();
  }
  void push(const Frame* frames, std::size_t n) {
    frames_.insert(frames_.end(), frames, frames + n);
    ends_.push_back(static_cast<uint32_t>(frames_.size()));
  }
  // The last stack's top frame (after push()).
  Frame& last_top() { return frames_.back(); }
  // Sorts the stacks and drops repeats.
  void canonicalize();
  bool operator==(const StateSet& other) const { return frames_ == other.frames_ && ends_ == other.ends_; }

 private:
  std::vector<Frame> frames_;
  std::vector<uint32_t> ends_;
};

// Counters further than this from every bound they are compared with are equal for masking (see key()).
inline constexpr int64_t kNoHorizon = -1;

class Matcher {
 public:
  explicit Matcher(const Grammar& grammar) : g_(grammar) {}

  void start(StateSet& out) const;
  // `in` after `byte`, into `out` (cleared first). Returns whether any stack survived.
  bool step(const StateSet& in, uint8_t byte, StateSet& out) const;
  bool can_end(const StateSet& s) const;       // the text so far is a whole match
  bool can_continue(const StateSet& s) const;  // some byte extends it
  // The fewest bytes to a whole match in which no object repeats a key (0 when can_end), taking the keys the
  // open objects have written to be none of their shortest: the grammar does not know them. A lower bound
  // that KeyLog::need (key_log.h) makes exact; exact where no open object has a key.
  int64_t min_bytes(const StateSet& s) const;
  // min_bytes() of the one stack [f, f + n); and what one frame adds to it (the rest of its node after the
  // frames above it finish).
  int64_t stack_min_bytes(const Frame* f, std::size_t n) const;
  int64_t remaining(const Frame& f) const;
  // When `s` is one stack inside a string's body with at least its minimum length written: how many more
  // characters the string takes (plain content of at most that many characters keeps it in its body and
  // leaves min_bytes as it is: token_masks.h). Otherwise -1.
  int64_t string_room(const StateSet& s) const;
  // The state as words. With horizon H >= 0, a counter whose every comparison comes out the same for the
  // next H bytes (a string's length far from its bounds, say) is written as one sentinel: two states with
  // equal keys then allow exactly the same tokens of at most H bytes, with the same fewest bytes after each. An
  // object's member count rises at most once every 4 bytes, so it is a sentinel while (H + 3) / 4 more members
  // pass every check.
  void key(const StateSet& s, int64_t horizon, std::vector<uint32_t>& out) const;

 private:
  using Stack = std::vector<Frame>;
  void advance(const Frame* f, std::size_t n, uint8_t byte, StateSet& out) const;
  void consume(const Frame* f, std::size_t n, uint8_t byte, StateSet& out) const;
  // What one node's step `s` (matcher_nodes.h) makes of the stack f[0, n) after `byte`, into `out`.
  void apply(const Frame* f, std::size_t n, uint8_t byte, const nodes::Step& s, StateSet& out) const;
  void push(Stack stack, int32_t node, std::vector<Stack>& out) const;
  void settle(Stack stack, std::vector<Stack>& out) const;
  bool ends_here(const Frame& top) const;
  int64_t depth(const Frame* f, std::size_t n)
      const;  // the nesting depth of f[n - 1] (see above)  // complete but extendable: it may end before the next byte
  bool can_end_stack(const Frame* f, std::size_t n) const;
  int64_t object_remaining(const Node& n, const Frame& f) const;  // kObject's part of remaining()

  const Grammar& g_;
};

}  // namespace orbit::constrain
