// Tracking the free keys of open objects beside the matcher (key_log.h).
#include "constrain/key_log.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <nlohmann/json.hpp>

#include "constrain/matcher_nodes.h"
#include "constrain/token_masks.h"

namespace orbit::constrain {

namespace {

bool is_object(const Node& n) { return n.kind == NodeKind::kObject || n.kind == NodeKind::kAnyObject; }

// The bytes of text + walked, read as one text.
struct Joined {
  std::string_view text, walked;
  char operator[](std::size_t i) const { return i < text.size() ? text[i] : walked[i - text.size()]; }
  // The bytes [from, to].
  std::string span(std::size_t from, std::size_t to) const {
    std::string s;
    for (std::size_t i = from; i <= to; ++i) s += (*this)[i];
    return s;
  }
  // The offset of the '"' that opens the JSON string whose bytes run through `last`: the nearest '"' at or
  // before it with an even run of backslashes before it (inside a string a '"' is always escaped).
  std::size_t opening_quote(std::size_t last) const {
    for (std::size_t q = last + 1; q-- > 0;) {
      if ((*this)[q] != '"') continue;
      std::size_t slashes = 0;
      while (slashes < q && (*this)[q - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return q;
    }
    return 0;  // not reached: a key's bytes follow its opening quote
  }
};

// A whole key (quotes included, any spelling the grammar allows) as json_quote() writes its text.
// ASCII without a '\\' or a control byte is its own: json_quote() escapes only those.
std::string canonical(const std::string& quoted) {
  const bool own = std::all_of(quoted.begin() + 1, quoted.end() - 1, [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '\\' && c != '"';
  });
  return own ? quoted : json_quote(nlohmann::json::parse(quoted).get<std::string>());
}

// One byte of a key (kString, kDfa or kLiteralSet): -1 refused, 0 the key goes on (`f` updated), 1 it is whole.
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

// How many completions of exactly `left` more bytes the key frame `f` (`prefix` its bytes so far) has that are
// none of `taken` (compared as json_quote() writes them), counted up to `want`. A byte after which the key
// cannot close within the bytes left (Matcher::remaining) is not tried further. `work` bounds the bytes tried:
// past it every count is `want`, so that a search that gives up errs towards fewer bytes.
int64_t fresh_in(const Matcher& m, const Node& key, const Frame& f, std::string& prefix, int64_t left,
                 const KeyLog::Taken& taken, int64_t want, int64_t& work) {
  int64_t found = 0;
  for (int b = 0; b < 256 && left > 0 && found < want; ++b) {
    if (--work < 0) return want;
    Frame next = f;
    const int r = key_byte(key, next, static_cast<uint8_t>(b));
    if (r < 0 || (r == 1) != (left == 1) || (r == 0 && m.remaining(next) > left - 1)) continue;
    prefix.push_back(static_cast<char>(b));
    found += r == 1 ? (taken.contains(canonical(prefix)) ? 0 : 1)
                    : fresh_in(m, key, next, prefix, left - 1, taken, want - found, work);
    prefix.pop_back();
  }
  return found;
}

// The lengths in bytes of the `want` shortest completions of the key frame `f` that are none of `taken`, less
// `fewest` (the grammar's shortest), shortest first. Exact up to kMaxKeyExtra more bytes (grammar.h), or until `work`
// runs out (then a lower bound). Only the bytes that can still close the key in the length tried are tried, so the
// search walks the completions that spell a taken key and a few dead ends: a key whose short completions are
// taken ("a" with "a" taken under ^(a|abcdefgh)$: 7 more) costs what it costs, not a cap.
std::vector<int64_t> extra_for_fresh(const Matcher& m, const Node& key, const Frame& f, std::string prefix,
                                     int64_t fewest, const KeyLog::Taken& taken, int64_t want) {
  int64_t work = 1 << 16;
  std::vector<int64_t> out;
  int64_t extra = 0;
  for (; extra < kMaxKeyExtra && static_cast<int64_t>(out.size()) < want; ++extra) {
    const int64_t n = fresh_in(m, key, f, prefix, fewest + extra, taken, want - static_cast<int64_t>(out.size()), work);
    out.insert(out.end(), static_cast<std::size_t>(n), extra);
  }
  out.resize(static_cast<std::size_t>(want), extra);  // none within kMaxKeyExtra: at least that many more
  return out;
}

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

bool has_few_keys(const Node& n) { return n.kind == NodeKind::kObject && n.open && n.extra_keys != Node::kNoKeyBound; }

// Whether the key node `key` writes `quoted` (json_quote()'s spelling). The log holds an object's keys by its
// '{', so alternatives that read the same object share them, and a key one reads as free may be a declared
// name in another, where its extra keys spell no such key: counted there, it would take the place of a key
// the object may still write.
bool writes(const Node& key, const std::string& quoted) {
  if (key.kind == NodeKind::kLiteralSet) {
    int32_t at = 0;
    for (std::size_t i = 0; i < quoted.size() && at >= 0; ++i) at = key.trie.child(at, static_cast<uint8_t>(quoted[i]));
    return at >= 0 && key.trie.nodes[static_cast<std::size_t>(at)].value >= 0;
  }
  if (key.kind != NodeKind::kDfa) return true;  // a string of any text: every key the object has is one
  int32_t q = 0;
  int64_t chars = 0;
  for (std::size_t i = 0; i < quoted.size() && q >= 0; ++i) {
    q = key.dfa->next(q, static_cast<uint8_t>(quoted[i]));
    if (q >= 0) chars += key.dfa->char_end[static_cast<std::size_t>(q)];
  }
  return q >= 0 && key.dfa->accepting[static_cast<std::size_t>(q)] != 0 && chars <= key.max_count;
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

bool KeyLog::Taken::contains(const std::string& k) const {
  if (log != nullptr && log->all.count(k) != 0 && (key == nullptr || writes(*key, k))) return true;
  return more.count(k) != 0;
}

bool KeyLog::Taken::any_begins(const std::string& prefix) const {
  const auto begins = [&](const std::set<std::string>& keys) {
    const auto it = keys.lower_bound(prefix);
    return it != keys.end() && it->compare(0, prefix.size(), prefix) == 0;
  };
  return (log != nullptr && begins(log->all)) || begins(more);
}

KeyLog::Taken KeyLog::taken(uint32_t object, const Closed& closed, const Node* key) const {
  Taken out;
  out.key = key;
  const auto it = keys_.find(object);
  if (it != keys_.end()) out.log = it->second.get();
  for (const auto& [o, k] : closed) {
    if (o != object || (out.log != nullptr && out.log->all.count(k) != 0)) continue;
    if (key == nullptr || writes(*key, k)) out.more.insert(k);
  }
  return out;
}

bool KeyLog::has_key(uint32_t object, const std::string& key, const Closed& closed) const {
  const auto it = keys_.find(object);
  if (it != keys_.end() && it->second->all.count(key) != 0) return true;
  return std::any_of(closed.begin(), closed.end(), [&](const auto& c) { return c.first == object && c.second == key; });
}

std::vector<int64_t> KeyLog::lengths_from_scratch(const Keys& keys, const Node& key) {
  std::vector<int64_t> out;
  for (const std::string& k : keys.all) {
    if (writes(key, k)) out.push_back(static_cast<int64_t>(k.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<int64_t>& KeyLog::log_lengths(const Taken& taken, const Node& key,
                                                std::vector<int64_t>& scratch) const {
  scratch.clear();
  if (taken.log == nullptr) return scratch;
  for (const auto& [node, lengths] : taken.log->lengths) {
    if (node == &key) return lengths;
  }
  scratch = lengths_from_scratch(*taken.log, key);  // a node add() did not see read the object
  return scratch;
}

std::size_t KeyLog::key_count(uint32_t object, const Closed& closed, const Node& key) const {
  const Taken t = taken(object, closed, &key);
  std::vector<int64_t> scratch;
  return log_lengths(t, key, scratch).size() + t.more.size();
}

bool KeyLog::fresh_ahead(const Node& key, const Frame& f, std::string& prefix, const Taken& taken) const {
  if (!taken.any_begins(prefix)) return true;  // the grammar's completion
  for (int b = 0; b < 256; ++b) {
    Frame next = f;
    const int r = key_byte(key, next, static_cast<uint8_t>(b));
    if (r < 0) continue;
    prefix.push_back(static_cast<char>(b));
    const bool fresh = r == 1 ? !taken.contains(prefix) : fresh_ahead(key, next, prefix, taken);
    prefix.pop_back();
    if (fresh) return true;
  }
  return false;
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

KeyLog::Keys& KeyLog::own(uint32_t object) {
  std::shared_ptr<Keys>& keys = keys_[object];
  if (keys == nullptr) {
    keys = std::make_shared<Keys>();
  } else if (keys.use_count() > 1) {
    keys = std::make_shared<Keys>(*keys);  // a copy of the log shares them: it keeps its own
  } else {
    // The only holder: reads by copies released in other threads come before these writes.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *keys;
}

void KeyLog::add(const Closed& closed, const StateSet& now) {
  for (const auto& [object, key] : closed) {
    const auto it = keys_.find(object);
    if (it != keys_.end() && it->second->all.count(key) != 0) continue;
    Keys& keys = own(object);
    keys.all.insert(key);
    const auto length = static_cast<int64_t>(key.size());
    for (auto& [node, lengths] : keys.lengths) {
      if (writes(*node, key)) lengths.insert(std::upper_bound(lengths.begin(), lengths.end(), length), length);
    }
  }
  // Forget the objects no stack holds open; give each that has keys the lengths of the key nodes reading it.
  std::set<uint32_t> open;
  for (std::size_t s = 0; s < now.size(); ++s) {
    for (std::size_t j = 0; j < now.length(s); ++j) {
      const Frame& f = now.begin(s)[j];
      open.insert(f.start);
      const auto it = keys_.find(f.start);
      const Node* key = it != keys_.end() ? key_node(g_.at(static_cast<int32_t>(f.node))) : nullptr;
      if (key == nullptr) continue;
      const auto& known = it->second->lengths;
      if (std::none_of(known.begin(), known.end(), [&](const auto& l) { return l.first == key; })) {
        own(f.start).lengths.emplace_back(key, lengths_from_scratch(*it->second, *key));
      }
    }
  }
  for (auto it = keys_.begin(); it != keys_.end();) it = open.count(it->first) != 0 ? std::next(it) : keys_.erase(it);
}

namespace {

// The keys a map or open object past its declared properties still writes from frame `f` (members owed; after
// a ',' at least one), or -1 where its keys are not all free (declared properties may come).
int64_t keys_owed(const Node& n, const Frame& f) {
  int64_t had = 0;
  if (n.kind == NodeKind::kAnyObject) {
    had = static_cast<int64_t>(f.a);
  } else if (n.kind == NodeKind::kObject && n.open && static_cast<int32_t>(nodes::spent(n, f.a)) == declared_count(n)) {
    had = nodes::members(n, f.a);
  } else {
    return -1;
  }
  const int64_t owed = std::max<int64_t>(0, n.min_count - had);
  return f.phase == nodes::kComma || f.phase == nodes::kCommaSp ? std::max<int64_t>(owed, 1) : owed;
}

}  // namespace

KeyLog::StackNeed KeyLog::stack_need(const Matcher& m, const Frame* f, std::size_t n, std::string_view text,
                                     std::string_view walked, const Closed* closed) const {
  StackNeed out;
  out.grammar = m.stack_min_bytes(f, n);
  if (out.grammar == 0) return out;
  const Joined all{text, walked};
  const std::size_t end = text.size() + walked.size();
  const Node* writing = n >= 2 && f[n - 2].start != kNoStart ? free_key(f[n - 2]) : nullptr;
  if (writing != &g_.at(static_cast<int32_t>(f[n - 1].node))) writing = nullptr;
  static const Closed kNone;
  std::vector<int64_t> scratch;
  for (std::size_t j = 0; j < n; ++j) {
    if (f[j].phase == nodes::kOpen || !is_object(g_.at(static_cast<int32_t>(f[j].node)))) continue;
    const Node& object = g_.at(static_cast<int32_t>(f[j].node));
    const int64_t k = keys_owed(object, f[j]);
    if (k < 0) continue;
    const Node& key = *key_node(object);
    const Taken keys = f[j].start != kNoStart ? taken(f[j].start, closed != nullptr ? *closed : kNone, &key) : Taken{};
    const std::vector<int64_t>& lengths = log_lengths(keys, key, scratch);
    std::vector<int64_t> more;
    for (const std::string& k : keys.more) more.push_back(static_cast<int64_t>(k.size()));
    std::sort(more.begin(), more.end());
    const int64_t free_k = key_sums(object, k, lengths, more), shortest_k = key_sums(object, k);
    out.add += free_k - shortest_k;
    if (writing == nullptr || j + 2 != n) continue;
    // The key being written is one more the object needs: one of the k + 1 shortest free keys, or its own
    // shortest free completion beside the k shortest others.
    const std::string prefix = all.span(all.opening_quote(end - 1), end - 1);
    const int64_t grammar_rest = m.remaining(f[n - 1]);
    out.fresh = extra_for_fresh(m, *writing, f[n - 1], prefix, grammar_rest, keys, 1)[0];
    out.floor = out.grammar - grammar_rest - shortest_k + key_sums(object, k + 1, lengths, more) -
                static_cast<int64_t>(prefix.size()) - (free_k - shortest_k);
  }
  if (out.floor != kNoFloor) out.floor += out.add;
  return out;
}

int64_t KeyLog::need(const Matcher& m, const StateSet& state, std::string_view text, std::string_view walked,
                     const Closed* closed) const {
  int64_t best = kUnreachable;
  for (std::size_t s = 0; s < state.size(); ++s) {
    const StackNeed t = stack_need(m, state.begin(s), state.length(s), text, walked, closed);
    best = std::min(best, t.grammar == 0 ? 0 : std::max(t.grammar + t.add + t.fresh, t.floor));
  }
  return best;
}

KeyLog::Slack KeyLog::slack(const Matcher& m, const StateSet& state, std::string_view text) const {
  Slack out;
  out.add = kUnreachable;
  out.longest_key = g_.longest_key;
  out.spread = g_.key_spread;
  out.few = g_.few_keys;
  out.shaped_extra = g_.shaped_extra;
  out.has_keys = !keys_.empty();
  out.in_string = !state.empty();
  bool floors = true;
  int64_t floor = kUnreachable;
  for (std::size_t s = 0; s < state.size(); ++s) {
    const Frame* f = state.begin(s);
    const std::size_t n = state.length(s);
    const bool key = n >= 2 && free_key(f[n - 2]) == &g_.at(static_cast<int32_t>(f[n - 1].node));
    const bool string = n >= 1 && g_.at(static_cast<int32_t>(f[n - 1].node)).kind == NodeKind::kString &&
                        f[n - 1].phase == nodes::kStrBody;
    out.in_key = out.in_key || key;
    out.in_string = out.in_string && string && !key;
    const StackNeed t = stack_need(m, f, n, text, {}, nullptr);
    out.add = std::min(out.add, t.add);
    out.top_add = std::max(out.top_add, t.add);
    out.most_add = std::max(out.most_add, t.grammar == 0 ? 0 : std::max(t.add + t.fresh, t.floor - t.grammar));
    floors = floors && t.floor != kNoFloor;
    floor = std::min(floor, t.floor);
    out.top_floor = std::max(out.top_floor, t.floor);
  }
  if (state.empty()) out.add = 0;
  out.floor = floors && !state.empty() ? floor : kNoFloor;
  return out;
}

int64_t KeyLog::most_over(const Slack& slack, std::string_view t) {
  std::size_t from = 0;
  if (slack.in_string) {
    const std::size_t q = t.find('"');
    from = q == std::string_view::npos ? t.size() : t.substr(0, q).find('\\') == std::string_view::npos ? q + 1 : 0;
  }
  const std::string_view rest = t.substr(from);
  const auto quotes = std::count(rest.begin(), rest.end(), '"');
  const auto commas = std::count(rest.begin(), rest.end(), ',');
  if (slack.few && quotes + commas > 0) return -1;
  if (quotes > 1 || (quotes == 1 && (slack.in_key || (slack.has_keys && rest.back() != '"')))) return -1;
  if (quotes == 0 && slack.in_key && slack.has_keys) return -1;
  return slack.spread * (commas + quotes);
}

bool KeyLog::budget_suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                             std::vector<int32_t>& out) const {
  const Joined joined{text, {}};
  bool escapes = false;
  for (std::size_t s = 0; s < state.size() && !text.empty(); ++s) {
    const std::size_t n = state.length(s);
    const Frame* f = state.begin(s);
    if (n < 2 || f[n - 2].start == kNoStart) continue;
    if (free_key(f[n - 2]) != &g_.at(static_cast<int32_t>(f[n - 1].node))) continue;
    const Taken logged = taken(f[n - 2].start, {});
    if (logged.empty()) continue;
    const std::set<std::string>& keys = logged.log->all;  // a walk's keys are none of them here
    const std::string prefix = joined.span(joined.opening_quote(text.size() - 1), text.size() - 1);
    if (prefix.find('\\') != std::string::npos) return true;
    escapes = true;
    for (auto it = keys.lower_bound(prefix); it != keys.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      trie.prefixes_of(std::string_view(*it).substr(prefix.size()), out);
    }
  }
  if (escapes) out.insert(out.end(), trie.backslashes().begin(), trie.backslashes().end());
  return false;
}

const std::vector<int32_t>& KeyLog::suspects(const StateSet& state, std::string_view text, const VocabTrie& trie,
                                             std::vector<int32_t>& out, bool& all) const {
  all = false;
  bool in_key = false;
  bool few = false;  // an open object with few extra keys: a ',' or a key's opening quote may be refused
  const Joined joined{text, {}};
  for (std::size_t s = 0; s < state.size(); ++s) {
    const std::size_t n = state.length(s);
    const Frame* f = state.begin(s);
    for (std::size_t j = 0; j < n; ++j) few = few || has_few_keys(g_.at(static_cast<int32_t>(f[j].node)));
    if (n < 2 || f[n - 2].start == kNoStart) continue;
    const Node* key = free_key(f[n - 2]);
    if (key != &g_.at(static_cast<int32_t>(f[n - 1].node))) continue;
    in_key = true;
    const Taken logged = taken(f[n - 2].start, {});
    if (logged.empty() || text.empty()) continue;
    const std::set<std::string>& keys = logged.log->all;
    if (key->kind == NodeKind::kString) {
      all = all || static_cast<int64_t>(f[n - 1].a) + trie.max_token_bytes() >= key->max_count;
      continue;
    }
    const std::string prefix = joined.span(joined.opening_quote(text.size() - 1), text.size() - 1);
    for (auto it = keys.lower_bound(prefix); it != keys.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      trie.prefixes_of(std::string_view(*it).substr(prefix.size()), out);
    }
  }
  // Where some object has a key, a token that holds a '"' may close one again, or open one with nothing
  // left; where none has, only one that writes two keys (three quotes inside a key, four outside) repeats.
  return trie.quotes_or_commas(few || !keys_.empty() ? 1 : in_key ? 3 : 4, few);
}

}  // namespace orbit::constrain
