// Step 2's memo (orbit/sync.h): what rendering each prefix of a message list gave, kept for the lists that
// follow it. An agent's next request is its last list and a few more messages, so its prefixes are that
// list's prefixes, rendered already: with the memo, a sync renders only the prefixes past the longest list it
// knows (and those whose text it does not keep), instead of every prefix of the list, which is quadratic in
// the number of messages.
//
// Why the memo gives what rendering gives. A rendering is a function of the template (ChatTemplate::key), the
// variables (tools, extra), the messages, and the texts its strftime_now calls returned (runtime::ClockReads: a
// template that reads the clock, as Llama 3.2's writes today's date); the memo's keys hash the first three, so a
// list's first m messages hash to a key the memo holds only if an earlier list had the same first m messages
// under the same template and variables. The memo keeps with a list the strftime_now calls of every render its
// entry rests on (the whole rendering, each prefix rendered, and the calls kept with the lists it read), and
// reads an entry only where each of those formats gives the same text at the time this sync renders at
// (PreparedChat::now, one time for every render of a sync; runtime::clock_reads_hold): then each render the
// entry rests on makes the same calls now, which return the same texts, and renders the same text. A date in
// the rendering keeps an entry for the rest of the day; a format with seconds keeps it for that second. For that
// earlier list (whose whole rendering is K) the memo keeps K and, per prefix i < m, whether rendering it was refused,
// gave K's first `length` bytes, or gave some other text R, and then how many bytes R starts with alike with K
// (`agrees`, less than |R|). Against the new list's rendering T, with c the length of the common prefix of K
// and T: a refused prefix is refused again; a prefix that was K[0, length) is a prefix of T exactly when
// length <= c (else other text agreeing with T on c bytes); the m-message prefix (K itself) is one exactly when
// |K| <= c; other text R with agrees < c is other text again, agreeing with T on as many bytes (R[agrees] differs
// from K[agrees] = T[agrees]: R and T part where R and K do); the others (other text with agrees >= c, and the
// prefixes past m) are rendered. Those four facts are all step 2 reads of a prefix. The fourth is what keeps a
// template that renders about half the prefixes otherwise from rendering them at every request (Qwen3 renders an
// answer after the last user turn with its reasoning and drops it once a user turn follows, Mistral Nemo puts
// the system prompt and tools in the last user turn): where a grown list's rendering parts from its last list's
// only at the last turns, c is past all of them.
//
// A list trimmed or summarized at its start (its oldest turns dropped or replaced, its first message kept) starts
// with no list the memo knows but for its first message, and a list whose first message changed (an agent that
// writes the date, a memory digest or a step counter into its system prompt at every request) with none at all,
// so each of its prefixes would be rendered: n renders of up to n messages each. Its messages past the edit are,
// in order, those of an earlier list K: of the latest lists the memo kept with the same first message, with the
// same second message, with one of its later messages as an anchor (the list's last message, a few marked ones:
// anchor_messages), and under the same template and variables (each named by an alias, latest_keys and
// anchor_key; its messages' own keys kept with it), the one holding the most of this list's messages
// (sync_latest.h says why: another agent's list may be the latest by each), and step 2 reads their prefixes
// from K's (spans). An anchor is a prefix of T
// (this list) that step 2 rendered (or read from a list it starts with): T's first t messages rendered as
// T[0, p), T's messages from t on are K's from k on for j messages, K's first k messages rendered as K[0, q), and
// the two renderings agree on T[p, p + b) = K[q, q + b). Then T's first t + i messages (0 < i <= j) are read as
// T[0, p + length - q) where K's first k + i rendered as K[0, length) with length - q <= b; where K's first
// k + i rendered as other text R agreeing with K on `agrees` bytes, q <= agrees < q + b, they are read as other
// text agreeing with T on p + agrees - q bytes (T's prefix is T[0, p) and R[q, |R|), and R[agrees] differs from
// K[agrees] = T[p + agrees - q]); prefixes K refused, other text parting from K elsewhere, and those past the
// run or past b, are rendered, and one that is a prefix of T anchors anew. The assumption: appending the same
// messages to two lists whose renderings end alike appends the same text. A template that renders a kept message
// otherwise in T (turns numbered, the first user turn marked, tool results counted) renders it otherwise in T's whole
// rendering too, so b stops there and the prefixes after it are rendered until an anchor past it; a template whose
// rendering of a prefix depends on what the list's whole rendering does not show (the last message's role named in a
// header, where the two lists end with different roles) meets no anchor, since K's prefix k and T's prefix t would both
// have to be prefixes of their renderings. A changed first message is the same case with the edit at message 0: the
// anchor is T's first message alone (or a longer prefix, where the template refuses that one or renders it otherwise)
// against K's, under the same assumption; a template that shows the first message again further on (the system prompt
// repeated or counted in every turn) shows it in both whole renderings, so b stops there, and one that moves it into
// the last user turn renders each prefix that ends with a user turn otherwise in K as well, so those are rendered.
// Where K rendered its first k messages as a head of K at no place k of T's message t, the anchor takes the place
// whose run goes furthest and, for q, the place in K where T[p, ..) starts again (of the first places of its first
// bytes in K, the one K agrees with furthest): the assumption then also takes K[0, q) for what K's first k messages
// are inside K's rendering, which no render of K showed. Mistral Nemo with a tool needs it: every prefix writes the
// tools before its own last user turn, so none of K's prefixes before its last user turn is a head of K, and a list
// trimmed at its start (its first message anchoring alone) met no place to anchor on, rendering every prefix.
// Last, the longest prefix of T read is rendered as well, and per anchor the shortest read that ends with each role (a
// user turn, an answer, a tool's result); where any differs, every prefix is rendered as without the spans (none twice:
// those rendered already are read from the first pass). A template may render the messages after the anchor otherwise
// for what precedes it in a way the whole renderings hide: Qwen3 shows an answer's reasoning (and an empty <think>
// block for the last message) only after a query, a user turn that is no <tool_response>, so where T has a query before
// the anchor and K none, the prefixes that end with an answer past the anchor and before the next query part, while
// those ending with a user turn, and the whole renderings (a query follows), do not; the shortest read ending with an
// answer is one of them (Qwen3's state is undone by the first query after the anchor, so the prefixes that part are the
// first of each role's).
// Other text read is checked apart, on what step 2 reads of it (its kind and where it parts from T; a length that
// differs past there, as a new system prompt in Mistral Nemo's last user turn gives, is no difference): its longest is
// rendered, and its shortest on until one renders as read (Qwen3 shows an answer's reasoning only after a user turn,
// which T may lack before the anchor where K had one: those render as a prefix of T), that one to the longest kept;
// where the longest differs (a template that moves a message before the anchor into the last user turn), each is
// rendered.
//
// What the spans' check guarantees, and what it does not. Reads of the lists this one starts with (the first half
// above) are exact for every template: the argument rests only on a rendering being a function of its inputs and
// its clock reads. Reads from the spans rest on the assumption instead, and the check tests it on a few prefixes; it
// proves nothing about the others. Precisely: (1) the tokens are the whole rendering's, whatever step 2 reads
// (sync.h step 3 cuts them), so a plan never feeds the model other text than rendering every prefix would; (2) the
// boundaries are those of rendering every prefix wherever the assumption holds for each prefix read, and wherever
// it fails only in ways the prefixes the check renders show (the longest head read, per anchor the shortest head
// read of each role, the longest other text read, and other text read from the shortest on until one renders as
// read); (3) else a prefix read may be wrong, which takes a template that renders a prefix past the anchor
// otherwise for something neither the two whole renderings (the bytes they agree on) nor those prefixes show:
// the number of messages (a line at exactly 30 messages, at a length the check does not render), or a message
// before the anchor together with one after it (a line after the third answer past a system prompt that asks for
// it, where the third is not the first of its role), or, past an anchor placed by text, a K whose rendering repeats
// T's text past p where K's messages are not T's. A wrong read costs a boundary: a message cut from the one before
// where rendering every prefix merges them, or merged where it cuts, and so the units and what the window reuses of
// them, never the tokens. A proof would need to know what in the messages each render reads (the list's length, a
// message by its place from the end, a flag set by an earlier message): the interpreter does not track that. A
// fallback keyed on the source (no loop.index, loop.first or loop.last, |length, messages[i]) would keep the spans
// for the built-in plain template alone (a concatenation of one text per message, for which the assumption holds):
// every template in tests/data/templates reads one of them, if only to check that roles alternate.

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "orbit/common/sha256.h"
#include "orbit/runtime/chat_template.h"

