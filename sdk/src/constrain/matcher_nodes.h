// The byte transitions of each node kind (grammar.h): what one byte does to the frame on top of a stack.
// The stack machinery around them (pushing a child, popping a finished frame, choices) is matcher.cpp's.
//
// Frame fields by node kind:
//   kLiteral     a = bytes matched
//   kLiteralSet  a = trie node
//   kString      phase (below), a = characters so far (counted at each character's first byte)
//   kNumber      phase (below), a = characters so far, b = exponent digits
//   kObject      phase, a = x + (n + 1) * members: x the first property index still allowed (properties go
//                in declared order; n after an extra member), members how many it has (when it counts them,
//                else 0); b = the key's trie node while in a declared key, then the property whose value
//                comes (n: an extra member's)
//   kAnyObject   phase, a = members so far
//   kArray       phase, a = items so far
//   kAnyValue    - (replaced by the node its first byte selects)
//   kSequence    a = the next part to push
//   kDfa         a = the automaton's state, b = characters so far
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "constrain/matcher.h"

namespace orbit::constrain::nodes {

// kString phases: the body, an escape, \u's hex digits, and the UTF-8 continuation bytes still expected
// (kU1..kU3 take any 80-BF; the others restrict the first continuation byte to keep UTF-8 minimal and out
// of the surrogates).
enum StrPhase : uint16_t {
  kStrOpen,
  kStrBody,
  kStrEsc,
  kHex0,
  kHexD,
  kHex1,
  kHex2,
  kHex3,
  kU1,
  kU2,
  kU3,
  kE0,
  kED,
  kF0,
  kF4
};
// kNumber phases.
enum NumPhase : uint16_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };
// Containers (kObject, kAnyObject, kArray). kKey and kColon are objects' only.
enum BoxPhase : uint16_t { kOpen, kFirst, kFirstSp, kKey, kColon, kValue, kValueSp, kNext, kComma, kCommaSp };

// What one byte does to the top frame.
enum class Op { kDead, kStay, kFinish, kPush, kReplace };
struct Step {
  Op op = Op::kDead;
  Frame top;           // the top frame after the byte (kStay, kPush: before the child; kReplace)
  int32_t child = -1;  // kPush: the node to push, which then takes the byte; kReplace: the byte goes to `top`
  // Besides: push `fork` over `fork_top`, which takes the byte too (an open object's '"' may begin a declared
  // key or an extra one; the two stacks go on side by side).
  int32_t fork = -1;
  Frame fork_top;
};

inline Step stay(Frame f) { return {Op::kStay, f, -1}; }
inline Step finish() { return {Op::kFinish, Frame{}, -1}; }
inline Step push_then(Frame f, int32_t child) { return {Op::kPush, f, child}; }

// Each: the frame `f` of node `n` after byte `c`.
Step string_byte(const Node& n, Frame f, uint8_t c);
Step number_byte(const Node& n, Frame f, uint8_t c);
Step object_byte(const Node& n, Frame f, uint8_t c);
Step any_object_byte(const Node& n, Frame f, uint8_t c);
Step array_byte(const Node& n, Frame f, uint8_t c);
Step any_value_byte(const Node& n, Frame f, uint8_t c, int64_t depth);  // `depth`: the frame's (matcher.h)
Step dfa_byte(const Node& n, Frame f, uint8_t c);

bool num_accepting(uint16_t phase);
// Bytes a string still needs to finish the character it is in (0 in the body).
int64_t string_pending(uint16_t phase);
// kObject's frame counter `a` (above): x and members.
inline uint32_t spent(const Node& n, uint32_t a) { return a % static_cast<uint32_t>(declared_count(n) + 1); }
inline int64_t members(const Node& n, uint32_t a) { return a / static_cast<uint32_t>(declared_count(n) + 1); }
// Members still owed to min_count.
inline int64_t owed(const Node& n, int64_t members) { return std::max<int64_t>(0, n.min_count - members); }
// The declared properties an object may write next, [first, second] (empty when first > second): at or after
// x, no required one skipped, and leaving a way to close (within max_count; closed: enough properties left
// for min_count).
std::pair<int32_t, int32_t> key_range(const Node& n, uint32_t x, int64_t members);

}  // namespace orbit::constrain::nodes
