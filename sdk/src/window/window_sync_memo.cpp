// Step 2 of Window::sync's rendering (orbit/sync.h) and its memos (sync_memo.h): the message boundaries, the
// renders of the lists it saw (CutsMemo), the templates it parsed.
#include "window/sync_memo.h"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "orbit/common/error.h"
#include "window/sync_latest.h"
#include "window/sync_render.h"

namespace orbit::detail {

CutsMemo& cuts_memo() {
  static CutsMemo memo;
  return memo;
}

namespace {

std::atomic<bool> use_cuts_memo{true};   // set_cuts_memo
std::atomic<int64_t> prefix_renders{0};  // prefix_renders_so_far
std::atomic<int64_t> prefix_spans{0};    // prefix_spans_so_far
std::atomic<int64_t> anchor_hashes{0};   // anchor_hashes_so_far

// The spans of a latest list are looked up when at least this many prefixes are not known otherwise (reading
// them costs a render of the longest, the check).
constexpr std::size_t kMinSpanPrefixes = 4;
// How many strftime_now calls (runtime::ClockReads) an entry keeps at most: a list whose renders rest on more (a
// template that formats the messages' own text as the time, say) is not kept, so no entry grows from list to list.
constexpr std::size_t kMaxEntryClockReads = 64;
// How many places in the latest list an anchor tries for its next message (a message may repeat there): the one
// whose run of equal messages goes furthest is kept.
constexpr std::size_t kAnchorPlaces = 8;
// How many bytes of the text past an anchor's prefix are looked up in the latest list, where K's first k messages
// rendered otherwise (Spans::at_in_latest): its places are then compared in full.
constexpr std::size_t kFindBytes = 64;

// The renders of an earlier list whose first `count` messages are this list's (CutsMemo), and the
// length of the common prefix of its rendering and this one's.
struct KnownRenders {
  std::shared_ptr<const ListRenders> renders;  // null: none known
  std::size_t count = 0;
  std::size_t common = 0;
};

// What K's first i messages rendered to (0 < i <= K's messages); K itself is its own prefix.
PrefixRender render_of(const ListRenders& k, std::size_t i) {
  if (i == k.messages.size()) return PrefixRender::prefix(k.text.size());
  return k.prefixes[i - 1];
}

// The spans of the latest list with this list's first message (K; the header's trimmed lists), and the
// anchor step 2 reads them from: this list's first t messages rendered as text[0, p), its messages from t on
// K's from k on for `run` messages, K's first k rendered as K[0, q) (or, where K rendered them otherwise, text[p, ..)
// found again at q: rendered()), and text[p, p + bytes) = K[q, q + bytes).
class Spans {
 public:
  Spans(std::shared_ptr<const ListRenders> latest, const std::vector<Sha256::Digest>& messages, const std::string& text)
      : k_(std::move(latest)), messages_(messages), text_(text) {}

