// The byte transitions of every node kind, and the stack machinery around them (matcher.h).
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
#include "constrain/matcher.h"

#include <algorithm>
#include <limits>

namespace orbit::constrain {

namespace {

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

constexpr int kMaxExponentDigits = 2;
// Counters written as one value in keys: between the bounds' reach, and below the minimum's reach.
constexpr uint32_t kMid = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kBelow = std::numeric_limits<uint32_t>::max() - 1;

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool num_accepting(uint16_t p) { return p == kNumZero || p == kNumInt || p == kNumFrac || p == kNumExp; }

// The phase after a UTF-8 lead byte, or kStrOpen when it cannot lead a character.
uint16_t utf8_phase(uint8_t c) {
  if (c >= 0xC2 && c <= 0xDF) return kU1;
  if (c == 0xE0) return kE0;
  if (c == 0xED) return kED;
  if (c >= 0xE1 && c <= 0xEF) return kU2;
  if (c == 0xF0) return kF0;
  if (c >= 0xF1 && c <= 0xF3) return kU3;
  if (c == 0xF4) return kF4;
  return kStrOpen;
}

// Bytes a string still needs to finish the character it is in (0 in the body).
int64_t string_pending(uint16_t p) {
  switch (p) {
    case kStrEsc: return 1;
    case kHex0: return 4;
    case kHexD:
    case kHex1: return 3;
    case kHex2: return 2;
    case kHex3: return 1;
    case kU1: return 1;
    case kU2:
    case kE0:
    case kED: return 2;
    case kU3:
    case kF0:
    case kF4: return 3;
    default: return 0;
  }
}

// What one byte does to the top frame.
enum class Op { kDead, kStay, kFinish, kPush, kReplace };
struct Step {
  Op op = Op::kDead;
  Frame top;           // the top frame after the byte (kStay, kPush: before the child; kReplace)
  int32_t child = -1;  // kPush: the node to push, which then takes the byte; kReplace: the byte goes to `top`
};

Step stay(Frame f) { return {Op::kStay, f, -1}; }
Step finish() { return {Op::kFinish, Frame{}, -1}; }
Step push_then(Frame f, int32_t child) { return {Op::kPush, f, child}; }

Step string_byte(const Node& n, Frame f, uint8_t c) {
  const auto count = static_cast<int64_t>(f.a);
  switch (f.phase) {
    case kStrOpen:
      if (c != '"') return {};
      f.phase = kStrBody;
      return stay(f);
    case kStrBody:
      if (c == '"') return count >= n.min_count ? finish() : Step{};
      if (c < 0x20 || count >= n.max_count) return {};
      if (c == '\\') {
        f.phase = kStrEsc;
      } else if (c >= 0x80) {
        f.phase = utf8_phase(c);
        if (f.phase == kStrOpen) return {};
      }
      ++f.a;
      return stay(f);
    case kStrEsc:
      if (c == 'u') {
        f.phase = kHex0;
        return stay(f);
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        f.phase = kStrBody;
        return stay(f);
      }
      return {};
    case kHex0:
      if (!is_hex(c)) return {};
      f.phase = (c == 'd' || c == 'D') ? kHexD : kHex1;
      return stay(f);
    case kHexD:
      if (c < '0' || c > '7') return {};
      f.phase = kHex2;
      return stay(f);
    case kHex1:
    case kHex2:
    case kHex3:
      if (!is_hex(c)) return {};
      f.phase = f.phase == kHex3 ? uint16_t{kStrBody} : static_cast<uint16_t>(f.phase + 1);
      return stay(f);
    case kU1:
    case kU2:
    case kU3:
      if (c < 0x80 || c > 0xBF) return {};
      f.phase = f.phase == kU1 ? uint16_t{kStrBody} : static_cast<uint16_t>(f.phase - 1);
      return stay(f);
    case kE0:
      if (c < 0xA0 || c > 0xBF) return {};
      f.phase = kU1;
      return stay(f);
    case kED:
      if (c < 0x80 || c > 0x9F) return {};
      f.phase = kU1;
      return stay(f);
    case kF0:
      if (c < 0x90 || c > 0xBF) return {};
      f.phase = kU2;
      return stay(f);
    case kF4:
      if (c < 0x80 || c > 0x8F) return {};
      f.phase = kU2;
      return stay(f);
    default: return {};
  }
}

// Whether a number in phase `p` with `count` characters may still grow.
bool number_extends(const Node& n, uint16_t p, int64_t count, uint32_t exp_digits) {
  switch (p) {
    case kNumZero: return !n.integer && count + 2 <= n.max_count;
    case kNumInt:
    case kNumFrac: return count + 1 <= n.max_count;
    case kNumExp: return exp_digits < kMaxExponentDigits && count + 1 <= n.max_count;
    default: return true;
  }
}

Step number_byte(const Node& n, Frame f, uint8_t c) {
  uint16_t to = kNumStart;
  const bool frac_ok = !n.integer;
  switch (f.phase) {
    case kNumStart:
      if (c == '-')
        to = kNumMinus;
      else if (c == '0')
        to = kNumZero;
      else if (is_digit(c))
        to = kNumInt;
      else
        return {};
      break;
    case kNumMinus:
      if (c == '0')
        to = kNumZero;
      else if (is_digit(c))
        to = kNumInt;
      else
        return {};
      break;
    case kNumZero:
    case kNumInt:
    case kNumFrac:
      if (is_digit(c) && f.phase != kNumZero)
        to = f.phase;
      else if (c == '.' && frac_ok && f.phase != kNumFrac)
        to = kNumDot;
      else if ((c == 'e' || c == 'E') && frac_ok)
        to = kNumE;
      else
        return {};
      break;
    case kNumDot:
      if (!is_digit(c)) return {};
      to = kNumFrac;
      break;
    case kNumE:
      if (c == '+' || c == '-') {
        to = kNumESign;
        break;
      }
      [[fallthrough]];
    case kNumESign:
    case kNumExp:
      if (!is_digit(c) || f.b >= kMaxExponentDigits) return {};
      to = kNumExp;
      ++f.b;
      break;
    default: return {};
  }
  const int64_t count = static_cast<int64_t>(f.a) + 1;
  if (count > n.max_count || (!num_accepting(to) && count + 1 > n.max_count)) return {};
  f.a = static_cast<uint32_t>(count);
  f.phase = to;
  if (num_accepting(to) && !number_extends(n, to, count, f.b)) return finish();
  return stay(f);
}

// The object's allowed property range starting at `x`: [x, last].
int32_t last_allowed(const Node& n, uint32_t x) {
  return std::min(n.next_required[x], static_cast<int32_t>(n.children.size()) - 1);
}

Step key_byte(const Node& n, Frame f, int32_t from, uint8_t c) {
  const int32_t next = n.trie.child(from, c);
  if (next < 0 || !n.trie.has_value_in(next, static_cast<int32_t>(f.a), last_allowed(n, f.a))) return {};
  const int32_t p = n.trie.nodes[static_cast<std::size_t>(next)].value;
  if (p >= 0) {  // a quoted key ends only at its closing quote, so no longer key continues it
    f.phase = kColon;
    f.a = static_cast<uint32_t>(p) + 1;
    f.b = static_cast<uint32_t>(p);
  } else {
    f.phase = kKey;
    f.b = static_cast<uint32_t>(next);
  }
  return stay(f);
}

Step object_byte(const Node& n, Frame f, uint8_t c) {
  const bool can_close = n.next_required[f.a] == static_cast<int32_t>(n.children.size());
  switch (f.phase) {
    case kOpen:
      if (c != '{') return {};
      f.phase = kFirst;
      return stay(f);
    case kFirst:
    case kFirstSp:
    case kComma:
    case kCommaSp:
      if (c == ' ' && n.space && (f.phase == kFirst || f.phase == kComma)) {
        f.phase = f.phase == kFirst ? kFirstSp : kCommaSp;
        return stay(f);
      }
      if (c == '}' && (f.phase == kFirst || f.phase == kFirstSp)) return can_close ? finish() : Step{};
      return key_byte(n, f, 0, c);
    case kKey: return key_byte(n, f, static_cast<int32_t>(f.b), c);
    case kColon:
      if (c != ':') return {};
      f.phase = kValue;
      return stay(f);
    case kValue:
    case kValueSp:
      if (c == ' ' && n.space && f.phase == kValue) {
        f.phase = kValueSp;
        return stay(f);
      }
      f.phase = kNext;
      return push_then(f, n.children[f.b]);
    case kNext:
      if (c == '}') return can_close ? finish() : Step{};
      if (c != ',' || f.a >= n.children.size()) return {};
      f.phase = kComma;
      return stay(f);
    default: return {};
  }
}

Step any_object_byte(const Node& n, Frame f, uint8_t c) {
  switch (f.phase) {
    case kOpen:
      if (c != '{') return {};
      f.phase = kFirst;
      return stay(f);
    case kFirst:
    case kFirstSp:
    case kComma:
    case kCommaSp:
      if (c == ' ' && n.space && (f.phase == kFirst || f.phase == kComma)) {
        f.phase = f.phase == kFirst ? kFirstSp : kCommaSp;
        return stay(f);
      }
      if (c == '}' && (f.phase == kFirst || f.phase == kFirstSp)) return finish();
      if (c != '"') return {};
      ++f.a;
      f.phase = kColon;
      return push_then(f, n.children[0]);
    case kColon:
      if (c != ':') return {};
      f.phase = kValue;
      return stay(f);
    case kValue:
    case kValueSp:
      if (c == ' ' && n.space && f.phase == kValue) {
        f.phase = kValueSp;
        return stay(f);
      }
      f.phase = kNext;
      return push_then(f, n.children[1]);
    case kNext:
      if (c == '}') return finish();
      if (c != ',' || static_cast<int64_t>(f.a) >= n.max_count) return {};
      f.phase = kComma;
      return stay(f);
    default: return {};
  }
}

Step array_byte(const Node& n, Frame f, uint8_t c) {
  const auto count = static_cast<int64_t>(f.a);
  switch (f.phase) {
    case kOpen:
      if (c != '[') return {};
      f.phase = kFirst;
      return stay(f);
    case kFirst:
    case kFirstSp:
    case kComma:
    case kCommaSp:
      if (c == ' ' && n.space && (f.phase == kFirst || f.phase == kComma)) {
        f.phase = f.phase == kFirst ? kFirstSp : kCommaSp;
        return stay(f);
      }
      if (c == ']' && (f.phase == kFirst || f.phase == kFirstSp)) return n.min_count == 0 ? finish() : Step{};
      if (count >= n.max_count) return {};
      ++f.a;
      f.phase = kNext;
      return push_then(f, n.children[0]);
    case kNext:
      if (c == ']') return count >= n.min_count ? finish() : Step{};
      if (c != ',' || count >= n.max_count) return {};
      f.phase = kComma;
      return stay(f);
    default: return {};
  }
}

// kAnyValue: the node the first byte selects, in place of the frame.
Step any_value_byte(const Node& n, Frame f, uint8_t c) {
  int32_t to = -1;
  if (c == '"')
    to = n.children[0];
  else if (c == '-' || is_digit(c))
    to = n.children[1];
  else if (c == 't' || c == 'f' || c == 'n')
    to = n.children[2];
  else if (c == '{' && f.depth < n.max_depth)
    to = n.children[3];
  else if (c == '[' && f.depth < n.max_depth)
    to = n.children[4];
  if (to < 0) return {};
  Frame g;
  g.node = static_cast<uint32_t>(to);
  g.depth = f.depth;
  return {Op::kReplace, g, -1};
}

}  // namespace

bool operator==(const Frame& x, const Frame& y) {
  return x.node == y.node && x.phase == y.phase && x.depth == y.depth && x.a == y.a && x.b == y.b;
}

bool operator<(const Frame& x, const Frame& y) {
  if (x.node != y.node) return x.node < y.node;
  if (x.phase != y.phase) return x.phase < y.phase;
  if (x.depth != y.depth) return x.depth < y.depth;
  if (x.a != y.a) return x.a < y.a;
  return x.b < y.b;
}

void StateSet::canonicalize() {
  if (ends_.size() < 2) return;
  std::vector<std::vector<Frame>> stacks;
  for (std::size_t i = 0; i < size(); ++i) stacks.emplace_back(begin(i), begin(i) + length(i));
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  clear();
  for (const auto& s : stacks) push(s.data(), s.size());
}

void Matcher::start(StateSet& out) const {
  out.clear();
  std::vector<Stack> stacks;
  push({}, g_.root, 0, stacks);
  for (const Stack& s : stacks) out.push(s.data(), s.size());
  out.canonicalize();
}

void Matcher::push(Stack stack, int32_t node, uint16_t depth, std::vector<Stack>& out) const {
  const Node& n = g_.at(node);
  if (n.kind == NodeKind::kChoice) {
    for (int32_t alt : n.children) push(stack, alt, depth, out);
    return;
  }
  Frame f;
  f.node = static_cast<uint32_t>(node);
  f.depth = depth;
  stack.push_back(f);
  settle(std::move(stack), out);
}

void Matcher::settle(Stack stack, std::vector<Stack>& out) const {
  while (!stack.empty()) {
    Frame& top = stack.back();
    const Node& n = g_.at(static_cast<int32_t>(top.node));
    if (n.kind == NodeKind::kSequence) {
      if (top.a < n.children.size()) {
        const int32_t part = n.children[top.a++];
        const uint16_t depth = top.depth;
        push(std::move(stack), part, depth, out);
        return;
      }
      stack.pop_back();
      continue;
    }
    if (n.kind == NodeKind::kLiteral && top.a == n.literal.size()) {
      stack.pop_back();
      continue;
    }
    break;
  }
  out.push_back(std::move(stack));
}

bool Matcher::ends_here(const Frame& top) const {
  const Node& n = g_.at(static_cast<int32_t>(top.node));
  if (n.kind == NodeKind::kNumber) return num_accepting(top.phase);
  if (n.kind == NodeKind::kLiteralSet) return n.trie.nodes[top.a].value >= 0;
  return false;
}

void Matcher::advance(const Frame* f, std::size_t n, uint8_t byte, StateSet& out) const {
  if (n == 0) return;
  if (ends_here(f[n - 1])) {  // the value may end here and the byte belong to what follows it
    std::vector<Stack> after;
    settle(Stack(f, f + n - 1), after);
    for (const Stack& s : after) advance(s.data(), s.size(), byte, out);
  }
  consume(f, n, byte, out);
}

void Matcher::consume(const Frame* f, std::size_t n, uint8_t byte, StateSet& out) const {
  const Frame& top = f[n - 1];
  const Node& node = g_.at(static_cast<int32_t>(top.node));
  Step s;
  switch (node.kind) {
    case NodeKind::kLiteral:
      if (static_cast<uint8_t>(node.literal[top.a]) == byte) {
        s = stay(top);
        if (++s.top.a == node.literal.size()) s = finish();
      }
      break;
    case NodeKind::kLiteralSet: {
      const int32_t next = node.trie.child(static_cast<int32_t>(top.a), byte);
      if (next >= 0) {
        const ByteTrie::Node& t = node.trie.nodes[static_cast<std::size_t>(next)];
        s = stay(top);
        s.top.a = static_cast<uint32_t>(next);
        if (t.value >= 0 && t.children.empty()) s = finish();
      }
      break;
    }
    case NodeKind::kString: s = string_byte(node, top, byte); break;
    case NodeKind::kNumber: s = number_byte(node, top, byte); break;
    case NodeKind::kObject: s = object_byte(node, top, byte); break;
    case NodeKind::kAnyObject: s = any_object_byte(node, top, byte); break;
    case NodeKind::kArray: s = array_byte(node, top, byte); break;
    case NodeKind::kAnyValue: s = any_value_byte(node, top, byte); break;
    case NodeKind::kChoice:
    case NodeKind::kSequence: break;  // never on top after settle()
  }
  switch (s.op) {
    case Op::kDead: return;
    case Op::kStay:
      out.push(f, n);
      out.last_top() = s.top;
      return;
    case Op::kFinish: {
      std::vector<Stack> after;
      settle(Stack(f, f + n - 1), after);
      for (const Stack& st : after) out.push(st.data(), st.size());
      return;
    }
    case Op::kPush: {
      Stack base(f, f + n);
      base.back() = s.top;
      std::vector<Stack> pushed;
      push(std::move(base), s.child, static_cast<uint16_t>(top.depth + 1), pushed);
      for (const Stack& st : pushed) advance(st.data(), st.size(), byte, out);
      return;
    }
    case Op::kReplace: {
      Stack base(f, f + n);
      base.back() = s.top;
      consume(base.data(), base.size(), byte, out);
      return;
    }
  }
}

bool Matcher::step(const StateSet& in, uint8_t byte, StateSet& out) const {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) advance(in.begin(i), in.length(i), byte, out);
  out.canonicalize();
  return !out.empty();
}

