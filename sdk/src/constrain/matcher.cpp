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
    case NodeKind::kAnyValue: s = any_value_byte(node, top, byte); break;
    case NodeKind::kDfa: s = dfa_byte(node, top, byte); break;
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
    // The fewest bytes, which a path with fewer characters but more bytes may exceed near max_count.
    case NodeKind::kDfa: return n.dfa->min_bytes[f.a];
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
    case NodeKind::kAnyObject: {  // a map: its key and value nodes (any object: "" and 0)
      const int64_t key = g_.at(n.children[0]).min_bytes;
      const int64_t value = g_.at(n.children[1]).min_bytes;
      switch (f.phase) {
        case kOpen: return 2;
        case kFirst:
        case kFirstSp:
        case kNext: return 1;
        case kColon: return 1 + value + 1;
        case kValue:
        case kValueSp: return value + 1;
        default: return key + 1 + value + 1;  // kComma, kCommaSp: "":0}
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
          case NodeKind::kDfa:  // b counts characters: every check over the horizon passes
            if (static_cast<int64_t>(b) + horizon + n.dfa->max_min_chars + 1 <= n.max_count) b = kMid;
            break;
          default: break;
        }
      }
      out.push_back(f[j].node);
      out.push_back(static_cast<uint32_t>(f[j].phase) | (static_cast<uint32_t>(f[j].depth) << 16));
      out.push_back(a);
      out.push_back(b);
    }
  }
}

}  // namespace orbit::constrain
