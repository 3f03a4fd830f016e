// Matching bytes and tokens (orbit/constraint.h): TokenVocabulary, ConstraintMatcher, TokenConstraint (each
// constraint's mask caches and its memory: constraint_parts.cpp).
#include <algorithm>
#include <bitset>
#include <limits>

#include "constrain/key_log.h"
#include "constrain/parts.h"
#include "orbit/common/error.h"

namespace orbit {

using constrain::Access;
using constrain::ConstraintParts;
using constrain::StateSet;

// ---- TokenVocabulary, TokenMask

TokenVocabulary::TokenVocabulary(TokenBytes bytes) : bytes_(std::move(bytes)) {
  const auto size = static_cast<int64_t>(bytes_.text.size());
  std::sort(bytes_.at_start.begin(), bytes_.at_start.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  for (std::size_t i = 0; i < bytes_.at_start.size(); ++i) {
    const int64_t id = bytes_.at_start[i].first;
    ORBIT_CHECK(id >= 0 && id < size,
                "TokenBytes::at_start: id " << id << " is outside the vocabulary [0, " << size << ")");
    ORBIT_CHECK(i == 0 || bytes_.at_start[i - 1].first != id, "TokenBytes::at_start: id " << id << " appears twice");
  }
  trie_ = std::make_unique<constrain::VocabTrie>(bytes_.text);
}

TokenVocabulary::~TokenVocabulary() = default;

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_bytes(TokenBytes bytes) {
  return std::shared_ptr<const TokenVocabulary>(new TokenVocabulary(std::move(bytes)));
}

int64_t TokenVocabulary::size() const { return static_cast<int64_t>(bytes_.text.size()); }

const std::optional<std::string>& TokenVocabulary::bytes(int64_t id) const {
  ORBIT_CHECK(id >= 0 && id < size(),
              "TokenVocabulary: id " << id << " is outside the vocabulary [0, " << size() << ")");
  return bytes_.text[static_cast<std::size_t>(id)];
}

const std::vector<std::pair<int64_t, std::optional<std::string>>>& TokenVocabulary::at_start() const {
  return bytes_.at_start;
}

int64_t TokenVocabulary::max_token_bytes() const { return trie_->max_token_bytes(); }

int64_t TokenMask::count() const {
  int64_t n = 0;
  for (uint64_t w : bits) n += static_cast<int64_t>(std::bitset<64>(w).count());
  return n;
}

// ---- ConstraintMatcher

struct ConstraintMatcher::State {
  explicit State(const constrain::Grammar& grammar) : keys(grammar) {}
  StateSet set;
  std::string text;
  constrain::KeyLog keys;  // the keys of the objects open in `text`
  // Computed on first use after each change.
  mutable int complete = -1;
  mutable int can_continue = -1;
};

namespace {

const ConstraintParts& parts_of(const std::shared_ptr<const Constraint>& c) {
  ORBIT_CHECK(c != nullptr, "constrained decoding: the constraint is null");
  return Access::parts(*c);
}

// `from` after `bytes` into `out`; false when a byte is refused.
bool walk(const constrain::Matcher& m, const StateSet& from, std::string_view bytes, StateSet& out) {
  StateSet next;
  out = from;
  for (const char c : bytes) {
    if (!m.step(out, static_cast<uint8_t>(c), next)) return false;
    std::swap(out, next);
  }
  return true;
}

}  // namespace

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> constraint)
    : constraint_(std::move(constraint)), state_(std::make_unique<State>(parts_of(constraint_).grammar)) {
  parts_of(constraint_).matcher.start(state_->set);
}

ConstraintMatcher::ConstraintMatcher(const ConstraintMatcher& other)
    : constraint_(other.constraint_), state_(std::make_unique<State>(*other.state_)) {}

ConstraintMatcher& ConstraintMatcher::operator=(const ConstraintMatcher& other) {
  if (this != &other) {
    constraint_ = other.constraint_;
    state_ = std::make_unique<State>(*other.state_);
  }
  return *this;
}

ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher::~ConstraintMatcher() = default;

bool ConstraintMatcher::advance(std::string_view bytes) {
  constrain::KeyLog::Closed closed;
  StateSet after;
  if (!state_->keys.walk(parts_of(constraint_).matcher, state_->set, state_->text, bytes, after, &closed)) return false;
  state_->keys.add(closed, after);
  state_->set = std::move(after);
  state_->text.append(bytes);
  state_->complete = state_->can_continue = -1;
  return true;
}

bool ConstraintMatcher::can_advance(std::string_view bytes) const {
  StateSet after;
  return state_->keys.walk(parts_of(constraint_).matcher, state_->set, state_->text, bytes, after);
}

bool ConstraintMatcher::complete() const {
  if (state_->complete < 0) state_->complete = parts_of(constraint_).matcher.can_end(state_->set) ? 1 : 0;
  return state_->complete == 1;
}

bool ConstraintMatcher::can_continue() const {
  if (state_->can_continue < 0) {
    state_->can_continue = parts_of(constraint_).matcher.can_continue(state_->set) ? 1 : 0;
  }
  return state_->can_continue == 1;
}

int64_t ConstraintMatcher::min_bytes_to_complete() const {
  return state_->keys.need(parts_of(constraint_).matcher, state_->set, state_->text);
}

int64_t ConstraintMatcher::min_bytes_after(std::string_view bytes) const {
  const constrain::Matcher& m = parts_of(constraint_).matcher;
  constrain::KeyLog::Closed closed;
  StateSet after;
  if (!state_->keys.walk(m, state_->set, state_->text, bytes, after, &closed)) return -1;
  return state_->keys.need(m, after, state_->text, bytes, &closed);
}

const std::string& ConstraintMatcher::text() const { return state_->text; }

std::string ConstraintMatcher::state_key() const {
  std::vector<uint32_t> words;
  parts_of(constraint_).matcher.key(state_->set, constrain::kNoHorizon, words);
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(uint32_t));
}

