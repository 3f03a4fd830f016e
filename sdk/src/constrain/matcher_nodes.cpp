// The byte transitions of each node kind (matcher_nodes.h).
#include "constrain/matcher_nodes.h"

#include <limits>

namespace orbit::constrain::nodes {

constexpr int kMaxExponentDigits = 2;

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

std::pair<int32_t, int32_t> key_range(const Node& n, uint32_t x, int64_t members) {
  const int32_t count = declared_count(n);
  int32_t first = static_cast<int32_t>(x);
  int32_t last = std::min(n.next_required[x], count - 1);
  // An optional property keeps every required one still to come: past max_count only the next required fits.
  if (members + 1 + n.required_left[x] > n.max_count) first = n.next_required[x];
  // A property leaves only those after it to reach min_count, and, open, its distinct extra keys (all of them
  // where it has fewer than min_count: key_log.h).
  const int64_t extra = n.open ? n.extra_keys : 0;
  if (extra < n.min_count)
    last = static_cast<int32_t>(std::min<int64_t>(last, count - 1 - owed(n, members + 1) + extra));
  return {first, last};
}

namespace {

uint32_t object_counter(const Node& n, int64_t x, int64_t members) {
  return static_cast<uint32_t>(x + (declared_count(n) + 1) * (n.counted ? members : 0));
}

// A declared key's next byte from trie node `from`.
Step key_byte(const Node& n, Frame f, int32_t from, uint8_t c) {
  const uint32_t x = spent(n, f.a);
  const int64_t had = members(n, f.a);
  const auto [first, last] = key_range(n, x, had);
  const int32_t next = n.trie.child(from, c);
  if (next < 0 || !n.trie.has_value_in(next, first, last)) return {};
  const int32_t p = n.trie.nodes[static_cast<std::size_t>(next)].value;
  if (p >= 0) {  // a quoted key ends only at its closing quote, so no longer key continues it
    f.phase = kColon;
    f.a = object_counter(n, p + 1, had + 1);
    f.b = static_cast<uint32_t>(p);
  } else {
    f.phase = kKey;
    f.b = static_cast<uint32_t>(next);
  }
  return stay(f);
}

// The '"' that begins a member: a declared key's, an extra key's (pushed: the key automaton takes it), or
// either (a fork).
Step member_start(const Node& n, Frame f, uint8_t c) {
  const uint32_t x = spent(n, f.a);
  const int64_t had = members(n, f.a);
  const Step declared = key_byte(n, f, 0, c);
  if (!n.open || n.required_left[x] != 0 || had >= n.max_count || c != '"') return declared;
  const int32_t count = declared_count(n);
  Frame extra = f;
  extra.phase = kColon;
  extra.a = object_counter(n, count, had + 1);
  extra.b = static_cast<uint32_t>(count);
  if (declared.op == Op::kDead) return push_then(extra, n.children[static_cast<std::size_t>(count)]);
  Step both = declared;
  both.fork = n.children[static_cast<std::size_t>(count)];
  both.fork_top = extra;
  return both;
}

// Whether the object may close here, after a member or at its start.
bool can_close(const Node& n, uint32_t a) { return n.required_left[spent(n, a)] == 0 && members(n, a) >= n.min_count; }

// Whether a ',' may follow: one more member fits and leaves a way to close.
bool can_add(const Node& n, uint32_t a) {
  const int64_t had = members(n, a);
  const int64_t more = object_table(n, n.after_comma, static_cast<int32_t>(spent(n, a)), owed(n, had));
  return had < n.max_count && more < std::numeric_limits<int64_t>::max() / 4;
}

}  // namespace

Step object_byte(const Node& n, Frame f, uint8_t c) {
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
      if (c == '}' && (f.phase == kFirst || f.phase == kFirstSp)) return can_close(n, f.a) ? finish() : Step{};
      return member_start(n, f, c);
    case kKey: return key_byte(n, f, static_cast<int32_t>(f.b), c);
    case kColon:
      if (c != ':') return {};
      f.phase = kValue;
      return stay(f);
    case kValue:
    case kValueSp: {
      if (c == ' ' && n.space && f.phase == kValue) {
        f.phase = kValueSp;
        return stay(f);
      }
      f.phase = kNext;
      const int32_t count = declared_count(n);
      const int32_t value = static_cast<int32_t>(f.b) < count ? n.children[f.b] : n.children[count + 1];
      return push_then(f, value);
    }
    case kNext:
      if (c == '}') return can_close(n, f.a) ? finish() : Step{};
      if (c != ',' || !can_add(n, f.a)) return {};
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
      if (c == '}' && (f.phase == kFirst || f.phase == kFirstSp)) return n.min_count == 0 ? finish() : Step{};
      if (c != '"' || static_cast<int64_t>(f.a) >= n.max_count) return {};
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
      if (c == '}') return static_cast<int64_t>(f.a) >= n.min_count ? finish() : Step{};
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
Step any_value_byte(const Node& n, Frame f, uint8_t c, int64_t depth) {
  int32_t to = -1;
  if (c == '"')
    to = n.children[0];
  else if (c == '-' || is_digit(c))
    to = n.children[1];
  else if (c == 't' || c == 'f' || c == 'n')
    to = n.children[2];
  else if (c == '{' && depth < n.max_depth)
    to = n.children[3];
  else if (c == '[' && depth < n.max_depth)
    to = n.children[4];
  if (to < 0) return {};
  f = Frame();
  f.node = static_cast<uint32_t>(to);
  return {Op::kReplace, f, -1};
}

// A byte is allowed when the automaton takes it and the shortest way to an accepting state still fits in
// the characters left; an accepting state with nowhere to go ends the node.
Step dfa_byte(const Node& n, Frame f, uint8_t c) {
  const ByteDfa& d = *n.dfa;
  const int32_t next = d.next(static_cast<int32_t>(f.a), c);
  if (next < 0) return {};
  const auto q = static_cast<std::size_t>(next);
  const int64_t chars = static_cast<int64_t>(f.b) + d.char_end[q];
  if (chars + d.min_chars[q] > n.max_count) return {};
  if (d.accepting[q] && d.edges[q].empty()) return finish();
  f.a = static_cast<uint32_t>(next);
  f.b = static_cast<uint32_t>(chars);
  return stay(f);
}

}  // namespace orbit::constrain::nodes