  // Prefix i as the spans give it; nullopt where they do not (and the anchor is spent where i is past its run
  // or its bytes).
  std::optional<PrefixRender> read(std::size_t i) {
    if (!anchored_ || i <= t_) return std::nullopt;
    if (i - t_ > run_) {
      spent_ = true;
      return std::nullopt;
    }
    const PrefixRender was = render_of(*k_, k_at_ + (i - t_));
    if (was.kind == PrefixRender::Kind::kOther) return read_other(was);
    if (was.kind != PrefixRender::Kind::kPrefix) return std::nullopt;  // rendered; the anchor reads on after it
    if (was.length < q_ || was.length - q_ > bytes_) {
      spent_ = true;
      return std::nullopt;
    }
    return PrefixRender::prefix(p_ + was.length - q_);
  }
  // K's prefix rendered as other text R, agreeing with K on `agrees` bytes: by the same assumption, this list's
  // renders as text[0, p) and R[q, |R|), and where R parts from K before the bytes K and this list agree on
  // (q <= agrees < q + bytes: R[agrees] != K[agrees] = text[p + agrees - q]), it parts from text there too.
  std::optional<PrefixRender> read_other(const PrefixRender& was) {
    // Else rendered, and the anchor reads on after it (the prefixes of the text it reads are those it read alone).
    if (was.agrees < q_ || was.agrees - q_ >= bytes_) return std::nullopt;
    return PrefixRender::other(p_ + was.agrees - q_);
  }
  // How many anchors were set so far: the reads of one anchor are those read while it stays the same.
  std::size_t anchors() const { return anchors_; }
  // Prefix i, rendered as `r`: an anchor there, unless the present one reads on past i. The anchor is a place
  // in K where K's message k is this list's message i and K's first k messages rendered as a head of K (the
  // place whose run goes furthest); where there is none, a place of message i whose first k messages K rendered
  // otherwise, as a template that writes something before each prefix's own last user turn renders every prefix
  // of K before its last user turn (Mistral Nemo with tools), anchored where text[p, ..) starts again in K
  // (at_in_latest): the spans' argument then takes K[0, q) for the text K's first k messages are inside K's whole
  // rendering, which no render of K showed; the check is the same (sync_memo.h).
  void rendered(std::size_t i, const PrefixRender& r) {
    if (k_ == nullptr || r.kind != PrefixRender::Kind::kPrefix || i >= messages_.size()) return;
    if (anchored_ && !spent_ && i > t_) return;
    anchored_ = false;
    auto [best_k, best_run] = longest_run(i, true);
    std::size_t q = 0;
    if (best_run > 0) {
      q = render_of(*k_, best_k).length;
    } else {
      std::tie(best_k, best_run) = longest_run(i, false);
      const std::optional<std::size_t> at = best_run > 0 ? at_in_latest(r.length) : std::nullopt;
      if (!at) return;
      q = *at;
    }
    anchored_ = true;
    spent_ = false;
    ++anchors_;
    t_ = i;
    k_at_ = best_k;
    run_ = best_run;
    p_ = r.length;
    q_ = q;
    bytes_ = common_prefix(std::string_view(text_).substr(p_), std::string_view(k_->text).substr(q_));
  }

 private:
  // Of the first kAnchorPlaces places k in K whose message k is this list's message i (those whose first k
  // messages K rendered as a head of it alone, where `heads`), the one whose run of equal messages goes furthest:
  // {k, run}; run 0: none.
  std::pair<std::size_t, std::size_t> longest_run(std::size_t i, bool heads) const {
    std::size_t best_run = 0, best_k = 0, tried = 0;
    const std::vector<Sha256::Digest>& km = k_->messages;
    for (std::size_t k = 1; k < km.size() && tried < kAnchorPlaces; ++k) {
      if (km[k] != messages_[i] || (heads && render_of(*k_, k).kind != PrefixRender::Kind::kPrefix)) continue;
      ++tried;
      std::size_t run = 0;
      while (k + run < km.size() && i + run < messages_.size() && km[k + run] == messages_[i + run]) ++run;
      if (run > best_run) std::tie(best_run, best_k) = std::make_pair(run, k);
    }
    return {best_k, best_run};
  }
  // Where text[p, ..) starts again in K: of the first kAnchorPlaces places of its first kFindBytes bytes in K, the
  // one K agrees with it furthest from; nullopt where it has none (or text ends at p).
  std::optional<std::size_t> at_in_latest(std::size_t p) const {
    const std::string_view rest = std::string_view(text_).substr(p);
    const std::string_view find = rest.substr(0, std::min(rest.size(), kFindBytes));
    const std::string_view k(k_->text);
    std::optional<std::size_t> best;
    std::size_t best_bytes = 0;
    std::size_t at = find.empty() ? std::string_view::npos : k.find(find);
    for (std::size_t tried = 0; at != std::string_view::npos && tried < kAnchorPlaces; ++tried) {
      const std::size_t bytes = common_prefix(rest, k.substr(at));
      if (bytes > best_bytes) std::tie(best, best_bytes) = std::make_pair(at, bytes);
      at = k.find(find, at + 1);
    }
    return best;
  }