TokenMask ConstraintMatcher::mask(const TokenVocabulary& vocabulary) const {
  const auto cache = parts_of(constraint_).cache_for(vocabulary, Access::trie(vocabulary));
  const auto entry = cache->get(state_->set);
  TokenMask m;
  entry->copy_bits(m.bits);
  m.complete = entry->complete;
  return m;
}

// ---- TokenConstraint

TokenConstraint::TokenConstraint(std::shared_ptr<const Constraint> constraint,
                                 std::shared_ptr<const TokenVocabulary> vocabulary, TokenConstraintOptions options)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)), matcher_(std::move(constraint)) {
  ORBIT_CHECK(vocabulary_ != nullptr, "TokenConstraint: the vocabulary is null");
  for (int64_t e : options_.end_tokens) {
    ORBIT_CHECK(e >= 0 && e < vocabulary_->size(),
                "TokenConstraint: end token " << e << " is outside the vocabulary [0, " << vocabulary_->size() << ")");
  }
  cache_ = parts_of(matcher_.constraint_).cache_for(*vocabulary_, Access::trie(*vocabulary_));
}

TokenConstraint::~TokenConstraint() = default;
TokenConstraint::TokenConstraint(const TokenConstraint&) = default;
TokenConstraint& TokenConstraint::operator=(const TokenConstraint&) = default;
TokenConstraint::TokenConstraint(TokenConstraint&&) noexcept = default;
TokenConstraint& TokenConstraint::operator=(TokenConstraint&&) noexcept = default;

bool TokenConstraint::is_end_token(int64_t token) const {
  return std::find(options_.end_tokens.begin(), options_.end_tokens.end(), token) != options_.end_tokens.end();
}

const std::optional<std::string>& TokenConstraint::bytes_now(int64_t token) const {
  if (at_start_now()) {
    const auto& start = vocabulary_->at_start();
    const auto it = std::lower_bound(start.begin(), start.end(), token,
                                     [](const auto& entry, int64_t id) { return entry.first < id; });
    if (it != start.end() && it->first == token) return it->second;
  }
  return vocabulary_->bytes(token);
}

namespace {

void set_bit(std::vector<uint64_t>& bits, int64_t id, bool on) {
  const uint64_t bit = uint64_t{1} << (id % 64);
  if (on) {
    bits[static_cast<std::size_t>(id / 64)] |= bit;
  } else {
    bits[static_cast<std::size_t>(id / 64)] &= ~bit;
  }
}

bool has_bit(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[static_cast<std::size_t>(id) / 64] >> (id % 64)) & 1;
}

// Calls f(id) for each id set in `bits`, ascending.
template <typename F>
void for_each_set(const std::vector<uint64_t>& bits, F f) {
  for (std::size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t b = bits[w]; b != 0; b &= b - 1) f(static_cast<int32_t>(w * 64 + __builtin_ctzll(b)));
  }
}

