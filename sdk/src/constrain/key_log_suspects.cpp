// The tokens whose need() a budgeted mask must walk, and those a walk may refuse (key_log.h:
// KeyLog::most_over, KeyLog::budget_suspects, KeyLog::suspects).
#include "constrain/key_log.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "constrain/key_log_parts.h"
#include "constrain/matcher_nodes.h"
#include "constrain/token_masks.h"

namespace orbit::constrain {

using key_log::has_few_keys;
using key_log::is_object;
using key_log::Joined;

namespace {

// How many of `keys` begin with the first `length` bytes of `*it` (one of them), counted up to `limit` (at
// least 1): those around it in sorted order, read outwards until one differs there.
std::size_t count_around(const KeySet& keys, KeySet::const_iterator it, std::size_t length, std::size_t limit) {
  std::size_t n = 1;
  for (auto l = it; n < limit && l != keys.begin();) {
    if ((--l)->compare(0, length, *it, 0, length) != 0) break;
    ++n;
  }
  for (auto r = std::next(it); n < limit && r != keys.end() && r->compare(0, length, *it, 0, length) == 0; ++r) ++n;
  return n;
}

// The tokens that write a prefix of the rest of the logged key `*it` past the bytes written of the key frame
// `top` (`written` of them, from its opening quote), that a walk may refuse (appended to `out`). A byte is
// refused only where every completion of the key so far is taken: where the key (kDfa or kLiteralSet) has more
// completions after it than the object has keys that begin with its bytes (`keys`; `in_range` of them begin
// with the bytes written), it is not. So the tokens no longer than the bytes of the rest such bytes follow are
// left out; those bytes are read only as far as the longest token that writes a prefix of the rest.
void rest_suspects(const Node& key, const Frame& top, std::size_t written, KeySet::const_iterator it,
                   const KeySet& keys, std::size_t in_range, const VocabTrie& trie, std::vector<int32_t>& out) {
  const std::string_view rest = it->substr(written);
  const std::size_t from = out.size();
  trie.prefixes_of(rest, out);  // shortest first
  if (out.size() == from) return;
  const auto longest = static_cast<std::size_t>(trie.length(out.back()));
  std::size_t sure = 0;
  Frame f = top;
  while (sure < longest && key_log::key_byte(key, f, static_cast<uint8_t>(rest[sure])) == 0) {
    const auto ahead = static_cast<std::size_t>(std::max<int64_t>(0, key_log::completions_at_least(key, f)));
    // Counted among the keys that begin with the bytes so far only where those that begin with the bytes
    // written are not already fewer.
    if (ahead <= in_range && count_around(keys, it, written + sure + 1, ahead) >= ahead) break;
    ++sure;
  }
  out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(),
                           [&](int32_t id) { return trie.length(id) <= static_cast<int64_t>(sure); }),
            out.end());
}

