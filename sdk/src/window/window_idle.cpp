// Window's idle-time work: prepared recalls and moves (forms in throwaway forks, stored for later), and
// idle() (heal, the fidelity self-check, then the preparations the policy asks for: recalls, moves and the
// lists learned from earlier syncs).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/interrupt.h"
#include "orbit/window.h"
#include "window/window_ops.h"

namespace orbit {

using detail::Entry;
using detail::Layout;
using detail::must;
using detail::served_again;
using detail::Slot;
using detail::WindowState;
namespace {

// The policy of the throwaway forks idle-time preparation runs in: the chunk is formed in context, the
// survivors are kept (nothing else is formed), and nothing is stored but the chunk's patch.
WindowPolicy preparation_policy(WindowPolicy prep) {
  prep.on_miss = MissAction::kForm;
  prep.survivors = SurvivorAction::kKeep;
  prep.stale = StalePatch::kRebuild;
  prep.reuse_stored = false;
  prep.use_orbit_patches = true;  // stores the orbit key too, when none is stored
  prep.store_conditioned = false;
  prep.reuse_computed = false;
  prep.cascade_on_recall = false;
  prep.kl_budget = 0;
  prep.cost_aware = false;
  prep.defer_repairs = false;
  return prep;
}

// The step of `plan` that forms `id`'s patch, when the plan forms one that is not stored yet; else null.
const PlanStep* new_form_step(const detail::EngineCore& core, const Plan& plan, InstanceId id) {
  if (!plan.refusal.empty()) return nullptr;
  const PlanStep* step = nullptr;
  for (const PlanStep& x : plan.steps) {
    if (x.instance == id) step = &x;
  }
  if (step == nullptr || step->action != StepAction::kForm || step->store_keys.empty() ||
      core.kv().available(step->store_keys.front())) {
    return nullptr;  // nothing to form there, or prepared already
  }
  return step;
}

}  // namespace

IdleReport Window::prepare_recalls(int64_t max_chunks) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "prepare_recalls");
  ORBIT_CHECK(max_chunks >= 0, "prepare_recalls: max_chunks = " << max_chunks << " must be >= 0");
  IdleReport out;
  const WindowState& s = *state_;
  if (max_chunks == 0 || s.evicted.empty() || s.has_deferred()) return out;
  const auto start = std::chrono::steady_clock::now();
  const std::map<std::string, detail::ChunkPtr> live = detail::live_evictions(*state_);
  std::vector<std::pair<uint64_t, std::string>> recent;  // (when evicted, chunk key), most recent first
  recent.reserve(live.size());
  for (const auto& [key, chunk] : live) recent.emplace_back(s.evicted.at(key).when, key);
  std::sort(recent.begin(), recent.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (recent.size() > static_cast<std::size_t>(max_chunks)) recent.resize(static_cast<std::size_t>(max_chunks));
  // A recall in a throwaway fork, formed in context: the fork's past is this window's KV, so the patch is
  // the one a recall to the tail here needs.
  // A fork copies the window's state (its dependency graph's edges too): one serves every recall that finds
  // nothing to form (planning changes nothing), and only an applied recall needs a fresh one after it.
  const WindowPolicy prep = preparation_policy(s.options.policy);
  std::unique_ptr<Window> child;
  for (const auto& [when, key] : recent) {
    if (child == nullptr) {
      child.reset(new Window(detail::fork_state(s)));
      child->state_->options.policy = prep;
    }
    const Plan plan = child->plan_recall(live.at(key)->ref);
    if (new_form_step(*s.core, plan, s.evicted.at(key).id) == nullptr) continue;
    const Result<ApplyReport> r = detail::apply_plan(*child->state_, plan, /*background=*/true);
    child.reset();
    if (!r.is_ok()) continue;  // the pool filled up meanwhile: skipped, as documented
    ++out.recalls_prepared;
    out.prepare_forward_tokens += r.value().forward_tokens;
  }
  out.forward_tokens = out.prepare_forward_tokens;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

IdleReport Window::prepare_evictions(const std::vector<InstanceId>& instances) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "prepare_evictions");
  for (InstanceId id : instances) (void)state_->entry(id, "prepare_evictions");  // throws naming an unknown id
  std::vector<InstanceId> sorted = instances;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  ORBIT_CHECK(twice == sorted.end(),
              "prepare_evictions: instance " << *twice << " is given twice (each instance is evicted once)");
  IdleReport out;
  const WindowState& s = *state_;
  if (instances.empty() || !s.options.policy.reuse_computed || s.has_deferred()) return out;
  const auto start = std::chrono::steady_clock::now();
  Window child(detail::fork_state(s));
  child.state_->options.policy = detail::anticipation_policy();
  std::vector<InstanceId> last_first = instances;  // each eviction's repair then covers less
  std::sort(last_first.begin(), last_first.end(),
            [&](InstanceId a, InstanceId b) { return s.index_of(a) > s.index_of(b); });
  for (InstanceId id : last_first) {
    const Plan plan = child.plan_evict(id);
    if (!plan.refusal.empty()) break;
    const Result<ApplyReport> r = detail::apply_plan(*child.state_, plan, /*background=*/true);
    if (!r.is_ok()) break;  // the pool filled up meanwhile: what was computed stays reusable
    for (const PlanStep& step : plan.steps) out.instances_prepared += step.forward_tokens > 0 ? 1 : 0;
    out.prepare_forward_tokens += r.value().forward_tokens;
  }
  out.forward_tokens = out.prepare_forward_tokens;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