// One step's budget: which of the mask's tokens leave a completion, with no key repeated, of at most
// `remaining` bytes (ConstraintMatcher::min_bytes_after). For most tokens that is the slack formula over the
// grammar's fewest bytes after the token (key_log.h: slack), read off the state's cached entry; the tokens
// budget_suspects() names are bounded first, then walked only where the bounds leave it open.
struct Budget {
  const constrain::Matcher& m;
  const constrain::KeyLog& keys;
  const StateSet& now;
  const std::string& text;
  const TokenVocabulary& vocabulary;
  const constrain::VocabTrie& trie;
  const constrain::MaskEntry& entry;
  int64_t remaining;
  int64_t need_now;  // Matcher::min_bytes(now)
  constrain::KeyLog::Slack slack;
  TokenConstraint::BudgetCounts& counts;

  // Whether token `id`, after which the grammar's fewest bytes are `grammar`, fits by the slack formula: 1 it
  // does, 0 it does not, -1 only a walk tells (stacks whose slack differs: key_log.h, slack).
  int fits(int64_t grammar, int32_t id) const {
    const int64_t length = trie.length(id);
    if (std::max(grammar + slack.add, slack.floor - length) > remaining) return 0;
    return std::max(grammar + slack.top_add, slack.top_floor - length) <= remaining ? 1 : -1;
  }

  // Allowed token `id` by the key log's walk and need(): exact. (Its walk succeeds: the mask holds no token
  // the key log refuses.)
  bool walked_fits(int32_t id) const {
    ++counts.walked;
    StateSet after;
    constrain::KeyLog::Closed closed;
    const std::string& bytes = *vocabulary.bytes(id);
    return keys.walk(m, now, text, bytes, after, &closed) && keys.need(m, after, text, bytes, &closed) <= remaining;
  }

  // Token `id` by the slack formula, walked where it cannot tell, into `bits`.
  void judge(int64_t grammar, int32_t id, std::vector<uint64_t>& bits) const {
    const int f = grammar < 0 ? 0 : fits(grammar, id);
    set_bit(bits, id, f < 0 ? walked_fits(id) : f == 1);
  }

  // The grammar's fewest bytes after allowed token `id` (walked where the entry lists no changes); -1 where
  // the grammar refuses its bytes.
  int64_t grammar_after(int32_t id, StateSet& after) const {
    if (entry.differs_complete) return need_now + entry.delta(id, trie.length(id));
    const std::optional<std::string>& bytes = vocabulary.bytes(id);
    return bytes.has_value() && walk(m, now, *bytes, after) ? m.min_bytes(after) : -1;
  }

  // Every token `allowed` holds, by the slack formula (walked where it cannot tell), into `bits`. Tokens the
  // entry does not list leave the grammar's fewest bytes at need_now: all of them fit or none does, or (a
  // floor, stacks of different slack) each is asked; with by_length at need_now less their bytes, each asked.
  void plain(const std::vector<uint64_t>& allowed, std::vector<uint64_t>& bits) const {
    StateSet after;
    if (!entry.differs_complete) {
      for_each_set(allowed, [&](int32_t id) { judge(grammar_after(id, after), id, bits); });
      return;
    }
    if (entry.by_length) {
      by_length(allowed, bits);
      return;
    }
    if (need_now + slack.add > remaining) {
      std::fill(bits.begin(), bits.end(), 0);
    } else if (std::max(need_now + slack.top_add, slack.top_floor - 1) > remaining) {  // a one-byte token may not fit
      for_each_set(allowed, [&](int32_t id) { judge(need_now, id, bits); });
    }
    for (const auto& [delta, id] : entry.differs) {
      if (has_bit(allowed, id)) judge(need_now + delta, id, bits);
    }
  }

  // plain() where the entry's differs are by_length: each allowed token's change read off the sorted list in
  // one pass beside the ascending ids (entry.delta without its search), judged as grammar_after would.
  void by_length(const std::vector<uint64_t>& allowed, std::vector<uint64_t>& bits) const {
    auto listed = entry.differs.begin();
    for_each_set(allowed, [&](int32_t id) {
      while (listed != entry.differs.end() && listed->second < id) ++listed;
      const bool found = listed != entry.differs.end() && listed->second == id;
      judge(need_now + (found ? listed->first : entry.unlisted(trie.length(id))), id, bits);
    });
  }