// What rest_suspects() lists for each logged key that begins with the key's bytes `written` (from its opening
// quote), read from the object's saturated prefixes (KeyLog::Saturated) past them: the first such prefix on a
// key's way is where rest_suspects() stops reading it, so the tokens that write a prefix of its rest reaching
// that far are listed, and a key with none there lists none. A saturated prefix past the vocabulary's longest
// token is reached by no token. (rest_suspects() lists the tokens that close the key with its quote as well;
// those hold a '"', which suspects()' quoted tokens and, where they are not all walked, one_quote_suspects()
// list.)
void saturated_suspects(const KeySet& keys, const KeySet& saturated, const std::string& written, const VocabTrie& trie,
                        std::vector<int32_t>& out) {
  for (auto it = saturated.upper_bound(written);
       it != saturated.end() && it->compare(0, written.size(), written) == 0;) {
    const std::string_view at = *it++;
    const std::size_t reach = at.size() - written.size();
    if (static_cast<int64_t>(reach) <= trie.max_token_bytes()) {
      for (auto k = keys.lower_bound(at); k != keys.end() && k->compare(0, at.size(), at) == 0; ++k) {
        const std::size_t from = out.size();
        trie.prefixes_of(k->substr(written.size()), out);
        out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(),
                                 [&](int32_t id) { return trie.length(id) < static_cast<int64_t>(reach); }),
                  out.end());
      }
    }
    // The saturated prefixes that begin with this one (next in order) lie on the ways of keys listed here.
    while (it != saturated.end() && it->compare(0, at.size(), at) == 0) ++it;
  }
}

}  // namespace

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
    const KeySet& keys = logged.log->all;  // a walk's keys are none of them here
    const std::string prefix = joined.span(joined.opening_quote(text.size() - 1), text.size() - 1);
    if (prefix.find('\\') != std::string::npos) return true;
    escapes = true;
    for (auto it = keys.lower_bound(prefix); it != keys.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      trie.prefixes_of(it->substr(prefix.size()), out);
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
    const KeySet& keys = logged.log->all;
    if (key->kind == NodeKind::kString) {
      all = all || static_cast<int64_t>(f[n - 1].a) + trie.max_token_bytes() >= key->max_count;
      continue;
    }
    const std::string prefix = joined.span(joined.opening_quote(text.size() - 1), text.size() - 1);
    const auto indexed = std::find_if(logged.log->saturated.begin(), logged.log->saturated.end(),
                                      [&](const auto& s) { return s.first == key && s.second.indexed; });
    if (indexed != logged.log->saturated.end()) {
      saturated_suspects(keys, indexed->second.prefixes, prefix, trie, out);
      continue;
    }
    const std::size_t in_range = key_log::count_begins(keys, prefix, keys.size());
    for (auto it = keys.lower_bound(prefix); it != keys.end() && it->compare(0, prefix.size(), prefix) == 0; ++it) {
      rest_suspects(*key, f[n - 1], prefix.size(), it, keys, in_range, trie, out);
    }
  }
  // An object the token opens may have few keys: its first key's opening quote may be refused (an extra key
  // first, where its extra keys alone cannot reach minProperties) with no key written anywhere.
  if (g_.few_keys && !few) out.insert(out.end(), trie.braced_quotes().begin(), trie.braced_quotes().end());
  // Where some object has a key, a token that holds a '"' may close one again, or open one with nothing
  // left; where none has, only one that writes two keys (three quotes inside a key, four outside) repeats.
  return trie.quotes_or_commas(few || !keys_.empty() ? 1 : in_key ? 3 : 4, few);
}

KeyLog::OneQuote KeyLog::one_quote(const StateSet& state, std::string_view text, int64_t max_token_bytes) const {
  if (keys_.empty()) return {};  // suspects() lists only tokens of three quotes or more
  OneQuote q;
  // A key the token's quote opens is one of the stack's objects' (or a fresh one's, which has none logged): a
  // byte inside it may be refused where its key node is a pattern or an enum (the object is then listed
  // outside, false where its key's opening quote itself may be refused) or a plain string a token can fill.
  const auto opens_outside = [&](const Frame* f, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) {
      const Node& node = g_.at(static_cast<int32_t>(f[j].node));
      const Node* key = is_object(node) ? key_node(node) : nullptr;
      if (key == nullptr || (key->kind == NodeKind::kString && key->max_count > max_token_bytes)) continue;
      if (key->kind != NodeKind::kDfa && key->kind != NodeKind::kLiteralSet) return false;
      if (f[j].start == kNoStart || keys_.count(f[j].start) == 0) continue;  // no key logged: none refused
      const bool listed = std::any_of(q.outside.begin(), q.outside.end(),
                                      [&](const Outside& o) { return o.object == f[j].start && o.key == key; });
      if (listed) continue;
      Outside o{f[j].start, key, Frame{}};
      std::string prefix = "\"";
      if (key_log::key_byte(*key, o.at_quote, '"') != 0 || !fresh_ahead(*key, o.at_quote, prefix, taken(o.object, {})))
        return false;
      q.outside.push_back(o);
    }
    return true;
  };
  for (std::size_t s = 0; s < state.size(); ++s) {
    const std::size_t n = state.length(s);
    const Frame* f = state.begin(s);
    for (std::size_t j = 0; j < n; ++j) {
      if (has_few_keys(g_.at(static_cast<int32_t>(f[j].node)))) return {};  // a ',' may be refused
    }
    const Node* key = n >= 2 && f[n - 2].start != kNoStart ? free_key(f[n - 2]) : nullptr;
    if (key == nullptr || key != &g_.at(static_cast<int32_t>(f[n - 1].node)) || text.empty()) {
      if (!opens_outside(f, n)) return {};  // the token's quote may open a key here
      continue;
    }
    // Inside a key the token's quote closes it: no key opens after it in this stack, whatever its objects.
    if (key->kind == NodeKind::kString && static_cast<int64_t>(f[n - 1].a) + max_token_bytes >= key->max_count)
      return {};
    if (key->kind != NodeKind::kString && key->kind != NodeKind::kDfa && key->kind != NodeKind::kLiteralSet) return {};
    q.objects.push_back(f[n - 2].start);
  }
  if (!q.objects.empty()) {
    const Joined joined{text, {}};
    q.prefix = joined.span(joined.opening_quote(text.size() - 1), text.size() - 1);
    const bool own = std::all_of(q.prefix.begin() + 1, q.prefix.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return u >= 0x20 && u < 0x80 && c != '\\';
    });
    if (!own) return {};  // an escape or a byte json_quote() writes otherwise: the key is not its bytes
  }
  q.applies = true;
  return q;
}

