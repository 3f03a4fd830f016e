// Window::sync / plan_sync and Engine::render_chat / tokenize_chat (orbit/sync.h): a message list rendered
// with a chat template, cut into one unit per message where the tokens allow, and diffed against the
// window. A sync that adds units is one plan (Operation::kSync: the window after the sync as one Layout);
// one that only removes or moves is its evictions and a reorder, edits under the window's policy.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "engine/engine_core.h"
#include "orbit/capacity.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "text/text_bound.h"
#include "window/sync_render.h"
#include "window/window_ops.h"
#include "window/window_state.h"

namespace orbit {

const char* sync_action_name(SyncAction action) noexcept {
  switch (action) {
    case SyncAction::kKeep: return "keep";
    case SyncAction::kAdmit: return "admit";
    case SyncAction::kRecall: return "recall";
    case SyncAction::kTurn: return "turn";
  }
  return "?";
}

int64_t SyncPlan::count(SyncAction action) const {
  return std::count_if(units.begin(), units.end(), [&](const SyncUnit& u) { return u.action == action; });
}

bool SyncPlan::changes() const {
  return !evict.empty() || reorder || count(SyncAction::kKeep) != int64_t(units.size());
}

std::string SyncPlan::describe() const {
  std::ostringstream os;
  os << "sync (" << chat_template << " template): " << units.size() << " units, " << tokens.size() << " tokens; keep "
     << count(SyncAction::kKeep) << ", admit " << count(SyncAction::kAdmit) << ", recall " << count(SyncAction::kRecall)
     << ", turn " << count(SyncAction::kTurn) << ", evict " << evict.size() << (reorder ? ", reorder" : "");
  if (merged_boundaries > 0) os << "; " << merged_boundaries << " message boundaries merged";
  os << "\n";
  for (InstanceId id : evict) os << "  evict   instance " << id << "\n";
  for (const SyncUnit& u : units) {
    os << "  " << sync_action_name(u.action) << std::string(8 - std::string(sync_action_name(u.action)).size(), ' ')
       << "messages [" << u.first_message << ", " << u.end_message << ")  tokens [" << u.position << ", "
       << u.position + static_cast<int64_t>(u.tokens.size()) << ")  " << (u.is_turn ? "turn" : "chunk") << " "
       << u.key.substr(0, 8);
    if (u.chunk.valid()) os << "  part " << u.part << (u.chunk.label.empty() ? "" : " '" + u.chunk.label + "'");
    if (u.instance != 0) os << "  instance " << u.instance;
    if (u.moved) os << "  (moved)";
    os << "\n";
  }
  return os.str();
}

using detail::part_field;
using detail::PartRef;
using detail::render_units;
using detail::Rendering;
using detail::Span;
using detail::unit_label;

// ---- Window ----

namespace {

// Step 4: the plan's units, from the rendering's spans (each keyed as a token chunk of its tokens; a chunk
// part by its chunk's key).
SyncPlan units_of(const detail::EngineCore& core, Rendering r) {
  SyncPlan plan;
  plan.chat_template = r.which;
  plan.tokens = std::move(r.tokens);
  plan.generation_prompt = std::move(r.generation_prompt);
  plan.generation_prompt_exact = r.generation_prompt_exact;
  plan.merged_boundaries = r.merged;
  for (const Span& s : r.spans) {
    SyncUnit u;
    u.first_message = s.first_message;
    u.end_message = s.end_message;
    u.position = static_cast<int64_t>(s.begin);
    u.tokens.assign(plan.tokens.begin() + static_cast<std::ptrdiff_t>(s.begin),
                    plan.tokens.begin() + static_cast<std::ptrdiff_t>(s.end));
    if (s.part >= 0) {
      const PartRef& p = r.parts[static_cast<std::size_t>(s.part)];
      u.chunk = core.registry()
                    .record(p.chunk)
                    ->ref;  // the engine's record: its label and extent, whatever the caller's copy
      u.part = p.index;
      u.key = u.chunk.key;
    } else {
      u.key = core.registry().turn_key(u.tokens);  // = the content key of a token chunk of them
    }
    plan.units.push_back(std::move(u));
  }
  return plan;
}

// Step 5: each unit's instance (index into `current`, -1: none), by key: of the unused instances with its
// key, the first after the instance matched last (in window order), else the first unless an earlier unit
// matched that key already (the unit is then a new copy). So when a key is in the window several times
// (the same message rendered twice), removing or appending one of them moves none of the rest.
std::vector<int64_t> match_units(const std::vector<InstanceInfo>& current, const SyncPlan& plan,
                                 std::vector<bool>& used) {
  std::unordered_map<std::string, std::vector<std::size_t>> by_key;  // window indices, ascending
  for (std::size_t i = 0; i < current.size(); ++i) by_key[current[i].chunk.key].push_back(i);
  std::vector<int64_t> match(plan.units.size(), -1);
  used.assign(current.size(), false);
  int64_t last = -1;
  std::unordered_set<std::string> matched;  // keys an earlier unit matched
  for (std::size_t u = 0; u < plan.units.size(); ++u) {
    auto it = by_key.find(plan.units[u].key);
    if (it == by_key.end() || it->second.empty()) continue;
    std::vector<std::size_t>& free = it->second;
    auto pick = std::upper_bound(free.begin(), free.end(), last,
                                 [](int64_t v, std::size_t i) { return v < static_cast<int64_t>(i); });
    if (pick == free.end()) {
      if (!matched.insert(it->first).second) continue;
      pick = free.begin();
    }
    matched.insert(it->first);
    match[u] = static_cast<int64_t>(*pick);
    free.erase(pick);
    used[static_cast<std::size_t>(match[u])] = true;
    last = match[u];
  }
  return match;
}

// Which matched units stay in place when the kept instances are put in the list's order: those on the
// longest run whose window indices increase (patience sorting); the other matched units move.
std::vector<bool> stays_in_place(const std::vector<int64_t>& match) {
  std::vector<std::size_t> kept;  // unit indices with a match
  for (std::size_t u = 0; u < match.size(); ++u) {
    if (match[u] >= 0) kept.push_back(u);
  }
  std::vector<std::size_t> tails;  // positions in `kept`
  std::vector<int64_t> parent(kept.size(), -1);
  for (std::size_t k = 0; k < kept.size(); ++k) {
    auto pos = std::lower_bound(tails.begin(), tails.end(), match[kept[k]],
                                [&](std::size_t t, int64_t v) { return match[kept[t]] < v; });
    if (pos != tails.begin()) parent[k] = static_cast<int64_t>(*(pos - 1));
    if (pos == tails.end()) {
      tails.push_back(k);
    } else {
      *pos = k;
    }
  }
  std::vector<bool> stays(match.size(), false);
  for (int64_t k = tails.empty() ? -1 : static_cast<int64_t>(tails.back()); k >= 0;
       k = parent[static_cast<std::size_t>(k)]) {
    stays[kept[static_cast<std::size_t>(k)]] = true;
  }
  return stays;
}

// A live turn is never moved: a kept turn keeps its place among the kept instances (those before it in the
// list are those before it in the window). A turn the reorder would move (a message identical to one
// trimmed from the front and appended at the end matches the old turn), or that a moved chunk crosses, is
// unmatched instead: its instance is evicted and its unit added anew, prefilled as a moved turn would be.
// Every turn left is on every longest increasing run, so none is marked moved.
void keep_turns_in_place(const std::vector<InstanceInfo>& current, std::vector<int64_t>& match,
                         std::vector<bool>& used) {
  const auto unmatch = [&](std::size_t u) {
    used[static_cast<std::size_t>(match[u])] = false;
    match[u] = -1;
  };
  const auto is_turn = [&](std::size_t u) { return current[static_cast<std::size_t>(match[u])].is_turn; };
  const std::vector<bool> stays = stays_in_place(match);
  for (std::size_t u = 0; u < match.size(); ++u) {
    if (match[u] >= 0 && !stays[u] && is_turn(u)) unmatch(u);
  }
  // The turns a moved chunk crosses: a larger window index before them in the list, or a smaller one after.
  std::vector<std::size_t> kept;
  for (std::size_t u = 0; u < match.size(); ++u) {
    if (match[u] >= 0) kept.push_back(u);
  }
  const std::size_t n = kept.size();
  std::vector<int64_t> before_max(n + 1, -1);  // before_max[k]: the largest window index among kept[0, k)
  for (std::size_t k = 0; k < n; ++k) before_max[k + 1] = std::max(before_max[k], match[kept[k]]);
  std::vector<int64_t> after_min(n + 1, static_cast<int64_t>(current.size()));  // among kept[k, n)
  for (std::size_t k = n; k-- > 0;) after_min[k] = std::min(after_min[k + 1], match[kept[k]]);
  for (std::size_t k = 0; k < n; ++k) {
    const int64_t w = match[kept[k]];
    if (is_turn(kept[k]) && (before_max[k] > w || after_min[k + 1] < w)) unmatch(kept[k]);
  }
}

// The instances no unit matched are evicted, in window order.
void plan_evictions(const std::vector<InstanceInfo>& current, const std::vector<bool>& used, SyncPlan& plan) {
  for (std::size_t i = 0; i < current.size(); ++i) {
    if (!used[i]) plan.evict.push_back(current[i].id);
  }
}

// The kept instances in the list's order; those off its longest increasing run (in window order) moved.
void mark_moved(const std::vector<int64_t>& match, SyncPlan& plan) {
  int64_t last = -1;
  for (int64_t m : match) {
    if (m < 0) continue;
    if (m < last) plan.reorder = true;
    last = m;
  }
  if (!plan.reorder) return;
  const std::vector<bool> stays = stays_in_place(match);
  for (std::size_t u = 0; u < plan.units.size(); ++u) plan.units[u].moved = match[u] >= 0 && !stays[u];
}

// What the window holds once the evictions are done (chunk keys), and what it can recall.
struct KnownKeys {
  std::unordered_set<std::string> in_window;
  std::unordered_set<std::string> evicted;
};

KnownKeys known_keys(const std::vector<InstanceInfo>& current, const std::vector<bool>& used,
                     const std::vector<ChunkRef>& evicted) {
  KnownKeys k;
  for (std::size_t i = 0; i < current.size(); ++i) {
    if (used[i] && !current[i].is_turn) k.in_window.insert(current[i].chunk.key);
  }
  for (const ChunkRef& c : evicted) k.evicted.insert(c.key);
  for (std::size_t i = 0; i < current.size(); ++i) {
    if (!used[i] && !current[i].is_turn) k.evicted.insert(current[i].chunk.key);
  }
  return k;
}

// New units: recall, admit or turn; matched ones are kept.
void choose_actions(const detail::EngineCore& core, const std::vector<InstanceInfo>& current,
                    const std::vector<int64_t>& match, KnownKeys keys, const SyncOptions& options, SyncPlan& plan,
                    const char* caller) {
  bool tail = true;  // no kept unit after this one
  std::vector<bool> at_tail(plan.units.size(), true);
  for (std::size_t u = plan.units.size(); u-- > 0;) {
    at_tail[u] = tail;
    if (match[u] >= 0) tail = false;
  }
  for (std::size_t u = 0; u < plan.units.size(); ++u) {
    SyncUnit& unit = plan.units[u];
    if (match[u] >= 0) {
      const InstanceInfo& info = current[static_cast<std::size_t>(match[u])];
      unit.action = SyncAction::kKeep;
      unit.instance = info.id;
      unit.is_turn = info.is_turn;
      continue;
    }
    const bool short_unit = static_cast<int64_t>(unit.tokens.size()) < options.chunk_min_tokens;
    if (keys.in_window.count(unit.key) > 0) {
      ORBIT_CHECK(
          !unit.chunk.valid() || unit.chunk.kind != ChunkKind::kEmbeddings,
          caller << ": "
                 << part_field(static_cast<std::size_t>(unit.first_message), static_cast<std::size_t>(unit.part))
                 << ".chunk " << unit.chunk.key.substr(0, 16) << " ('" << unit.chunk.label
                 << "') is placed twice in the rendering; a window holds a chunk once, and an embedding "
                    "chunk's rows cannot be a turn");
      unit.action = SyncAction::kTurn;  // the same chunk twice: a turn (at the tail, then reordered)
      unit.is_turn = true;
      if (!at_tail[u]) plan.reorder = true;
    } else if (keys.evicted.count(unit.key) > 0) {
      unit.action = SyncAction::kRecall;
    } else if (short_unit && at_tail[u] && !core.registry().knows(unit.key)) {
      unit.action = SyncAction::kTurn;
      unit.is_turn = true;
    } else {
      unit.action = SyncAction::kAdmit;
    }
    if (!unit.is_turn) {
      keys.in_window.insert(unit.key);
      keys.evicted.erase(unit.key);
    }
  }
}

// How many of `evict` (in window order), from its first, are the window's oldest chunk instances.
std::size_t oldest_chunks(const std::vector<InstanceInfo>& current, const std::vector<InstanceId>& evict) {
  std::size_t k = 0;
  for (const InstanceInfo& i : current) {
    if (i.is_turn) continue;
    if (k == evict.size() || i.id != evict[k]) break;
    ++k;
  }
  return k;
}

// The record a new chunk unit is served from: its chunk part's, or its text registered as a token chunk.
detail::ChunkPtr unit_record(detail::EngineCore& core, const std::vector<ChatMessage>& messages, const SyncUnit& unit) {
  if (unit.chunk.valid()) return core.registry().record(unit.chunk);
  ChunkOptions co;
  co.label = unit_label(messages, unit);
  return core.registry().record(core.registry().add_tokens(unit.tokens, co));
}

// A recalled chunk's dependents placed after it are re-formed with it in their context (cascade_on_recall),
// as Window::plan_recall does.
void cascade_recalls(const detail::WindowState& s, const std::vector<InstanceId>& recalled, detail::Layout& l) {
  if (!s.options.policy.cascade_on_recall) return;
  std::set<InstanceId> listed;
  for (InstanceId r : recalled) {
    if (!s.graph.contains(r)) continue;
    std::size_t at = 0;
    while (l.slots[at].id != r) ++at;
    std::set<InstanceId> after;
    for (std::size_t i = at + 1; i < l.slots.size(); ++i) after.insert(l.slots[i].id);
    for (InstanceId id : s.graph.dependents(r)) {
      if (after.count(id) == 0 || !listed.insert(id).second) continue;
      l.cascade.push_back(id);
      for (detail::Slot& sl : l.slots) {
        if (sl.id != id) continue;
        sl.force = true;
        sl.reason = "recall cascade: formed with a recalled chunk in its context";
      }
    }
  }
}

// The window after a sync that adds units, as one Layout: the units in list order (kept instances at their
// index, recalled chunks as their evicted instance, admitted chunks and turns as new instances), and the
// evictions. Fills each unit's instance id.
detail::Layout sync_layout(detail::WindowState& s, const std::vector<ChatMessage>& messages, SyncPlan& plan) {
  detail::Layout l;
  l.op = Operation::kSync;
  l.reorder_relookup = plan.reorder;
  l.change_reason = "messages synced";
  std::vector<InstanceId> recalled;
  for (SyncUnit& unit : plan.units) {
    detail::Slot& sl = l.slots.emplace_back();
    if (unit.action == SyncAction::kKeep) {
      sl.existing = s.index_of(unit.instance);
      sl.id = unit.instance;
      continue;
    }
    if (unit.action == SyncAction::kTurn) {
      sl.is_turn = true;
      sl.turn_tokens = unit.tokens;
      sl.id = unit.instance = s.core->next_instance_id();
      continue;
    }
    sl.chunk = unit_record(*s.core, messages, unit);
    // A chunk evicted by an earlier operation comes back as its instance; one this sync evicts (its instance
    // matched no unit: the rendering holds it elsewhere as another unit) is admitted anew.
    const auto ev = unit.action == SyncAction::kRecall ? s.evicted.find(sl.chunk->ref.key) : s.evicted.end();
    if (ev != s.evicted.end() && ev->second.live() == sl.chunk) {  // not one the engine let go of since
      sl.id = unit.instance = ev->second.id;
      sl.reason = "recall: fresh patch on its current earlier context";
      recalled.push_back(sl.id);
    } else {
      sl.id = unit.instance = s.core->next_instance_id();
    }
  }
  for (InstanceId id : plan.evict) l.evict.push_back(s.index_of(id));
  std::sort(l.evict.begin(), l.evict.end());
  cascade_recalls(s, recalled, l);
  return l;
}

// Window::plan_sync of `w` (whose state is `s`), for `caller`, the function the user called (sync,
// plan_sync, prepare_sync), which its errors name.
// A digest of every field of every message (FNV-1a over each, its length first): what Window::sync(messages,
// planned) compares to tell the list a plan was made from.
uint64_t list_digest(const std::vector<ChatMessage>& messages) {
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](std::string_view text) {
    for (std::size_t n = text.size(), k = 0; k < 8; ++k, n >>= 8) h = (h ^ (n & 0xFF)) * 1099511628211ull;
    for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  };
  const auto mix_optional = [&](const std::optional<std::string>& text) {
    mix(text ? "1" : "0");
    if (text) mix(*text);
  };
  mix(std::to_string(messages.size()));
  for (const ChatMessage& m : messages) {
    mix(m.role);
    mix(m.content);
    mix_optional(m.name);
    mix_optional(m.tool_call_id);
    mix_optional(m.reasoning_content);
    mix(content_form_name(m.content_form));
    mix(std::to_string(m.tool_calls.size()));
    for (const ChatToolCall& c : m.tool_calls) {
      mix(c.id);
      mix(c.name);
      mix(c.arguments);
    }
    mix(std::to_string(m.parts.size()));
    for (const ContentPart& p : m.parts) mix_optional(p.chunk ? std::optional<std::string>(p.chunk->key) : p.text);
  }
  return h;
}

SyncPlan plan_sync_for(const Window& w, const detail::WindowState& s, const std::vector<ChatMessage>& messages,
                       const SyncOptions& options, const char* caller) {
  ORBIT_CHECK(options.chunk_min_tokens >= 0,
              caller << ": SyncOptions::chunk_min_tokens = " << options.chunk_min_tokens << " must be >= 0");
  detail::EngineCore& core = *s.core;
  SyncOptions at = options;  // the one time every rendering of the plan reads, kept in plan.options
  if (!at.chat.now) at.chat.now = runtime::template_clock();
  SyncPlan plan = units_of(core, render_units(core, messages, at.chat, caller));
  const std::vector<InstanceInfo> current = w.instances();
  std::vector<bool> used;
  std::vector<int64_t> match = match_units(current, plan, used);
  keep_turns_in_place(current, match, used);
  plan_evictions(current, used, plan);
  mark_moved(match, plan);
  choose_actions(core, current, match, known_keys(current, used, w.evicted()), at, plan, caller);
  plan.window_id = s.id;
  plan.window_version = s.version;
  plan.messages_digest = list_digest(messages);
  plan.options = std::move(at);
  return plan;
}

}  // namespace