IdleReport Window::prepare_moves(int64_t max_chunks) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "prepare_moves");
  ORBIT_CHECK(max_chunks >= 0, "prepare_moves: max_chunks = " << max_chunks << " must be >= 0");
  IdleReport out;
  const WindowState& s = *state_;
  if (max_chunks == 0 || s.has_deferred()) return out;
  std::vector<std::size_t> chunks;  // chunk entries, in window order
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    if (!s.entries[i].is_turn) chunks.push_back(i);
  }
  if (chunks.size() < 2) return out;
  const auto start = std::chrono::steady_clock::now();
  // A move behind the last chunk puts the chunk where that one is followed by: the instance after it
  // (a turn), or the window's end.
  const std::size_t last = chunks.back();
  const InstanceId before = last + 1 < s.entries.size() ? s.entries[last + 1].id : 0;
  // Under the exact key only: a patch formed for one ordering, stored as the set's orbit patch, would be read
  // under every other ordering at the orbit price (on a video QA trace a step that read one measured KL
  // 5.4e-3 against 1e-3 predicted).
  WindowPolicy prep = preparation_policy(s.options.policy);
  prep.use_orbit_patches = false;
  int64_t tried = 0;
  for (std::size_t k = chunks.size() - 1; k-- > 0 && tried < max_chunks;) {
    const Entry& e = s.entries[chunks[k]];
    ++tried;
    // In a throwaway fork: evicted (the survivors kept as they are, which is what a deferred reorder
    // leaves them) and recalled behind the last chunk, formed in that context.
    Window child(detail::fork_state(s));
    child.state_->options.policy = prep;
    const Plan evict = child.plan_evict(e.id);
    if (!evict.refusal.empty()) continue;
    const Result<ApplyReport> evicted = detail::apply_plan(*child.state_, evict, /*background=*/true);
    if (!evicted.is_ok()) continue;
    const Plan plan = child.plan_recall(e.ref(), before);
    if (new_form_step(*s.core, plan, e.id) == nullptr) continue;
    const Result<ApplyReport> r = detail::apply_plan(*child.state_, plan, /*background=*/true);
    if (!r.is_ok()) continue;  // the pool filled up meanwhile: skipped, as documented
    ++out.moves_prepared;
    out.prepare_forward_tokens += evicted.value().forward_tokens + r.value().forward_tokens;
  }
  out.forward_tokens = out.prepare_forward_tokens;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {

// The self-check's probe: the window's last kProbeTokens vocabulary ids (from its trailing turns and token
// chunks; an embedding chunk ends the walk back), read again as a query. Cheap (a few forwards, no new
// content), and representative of the read that comes next: its rows sit where the next query's will,
// right after the window, and attend over all of the window's KV as that query's do (a repeat of the tail
// also makes the model look back for the earlier occurrence, across the window). Empty when the window
// ends in an embedding chunk or the probe would pass the model's positions.
constexpr std::size_t kProbeTokens = 8;
// A window below heal_min_kl that is not exact is checked (and healed) on every kSampleEvery-th idle call.
constexpr int64_t kSampleEvery = 4;

std::vector<int64_t> self_check_probe(const WindowState& s) {
  std::vector<int64_t> reversed;
  for (auto it = s.entries.rbegin(); it != s.entries.rend() && reversed.size() < kProbeTokens; ++it) {
    if (!it->is_turn && it->chunk->ref.kind != ChunkKind::kTokens) break;
    const std::vector<int64_t>& tokens = it->is_turn ? it->turn_tokens : it->chunk->tokens;
    for (auto t = tokens.rbegin(); t != tokens.rend() && reversed.size() < kProbeTokens; ++t) {
      reversed.push_back(*t);
    }
  }
  int64_t extent = 0;
  for (const Entry& e : s.entries) extent += e.extent;
  if (extent + static_cast<int64_t>(reversed.size()) > s.core->max_positions()) return {};
  return {reversed.rbegin(), reversed.rend()};
}

// Heals the window (plan_heal + apply) and, when `check` (WindowPolicy::self_check), checks the fidelity model
// on the way (Window::idle says how):
// the probe's logits before and after, their KL measured against the window's predicted KL. With a `stop`, the
// first probe and the heal's apply run under an InterruptScope that asks it (and any outer scope's check) at their
// interruption points (orbit/interrupt.h: before each instance the heal serves and each layer of its forwards);
// one it stops commits nothing, so the window is exactly as it was: out.stopped, nothing healed or counted, and the
// sampled check's turn kept for the next call. False then; true once the heal ran or had nothing to do.
bool heal_and_check(Window& w, WindowState& s, IdleReport& out, bool check, const std::function<bool()>& stop) {
  const int64_t unchecked = s.unchecked_idles;
  s.unchecked_idles = 0;
  out.heal_planned = true;
  const Plan plan = w.plan_heal();
  out.healed_instances = served_again(plan);
  if (out.healed_instances == 0) return true;
  // A deferred repair would change the KV before the heal's plan reads it: no check then.
  const std::vector<int64_t> probe = !check || s.has_deferred() ? std::vector<int64_t>{} : self_check_probe(s);
  std::optional<Logits> approx;
  std::optional<Result<ApplyReport>> applied;
  bool stopped = false;  // this call's stop answered true (an outer scope's Interrupted is passed on)
  try {
    const std::function<bool()> outer = current_interrupt_check();
    const InterruptScope scope(!stop ? outer : std::function<bool()>([&stop, &stopped, outer] {
      if (stop()) return stopped = true;
      return outer && outer();
    }));
    if (!probe.empty()) approx = detail::probe_logits(s, probe);
    applied.emplace(w.apply(plan));
  } catch (const Interrupted&) {
    if (!stopped) throw;
    out.healed_instances = 0;
    out.stopped = true;
    s.unchecked_idles = unchecked;
    return false;
  }
  Result<ApplyReport> healed = std::move(*applied);
  if (!healed.is_ok() && healed.status().code() == StatusCode::kOutOfCapacity) {
    // The healed KV is written before the approximate KV is freed: without room for both, idle time leaves the
    // window as it is (a later idle call, once the agent freed room, heals it) rather than failing.
    out.healed_instances = 0;
    out.heal_refused = healed.status().reason();
    return true;
  }
  out.heal_forward_tokens = must(std::move(healed)).forward_tokens;
  if (!approx) return true;
  const Logits exact = detail::probe_logits(s, probe);
  out.checked = true;
  out.measured_kl = detail::probe_kl(exact, *approx);
  out.check_forward_tokens = 2.0 * static_cast<double>(probe.size());
  detail::Counters counted;  // the two probes: background forwards
  counted.forward_tokens = out.check_forward_tokens;
  counted.background_forward_tokens = out.check_forward_tokens;
  s.core->usage().count(counted);
  s.forward_tokens += out.check_forward_tokens;
  // Dynamic-NTK RoPE: the check measures the heal's change. An instance it keeps carries the same shortfall in
  // both windows (nothing to measure); one it serves again carries a new one in the healed window (a canonical
  // at its own length, say), which the probe reads as a change.
  double shortfall_change = 0;
  for (const PlanStep& step : plan.steps) {
    shortfall_change += step.action == StepAction::kKeep ? -step.shortfall_kl : step.shortfall_kl;
  }
  s.core->note_fidelity_check(out.measured_kl, std::max(out.predicted_kl + shortfall_change, 0.0),
                              out.check_forward_tokens);
  return true;
}

// The lists the window learned its next sync may start with (ListMemory::predict), each prepared as
// prepare_sync prepares a hinted one. A list that cannot be rendered or placed is skipped.
void prepare_learned_lists(Window& w, WindowState& s, const std::vector<std::vector<ChatMessage>>& lists,
                           const std::function<bool()>& stop, IdleReport& out, const SyncOptions* options = nullptr) {
  if (!s.options.policy.reuse_computed || s.lists.empty()) return;
  s.preparing_learned = true;  // these lists are not the agent's hints (HintWatch)
  const struct Reset {
    WindowState& s;
    ~Reset() { s.preparing_learned = false; }
  } reset{s};
  for (const std::vector<ChatMessage>& list : lists) {
    if (stop && stop()) {
      out.stopped = true;
      return;
    }
    try {
      const IdleReport r = w.prepare_sync(list, options != nullptr ? *options : s.lists.options());
      out.lists_prepared += 1;
      out.instances_prepared += r.instances_prepared;
      out.prepare_forward_tokens += r.prepare_forward_tokens;
    } catch (const Error&) {
      // a guess the template refuses (or past the positions): nothing was computed for it
    }
  }
}

// A window edited instance by instance (never synced to a list): the instances that left between idle
// calls, learned (InstanceMemory), and each predicted set's evictions prepared (Window::prepare_evictions).
void prepare_learned_drops(Window& w, WindowState& s, int64_t max_sets, const std::function<bool()>& stop,
                           IdleReport& out) {
  std::vector<detail::InstanceMark> marks;
  for (const Entry& e : s.entries) {
    marks.push_back({e.id, e.key, e.is_turn ? "turn" : std::string("chunk:") + chunk_kind_name(e.chunk->ref.kind)});
  }
  s.seen.observe(marks);
  for (const std::vector<uint64_t>& ids : s.seen.predict(marks, max_sets)) {
    if (stop && stop()) {
      out.stopped = true;
      return;
    }
    const IdleReport r = w.prepare_evictions(std::vector<InstanceId>(ids.begin(), ids.end()));
    out.lists_prepared += r.instances_prepared > 0 ? 1 : 0;
    out.instances_prepared += r.instances_prepared;
    out.prepare_forward_tokens += r.prepare_forward_tokens;
  }
}

// The predicted KL a heal can remove: that of the instances plan_heal re-forms (from detail::heal_from on; -1
// when it re-forms none). The ones before them it keeps as they are, so what they carry (on a dynamic-NTK
// model, the shortfall of content formed at a shorter window; nothing else, being exact over an unchanged
// context) stays: a window over heal_min_kl by that alone would plan, at every idle call, a heal that serves
// nothing again.
double healable_kl(const WindowState& s) {
  const std::size_t from = detail::heal_from(s);
  if (from == s.entries.size()) return -1;
  double kl = 0;
  for (std::size_t i = from; i < s.entries.size(); ++i) kl += s.entries[i].predicted_kl;
  return kl;
}

}  // namespace

