// Step 2 of Window::sync's rendering (orbit/sync.h) and its memos (sync_memo.h): the message boundaries, the
// renders of the lists it saw (CutsMemo), the templates it parsed.
#include "window/sync_memo.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <tuple>

#include "orbit/common/error.h"
#include "window/sync_render.h"

namespace orbit::detail {

CutsMemo& cuts_memo() {
  static CutsMemo memo;
  return memo;
}

namespace {

bool starts_with(const std::string& all, const std::string& prefix) {
  return prefix.size() <= all.size() && all.compare(0, prefix.size(), prefix) == 0;
}

std::atomic<bool> use_cuts_memo{true};   // set_cuts_memo
std::atomic<int64_t> prefix_renders{0};  // prefix_renders_so_far

// The renders of an earlier list whose first `count` messages are this list's (CutsMemo), and the
// length of the common prefix of its rendering and this one's.
struct KnownRenders {
  std::shared_ptr<const ListRenders> renders;  // null: none known
  std::size_t count = 0;
  std::size_t common = 0;
};

// What rendering messages[0, i) gives against `text`, the list's rendering: read from `known` where it tells
// (sync_memo.h says why that is what rendering gives), else rendered.
PrefixRender prefix_render(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat, std::size_t i,
                           const std::string& text, const KnownRenders& known) {
  using Kind = PrefixRender::Kind;
  if (known.renders != nullptr && i <= known.count) {
    const ListRenders& k = *known.renders;
    if (i == known.count) return {k.text.size() <= known.common ? Kind::kPrefix : Kind::kOther, k.text.size()};
    const PrefixRender& was = k.prefixes[i - 1];
    if (was.kind == Kind::kRefused) return was;
    if (was.kind == Kind::kPrefix) return {was.length <= known.common ? Kind::kPrefix : Kind::kOther, was.length};
  }
  prefix_renders.fetch_add(1, std::memory_order_relaxed);
  std::string prefix;
  try {
    prefix = tmpl.render_prefix(chat, i, false);
  } catch (const Error&) {  // the template refuses the shorter list (it wants a user turn last, say)
    return {Kind::kRefused, 0};
  }
  return {starts_with(text, prefix) ? Kind::kPrefix : Kind::kOther, prefix.size()};
}

// Step 2: where each message starts in `text` (the end of the rendering of the messages before it); a
// message whose prefix the template refuses or renders differently joins the unit before it. What each
// prefix rendered to is recorded in `renders` (for the memo).
std::vector<TextCut> cuts_of(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat,
                             const std::string& text, const KnownRenders& known, ListRenders& renders,
                             int64_t* merged) {
  std::vector<TextCut> cuts;
  for (std::size_t i = 1; i < chat.size(); ++i) {
    const PrefixRender r = prefix_render(tmpl, chat, i, text, known);
    renders.prefixes.push_back(r);
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

bool cuts_memo_applies(const runtime::ChatTemplate& tmpl) {
  return tmpl.deterministic() && use_cuts_memo.load(std::memory_order_relaxed);
}

std::vector<TextCut> text_cuts(const runtime::ChatTemplate& tmpl, const runtime::PreparedChat& chat,
                               const std::vector<Sha256::Digest>& keys, const std::string& text, int64_t* merged) {
  const bool memo = !keys.empty() && cuts_memo_applies(tmpl);
  KnownRenders known;
  if (memo) {
    std::tie(known.count, known.renders) = cuts_memo().longest(keys);
    if (known.renders != nullptr) {
      const std::string& k = known.renders->text;
      const std::size_t both = std::min(k.size(), text.size());
      known.common =
          static_cast<std::size_t>(std::mismatch(k.begin(), k.begin() + both, text.begin()).first - k.begin());
    }
  }
  auto renders = std::make_shared<ListRenders>();
  std::vector<TextCut> cuts = cuts_of(tmpl, chat, text, known, *renders, merged);
  if (memo) {
    renders->text = text;
    cuts_memo().put(keys.back(), std::move(renders));
  }
  return cuts;
}

void set_cuts_memo(bool on) { use_cuts_memo.store(on, std::memory_order_relaxed); }
void clear_cuts_memo() { cuts_memo().clear(); }
int64_t prefix_renders_so_far() { return prefix_renders.load(std::memory_order_relaxed); }

namespace {

void add_text(Sha256& h, const std::string& text) { h.update_u64(text.size()).update(text); }

void add_optional(Sha256& h, const std::optional<std::string>& text) {
  h.update_u64(text ? 1 : 0);
  if (text) add_text(h, *text);
}

}  // namespace

std::vector<Sha256::Digest> list_keys(const runtime::ChatTemplate& tmpl, const runtime::ChatRenderOptions& options,
                                      const std::vector<runtime::ChatMessage>& messages) {
  Sha256 head;
  head.update("orbit sync list v1");
  add_text(head, tmpl.key());
  add_text(head, options.tools_json);
  add_text(head, options.extra_json);
  Sha256::Digest key = head.digest();
  std::vector<Sha256::Digest> keys;
  keys.reserve(messages.size());
  for (const runtime::ChatMessage& m : messages) {
    Sha256 h;
    h.update(key.data(), key.size());
    add_text(h, m.role);
    add_text(h, m.content);
    add_optional(h, m.name);
    add_optional(h, m.tool_call_id);
    h.update_u64(m.tool_calls.size());
    for (const runtime::ChatToolCall& c : m.tool_calls) {
      add_text(h, c.id);
      add_text(h, c.name);
      add_text(h, c.arguments);
    }
    key = h.digest();
    keys.push_back(key);
  }
  return keys;
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