bool Matcher::can_end_stack(const Frame* f, std::size_t n) const {
  if (n == 0) return true;
  if (!ends_here(f[n - 1])) return false;
  std::vector<Stack> after;
  settle(Stack(f, f + n - 1), after);
  for (const Stack& s : after) {
    if (can_end_stack(s.data(), s.size())) return true;
  }
  return false;
}

bool Matcher::can_end(const StateSet& s) const {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (can_end_stack(s.begin(i), s.length(i))) return true;
  }
  return false;
}

bool Matcher::can_continue(const StateSet& s) const {
  StateSet next;
  for (int b = 0; b < 256; ++b) {
    if (step(s, static_cast<uint8_t>(b), next)) return true;
  }
  return false;
}

int64_t Matcher::remaining(const Frame& f) const {
  const Node& n = g_.at(static_cast<int32_t>(f.node));
  const auto a = static_cast<int64_t>(f.a);
  switch (n.kind) {
    case NodeKind::kLiteral: return static_cast<int64_t>(n.literal.size()) - a;
    case NodeKind::kLiteralSet: return n.trie.nodes[f.a].min_remaining;
    case NodeKind::kString:
      if (f.phase == kStrOpen) return n.min_bytes;
      return string_pending(f.phase) + std::max<int64_t>(0, n.min_count - a) + 1;
    case NodeKind::kNumber: return num_accepting(f.phase) ? 0 : 1;
    case NodeKind::kAnyValue: return 1;
    case NodeKind::kSequence: {
      int64_t sum = 0;
      for (std::size_t i = f.a; i < n.children.size(); ++i) sum += g_.at(n.children[i]).min_bytes;
      return sum;
    }
    case NodeKind::kChoice: return n.min_bytes;
    case NodeKind::kObject: {
      const int32_t count = static_cast<int32_t>(n.children.size());
      switch (f.phase) {
        case kOpen: return n.min_bytes;
        case kFirst:
        case kFirstSp: return n.next_required[f.a] == count ? 1 : n.after_comma[f.a];
        case kKey: {
          int64_t best = std::numeric_limits<int64_t>::max() / 4;
          const auto& t = n.trie.nodes[f.b];
          for (int32_t p : t.values_below) {
            if (p < static_cast<int32_t>(f.a) || p > last_allowed(n, f.a)) continue;
            const auto up = static_cast<std::size_t>(p);
            best = std::min(best, n.key_bytes[up] - t.depth + 1 + g_.at(n.children[up]).min_bytes + n.rest[up + 1]);
          }
          return best;
        }
        case kColon: return 1 + g_.at(n.children[f.b]).min_bytes + n.rest[f.a];
        case kValue:
        case kValueSp: return g_.at(n.children[f.b]).min_bytes + n.rest[f.a];
        case kNext: return n.rest[f.a];
        default: return n.after_comma[f.a];  // kComma, kCommaSp
      }
    }
    case NodeKind::kAnyObject:
      switch (f.phase) {
        case kOpen: return 2;
        case kFirst:
        case kFirstSp:
        case kNext: return 1;
        case kColon: return 3;
        case kValue:
        case kValueSp: return 2;
        default: return 5;  // kComma, kCommaSp: "":0}
      }
    case NodeKind::kArray: {
      const int64_t item = g_.at(n.children[0]).min_bytes;
      switch (f.phase) {
        case kOpen: return n.min_bytes;
        case kFirst:
        case kFirstSp: return n.min_count == 0 ? 1 : n.min_count * (item + 1);
        case kNext: return std::max<int64_t>(0, n.min_count - a) * (1 + item) + 1;
        default: return item + (std::max<int64_t>(1, n.min_count - a) - 1) * (1 + item) + 1;
      }
    }
  }
  return 0;
}