bool KeyLog::tail_refusable(const OneQuote& q, std::string_view tail) const {
  for (const Outside& o : q.outside) {
    const Taken logged = taken(o.object, {});
    Frame f = o.at_quote;
    std::string prefix = "\"";
    // keeps() after each byte of the key: refused only where a logged key begins with the bytes so far and
    // none of their completions is fresh.
    for (const char c : tail) {
      const int r = key_log::key_byte(*o.key, f, static_cast<uint8_t>(c));
      if (r < 0) break;        // the key refuses the byte: the grammar drops this stack
      if (r > 0) return true;  // a whole key without its quote: not one of ours; walked
      prefix.push_back(c);
      if (!logged.any_begins(prefix)) break;  // nor any longer bytes
      if (!fresh_ahead(*o.key, f, prefix, logged)) return true;
    }
  }
  return false;
}

void KeyLog::one_quote_suspects(const OneQuote& q, const VocabTrie& trie, std::vector<int32_t>& out) const {
  for (const uint32_t o : q.objects) {
    const auto it = keys_.find(o);
    if (it == keys_.end()) continue;
    const KeySet& keys = it->second->all;
    // A token that begins with a key's rest, closing quote and all, holds a '"' that many bytes in: no rest
    // longer than the vocabulary's quote_reach() is one, and none is where the object's shortest key is past it.
    const auto reach = static_cast<std::size_t>(trie.quote_reach());
    if (it->second->shortest > q.prefix.size() + reach) continue;
    for (auto k = keys.lower_bound(q.prefix); k != keys.end() && k->compare(0, q.prefix.size(), q.prefix) == 0; ++k) {
      // A walk refuses a token of one quote inside a pattern's or an enum's key only where the key's
      // completions are all taken: the key the grammar lets the token close with its quote is then one of
      // them, so the token begins with a logged key's rest as well.
      if (k->size() - q.prefix.size() > reach) continue;
      trie.extensions_of(k->substr(q.prefix.size()), out);
    }
  }
}

bool KeyLog::in_string_bodies(const StateSet& state, int64_t max_token_bytes) const {
  for (std::size_t s = 0; s < state.size(); ++s) {
    const std::size_t n = state.length(s);
    const Frame* f = state.begin(s);
    if (n == 0) return false;
    const Node& top = g_.at(static_cast<int32_t>(f[n - 1].node));
    if (top.kind != NodeKind::kString || f[n - 1].phase != nodes::kStrBody) return false;
    const bool key = n >= 2 && free_key(f[n - 2]) == &top;
    if (key && static_cast<int64_t>(f[n - 1].a) + max_token_bytes >= top.max_count) return false;
  }
  return !state.empty();
}

}  // namespace orbit::constrain
