// Tracking the free keys of open objects beside the matcher (key_log.h): the walk and its refusals.
#include "constrain/key_log.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "constrain/key_log_parts.h"
#include "constrain/matcher_nodes.h"

namespace orbit::constrain {

namespace key_log {

std::string canonical(const std::string& quoted) {
  const bool own = std::all_of(quoted.begin() + 1, quoted.end() - 1, [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '\\' && c != '"';
  });
  return own ? quoted : json_quote(nlohmann::json::parse(quoted).get<std::string>());
}

int64_t completions_at_least(const Node& key, const Frame& f) {
  if (key.kind == NodeKind::kLiteralSet) {
    return static_cast<int64_t>(key.trie.nodes[static_cast<std::size_t>(f.a)].values_below.size());
  }
  if (key.kind != NodeKind::kDfa) return 0;
  const auto q = static_cast<std::size_t>(f.a);
  const int64_t left = key.max_count - static_cast<int64_t>(f.b);  // characters
  const ByteDfa& d = *key.dfa;
  if (d.texts_ahead[q] != ByteDfa::kUnbounded) return d.chars_ahead[q] <= left ? d.texts_ahead[q] : 0;
  if (d.loop_chars[q] == ByteDfa::kUnbounded || d.loop_chars[q] > left) return 0;
  return std::min(ByteDfa::kTextsCap, left - d.loop_chars[q] + 1);
}

int key_byte(const Node& key, Frame& f, uint8_t c) {
  if (key.kind == NodeKind::kDfa || key.kind == NodeKind::kString) {
    const nodes::Step s = key.kind == NodeKind::kDfa ? nodes::dfa_byte(key, f, c) : nodes::string_byte(key, f, c);
    if (s.op == nodes::Op::kDead) return -1;
    if (s.op == nodes::Op::kFinish) return 1;
    f = s.top;
    return 0;
  }
  const int32_t next = key.trie.child(static_cast<int32_t>(f.a), c);
  if (next < 0) return -1;
  const ByteTrie::Node& t = key.trie.nodes[static_cast<std::size_t>(next)];
  if (t.value >= 0 && t.children.empty()) return 1;
  f.a = static_cast<uint32_t>(next);
  return 0;
}

}  // namespace key_log

using key_log::canonical;
using key_log::has_few_keys;
using key_log::is_object;
using key_log::Joined;
using key_log::key_byte;

namespace {

// An open object with few extra keys (Node::extra_keys), at frame `f` with `taken` extra keys written: after
// an extra key's opening quote (`comma` false), whether its members can still reach min_count; after a ','
// (`comma`), whether some member can follow that leaves them a way to reach it. Declared properties come
// before extra members, so an object that skipped them has only its extra keys left.
bool can_fill(const Node& n, const Frame& f, std::size_t taken, bool comma) {
  if (n.kind != NodeKind::kObject || !n.open || n.extra_keys == Node::kNoKeyBound) return true;
  const int64_t fresh = n.extra_keys - static_cast<int64_t>(taken);
  const int64_t had = nodes::members(n, f.a);
  if (!comma) return had - 1 + fresh >= n.min_count;  // `had` counts the key begun, one of the fresh ones
  const auto x = static_cast<int32_t>(nodes::spent(n, f.a));
  const auto [first, last] = nodes::key_range(n, static_cast<uint32_t>(x), had);
  const bool declared = first <= last && had + (declared_count(n) - x) + fresh >= n.min_count;
  const bool extra = n.required_left[static_cast<std::size_t>(x)] == 0 && fresh >= 1 && had + fresh >= n.min_count;
  return declared || extra;
}

}  // namespace

const Node* KeyLog::free_key(const Frame& object) const {
  const Node& n = g_.at(static_cast<int32_t>(object.node));
  if (object.phase != nodes::kColon) return nullptr;
  if (n.kind == NodeKind::kAnyObject) return &g_.at(n.children[0]);
  const int32_t count = declared_count(n);
  if (n.kind != NodeKind::kObject || !n.open || object.b != static_cast<uint32_t>(count)) return nullptr;
  return &g_.at(n.children[static_cast<std::size_t>(count)]);
}

const Node* KeyLog::key_node(const Node& object) const {
  if (object.kind == NodeKind::kAnyObject) return &g_.at(object.children[0]);
  if (object.kind != NodeKind::kObject || !object.open) return nullptr;
  return &g_.at(object.children[static_cast<std::size_t>(declared_count(object))]);
}
bool KeyLog::fresh_ahead(const Node& key, const Frame& f, std::string& prefix, const Taken& taken) const {
  if (!taken.any_begins(prefix)) return true;  // the grammar's completion
  // More completions than keys that begin with the bytes so far: one is fresh.
  const int64_t ahead = key_log::completions_at_least(key, f);
  if (ahead > 0 && taken.count_begins(prefix, static_cast<std::size_t>(ahead)) < static_cast<std::size_t>(ahead)) {
    return true;
  }
  const auto fresh_after = [&](int b) {
    Frame next = f;
    const int r = key_byte(key, next, static_cast<uint8_t>(b));
    if (r < 0) return false;
    prefix.push_back(static_cast<char>(b));
    const bool fresh = r == 1 ? !taken.contains(prefix) : fresh_ahead(key, next, prefix, taken);
    prefix.pop_back();
    return fresh;
  };
  return key_log::any_key_byte(key, f, fresh_after);
}

bool KeyLog::keeps(Frame* f, std::size_t n, uint32_t at, std::string_view text, std::string_view walked,
                   const Closed& closed, Closed& here) const {
  for (std::size_t j = 0; j < n; ++j) {
    if (f[j].start == kNoStart && f[j].phase != nodes::kOpen && is_object(g_.at(static_cast<int32_t>(f[j].node)))) {
      f[j].start = at;
    }
  }
  if (n == 0) return true;
  const Joined all{text, walked};
  const Frame& top = f[n - 1];
  if (free_key(top) != nullptr && top.start != kNoStart) {  // the byte at `at` closed a free key
    const std::string key = canonical(all.span(all.opening_quote(at - 1), at));
    if (has_key(top.start, key, closed)) return false;
    const std::pair<uint32_t, std::string> entry{top.start, key};
    if (std::find(here.begin(), here.end(), entry) == here.end()) here.push_back(entry);
    return true;
  }
  const Node& node = g_.at(static_cast<int32_t>(top.node));
  if (top.phase == nodes::kComma && has_few_keys(node) && top.start != kNoStart) {
    return can_fill(node, top, key_count(top.start, closed, *key_node(node)), true);
  }
  if (n < 2 || f[n - 2].start == kNoStart) return true;
  const Node* key = free_key(f[n - 2]);
  if (key != &node) return true;  // not inside a free key
  const std::size_t had = key_count(f[n - 2].start, closed, *key);
  const Node& object = g_.at(static_cast<int32_t>(f[n - 2].node));
  // After the key's opening quote (can_fill holds for any object but one with few keys).
  if (has_few_keys(object) && all.opening_quote(at) == at && !can_fill(object, f[n - 2], had, false)) return false;
  if (had == 0) return true;
  if (key->kind == NodeKind::kString) {
    // Below its maxLength a plain key has more completions than any object has members. At it, only its
    // closing quote may follow (mid-character, the few ways to finish the character are taken as fresh).
    if (static_cast<int64_t>(top.a) < key->max_count || top.phase != nodes::kStrBody) return true;
    return !has_key(f[n - 2].start, canonical(all.span(all.opening_quote(at), at) + '"'), closed);
  }
  std::string prefix = all.span(all.opening_quote(at), at);
  return fresh_ahead(*key, top, prefix, taken(f[n - 2].start, closed));
}

bool KeyLog::walk(const Matcher& m, const StateSet& from, std::string_view text, std::string_view bytes, StateSet& out,
                  Closed* closed, bool* dropped) const {
  Closed local;
  Closed& added = closed != nullptr ? *closed : local;
  StateSet now = from, next;
  Closed here;  // the keys this byte closes: a repeat only of those closed before it, not of another stack's
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!m.step(now, static_cast<uint8_t>(bytes[i]), next)) return false;
    const auto at = static_cast<uint32_t>(text.size() + i);
    now.clear();
    here.clear();
    for (std::size_t s = 0; s < next.size(); ++s) {
      if (keeps(next.begin(s), next.length(s), at, text, bytes.substr(0, i + 1), added, here)) {
        now.push(next.begin(s), next.length(s));
      }
    }
    added.insert(added.end(), here.begin(), here.end());
    if (now.empty()) return false;
    if (dropped != nullptr && now.size() < next.size()) *dropped = true;
    now.canonicalize();
  }
  out = std::move(now);
  return true;
}
}  // namespace orbit::constrain