int64_t Matcher::min_bytes(const StateSet& s) const {
  if (can_end(s)) return 0;
  int64_t best = std::numeric_limits<int64_t>::max();
  for (std::size_t i = 0; i < s.size(); ++i) {
    int64_t sum = 0;
    const Frame* f = s.begin(i);
    for (std::size_t j = 0; j < s.length(i); ++j) sum += remaining(f[j]);
    best = std::min(best, sum);
  }
  return best;
}

int64_t Matcher::string_room(const StateSet& s) const {
  if (s.size() != 1 || s.length(0) == 0) return -1;
  const Frame& top = s.begin(0)[s.length(0) - 1];
  const Node& n = g_.at(static_cast<int32_t>(top.node));
  const auto count = static_cast<int64_t>(top.a);
  if (n.kind != NodeKind::kString || top.phase != kStrBody || count < n.min_count) return -1;
  return n.max_count - count;
}

void Matcher::key(const StateSet& s, int64_t horizon, std::vector<uint32_t>& out) const {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    out.push_back(static_cast<uint32_t>(s.length(i)));
    const Frame* f = s.begin(i);
    for (std::size_t j = 0; j < s.length(i); ++j) {
      const Node& n = g_.at(static_cast<int32_t>(f[j].node));
      uint32_t a = f[j].a;
      if (horizon >= 0) {
        const auto c = static_cast<int64_t>(a);
        // Every comparison of the counter over the next `horizon` increments comes out the same.
        const bool far_from_max = c + horizon + 2 <= n.max_count;
        const bool past_min = n.min_count == 0 || c >= n.min_count + horizon;
        const bool below_min = c + horizon + 1 < n.min_count;  // min_bytes then falls by what is written
        switch (n.kind) {
          case NodeKind::kString:
          case NodeKind::kArray:
            if (far_from_max && past_min) a = kMid;
            if (far_from_max && below_min) a = kBelow;
            break;
          case NodeKind::kNumber:
          case NodeKind::kAnyObject:
            if (far_from_max) a = kMid;
            break;
          default: break;
        }
      }
      out.push_back(f[j].node);
      out.push_back(static_cast<uint32_t>(f[j].phase) | (static_cast<uint32_t>(f[j].depth) << 16));
      out.push_back(a);
      out.push_back(f[j].b);
    }
  }
}

}  // namespace orbit::constrain