  // Allowed token `id`, one holding a '"' or ',' or (`listed`) one budget_suspects() names, into `bits`.
  // need() after it is at least the grammar's fewest bytes and, for one it does not name, at most those plus
  // most_add and most_over (key_log.h); only between the two, or where most_over cannot tell, does the key
  // log walk it.
  void suspect(int32_t id, bool listed, std::vector<uint64_t>& bits) const {
    StateSet after;
    const int64_t grammar = grammar_after(id, after);
    if (grammar < 0 || grammar > remaining) {
      set_bit(bits, id, false);
      return;
    }
    const std::string& bytes = *vocabulary.bytes(id);
    const int64_t over = listed ? -1 : constrain::KeyLog::most_over(slack, bytes);
    if (over >= 0 && grammar + slack.most_add + over <= remaining) {
      ++counts.settled;
      set_bit(bits, id, true);
      return;
    }
    set_bit(bits, id, walked_fits(id));
  }
};

// Where every stack is in a string value's body (`one` applies with no stack in a key: KeyLog::one_quote,
// KeyLog::in_string_bodies), the tokens `mask` allows that a walk may refuse, appended to `out`. A token's
// bytes are read from the body: up to its first unescaped '"' they stay in the value, which no walk refuses a
// byte of, and that quote ends it; bytes outside a string are refused only at a ',' of an object with few keys
// (no stack holds one, and one the token opens is among suspects()' braced quotes); a later '"' opens a
// string, a key or a value, whose opening quote one_quote() found free. Its bytes are refused only inside a
// key of an object `one.outside` lists (tail_refusable; an object not listed has plain keys no token fills,
// or is one the token opens, with no key logged), so only the tokens whose string's bytes may be refused there
// are listed, and those whose string closes or holds a '\\' (VocabTrie::body_openers).
void value_body_suspects(const TokenMask& mask, const constrain::KeyLog::OneQuote& one, const constrain::KeyLog& keys,
                         const constrain::VocabTrie& trie, const TokenVocabulary& vocabulary,
                         std::vector<int32_t>& out) {
  for (const auto& [id, tail] : trie.body_openers()) {
    if (!mask.allows(id)) continue;
    if (tail == constrain::VocabTrie::kOpenedWalk) {
      out.push_back(id);
    } else if (!one.outside.empty()) {
      const std::string& bytes = *vocabulary.bytes(id);
      if (keys.tail_refusable(one, std::string_view(bytes).substr(static_cast<std::size_t>(tail)))) out.push_back(id);
    }
  }
}

}  // namespace