  std::shared_ptr<const ListRenders> k_;  // null: no latest list
  const std::vector<Sha256::Digest>& messages_;
  const std::string& text_;
  bool anchored_ = false;
  bool spent_ = false;  // a prefix past the anchor's run or bytes was asked for: the next rendered anchors anew
  std::size_t t_ = 0, k_at_ = 0, run_ = 0, p_ = 0, q_ = 0, bytes_ = 0;
  std::size_t anchors_ = 0;
};

// What rendering messages[0, i) gives against `text`, the list's rendering: read from `known` where it tells
// (sync_memo.h says why that is what rendering gives), else rendered, its strftime_now calls added to `reads`.
PrefixRender prefix_render(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat, std::size_t i,
                           const std::string& text, const KnownRenders& known, runtime::ClockReads& reads) {
  using Kind = PrefixRender::Kind;
  if (known.renders != nullptr && i <= known.count) {
    const ListRenders& k = *known.renders;
    if (i == known.count) {
      if (k.text.size() <= known.common) return PrefixRender::prefix(k.text.size());
      return PrefixRender::other(known.common);
    }
    const PrefixRender& was = k.prefixes[i - 1];
    if (was.kind == Kind::kRefused) return was;
    if (was.kind == Kind::kPrefix && was.length <= known.common) return was;
    if (was.kind == Kind::kPrefix) return PrefixRender::other(known.common);
    // Other text R that agrees with K on its first `agrees` bytes: where K and T agree past them, R and T part
    // there as R and K do (R[agrees] != K[agrees] = T[agrees]), so R is again other text, agreeing as far.
    if (was.agrees < known.common) return was;
  }
  prefix_renders.fetch_add(1, std::memory_order_relaxed);
  std::string prefix;
  try {
    prefix = tmpl.render_prefix(chat, i, false, &reads);
  } catch (const Error&) {  // the template refuses the shorter list (it wants a user turn last, say)
    return PrefixRender::refused();
  }
  const std::size_t agrees = common_prefix(text, prefix);
  return agrees == prefix.size() ? PrefixRender::prefix(agrees) : PrefixRender::other(agrees);
}

// Whether `a` and `b` say the same of a prefix: the same kind, and the same length of a prefix of the text or
// the same agreement of other text (all a PrefixRender holds: step 2 reads nothing else of other text, so a text
// that parts where read but is longer or shorter past there, as Mistral Nemo's prefix carrying a new system prompt
// in its last user turn, is read right).
bool same(const PrefixRender& a, const PrefixRender& b) {
  return a.kind == b.kind && a.length == b.length && a.agrees == b.agrees;
}

// The check of other text read from the spans (the prefixes `at`, shortest first, read into `out`): the longest
// is rendered, and where it renders as read, the shorter ones from the shortest on until one renders as read;
// that one, the longest and those between them are kept as read (the shortest and the longest kept rendered as
// read: the check of the prefixes of the text), the others as rendered. A template may render the first of them
// otherwise in this list for what precedes the anchor (Qwen3 shows an answer's reasoning only after a user
// turn, which a trimmed list may lack before the anchor). Where the longest does not, each is rendered. Returns
// how many were kept as read.
template <class Render>
std::size_t check_other_reads(const std::vector<std::size_t>& at, const Render& render,
                              std::vector<PrefixRender>& out) {
  if (at.empty()) return 0;
  const PrefixRender longest = render(at.back());
  const bool holds = same(longest, out[at.back() - 1]);
  out[at.back() - 1] = longest;
  for (std::size_t j = 0; j + 1 < at.size(); ++j) {
    const PrefixRender r = render(at[j]);
    const bool as_read = same(r, out[at[j] - 1]);
    out[at[j] - 1] = r;
    if (holds && as_read) return at.size() - j;
  }
  return holds ? 1 : 0;
}

// The prefixes of the text read from the spans that the check renders: the longest read, and per anchor the
// shortest read that ends with each role. A template may render a message past the anchor otherwise for what
// precedes the anchor in a way the whole renderings hide (Qwen3 shows an answer's reasoning, or an empty
// <think> block for the last message, only after a query: a user turn that is no <tool_response>; where one list
// has a query before the anchor and the other none, the answers after the anchor render alike in both whole
// renderings once a query follows them, but the prefixes that end before it part); where it does so for a
// prefix that ends with a role, it does so for the shortest such prefix read, whose run holds the fewest messages
// that could undo it (a later query), so rendering that one shows it.
class HeadChecks {
 public:
  explicit HeadChecks(const std::vector<std::string>& roles) : roles_(roles) {}
  // Prefix i, read from the spans as a prefix of the text while `anchor` was the spans' anchor.
  void read(std::size_t i, std::size_t anchor) {
    ++count_;
    longest_ = i;
    const std::string& role = roles_[i - 1];
    for (const Shortest& s : shortest_)
      if (s.anchor == anchor && roles_[s.at - 1] == role) return;
    shortest_.push_back({anchor, i});
  }
  int64_t count() const { return count_; }
  // Whether each prefix the check renders (render: as prefix_render gives it) renders as `out` read it.
  template <class Render>
  bool hold(const Render& render, const std::vector<PrefixRender>& out) const {
    if (count_ == 0) return true;
    if (!same(render(longest_), out[longest_ - 1])) return false;
    return std::all_of(shortest_.begin(), shortest_.end(),
                       [&](const Shortest& s) { return s.at == longest_ || same(render(s.at), out[s.at - 1]); });
  }

