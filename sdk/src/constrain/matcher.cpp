// The stack machinery of the matcher (matcher.h) around the byte transitions of matcher_nodes.h: pushing a
// child (a choice into one stack per alternative), popping finished frames, settling sequences; and what a
// state needs to complete, and its key.
#include "constrain/matcher.h"
#include "constrain/matcher_nodes.h"

#include <algorithm>
#include <limits>

namespace orbit::constrain {

using namespace nodes;

namespace {

// Counters written as one value in keys: between the bounds' reach, and below the minimum's reach.
constexpr uint32_t kMid = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kBelow = std::numeric_limits<uint32_t>::max() - 1;
// An object's counter whose member count is written as one value (its x kept): above every counter an object
// has (schema_objects.cpp keeps (n + 1) * (max_count + 1) below it).
constexpr uint32_t kObjectMid = uint32_t{1} << 31;

}  // namespace

bool operator==(const Frame& x, const Frame& y) {
  return x.node == y.node && x.phase == y.phase && x.a == y.a && x.b == y.b && x.start == y.start;
}

bool operator<(const Frame& x, const Frame& y) {
  if (x.node != y.node) return x.node < y.node;
  if (x.phase != y.phase) return x.phase < y.phase;
  if (x.a != y.a) return x.a < y.a;
  if (x.b != y.b) return x.b < y.b;
  return x.start < y.start;
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
  push({}, g_.root, stacks);
  for (const Stack& s : stacks) out.push(s.data(), s.size());
  out.canonicalize();
}

void Matcher::push(Stack stack, int32_t node, std::vector<Stack>& out) const {
  const Node& n = g_.at(node);
  if (n.kind == NodeKind::kChoice) {
    for (int32_t alt : n.children) push(stack, alt, out);
    return;
  }
  Frame f;
  f.node = static_cast<uint32_t>(node);
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
        push(std::move(stack), part, out);
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

int64_t Matcher::depth(const Frame* f, std::size_t n) const {
  int64_t d = 0;
  for (std::size_t j = 0; j + 1 < n; ++j) d += g_.at(static_cast<int32_t>(f[j].node)).kind != NodeKind::kSequence;
  return d;
}

bool Matcher::ends_here(const Frame& top) const {
  const Node& n = g_.at(static_cast<int32_t>(top.node));
  if (n.kind == NodeKind::kNumber) return num_accepting(top.phase);
  if (n.kind == NodeKind::kLiteralSet) return n.trie.nodes[top.a].value >= 0;
  if (n.kind == NodeKind::kDfa) return n.dfa->accepting[top.a] != 0;
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
    case NodeKind::kAnyValue: s = any_value_byte(node, top, byte, depth(f, n)); break;
    case NodeKind::kDfa: s = dfa_byte(node, top, byte); break;
    case NodeKind::kChoice:
    case NodeKind::kSequence: break;  // never on top after settle()
  }
  apply(f, n, byte, s, out);
  if (s.fork >= 0) apply(f, n, byte, push_then(s.fork_top, s.fork), out);
}

void Matcher::apply(const Frame* f, std::size_t n, uint8_t byte, const Step& s, StateSet& out) const {
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
      push(std::move(base), s.child, pushed);
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
    // The fewest bytes, which a path with fewer characters but more bytes may exceed near max_count.
    case NodeKind::kDfa: return n.dfa->min_bytes[f.a];
    case NodeKind::kSequence: {
      int64_t sum = 0;
      for (std::size_t i = f.a; i < n.children.size(); ++i) sum += g_.at(n.children[i]).min_bytes;
      return sum;
    }
    case NodeKind::kChoice: return n.min_bytes;
    case NodeKind::kObject: return object_remaining(n, f);
    case NodeKind::kAnyObject: {  // a map: its key and value nodes (any object: "" and 0)
      const int64_t owed = std::max<int64_t>(0, n.min_count - a);  // a counts the member being written
      // After a member: '}', or ',' and the members owed at the shortest distinct keys (grammar.h). Which keys
      // the map has is the KeyLog's to know (key_log.h); here the shortest are taken to be free.
      const int64_t after = owed == 0 ? 1 : 1 + members_bytes(g_, n, owed);
      switch (f.phase) {
        case kOpen: return n.min_bytes;
        case kFirst:
        case kFirstSp: return n.min_count == 0 ? 1 : members_bytes(g_, n, n.min_count);
        case kNext: return after;
        case kColon: return 1 + g_.at(n.children[1]).min_bytes + after;
        case kValue:
        case kValueSp: return g_.at(n.children[1]).min_bytes + after;
        default: return members_bytes(g_, n, std::max<int64_t>(owed, 1));  // kComma, kCommaSp
      }
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

int64_t Matcher::object_remaining(const Node& n, const Frame& f) const {
  const int32_t count = declared_count(n);
  const uint32_t x = spent(n, f.a);
  const int64_t had = members(n, f.a);
  // Past its declared properties an open object writes only extra members: their distinct keys are costed as
  // a map's (the shortest taken to be free), whatever its tables' width.
  const bool extras_only = n.open && static_cast<int32_t>(x) == count;
  const auto rest = [&] {
    const int64_t d = owed(n, had);
    if (extras_only) return d == 0 ? int64_t{1} : 1 + members_bytes(g_, n, d);
    return object_table(n, n.rest, static_cast<int32_t>(x), d);
  };
  const auto after_comma = [&] {
    if (extras_only) return members_bytes(g_, n, std::max<int64_t>(owed(n, had), 1));
    return object_table(n, n.after_comma, static_cast<int32_t>(x), owed(n, had));
  };
  const auto value = [&] {
    return g_.at(n.children[static_cast<int32_t>(f.b) < count ? f.b : static_cast<uint32_t>(count) + 1]).min_bytes;
  };
  switch (f.phase) {
    case kOpen: return n.min_bytes;
    case kFirst:
    case kFirstSp:
      if (n.required_left[x] == 0 && had >= n.min_count) return 1;
      return after_comma();
    case kKey: {  // the declared keys still possible through the trie node
      int64_t best = std::numeric_limits<int64_t>::max() / 4;
      const auto& t = n.trie.nodes[f.b];
      const auto [first, last] = key_range(n, x, had);
      for (int32_t p : t.values_below) {
        if (p < first || p > last) continue;
        const auto up = static_cast<std::size_t>(p);
        const int64_t after = object_table(n, n.rest, p + 1, owed(n, had + 1));
        best = std::min(best, n.key_bytes[up] - t.depth + 1 + g_.at(n.children[up]).min_bytes + after);
      }
      return best;
    }
    case kColon: return 1 + value() + rest();
    case kValue:
    case kValueSp: return value() + rest();
    case kNext: return rest();
    default: return after_comma();  // kComma, kCommaSp
  }
}

int64_t Matcher::stack_min_bytes(const Frame* f, std::size_t n) const {
  if (can_end_stack(f, n)) return 0;
  int64_t sum = 0;
  for (std::size_t j = 0; j < n; ++j) sum += remaining(f[j]);
  return sum;
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
      uint32_t b = f[j].b;
      if (horizon >= 0) {
        const auto c = static_cast<int64_t>(a);
        // Every comparison of the counter over the next `horizon` increments comes out the same.
        const bool far_from_max = c + horizon + 2 <= n.max_count;
        // An object's members over the next `horizon` bytes: its count rises at a '"' (an extra key's opening
        // quote, a declared key's closing one), and two such quotes are at least 4 bytes apart (`":0,"`: a ':', a
        // value and a ',' between them), so at most (horizon + 3) / 4 times. Counted in bytes, a map of GPT-2's
        // vocabulary (a 128-byte token) was keyed by its exact count from its 127th member on (of at most 256),
        // each member's states new masks.
        const int64_t members_ahead = (horizon + 3) / 4;
        const bool past_min = n.min_count == 0 || c >= n.min_count + horizon;
        const bool below_min = c + horizon + 1 < n.min_count;  // min_bytes then falls by what is written
        switch (n.kind) {
          case NodeKind::kString:
          case NodeKind::kArray:
            if (far_from_max && past_min) a = kMid;
            if (far_from_max && below_min) a = kBelow;
            break;
          case NodeKind::kNumber:
            if (far_from_max) a = kMid;
            break;
          case NodeKind::kAnyObject:  // members only grow: once at min_count they stay there
            if (c + members_ahead + 2 <= n.max_count && c >= n.min_count) a = kMid;
            break;
          case NodeKind::kObject: {
            // A count at min_count whose every max_count check passes over the horizon, whatever is required.
            const int64_t had = members(n, a);
            if (n.counted && had >= n.min_count && had + declared_count(n) + members_ahead + 2 <= n.max_count) {
              a = kObjectMid | spent(n, a);
            }
            break;
          }
          case NodeKind::kDfa:  // b counts characters: every check over the horizon passes
            if (static_cast<int64_t>(b) + horizon + n.dfa->max_min_chars + 1 <= n.max_count) b = kMid;
            break;
          default: break;
        }
      }
      out.push_back(f[j].node);
      out.push_back(f[j].phase);
      out.push_back(a);
      out.push_back(b);
    }
  }
}

}  // namespace orbit::constrain