std::vector<int64_t> TokenConstraint::repeats(const TokenMask& mask, bool* drops) const {
  const constrain::VocabTrie& trie = Access::trie(*vocabulary_);
  const StateSet& now = matcher_.state_->set;
  const constrain::Matcher& m = parts_of(matcher_.constraint_).matcher;
  std::vector<int32_t> prefixes;
  bool all = false;
  const std::vector<int32_t>& quoted = keys().suspects(now, matcher_.text(), trie, prefixes, all);
  std::vector<int64_t> out;
  StateSet after;
  const auto ask = [&](int32_t id) {
    const std::optional<std::string>& bytes = bytes_now(id);
    bool dropped = false;
    if (bytes.has_value() && !keys().walk(m, now, matcher_.text(), *bytes, after, nullptr, &dropped)) {
      out.push_back(id);
    } else if (dropped && drops != nullptr) {
      *drops = true;
    }
  };
  if (all) {
    for_each_set(mask.bits, ask);
    return out;
  }
  // A token with one '"' after printable ASCII and no '\\' is refused, where one_quote() applies, only inside
  // the key it begins in or by closing it as a logged key: walked only where it begins with the rest of one;
  // or inside a pattern's or an enum's key its quote opens: walked only where its bytes after the quote may be
  // refused there (tail_refusable), or are not all printable ASCII (tails_apart).
  const constrain::KeyLog::OneQuote one = keys().one_quote(now, matcher_.text(), trie.max_token_bytes());
  if (one.applies) keys().one_quote_suspects(one, trie, prefixes);
  const bool outside = one.applies && !one.outside.empty();
  const bool bodies = keys().in_string_bodies(now, trie.max_token_bytes());
  if (one.applies && one.objects.empty() && bodies) {
    value_body_suspects(mask, one, keys(), trie, *vocabulary_, prefixes);
  } else {
    if (outside) {
      for (const int32_t id : trie.quoted_tails()) {
        if (!mask.allows(id)) continue;
        const std::string& bytes = *vocabulary_->bytes(id);
        if (keys().tail_refusable(one, std::string_view(bytes).substr(bytes.find('"') + 1))) prefixes.push_back(id);
      }
    }
    // Inside strings' bodies a token whose quotes are all escaped stays in them: no walk refuses it. Inside a key
    // (printable so far, one_quote), a token whose first quote ends it after bytes that write it as json_quote()
    // does and opens no string after but a value (closes_only) is refused, if at all, at that quote or before
    // it, where it begins with the rest of a logged key: one_quote_suspects() lists it.
    const bool in_key = one.applies && !one.objects.empty();
    for (const int32_t id : !one.applies ? quoted : outside ? trie.tails_apart() : trie.quoted_apart()) {
      if (mask.allows(id) && !(bodies && trie.quotes_escaped(id)) && !(in_key && trie.closes_only(id))) ask(id);
    }
  }
  std::sort(prefixes.begin(), prefixes.end());  // a token writes the start of many keys' rest: walked once
  prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
  for (const int32_t id : prefixes) {
    if (mask.allows(id)) ask(id);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const constrain::KeyLog& TokenConstraint::keys() const { return matcher_.state_->keys; }

void TokenConstraint::fit_budget(const constrain::MaskEntry& entry,
                                 const std::vector<std::pair<int64_t, int32_t>>& apart, int64_t remaining,
                                 const std::vector<uint64_t>& allowed, std::vector<uint64_t>& bits) const {
  const constrain::Matcher& m = parts_of(matcher_.constraint_).matcher;
  const StateSet& now = matcher_.state_->set;
  const constrain::VocabTrie& trie = Access::trie(*vocabulary_);
  const Budget budget{.m = m,
                      .keys = keys(),
                      .now = now,
                      .text = matcher_.text(),
                      .vocabulary = *vocabulary_,
                      .trie = trie,
                      .entry = entry,
                      .remaining = remaining,
                      .need_now = m.min_bytes(now),
                      .slack = keys().slack(m, now, matcher_.text()),
                      .counts = counts_};
  budget.plain(allowed, bits);
  std::vector<int32_t> prefixes;
  if (keys().budget_suspects(now, matcher_.text(), trie, prefixes)) {  // a key spelled with escapes: walk all
    for_each_set(allowed, [&](int32_t id) { budget.suspect(id, true, bits); });
  } else {
    std::sort(prefixes.begin(), prefixes.end());
    prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
    for (const int32_t id : trie.quotes_or_commas(1, true)) {
      if (has_bit(allowed, id) && !std::binary_search(prefixes.begin(), prefixes.end(), id)) {
        budget.suspect(id, false, bits);
      }
    }
    for (const int32_t id : prefixes) {
      if (has_bit(allowed, id)) budget.suspect(id, true, bits);
    }
  }
  for (const auto& [need, id] : apart) {  // judged at the text's start
    if (has_bit(allowed, id)) set_bit(bits, id, need <= remaining);
  }
}

TokenMask TokenConstraint::allowed(int64_t remaining) const {
  const constrain::MaskEntry& entry = *cache_->get(matcher_.state_->set);
  const constrain::Matcher& m = parts_of(matcher_.constraint_).matcher;
  const StateSet& now = matcher_.state_->set;
  // Tokens whose bytes differ at the text's start are judged apart: (need after, token) when allowed.
  std::vector<std::pair<int64_t, int32_t>> apart;
  std::vector<int64_t> apart_ids;
  if (at_start_now()) {
    StateSet after;
    constrain::KeyLog::Closed closed;
    for (const auto& [id, bytes] : vocabulary_->at_start()) {
      apart_ids.push_back(id);
      closed.clear();
      if (bytes.has_value() && !bytes->empty() && keys().walk(m, now, matcher_.text(), *bytes, after, &closed)) {
        apart.emplace_back(keys().need(m, after, matcher_.text(), *bytes, &closed), static_cast<int32_t>(id));
      }
    }
  }
  TokenMask mask;
  mask.complete = entry.complete;
  entry.copy_bits(mask.bits);
  for (int64_t id : apart_ids) set_bit(mask.bits, id, false);
  for (const auto& [need, id] : apart) set_bit(mask.bits, id, true);
  for (int64_t e : options_.end_tokens) set_bit(mask.bits, e, false);
  bool drops = false;                                           // some allowed token drops a stack by the key log
  const std::vector<int64_t> repeated = repeats(mask, &drops);  // the grammar allows them; the key log does not
  for (int64_t id : repeated) set_bit(mask.bits, id, false);
  if (remaining < 0) return mask;
  // Nothing to budget when every token fits: the grammar's most after any token, what distinct keys may add to
  // it (key_log.h: slack), and the tokens judged apart. The bound holds for a token after which no stack is
  // dropped, a key being written costing at most 6 more than the grammar's shortest, or Grammar::shaped_extra
  // (key_log.h: slack); else a token's need is another stack's, which the bound does not hold (an alternative
  // whose keys are spent, left for one that owes 7 members), and each token is asked. repeats() walks every token
  // that may drop a stack (the key log's suspects), so `drops` says whether one does.
  const constrain::KeyLog::Slack slack = keys().slack(m, now, matcher_.text());
  int64_t most = entry.allowed > 0 ? m.min_bytes(now) + entry.max_delta + slack.most_add +
                                         (vocabulary_->max_token_bytes() + 1) * slack.longest_key +
                                         std::max<int64_t>(0, slack.shaped_extra - 6)
                                   : 0;
  for (const auto& [need, id] : apart) most = std::max(most, need);
  if (most <= remaining && !drops) return mask;
  // The budget: only tokens after which the shortest completion, with distinct keys, fits in `remaining` bytes
  // (one token per byte); dropped when none does (constraint.h: allowed says why).
  TokenMask budgeted = mask;
  fit_budget(entry, apart, remaining, mask.bits, budgeted.bits);
  const bool ends = budgeted.complete && !options_.end_tokens.empty();
  return ends || budgeted.count() > 0 ? budgeted : mask;
}

namespace {

template <typename T>
int64_t apply_mask(const TokenMask& mask, const std::vector<int64_t>& end_tokens, T* logits, int64_t n) {
  int64_t allowed = 0;
  for (int64_t w = 0; w * 64 < n && static_cast<std::size_t>(w) < mask.bits.size(); ++w) {
    uint64_t bits = mask.bits[static_cast<std::size_t>(w)];
    if ((w + 1) * 64 > n) bits &= (uint64_t{1} << (n % 64)) - 1;  // ids past n do not count
    allowed += static_cast<int64_t>(std::bitset<64>(bits).count());
  }
  std::vector<std::pair<int64_t, T>> ends;
  if (mask.complete) {
    for (int64_t e : end_tokens) {
      if (e < n) {
        ends.emplace_back(e, logits[e]);
        ++allowed;
      }
    }
  }
  if (allowed == 0) return 0;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = static_cast<std::size_t>(w) < mask.bits.size() ? mask.bits[static_cast<std::size_t>(w)] : 0;
    if (bits == ~uint64_t{0}) continue;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 64);
    if (bits == 0) {
      std::fill(logits + w * 64, logits + end, minus_inf);
      continue;
    }
    for (uint64_t off = ~bits; off != 0; off &= off - 1) {  // each disallowed id of the word
      const int64_t id = w * 64 + __builtin_ctzll(off);
      if (id < end) logits[id] = minus_inf;
    }
  }
  for (const auto& [e, value] : ends) logits[e] = value;
  return allowed;
}

}  // namespace

