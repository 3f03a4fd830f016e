// The fewest bytes left where no object repeats a key (key_log.h: KeyLog::need, KeyLog::slack).
#include "constrain/key_log.h"

#include <algorithm>

#include "constrain/key_log_parts.h"
#include "constrain/matcher_nodes.h"

namespace orbit::constrain {

using key_log::canonical;
using key_log::is_object;
using key_log::Joined;
using key_log::key_byte;

namespace {

// How many completions of exactly `left` more bytes the key frame `f` (`prefix` its bytes so far) has that are
// none of `taken` (compared as json_quote() writes them), counted up to `want`. A byte after which the key
// cannot close within the bytes left (Matcher::remaining) is not tried further. `work` bounds the bytes tried:
// past it every count is `want`, so that a search that gives up errs towards fewer bytes.
int64_t fresh_in(const Matcher& m, const Node& key, const Frame& f, std::string& prefix, int64_t left,
                 const KeyLog::Taken& taken, int64_t want, int64_t& work) {
  int64_t found = 0;
  bool spent = false;
  // Only the bytes key_byte may take (key_log::any_key_byte): each costs one of `work`.
  key_log::any_key_byte(key, f, [&](int b) {
    if (left <= 0 || found >= want) return true;
    if (--work < 0) return spent = true;
    Frame next = f;
    const int r = key_byte(key, next, static_cast<uint8_t>(b));
    if (r < 0 || (r == 1) != (left == 1) || (r == 0 && m.remaining(next) > left - 1)) return false;
    prefix.push_back(static_cast<char>(b));
    found += r == 1 ? (taken.contains(canonical(prefix)) ? 0 : 1)
                    : fresh_in(m, key, next, prefix, left - 1, taken, want - found, work);
    prefix.pop_back();
    return false;
  });
  return spent ? want : found;
}

// Where `key` is a literal set whose words `taken`'s log indexes (KeyLog::Keys::words), or no key is logged, how
// many completions of exactly `left` more bytes the key frame `f` (`prefix` its bytes so far) has that are none of
// `taken`, counted up to `want`, as fresh_in() counts them: the words through its trie node of that length, less
// those the log has there and those `taken` adds past it. A word is spelled as dump() writes it, as json_quote()
// writes a logged key, so it is taken exactly where it is one of them. -1 where the log does not index them.
int64_t fresh_words(const Node& key, const Frame& f, const std::string& prefix, int64_t left,
                    const KeyLog::Taken& taken, int64_t want) {
  if (key.kind != NodeKind::kLiteralSet) return -1;
  const KeyLog::WordLengths* logged = nullptr;
  if (taken.log != nullptr && !taken.log->all.empty()) {
    for (const auto& [node, words] : taken.log->words) {
      if (node == &key) logged = &words;
    }
    if (logged == nullptr) return -1;
  }
  if (left <= 0) return 0;
  const auto length = static_cast<int32_t>(prefix.size() + static_cast<std::size_t>(left));
  const auto count = [&](const std::vector<int32_t>& lengths) {
    const auto [lo, hi] = std::equal_range(lengths.begin(), lengths.end(), length);
    return static_cast<int64_t>(hi - lo);
  };
  int64_t fresh = count(key.trie.nodes[static_cast<std::size_t>(f.a)].lengths_below);
  if (logged != nullptr) fresh -= logged->count(static_cast<int32_t>(f.a), length);
  for (const std::string& k : taken.more) {  // those of `key`'s (taken() keeps only them), none of the log's
    if (static_cast<int32_t>(k.size()) == length && k.compare(0, prefix.size(), prefix) == 0) --fresh;
  }
  return std::min(want, fresh);
}

// The lengths in bytes of the `want` shortest completions of the key frame `f` that are none of `taken`, less
// `fewest` (the grammar's shortest), shortest first. Exact up to kMaxKeyExtra more bytes (grammar.h), or until `work`
// runs out (then a lower bound). Only the bytes that can still close the key in the length tried are tried, so the
// search walks the completions that spell a taken key and a few dead ends: a key whose short completions are
// taken ("a" with "a" taken under ^(a|abcdefgh)$: 7 more) costs what it costs, not a cap. An enum's names the log
// indexes are counted by fresh_words instead, which reads no key (exact, where the search may run out of `work`).
std::vector<int64_t> extra_for_fresh(const Matcher& m, const Node& key, const Frame& f, std::string prefix,
                                     int64_t fewest, const KeyLog::Taken& taken, int64_t want) {
  int64_t work = 1 << 16;
  std::vector<int64_t> out;
  int64_t extra = 0;
  for (; extra < kMaxKeyExtra && static_cast<int64_t>(out.size()) < want; ++extra) {
    const int64_t left = fewest + extra, wanted = want - static_cast<int64_t>(out.size());
    int64_t n = fresh_words(key, f, prefix, left, taken, wanted);
    if (n < 0) n = fresh_in(m, key, f, prefix, left, taken, wanted, work);
    out.insert(out.end(), static_cast<std::size_t>(n), extra);
  }
  out.resize(static_cast<std::size_t>(want), extra);  // none within kMaxKeyExtra: at least that many more
  return out;
}

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
}  // namespace orbit::constrain