namespace detail {

bool hints_trusted(const WindowState& s) {
  const WindowPolicy& policy = s.options.policy;
  return !s.lists.empty() && policy.trust_hints > 0 && s.hints.streak() >= policy.trust_hints &&
         (policy.prepare_lists > 0 || policy.prepare_moves > 0);
}

void prepare_past_hint(Window& w, WindowState& s, const std::vector<ChatMessage>& hint, const SyncOptions& options,
                       IdleReport& out) {
  if (!hints_trusted(s)) return;
  const WindowPolicy& policy = s.options.policy;
  const auto past_hint = [&](std::vector<std::vector<ChatMessage>> lists) {
    lists.erase(std::remove_if(lists.begin(), lists.end(),
                               [&](const std::vector<ChatMessage>& l) { return !detail::one_past(l, hint); }),
                lists.end());
    return lists;
  };
  out.hints_trusted = true;
  // Rendered with the hint's options: the start they share is then the same tokens, served from the hint's KV.
  if (policy.prepare_lists > 0) {
    prepare_learned_lists(w, s, past_hint(s.lists.predict(policy.prepare_lists)), {}, out, &options);
  }
  if (policy.prepare_moves > 0) {
    const int64_t before = out.lists_prepared;
    prepare_learned_lists(w, s, past_hint(s.lists.predict_moves(policy.prepare_moves, policy.prepare_lists)), {}, out,
                          &options);
    out.moves_prepared += out.lists_prepared - before;
    out.lists_prepared = before;
  }
}

}  // namespace detail