 private:
  struct Shortest {
    std::size_t anchor = 0, at = 0;
  };
  const std::vector<std::string>& roles_;
  std::vector<Shortest> shortest_;  // the shortest read per anchor and role, in the order read
  std::size_t longest_ = 0;
  int64_t count_ = 0;
};

// What rendering each prefix of a list gives (prefix_render), each asked at most once per list: the spans' pass,
// its check and the pass without the spans where the check fails read the same answers, so a list whose check
// fails renders no prefix twice (at most every prefix, as without the spans). Every answer is what rendering gives
// (a read of `known` is exact: sync_memo.h), whatever asked for it.
class PrefixAnswers {
 public:
  PrefixAnswers(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat, const std::string& text,
                runtime::ClockReads& reads)
      : tmpl_(tmpl), chat_(chat), text_(text), reads_(reads), seen_(chat.size()) {}
  // Prefix i (0 < i < the list's messages): read from `known` where it tells, else rendered.
  PrefixRender at(std::size_t i, const KnownRenders& known) {
    std::optional<PrefixRender>& r = seen_[i];
    if (!r) r = prefix_render(tmpl_, chat_, i, text_, known, reads_);
    return *r;
  }
  std::size_t messages() const { return seen_.size(); }  // the list's

 private:
  const runtime::ChatTemplate& tmpl_;
  const runtime::PreparedChat& chat_;
  const std::string& text_;
  runtime::ClockReads& reads_;
  std::vector<std::optional<PrefixRender>> seen_;  // [i]: prefix i's answer, once asked
};

// What each prefix of the list renders to (renders.prefixes), from `known`, the spans of `latest` (null: none),
// or rendering (`answers`, which adds the strftime_now calls of the prefixes rendered to renders.clock); false when
// the check of the spans' prefixes of the text (HeadChecks) failed, and nothing is set. Other text read from the
// spans is checked apart (check_other_reads), so a template that renders it otherwise in this list (Mistral Nemo
// carries the system prompt, a message before the anchor, into the last user turn) costs only what it cost when
// other text was always rendered.
bool read_prefixes(PrefixAnswers& answers, const std::string& text, const KnownRenders& known,
                   std::shared_ptr<const ListRenders> latest, const ListKeys& keys, ListRenders& renders) {
  Spans spans(std::move(latest), keys.messages, text);
  std::vector<PrefixRender> out;
  HeadChecks heads(keys.roles);
  std::vector<std::size_t> other_reads;  // the prefixes read as other text, shortest first
  for (std::size_t i = 1; i < answers.messages(); ++i) {
    std::optional<PrefixRender> r;
    if (i > known.count) r = spans.read(i);
    if (r && r->kind == PrefixRender::Kind::kOther) {
      other_reads.push_back(i);
    } else if (r) {
      heads.read(i, spans.anchors());
    } else {
      r = answers.at(i, known);
      if (i >= known.count) spans.rendered(i, *r);
    }
    out.push_back(*r);
  }
  const auto render = [&](std::size_t i) { return answers.at(i, KnownRenders{}); };
  if (!heads.hold(render, out)) return false;
  prefix_spans.fetch_add(heads.count(), std::memory_order_relaxed);
  const std::size_t kept = check_other_reads(other_reads, render, out);
  prefix_spans.fetch_add(static_cast<int64_t>(kept), std::memory_order_relaxed);
  renders.prefixes = std::move(out);
  return true;
}

// Step 2: where each message starts in `text` (the end of the rendering of the messages before it); a
// message whose prefix the template refuses or renders differently joins the unit before it.
std::vector<TextCut> cuts_of(const std::vector<PrefixRender>& prefixes, const std::string& text, int64_t* merged) {
  std::vector<TextCut> cuts;
  for (std::size_t i = 1; i <= prefixes.size(); ++i) {
    const PrefixRender& r = prefixes[i - 1];
    const std::size_t last = cuts.empty() ? 0 : cuts.back().text;
    if (r.kind == PrefixRender::Kind::kPrefix && r.length > last && r.length < text.size()) {
      cuts.push_back({r.length, static_cast<int64_t>(i)});
    } else {
      ++*merged;
    }
  }
  return cuts;
}

}  // namespace

bool cuts_memo_applies() { return use_cuts_memo.load(std::memory_order_relaxed); }

namespace {

// Adds to `to` the calls of `from` it lacks. Every entry read was read where its calls give its texts at this
// sync's time, as this sync's renders' calls do, so the two agree on every format they share (but the overflow
// mark, which holds at no time: compared whole, it is kept).
void add_reads(runtime::ClockReads& to, const runtime::ClockReads& from) {
  for (const auto& read : from) {
    if (std::find(to.begin(), to.end(), read) == to.end()) to.push_back(read);
  }
}

}  // namespace

std::vector<TextCut> text_cuts(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat,
                               const ListKeys& keys, const std::string& text, const runtime::ClockReads& text_reads,
                               int64_t* merged, ListChoice* chose) {
  const bool memo = !keys.empty() && cuts_memo_applies();
  KnownRenders known;
  std::shared_ptr<const ListRenders> latest;
  auto renders = std::make_shared<ListRenders>();
  renders->clock = text_reads;
  if (memo) {
    // Only entries whose renders would render as they did at this sync's time (sync_memo.h).
    const std::time_t now = chat.now();
    const auto holds = [now](const ListRenders& r) { return clock_holds(r, now); };
    std::tie(known.count, known.renders) = cuts_memo().longest(keys.lists, 0, holds);
    if (known.renders != nullptr) known.common = common_prefix(known.renders->text, text);
    LatestList<ListRenders> chosen;
    if (known.count + kMinSpanPrefixes < chat.size()) chosen = latest_list(cuts_memo(), keys, 0, holds);
    latest = chosen.value;
    if (known.renders != nullptr) add_reads(renders->clock, known.renders->clock);
    if (latest != nullptr) add_reads(renders->clock, latest->clock);
    if (chose != nullptr) {
      chose->made = true;
      chose->count = known.count;
      if (latest != nullptr) chose->latest = chosen.key.key;
    }
  }
  PrefixAnswers answers(tmpl, chat, text, renders->clock);
  if (!read_prefixes(answers, text, known, latest, keys, *renders)) {
    read_prefixes(answers, text, known, nullptr, keys, *renders);
  }
  std::vector<TextCut> cuts = cuts_of(renders->prefixes, text, merged);
  if (memo && renders->clock.size() <= kMaxEntryClockReads) {
    renders->text = text;
    renders->messages = keys.messages;
    cuts_memo().put(keys.lists.back(), std::move(renders));
    for (const Sha256::Digest& key : list_aliases(keys)) cuts_memo().alias(key, keys.lists.back());
  }
  return cuts;
}

void set_cuts_memo(bool on) { use_cuts_memo.store(on, std::memory_order_relaxed); }
void clear_cuts_memo() { cuts_memo().clear(); }
int64_t prefix_renders_so_far() { return prefix_renders.load(std::memory_order_relaxed); }
int64_t prefix_spans_so_far() { return prefix_spans.load(std::memory_order_relaxed); }
int64_t anchor_hashes_so_far() { return anchor_hashes.load(std::memory_order_relaxed); }

namespace {

void add_text(Sha256& h, const std::string& text) { h.update_u64(text.size()).update(text); }

void add_optional(Sha256& h, const std::optional<std::string>& text) {
  h.update_u64(text ? 1 : 0);
  if (text) add_text(h, *text);
}

Sha256::Digest message_key(const runtime::ChatMessage& m) {
  Sha256 h;
  add_text(h, m.role);
  add_text(h, m.content);
  add_optional(h, m.name);
  add_optional(h, m.tool_call_id);
  add_optional(h, m.reasoning_content);                 // templates see it (unset and "" apart)
  h.update_u64(static_cast<uint64_t>(m.content_form));  // None, undefined and "" apart
  h.update_u64(m.tool_calls.size());
  for (const runtime::ChatToolCall& c : m.tool_calls) {
    add_text(h, c.id);
    add_text(h, c.name);
    add_text(h, c.arguments);
  }
  return h.digest();
}

}  // namespace

ListKeys list_keys(const runtime::ChatTemplate& tmpl, const runtime::ChatRenderOptions& options,
                   const std::vector<runtime::ChatMessage>& messages) {
  Sha256 head;
  head.update("orbit sync list v2");
  add_text(head, tmpl.key());
  add_text(head, options.tools_json);
  add_text(head, options.extra_json);
  ListKeys keys;
  keys.head = head.digest();
  Sha256 template_only;
  template_only.update("orbit sync template any variables v1");
  add_text(template_only, tmpl.key());
  keys.template_only = template_only.digest();
  Sha256::Digest key = keys.head;
  keys.lists.reserve(messages.size());
  keys.messages.reserve(messages.size());
  keys.roles.reserve(messages.size());
  for (const runtime::ChatMessage& m : messages) {
    keys.messages.push_back(message_key(m));
    keys.roles.push_back(m.role);
    Sha256 h;
    h.update(key.data(), key.size());
    h.update(keys.messages.back().data(), keys.messages.back().size());
    key = h.digest();
    keys.lists.push_back(key);
  }
  return keys;
}

const std::vector<Sha256::Digest>& latest_keys(const ListKeys& keys) {
  if (keys.empty() || !keys.latest_cache.empty()) return keys.latest_cache;
  keys.latest_cache.push_back(keys.lists.front());
  if (keys.messages.size() > 1) {
    Sha256 h;
    h.update("orbit sync second message v1");
    h.update(keys.head.data(), keys.head.size());
    h.update(keys.messages[1].data(), keys.messages[1].size());
    keys.latest_cache.push_back(h.digest());
  }
  keys.latest_cache.push_back(keys.head);
  return keys.latest_cache;
}

Sha256::Digest anchor_key(const ListKeys& keys, std::size_t i) {
  if (keys.anchor_known.size() != keys.messages.size()) {
    keys.anchor_known.assign(keys.messages.size(), 0);
    keys.anchor_cache.resize(keys.messages.size());
  }
  if (keys.anchor_known[i] == 0) {
    anchor_hashes.fetch_add(1, std::memory_order_relaxed);
    Sha256 h;
    h.update("orbit sync anchor message v1");
    h.update(keys.head.data(), keys.head.size());
    h.update(keys.messages[i].data(), keys.messages[i].size());
    keys.anchor_cache[i] = h.digest();
    keys.anchor_known[i] = 1;
  }
  return keys.anchor_cache[i];
}

Sha256::Digest any_variables_key(const ListKeys& keys, std::size_t i) {
  if (keys.any_variables_known.size() != keys.messages.size()) {
    keys.any_variables_known.assign(keys.messages.size(), 0);
    keys.any_variables_cache.resize(keys.messages.size());
  }
  if (keys.any_variables_known[i] == 0) {
    anchor_hashes.fetch_add(1, std::memory_order_relaxed);
    Sha256 h;
    h.update("orbit sync anchor any variables v1");
    h.update(keys.template_only.data(), keys.template_only.size());
    h.update(keys.messages[i].data(), keys.messages[i].size());
    keys.any_variables_cache[i] = h.digest();
    keys.any_variables_known[i] = 1;
  }
  return keys.any_variables_cache[i];
}

std::vector<Sha256::Digest> any_variables_aliases(const ListKeys& keys) {
  if (keys.messages.empty()) return {};
  return {any_variables_key(keys, keys.messages.size() - 1), keys.template_only};
}

std::vector<Sha256::Digest> list_aliases(const ListKeys& keys) {
  std::vector<Sha256::Digest> out = latest_keys(keys);
  for (const std::size_t i : anchor_messages(keys)) out.push_back(anchor_key(keys, i));
  for (const Sha256::Digest& a : any_variables_aliases(keys)) out.push_back(a);
  return out;
}

std::vector<std::size_t> anchor_messages(const ListKeys& keys) {
  const std::size_t n = keys.messages.size();
  if (n < 2) return {};
  std::vector<std::size_t> out{n - 1};
  for (std::size_t i = n - 1; i > 1 && out.size() <= kMaxMarkedAnchors; --i) {
    if (marked_anchor(keys.messages[i - 1])) out.push_back(i - 1);
  }
  return out;
}

std::shared_ptr<const runtime::ChatTemplate> parsed_template(const std::string& source, const std::string& origin,
                                                             const std::string& bos, const std::string& eos) {
  struct Parsed {
    std::string source, origin, bos, eos;
    std::shared_ptr<const runtime::ChatTemplate> tmpl;
  };
  static std::mutex mu;
  static std::list<Parsed> parsed;  // most recently used first
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = std::find_if(parsed.begin(), parsed.end(), [&](const Parsed& p) {
      return p.source == source && p.origin == origin && p.bos == bos && p.eos == eos;
    });
    if (it != parsed.end()) {
      parsed.splice(parsed.begin(), parsed, it);
      return it->tmpl;
    }
  }
  auto tmpl = std::make_shared<const runtime::ChatTemplate>(source, origin, bos, eos);  // outside the lock
  const std::lock_guard<std::mutex> lock(mu);
  const bool raced = std::any_of(parsed.begin(), parsed.end(), [&](const Parsed& p) {
    return p.source == source && p.origin == origin && p.bos == bos && p.eos == eos;
  });
  if (raced) return tmpl;  // another thread parsed it meanwhile and kept its copy
  parsed.push_front({source, origin, bos, eos, tmpl});
  if (parsed.size() > kMaxParsedTemplates) parsed.pop_back();
  return tmpl;
}

}  // namespace orbit::detail