SyncPlan Window::plan_sync(const std::vector<ChatMessage>& messages, const SyncOptions& options) const {
  const detail::OpHold hold(*state_->core);
  return plan_sync_for(*this, *state_, messages, options, "plan_sync");
}

namespace {

// Why sync's operation `what` was refused, `applied` operations after its first: the step, what was applied,
// then the apply's reason once (it starts "<what> refused: " itself, which is not said twice).
std::string sync_refusal(const std::string& what, std::size_t applied, std::string reason) {
  const std::string lead = what + " refused: ";
  if (reason.compare(0, lead.size(), lead) == 0) reason.erase(0, lead.size());
  std::ostringstream out;
  out << what << " refused ";
  if (applied == 0)
    out << "(nothing was applied)";
  else
    out << "after " << applied << " operations were applied (a later sync resumes)";
  out << ": " << reason;
  return out.str();
}

// Window::sync's operations on `w` (whose state is `s`) for `planned` (w.plan_sync(messages)), each plan
// executed by `apply` (the window's own apply, or a background one for prepare_sync's throwaway fork). A
// refusal throws (see Window::sync).
SyncReport sync_with(Window& w, detail::WindowState& s, const std::vector<ChatMessage>& messages, SyncPlan planned,
                     const std::function<Result<ApplyReport>(const Plan&)>& apply) {
  SyncReport report;
  report.plan = std::move(planned);
  SyncPlan& plan = report.plan;
  report.generation_prompt = plan.generation_prompt;

  const auto run = [&](const Plan& p, const char* what) -> const ApplyReport& {
    Result<ApplyReport> r = apply(p);
    if (!r.is_ok()) {
      const std::string why = "sync: " + sync_refusal(what, report.plans.size(), r.status().reason());
      if (r.status().code() == StatusCode::kOutOfCapacity) {
        // The window's own max_bytes is checked before the pool (limit_refusal, then the pool's pages).
        const bool own = s.options.max_bytes > 0 && p.device_bytes_after > s.options.max_bytes;
        if (own) throw CapacityRefused(why, CapacityRefused::Bound::kWindowBytes, __FILE__, __LINE__);
        throw CapacityRefused(why, CapacityRefused::Bound::kPool, __FILE__, __LINE__, p.pool_pages_short);
      }
      throw Error(why, __FILE__, __LINE__);
    }
    report.plans.push_back(p);
    report.reports.push_back(std::move(r).value());
    report.forward_tokens += report.reports.back().forward_tokens;
    return report.reports.back();
  };

  // Only removals and moves: edits, whose repairs wait for the next read under a deferring policy. Evictions
  // that are the window's oldest chunk instances leave in one slide; the others one by one.
  const bool adds = plan.count(SyncAction::kKeep) != static_cast<int64_t>(plan.units.size());
  const std::size_t slid = adds ? 0 : oldest_chunks(w.instances(), plan.evict);
  // An eager policy repairs at each edit: two edits past the slide would serve the instances behind them twice
  // (dropping k messages behind the system prompt re-prefilled the tail k times), so they become one plan.
  const std::size_t edits = plan.evict.size() - slid + (plan.reorder ? 1 : 0);
  const bool one_plan = !s.options.policy.defer_repairs && edits > 1;
  if (adds || one_plan) {
    // Units are added (or an eager policy's edits): one plan of the window after the sync, so each instance is
    // served once, for the window the whole edit leaves.
    const detail::Layout l = sync_layout(s, messages, plan);
    run(detail::plan_layout(s, l), "sync");
    if (plan.reorder) ++s.reorders;  // a window whose agent moves content (Window::idle prepares moves)
    return report;
  }
  if (slid > 0) run(w.plan_slide(static_cast<int64_t>(slid)), "slide");
  for (std::size_t k = slid; k < plan.evict.size(); ++k) run(w.plan_evict(plan.evict[k]), "evict");
  std::vector<InstanceId> kept;
  for (const SyncUnit& u : plan.units) kept.push_back(u.instance);
  std::vector<InstanceId> now;
  for (const InstanceInfo& i : w.instances()) now.push_back(i.id);
  if (kept != now) run(w.plan_reorder(kept), "reorder");
  return report;
}

// At a sync to `messages`, before the list memory learns it: whether the agent's hints since the last sync
// left the learned lists (and moves) idle time prepares from the memory as it is nothing to add
// (HintWatch, WindowPolicy::trust_hints), and whether those lists would have served this sync
// (ListMemory::score). List edits only: nothing is computed.
void watch_lists(detail::WindowState& s, const std::vector<ChatMessage>& messages) {
  const WindowPolicy& p = s.options.policy;
  std::vector<std::vector<ChatMessage>> learned;
  if (!s.lists.empty()) {
    if (p.prepare_lists > 0) learned = s.lists.predict(p.prepare_lists);
    if (p.prepare_moves > 0) {
      for (std::vector<ChatMessage>& l : s.lists.predict_moves(p.prepare_moves, p.prepare_lists))
        learned.push_back(std::move(l));
    }
  }
  s.hints.synced(messages, learned, s.lists.last());
  s.lists.score(messages, learned);
}

}  // namespace