namespace orbit::detail {

// What rendering a list's first i messages gave, against the rendering of the whole list: all step 2 reads of
// it, and all the memo keeps. Other text is kept by where it parts from the whole rendering alone: step 2 cuts
// only at heads, and reads other text again only by where it parts (the header's argument), so its length (which a
// template that writes a message before the anchor past that point, as Mistral Nemo the system prompt in the last
// user turn, changes with that message) is not kept. The memo lives in memory only (no stored format).
struct PrefixRender {
  enum class Kind : uint8_t {
    kRefused,  // the template threw (orbit::Error) on the shorter list
    kPrefix,   // its text is the whole rendering's first `length` bytes
    kOther,    // some other text: it starts with `agrees` bytes alike with the whole rendering, and parts there
  };
  Kind kind = Kind::kOther;
  std::size_t length = 0;  // kPrefix: the text's length in bytes; 0 otherwise
  std::size_t agrees = 0;  // kOther: how many bytes the text starts with alike with the whole rendering; 0 otherwise

  static PrefixRender refused() { return {Kind::kRefused, 0, 0}; }
  static PrefixRender prefix(std::size_t length) { return {Kind::kPrefix, length, 0}; }
  static PrefixRender other(std::size_t agrees) { return {Kind::kOther, 0, agrees}; }
};

// The renderings of one list of n messages.
struct ListRenders {
  std::string text;                      // the whole list rendered without the generation prompt
  std::vector<PrefixRender> prefixes;    // [i - 1]: its first i messages, 0 < i < n
  std::vector<Sha256::Digest> messages;  // [i]: message i's own key (ListKeys::messages); n of them
  // What strftime_now gave the renders this entry rests on (the header): it holds while clock_holds.
  runtime::ClockReads clock;
  // What it holds in memory: its containers' capacities (what they allocated, not only what they use), itself,
  // and 128 bytes for the memo's list and index nodes and the shared_ptr's block.
  std::size_t bytes() const {
    std::size_t n = sizeof(ListRenders) + text.capacity() + prefixes.capacity() * sizeof(PrefixRender) +
                    messages.capacity() * sizeof(Sha256::Digest) + clock.capacity() * sizeof(clock[0]);
    for (const auto& [format, said] : clock) n += format.capacity() + said.capacity();
    return n + 128;
  }
};

// Whether what `r` keeps holds for a sync whose renders read the time `now` (the header's condition).
inline bool clock_holds(const ListRenders& r, std::time_t now) { return runtime::clock_reads_hold(r.clock, now); }

// What names a memo's value or alias: a list's key (list_keys) or an alias (latest_keys, anchor_key), and the
// serial of the tokenizer the value is of (runtime::Tokenizer::serial; 0: none, the cuts memo). Exact: no hash
// of the two is taken, so two names are equal only where both parts are.
struct MemoKey {
  Sha256::Digest key{};
  uint64_t tokenizer = 0;
  MemoKey() = default;
  MemoKey(const Sha256::Digest& k, uint64_t t = 0) : key(k), tokenizer(t) {}  // NOLINT: a list's key names it
  bool operator==(const MemoKey& o) const { return key == o.key && tokenizer == o.tokenizer; }
};

// A bounded map from a list's key to what a memo keeps for that list (`Value`, with bytes()), least recently
// used dropped first: the cuts memo (ListRenders) and the encodings memo (ListEncodings, sync_encode.h). A key
// may also be named by aliases (the latest list with a given first or second message, or under a given
// template and variables: latest_keys; with a given anchor message: anchor_key). Thread-safe: every call takes
// its lock; values are immutable once put.
template <class Value>
class ListMemo {
 public:
  // The default bounds (orbit/sync_memo.h's SyncMemoLimits; set_limits changes them).
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;  // Σ Value::bytes()
  static constexpr std::size_t kMaxEntries = 4096;                 // values, and aliases apart