IdleReport Window::idle() { return idle({}); }

IdleReport Window::idle(const std::function<bool()>& stop) {
  const detail::OpHold hold(*state_->core);
  detail::refuse_in_callback(*state_, "idle");
  const auto start = std::chrono::steady_clock::now();
  IdleReport out;
  const auto finish = [&] {
    out.forward_tokens = out.heal_forward_tokens + out.check_forward_tokens + out.prepare_forward_tokens;
    out.fidelity_correction = state_->core->fidelity_checks().correction.factor();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  };
  const WindowPolicy& policy = state_->options.policy;
  for (const Entry& e : state_->entries) out.predicted_kl += e.predicted_kl;
  // A window whose heal would remove (by prediction) less than heal_min_kl is left as it is, but for a sampled
  // check on every kSampleEvery-th idle call that finds it so (and with something to heal: some loss predicted
  // there); with a threshold of 0, any window with an instance the heal re-forms is healed.
  if (policy.heal_when_idle) {
    const double healable = healable_kl(*state_);
    const bool over = healable >= 0 && healable >= policy.heal_min_kl;
    const bool sample = policy.self_check && !over && healable > 0 && ++state_->unchecked_idles >= kSampleEvery;
    // A heal stopped on the way leaves the window as it was, and the preparations (which start from it) to a
    // later call.
    if ((over || sample) && !heal_and_check(*this, *state_, out, policy.self_check, stop)) return finish();
  }
  const auto stopping = [&] {
    if (stop && stop()) out.stopped = true;
    return out.stopped;
  };
  if (policy.prepare_recalls > 0 && !stopping()) {
    const IdleReport prepared = prepare_recalls(policy.prepare_recalls);
    out.recalls_prepared = prepared.recalls_prepared;
    out.prepare_forward_tokens = prepared.prepare_forward_tokens;
  }
  const bool synced = !state_->lists.empty();
  // An agent that has reordered this window is one that attends by moving chunks: only then is a move
  // worth preparing (a window never reordered would spend its idle time on patches nothing reads). A
  // window synced to lists prepares its moves as lists, below: a message moved to the end of the list
  // lands behind the turns too, where a patch formed behind the last chunk is not read.
  if (policy.prepare_moves > 0 && state_->reorders > 0 && !synced && !stopping()) {
    const IdleReport prepared = prepare_moves(policy.prepare_moves);
    out.moves_prepared = prepared.moves_prepared;
    out.prepare_forward_tokens += prepared.prepare_forward_tokens;
  }
  // The agent's own hints have reached as far as every learned list for trust_hints syncs in a row: the
  // learned lists and moves would only repeat what its next hint prepares.
  out.hints_trusted = detail::hints_trusted(*state_);
  // Learned lists that missed the agent's last syncs (ListMemory::predicting) wait for one that would have served.
  const bool learning = synced && !out.hints_trusted && state_->options.policy.reuse_computed &&
                        (policy.prepare_lists > 0 || policy.prepare_moves > 0);
  out.predictions_missed = learning && !state_->lists.predicting();
  if (policy.prepare_lists > 0 && learning && !out.predictions_missed) {
    prepare_learned_lists(*this, *state_, state_->lists.predict(policy.prepare_lists), stop, out);
  } else if (policy.prepare_lists > 0 && !synced) {
    prepare_learned_drops(*this, *state_, policy.prepare_lists, stop, out);
  }
  if (policy.prepare_moves > 0 && learning && !out.predictions_missed && !out.stopped) {
    const int64_t before = out.lists_prepared;
    prepare_learned_lists(*this, *state_, state_->lists.predict_moves(policy.prepare_moves, policy.prepare_lists), stop,
                          out);
    out.moves_prepared += out.lists_prepared - before;
    out.lists_prepared = before;
  }
  return finish();
}

}  // namespace orbit
