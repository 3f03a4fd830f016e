// The byte transitions of each node kind (grammar.h): what one byte does to the frame on top of a stack.
// The stack machinery around them (pushing a child, popping a finished frame, choices) is matcher.cpp's.
//
// Frame fields by node kind:
//   kLiteral     a = bytes matched
//   kLiteralSet  a = trie node
//   kString      phase (below), a = characters so far (counted at each character's first byte)
//   kNumber      phase (below), a = characters so far, b = exponent digits
//   kObject      phase, a = the first property index still allowed (properties go in declared order),
//                b = the key's trie node while in a key, then the property whose value comes
//   kAnyObject   phase, a = members so far
//   kArray       phase, a = items so far
//   kAnyValue    - (replaced by the node its first byte selects)
//   kSequence    a = the next part to push
//   kDfa         a = the automaton's state, b = characters so far
#pragma once

#include <cstdint>

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
Step any_value_byte(const Node& n, Frame f, uint8_t c);
Step dfa_byte(const Node& n, Frame f, uint8_t c);

bool num_accepting(uint16_t phase);
// Bytes a string still needs to finish the character it is in (0 in the body).
int64_t string_pending(uint16_t phase);
// The last property an object may write next when properties before `x` are spent (declared order, no
// required one skipped).
int32_t last_allowed(const Node& n, uint32_t x);

}  // namespace orbit::constrain::nodes