  // Keeps at most `entries` values (and `entries` aliases apart) of at most `bytes` in all from now on, dropping
  // the least recently used values (and set aliases) now until the memo holds within them. Both > 0.
  void set_limits(std::size_t entries, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu_);
    max_entries_ = entries;
    max_bytes_ = bytes;
    while (!lru_.empty() && (bytes_ > max_bytes_ || lru_.size() > max_entries_)) drop_oldest_locked();
    while (aliases_.size() > max_entries_) {
      alias_index_.erase(aliases_.back().first);
      aliases_.pop_back();
    }
  }

  // The value under `key`, now the most recently used; null when the memo has none.
  std::shared_ptr<const Value> get(const MemoKey& key) {
    const std::lock_guard<std::mutex> lock(mu_);
    return get_locked(key);
  }
  // The longest list the memo knows among `keys` (keys[m - 1]: the key of a list's first m messages): m and
  // its value; {0, null} when it knows none.
  // `tokenizer`: MemoKey's.
  std::pair<std::size_t, std::shared_ptr<const Value>> longest(const std::vector<Sha256::Digest>& keys,
                                                               uint64_t tokenizer = 0) {
    return longest(keys, tokenizer, [](const Value&) { return true; });
  }
  // The same among the values `accept` takes (a value it refuses is not marked used).
  template <class Accept>
  std::pair<std::size_t, std::shared_ptr<const Value>> longest(const std::vector<Sha256::Digest>& keys,
                                                               uint64_t tokenizer, const Accept& accept) {
    for (std::size_t m = keys.size(); m > 0; --m) {
      const std::lock_guard<std::mutex> lock(mu_);
      const auto it = index_.find({keys[m - 1], tokenizer});
      if (it == index_.end() || !accept(*it->second->second)) continue;
      lru_.splice(lru_.begin(), lru_, it->second);
      return {m, it->second->second};
    }
    return {0, nullptr};
  }
  // Keeps `value` under `key`; a key the memo holds keeps its value (the same list gives the same value). A
  // value over the byte bound (set_limits) is not kept.
  void put(const MemoKey& key, std::shared_ptr<const Value> value) {
    const std::size_t size = value->bytes();
    const std::lock_guard<std::mutex> lock(mu_);
    if (size > max_bytes_) return;
    const auto known = index_.find(key);
    if (known != index_.end()) {
      lru_.splice(lru_.begin(), lru_, known->second);
      return;
    }
    while (!lru_.empty() && (bytes_ + size > max_bytes_ || lru_.size() >= max_entries_)) drop_oldest_locked();
    lru_.emplace_front(key, std::move(value));
    index_.emplace(key, lru_.begin());
    bytes_ += size;
  }
  // Names the value under `key` by `alias` too, instead of what `alias` named. An alias costs nothing against
  // the byte bound (a value is counted once however it is named) and names nothing once its key's value is
  // dropped; at most as many aliases as values are kept (set_limits), the least recently set forgotten first (one
  // read that names nothing is forgotten then; a read does not make an alias recent: each sync sets its list's
  // aliases anew).
  void alias(const MemoKey& alias, const MemoKey& key) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto known = alias_index_.find(alias);
    if (known != alias_index_.end()) {
      known->second->second = key;
      aliases_.splice(aliases_.begin(), aliases_, known->second);
      return;
    }
    if (aliases_.size() >= max_entries_) {
      alias_index_.erase(aliases_.back().first);
      aliases_.pop_back();
    }
    aliases_.emplace_front(alias, key);
    alias_index_.emplace(alias, aliases_.begin());
  }
  // The key and value `alias` names, neither marked used (a candidate read and not chosen must not outlive the
  // lists used since: get() the one chosen); {.., null} when it names none (an alias whose value was dropped is
  // forgotten then).
  std::pair<MemoKey, std::shared_ptr<const Value>> peek_alias(const MemoKey& alias) {
    const std::lock_guard<std::mutex> lock(mu_);
    ++alias_reads_;
    const auto it = alias_index_.find(alias);
    if (it == alias_index_.end()) return {};
    const MemoKey key = it->second->second;
    const auto value = index_.find(key);
    if (value == index_.end()) {
      aliases_.erase(it->second);
      alias_index_.erase(it);
      return {};
    }
    return {key, value->second->second};
  }
  // How many alias reads (peek_alias) the memo answered (for tests).
  int64_t alias_reads() {
    const std::lock_guard<std::mutex> lock(mu_);
    return alias_reads_;
  }
  // How many aliases are kept (for tests).
  std::size_t aliases() {
    const std::lock_guard<std::mutex> lock(mu_);
    return aliases_.size();
  }
  void clear() {
    const std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    lru_.clear();
    alias_index_.clear();
    aliases_.clear();
    bytes_ = 0;
  }
  // Σ bytes() of the values held.
  std::size_t bytes() {
    const std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  // How many values are held.
  std::size_t entries() {
    const std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
  }

 private:
  struct KeyHash {
    std::size_t operator()(const MemoKey& k) const noexcept {
      std::size_t h = 0;
      for (std::size_t b = 0; b < sizeof h; ++b) h = h << 8 | k.key[b];
      return h ^ (k.tokenizer * 0x9E3779B97F4A7C15ull);
    }
  };
  using Lru = std::list<std::pair<MemoKey, std::shared_ptr<const Value>>>;
  using AliasLru = std::list<std::pair<MemoKey, MemoKey>>;  // alias, key

  std::shared_ptr<const Value> get_locked(const MemoKey& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  void drop_oldest_locked() {
    bytes_ -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }

  std::mutex mu_;
  std::size_t max_entries_ = kMaxEntries;
  std::size_t max_bytes_ = kMaxBytes;
  Lru lru_;  // most recently used first
  std::unordered_map<MemoKey, typename Lru::iterator, KeyHash> index_;
  AliasLru aliases_;  // most recently set first
  std::unordered_map<MemoKey, typename AliasLru::iterator, KeyHash> alias_index_;
  std::size_t bytes_ = 0;
  int64_t alias_reads_ = 0;
};

// How many bytes `a` and `b` start with alike.
inline std::size_t common_prefix(std::string_view a, std::string_view b) {
  const std::size_t both = std::min(a.size(), b.size());
  return static_cast<std::size_t>(std::mismatch(a.begin(), a.begin() + both, b.begin()).first - a.begin());
}

using CutsMemo = ListMemo<ListRenders>;

// The memo Window::sync uses (one per process).
CutsMemo& cuts_memo();

// Where a message starts in the rendered text, and which message it is.
struct TextCut {
  std::size_t text = 0;
  int64_t message = 0;
};

// Whether step 2 reads and keeps the renders of lists (the cuts memo): the memo is on (set_cuts_memo). A template
// that reads the clock is memoized too, each entry read only while clock_holds (the header).
bool cuts_memo_applies();

// The keys of a message list (list_keys), and the aliases it is named by (latest_keys, anchor_key), each hashed
// at most once however often a sync asks (both memos read and keep them): the caches are filled on first use,
// so a ListKeys is used by one thread at a time (a sync's own).
struct ListKeys {
  Sha256::Digest head{};                 // the key of no messages: the template's key and the variables
  std::vector<Sha256::Digest> lists;     // [m - 1]: the key of the list's first m messages
  std::vector<Sha256::Digest> messages;  // [i]: message i's own key (its fields alone)
  std::vector<std::string> roles;        // [i]: message i's role (the spans' check groups reads by it)
  Sha256::Digest template_only{};        // the template's key alone: names lists whatever their variables
  bool empty() const { return lists.empty(); }

  mutable std::vector<Sha256::Digest> latest_cache;  // latest_keys; empty: not yet
  mutable std::vector<Sha256::Digest> anchor_cache;  // [i]: anchor_key(i) where anchor_known[i]
  mutable std::vector<char> anchor_known;
  mutable std::vector<Sha256::Digest> any_variables_cache;  // [i]: any_variables_key(i) where any_variables_known[i]
  mutable std::vector<char> any_variables_known;
};

// Step 2 (orbit/sync.h): where each message of `chat` starts in `text`, their rendering by `tmpl` without the
// generation prompt, in order: the end of the rendering of the messages before it, where that rendering is a
// proper prefix of `text` past the last boundary; elsewhere (the template refuses the shorter list, or renders it
// otherwise) the message joins the unit before it and *merged counts it. `text_reads`: the strftime_now calls of
// text's render (render_prefix of `chat`, whose time every render of this list reads). `keys`: list_keys of the
// messages (empty: none computed). Where cuts_memo_applies and there are keys, reads the prefixes the memo knows (of a
// list this one starts with, and spans of the latest list latest_list chooses) and keeps this list's renders
// under its key and its aliases; the boundaries are the same either way (the header gives the argument).
// `chose`, when given, is set to the lists step 2 read (ListChoice), for step 3 to read the same lists' encodings.
struct ListChoice;
std::vector<TextCut> text_cuts(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat,
                               const ListKeys& keys, const std::string& text, const runtime::ClockReads& text_reads,
                               int64_t* merged, ListChoice* chose = nullptr);

// The lists step 2 read for a list (text_cuts), named by their keys, so that step 3 reads the encodings of the
// same lists (known_encodings) instead of choosing again: the memos keep the same lists (both keep each list a
// sync plans), and which list is read never changes a result (sync_memo.h, sync_encode.h say why).
struct ListChoice {
  bool made = false;      // step 2 read the cuts memo (cuts_memo_applies, and there were keys)
  std::size_t count = 0;  // the longest list the memo knew is this list's first `count` messages; 0: none
  std::optional<Sha256::Digest> latest;  // the latest list whose spans step 2 read (sync_latest.h); none: none
};

// What names a list with keys `keys` as the latest of its kind (ListMemo::alias), in
// the order a list whose key a memo does not know offers them (latest_list, sync_latest.h; its anchors,
// anchor_key, come before the last): its first message (ListKeys::lists[0]); its second message under its
// template and variables, whatever the first (an agent's first request, which stays when its system prompt is
// rewritten at every request); its template and variables alone (ListKeys::head). Empty for no messages.
const std::vector<Sha256::Digest>& latest_keys(const ListKeys& keys);

// What names a list as the latest with message `i` (its own key, ListKeys::messages) among its anchors, under its
// template and variables (head). A list whose first and second messages both changed since the agent's last list
// (a system prompt rewritten and the oldest turns trimmed) still holds that list's later messages: its last (an
// agent appends) and any kept anchor further back.
Sha256::Digest anchor_key(const ListKeys& keys, std::size_t i);

// What names a list as the latest with message `i` under its template whatever its variables (ListKeys::
// template_only; the tools, extra_json). An agent that adds, removes or reorders its tools between two requests
// (a handoff, tools bound per step) sends lists whose keys and aliases above all differ from its last list's, so
// every prefix was rendered and every segment encoded whole again, though most of the rendering (the messages,
// after a tools block or before it) is the last list's text. A list is named so by its last message
// (any_variables_aliases), and a list whose key is unknown looks these up for its last messages after every alias
// under its variables (latest_list, sync_latest.h): a list under its own variables holding as many of its
// messages is read first. Reading a list under other variables is as exact as reading any list (step 2 checks
// what it reads from the spans, step 3 compares texts): only how much is read depends on it.
Sha256::Digest any_variables_key(const ListKeys& keys, std::size_t i);

// The aliases a list is named by whatever its variables: its last message's any_variables_key and its template
// alone (ListKeys::template_only); none for no messages.
std::vector<Sha256::Digest> any_variables_aliases(const ListKeys& keys);

// Every alias a memo names a list by (latest_keys, anchor_key of anchor_messages, any_variables_aliases): both memos
// set the same (ListMemo::alias).
std::vector<Sha256::Digest> list_aliases(const ListKeys& keys);

// How many anchor keys (anchor_key, any_variables_key) were hashed in this process (for tests: each at most once
// per sync).
int64_t anchor_hashes_so_far();

// Whether message key `m` is an anchor wherever it stands: about one message in 16 (a SHA-256's first byte under
// 16), so an agent's kept messages stay anchors from list to list however many are trimmed or added.
inline bool marked_anchor(const Sha256::Digest& m) { return m[0] < 16; }

// The messages a list is named by as the latest with each (anchor_key): its last, and the latest
// kMaxMarkedAnchors marked ones before it past the first (the first message has its own alias, latest_keys);
// none for fewer than two messages. At most 1 + kMaxMarkedAnchors aliases per list, whatever its length.
inline constexpr std::size_t kMaxMarkedAnchors = 8;
std::vector<std::size_t> anchor_messages(const ListKeys& keys);

// The keys of `messages` rendered by `tmpl` with `options`' tools_json and extra_json: each message's own key
// (SHA-256 over its fields, length-prefixed), and each list's (SHA-256 over the template's key and the
// variables, then, per message, over the list's key before it and the message's key); the error names in the
// options are not part of them.
ListKeys list_keys(const runtime::ChatTemplate& tmpl, const runtime::ChatRenderOptions& options,
                   const std::vector<runtime::ChatMessage>& messages);

// A chat template parsed once per source, bos and eos: ChatOptions::chat_template and kPlainChatTemplate
// (a model's own template is parsed once by its engine). Process-wide, at most kMaxParsedTemplates kept,
// least recently used dropped first; thread-safe. Throws what parsing throws (nothing is kept then).
inline constexpr std::size_t kMaxParsedTemplates = 32;
std::shared_ptr<const runtime::ChatTemplate> parsed_template(const std::string& source, const std::string& origin,
                                                             const std::string& bos, const std::string& eos);

}  // namespace orbit::detail