namespace detail {

WindowPolicy anticipation_policy() {
  WindowPolicy p = parse_policy("prefix");
  p.defer_repairs = false;
  p.heal_when_idle = false;
  p.prepare_recalls = p.prepare_moves = p.prepare_lists = 0;
  return p;
}

}  // namespace detail

SyncReport Window::sync(const std::vector<ChatMessage>& messages, const SyncOptions& options) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "sync");
  SyncReport r = sync_with(*this, *state_, messages, plan_sync_for(*this, *state_, messages, options, "sync"),
                           [this](const Plan& p) { return detail::apply_plan(*state_, p); });
  detail::settle_tail(*state_);              // reused as far as the list starts with it; the rest is dropped
  watch_lists(*state_, messages);            // before the memory learns the list: what idle time would prepare
  state_->lists.observe(messages, options);  // the agent's edits, learned (Window::idle prepares the next list)
  return r;
}

SyncReport Window::sync(const std::vector<ChatMessage>& messages, const SyncPlan& planned) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "sync");
  ORBIT_CHECK(planned.window_id == state_->id && planned.window_version == state_->version,
              "sync: stale sync plan (made for window " << planned.window_id << " at version " << planned.window_version
                                                        << "; this is window " << state_->id << " at version "
                                                        << state_->version << "): plan_sync again");
  ORBIT_CHECK(planned.messages_digest == list_digest(messages),
              "sync: the sync plan was made for another message list than `messages` ("
                  << messages.size() << " messages): plan_sync them");
  SyncReport r =
      sync_with(*this, *state_, messages, planned, [this](const Plan& p) { return detail::apply_plan(*state_, p); });
  detail::settle_tail(*state_);  // reused as far as the list starts with it; the rest is dropped
  watch_lists(*state_, messages);
  state_->lists.observe(messages, planned.options);
  return r;
}