int64_t TokenConstraint::mask_logits(float* logits, int64_t n, int64_t remaining) const {
  return apply_mask(allowed(remaining), options_.end_tokens, logits, n);
}

int64_t TokenConstraint::mask_logits(double* logits, int64_t n, int64_t remaining) const {
  return apply_mask(allowed(remaining), options_.end_tokens, logits, n);
}

void TokenConstraint::accept(int64_t token) {
  ORBIT_CHECK(token >= 0 && token < vocabulary_->size(), "TokenConstraint::accept: token "
                                                             << token << " is outside the vocabulary [0, "
                                                             << vocabulary_->size() << ")");
  if (is_end_token(token)) {
    ORBIT_CHECK(matcher_.complete(), "TokenConstraint::accept: end token " << token << " before the text is complete");
    ++accepted_;
    return;
  }
  const std::optional<std::string>& bytes = bytes_now(token);
  ORBIT_CHECK(bytes.has_value() && !bytes->empty() && matcher_.advance(*bytes),
              "TokenConstraint::accept: token " << token << " does not continue the constrained text (after "
                                                << matcher_.text().size() << " bytes)");
  ++accepted_;
}

void TokenConstraint::accept_text(std::string_view bytes) {
  ORBIT_CHECK(matcher_.advance(bytes),
              "TokenConstraint::accept_text: " << bytes.size() << " bytes do not continue the constrained "
                                               << "text (after " << matcher_.text().size() << " bytes)");
  text_accepted_ = true;
}

}  // namespace orbit