IdleReport Window::prepare_sync(const std::vector<ChatMessage>& messages, const SyncOptions& options) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "prepare_sync");
  IdleReport out;
  const auto start = std::chrono::steady_clock::now();
  Window child(detail::fork_state(*state_));  // O(pages) reference counts; the same instance ids
  detail::WindowState& cs = *child.state_;
  cs.options.policy = detail::anticipation_policy();
  // A list sync cannot render or place throws here, naming prepare_sync, before any work.
  SyncPlan plan = plan_sync_for(child, cs, messages, options, "prepare_sync");
  // Deferred repairs change the KV a fork would start from; without exact reuse nothing would read the result.
  if (state_->has_deferred() || !state_->options.policy.reuse_computed) return out;
  if (!state_->preparing_learned) state_->hints.hinted(messages);  // the agent's own hint (WindowPolicy::trust_hints)
  try {
    const SyncReport r = sync_with(child, cs, messages, std::move(plan),
                                   [&cs](const Plan& p) { return detail::apply_plan(cs, p, /*background=*/true); });
    for (const Plan& p : r.plans) {
      for (const PlanStep& step : p.steps) out.instances_prepared += step.forward_tokens > 0 ? 1 : 0;
    }
    out.prepare_forward_tokens = r.forward_tokens;
  } catch (const Error&) {
    // The pool filled up on the way (other windows hold it): what was computed before stays stored and
    // reusable, the rest is skipped, as for prepare_recalls.
  }
  // Trusted hints: the learned lists that go on past this one, prepared past it (their start is its KV).
  if (!state_->preparing_learned) detail::prepare_past_hint(*this, *state_, messages, options, out);
  out.forward_tokens = out.prepare_forward_tokens;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace orbit
