// Enums and the read-only value objects: ChunkRef, PlanStep, Plan, ApplyReport, InstanceInfo, stats and
// infos. Each mirrors its C++ struct field for field (the headers in sdk/include/orbit/ document them).
#include <pybind11/stl.h>

#include <iomanip>
#include <sstream>

#include "bindings.h"
#include "convert.h"
#include "orbit/engine.h"

namespace orbit_py {

namespace {

// orbit::chunk_kind_name is declared in orbit/chunk.h but not yet defined by the SDK: a local copy.
const char* kind_name(orbit::ChunkKind k) noexcept { return k == orbit::ChunkKind::kTokens ? "tokens" : "embeddings"; }

std::string quoted(const std::string& s) { return py::repr(py::str(s)); }

std::string short_key(const std::string& key) { return key.size() > 12 ? key.substr(0, 12) + "..." : key; }

template <typename T>
std::string join(const std::vector<T>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

std::string chunk_repr(const orbit::ChunkRef& c) {
  std::ostringstream s;
  s << "ChunkRef(" << (c.label.empty() ? "" : quoted(c.label) + ", ") << "key=" << short_key(c.key)
    << ", kind=" << kind_name(c.kind) << ", length=" << c.length;
  if (c.extent != c.length) s << ", extent=" << c.extent;
  s << ")";
  return s.str();
}

// An enum whose str() is the C++ name ("apply-patch") and whose members are the C++ enumerators without
// the k prefix, in snake case (StepAction.apply_patch).
template <typename E>
py::enum_<E> bind_enum(py::module_& m, const char* name, const char* doc, const char* (*name_of)(E) noexcept) {
  py::enum_<E> e(m, name, doc);
  // Replaces (not overloads) enum_'s own __str__.
  e.attr("__str__") = py::cpp_function([name_of](E v) { return std::string(name_of(v)); }, py::name("__str__"),
                                       py::is_method(e), "The C++ name (as plans and traces print it).");
  e.def_property_readonly(
      "label", [name_of](E v) { return std::string(name_of(v)); },
      "The C++ name (as plans and traces print it), e.g. 'apply-patch'.");
  return e;
}

const char* store_tier_name_of(orbit::StoreTier t) noexcept { return orbit::store_tier_name(t); }
const char* survivor_name(orbit::SurvivorAction a) noexcept {
  return a == orbit::SurvivorAction::kKeep ? "keep" : "recondition";
}
const char* stale_name(orbit::StalePatch a) noexcept { return a == orbit::StalePatch::kRebuild ? "rebuild" : "accept"; }

}  // namespace

namespace {

// the enums.
void def_enums(py::module_& m) {
  using namespace orbit;

  // ---- enums ----------------------------------------------------------------------------------------
  bind_enum<ChunkKind>(m, "ChunkKind", "What a chunk holds: token ids or input embeddings (media).", kind_name)
      .value("tokens", ChunkKind::kTokens)
      .value("embeddings", ChunkKind::kEmbeddings);
  bind_enum<Operation>(m, "Operation", "A window operation (Plan.op, ApplyReport.op).", operation_name)
      .value("admit", Operation::kAdmit)
      .value("add_turn", Operation::kAddTurn)
      .value("evict", Operation::kEvict)
      .value("slide", Operation::kSlide)
      .value("recall", Operation::kRecall)
      .value("reorder", Operation::kReorder)
      .value("recondition", Operation::kRecondition)
      .value("flush", Operation::kFlush)
      .value("heal", Operation::kHeal)
      .value("sync", Operation::kSync);
  bind_enum<StepAction>(m, "StepAction", "What a plan step does to one instance (see orbit/plan.h).", step_action_name)
      .value("keep", StepAction::kKeep, "content unchanged, relocated if it moved (rotation only)")
      .value("canonical", StepAction::kCanonical, "the canonical alone is exact (nothing precedes the chunk)")
      .value("apply_patch", StepAction::kApplyPatch, "canonical + a stored patch")
      .value("load_conditioned", StepAction::kLoadConditioned, "a stored conditioned KV for exactly this context")
      .value("form", StepAction::kForm, "one forward in context; its patch is formed and stored")
      .value("reprefill", StepAction::kReprefill, "one forward in context, nothing stored")
      .value("blind", StepAction::kBlind, "the canonical relocated, no repair (approximate)")
      .value("recompute", StepAction::kRecompute, "some tokens forwarded in context (CacheBlend / first-k)")
      .value("prefill_turn", StepAction::kPrefillTurn, "a live turn prefilled in context")
      .value("evict", StepAction::kEvict, "the instance leaves the window (its canonical stays stored)");
  bind_enum<PatchMatch>(m, "PatchMatch", "How the patch of an apply_patch step was found.", patch_match_name)
      .value("none", PatchMatch::kNone)
      .value("exact", PatchMatch::kExact)
      .value("orbit", PatchMatch::kOrbit)
      .value("stale", PatchMatch::kStale);
  bind_enum<MissAction>(m, "MissAction", "What a window does when no usable stored patch exists.", miss_action_name)
      .value("form", MissAction::kForm, "one forward in context; a patch stored for next time")
      .value("blind", MissAction::kBlind, "the canonical, relocated; no repair")
      .value("reprefill", MissAction::kReprefill, "one forward in context, nothing stored")
      .value("token_recompute", MissAction::kTokenRecompute, "CacheBlend: recompute the top recompute_ratio of tokens")
      .value("first_k", MissAction::kFirstK, "EPIC: recompute the first first_k tokens in context");
  bind_enum<SurvivorAction>(m, "SurvivorAction", "What happens to instances whose context changed.", survivor_name)
      .value("keep", SurvivorAction::kKeep, "relocation only")
      .value("recondition", SurvivorAction::kRecondition, "look up a patch for the new context, else the miss action");
  bind_enum<StalePatch>(m, "StalePatch", "Whether a patch formed under another context may be used.", stale_name)
      .value("rebuild", StalePatch::kRebuild, "never: treat as a miss")
      .value("accept", StalePatch::kAccept, "use the closest one when its divergence <= max_divergence");
  bind_enum<BackgroundMode>(
      m, "BackgroundMode",
      "Where a chunk's canonical and patch are formed after its first sight (Engine(background=...)).",
      background_mode_name)
      .value("thread", BackgroundMode::kThread, "a worker thread forms them as they are queued (the default)")
      .value("deferred", BackgroundMode::kDeferred, "they wait for Engine.run_background() (idle time you pick)")
      .value("inline", BackgroundMode::kInline, "at the end of the apply() that queued them, on its thread");
  bind_enum<StoreTier>(m, "StoreTier", "A tier of the chunk store.", store_tier_name_of)
      .value("device", StoreTier::kDevice)
      .value("host", StoreTier::kHost)
      .value("disk", StoreTier::kDisk)
      .value("remote", StoreTier::kRemote);
}

// ChunkRef.
void def_chunk_ref(py::module_& m) {
  using namespace orbit;

  // ---- ChunkRef -------------------------------------------------------------------------------------
  py::class_<ChunkRef>(m, "ChunkRef",
                       "A handle to a chunk registered with an Engine (Engine.add_tokens / add_embeddings). A value:\n"
                       "compares and hashes by its content key. Valid only with the engine that made it.")
      .def_readonly("key", &ChunkRef::key, "64-hex content key (model fingerprint + content; never position).")
      .def_readonly("kind", &ChunkRef::kind, "ChunkKind.tokens or ChunkKind.embeddings.")
      .def_readonly("length", &ChunkRef::length, "Tokens.")
      .def_readonly("extent", &ChunkRef::extent, "Positions it spans in a window (= length for text).")
      .def_readonly("label", &ChunkRef::label, "The caller's name for it (may be empty).")
      .def_property_readonly("valid", &ChunkRef::valid, "False only for a default (empty) reference.")
      .def(
          "__len__", [](const ChunkRef& c) { return c.length; }, "Tokens.")
      .def(
          "__eq__", [](const ChunkRef& a, const ChunkRef& b) { return a == b; }, py::is_operator())
      .def(
          "__ne__", [](const ChunkRef& a, const ChunkRef& b) { return a != b; }, py::is_operator())
      .def("__hash__", [](const ChunkRef& c) { return py::hash(py::str(c.key)); })
      .def("__repr__", &chunk_repr);
}

// PlanStep and Plan.
void def_plans(py::module_& m) {
  using namespace orbit;

  // ---- plans ----------------------------------------------------------------------------------------
  py::class_<PlanStep>(m, "PlanStep", "What one plan step does to one instance (read-only; see orbit/plan.h).")
      .def_readonly("action", &PlanStep::action, "StepAction.")
      .def_readonly("instance", &PlanStep::instance, "Instance id.")
      .def_readonly("chunk", &PlanStep::chunk, "The chunk (for a turn: kind tokens, label 'turn').")
      .def_readonly("is_turn", &PlanStep::is_turn, "True for a live turn.")
      .def_readonly("position", &PlanStep::position, "First position after the operation (evict: before).")
      .def_readonly("match", &PlanStep::match, "PatchMatch of an apply_patch step.")
      .def_readonly("turn_tokens", &PlanStep::turn_tokens, "A new live turn's tokens.")
      .def_readonly("patch_key", &PlanStep::patch_key, "The stored patch / conditioned KV read.")
      .def_readonly("store_keys", &PlanStep::store_keys, "Keys this step writes.")
      .def_readonly("divergence", &PlanStep::divergence, "Stale match: the accepted patch's context divergence.")
      .def_readonly("needs_canonical", &PlanStep::needs_canonical, "The canonical must be encoded or loaded.")
      .def_readonly("encode_canonical", &PlanStep::encode_canonical, "... and it is not stored: one forward alone.")
      .def_readonly("canonical_tier", &PlanStep::canonical_tier, "StoreTier the canonical is read from.")
      .def_readonly("forward_tokens", &PlanStep::forward_tokens, "Token-forwards this step costs.")
      .def_readonly("background_tokens", &PlanStep::background_tokens,
                    "Token-forwards it queues for the background (the canonical, when not stored; a live turn's\n"
                    "tokens alone, when measure_sensitivity).")
      .def_readonly("measure_sensitivity", &PlanStep::measure_sensitivity,
                    "A live turn whose sensitivity is measured in the background after it is prefilled or loaded by\n"
                    "exact reuse (budgeted policies that work in the background; once per content), so later\n"
                    "plans price keeping it by it.")
      .def_readonly("estimated_seconds", &PlanStep::estimated_seconds,
                    "Critical-path seconds by the engine's cost model (Engine.calibrate fits it).")
      .def_readonly("bytes_moved", &PlanStep::bytes_moved, "Bytes read from the store for this step.")
      .def_readonly("exact", &PlanStep::exact, "This instance's KV equals a re-prefill after the plan.")
      .def_readonly("deferred", &PlanStep::deferred, "Kept, its repair left to the next read (policy.defer_repairs).")
      .def_property_readonly(
          "how", [](const PlanStep& s) { return std::string(serve_action_name(s.how)); },
          "The serving action's name ('keep', 'stored-patch', 'form', 'blind', ...).")
      .def_readonly("predicted_kl", &PlanStep::predicted_kl,
                    "The fidelity model's next-token KL vs a re-prefill this instance carries after the step.")
      .def_readonly("sensitivity", &PlanStep::sensitivity,
                    "The measured sensitivity the prediction was scaled by (a chunk's patches', a turn's own);\n"
                    "-1 when unknown (nothing measured yet).")
      .def_readonly("reason", &PlanStep::reason, "Why this action.")
      .def("__repr__", [](const PlanStep& s) {
        std::ostringstream o;
        o << "PlanStep(" << step_action_name(s.action) << ", instance=" << s.instance << ", "
          << (s.is_turn ? std::string("turn") : chunk_repr(s.chunk)) << ", position=" << s.position
          << ", forward_tokens=" << s.forward_tokens << ", exact=" << (s.exact ? "True" : "False");
        if (s.match != PatchMatch::kNone) o << ", match=" << patch_match_name(s.match);
        if (!s.reason.empty()) o << ", reason=" << quoted(s.reason);
        o << ")";
        return o.str();
      });

  py::class_<Plan>(m, "Plan",
                   "What an operation would do (Window.plan_*), made without changing the window. Pass it to\n"
                   "Window.apply() while the window is unchanged (a plan of an older version raises OrbitError).\n"
                   "len(plan) and iteration give its steps; str(plan) is Plan.describe().")
      .def_readonly("op", &Plan::op, "Operation.")
      .def_readonly("window_id", &Plan::window_id, "The window that made it.")
      .def_readonly("window_version", &Plan::window_version, "The window version it was made from.")
      .def_readonly("steps", &Plan::steps, "list[PlanStep], in the order apply() executes them.")
      .def_readonly("order", &Plan::order, "Instance ids after the plan, in window order.")
      .def_readonly("forward_tokens", &Plan::forward_tokens, "Estimated token-forwards (sum over steps).")
      .def_readonly("background_tokens", &Plan::background_tokens,
                    "Token-forwards queued for the background (sum over steps).")
      .def_readonly("predicted_kl", &Plan::predicted_kl,
                    "The fidelity model's next-token KL vs a re-prefill after apply (sum over steps); a\n"
                    "budgeted policy keeps it within policy.kl_budget when it can.")
      .def_readonly("estimated_seconds", &Plan::estimated_seconds, "Critical-path seconds by the cost model (sum).")
      .def_readonly(
          "policy", &Plan::policy,
          "The WindowPolicy it was made under, for the record; apply() follows the steps, which carry what it decided.")
      .def_readonly("attention", &Plan::attention, "How reads attend over the KV on the engine's device.")
      .def_readonly("bytes_moved", &Plan::bytes_moved, "Estimated store bytes read (sum over steps).")
      .def_readonly("device_bytes_after", &Plan::device_bytes_after, "KV bytes (whole pages) the window holds after.")
      .def_readonly("window_tokens_after", &Plan::window_tokens_after, "Tokens in the window after.")
      .def_readonly("exact", &Plan::exact, "Every instance's KV equals a re-prefill after apply.")
      .def_readonly("cascade", &Plan::cascade, "Recall: dependents re-conditioned, in topological order.")
      .def_readonly("refusal", &Plan::refusal,
                    "Non-empty: apply() will refuse the plan with this reason (nothing runs; the totals are 0).")
      .def_readonly("refused_capacity", &Plan::refused_capacity,
                    "The refusal is a capacity one (apply raises CapacityError; else RefusedError).")
      .def(
          "count", [](const Plan& p, StepAction a) { return p.count(a); }, py::arg("action"),
          "Number of steps with this StepAction.")
      .def("describe", &Plan::describe, "One line per step (what `orbit replay --explain` prints).")
      .def("__str__", &Plan::describe)
      .def("__len__", [](const Plan& p) { return p.steps.size(); })
      .def("__iter__", [](const Plan& p) { return py::iter(py::cast(p.steps)); })
      .def("__repr__", [](const Plan& p) {
        std::ostringstream o;
        o << "Plan(" << operation_name(p.op) << ", window=" << p.window_id << "@v" << p.window_version
          << ", steps=" << p.steps.size() << ", forward_tokens=" << p.forward_tokens
          << ", window_tokens_after=" << p.window_tokens_after << ", exact=" << (p.exact ? "True" : "False") << ")";
        return o.str();
      });
}

// ApplyReport and IdleReport.
void def_reports(py::module_& m) {
  using namespace orbit;

  py::class_<ApplyReport>(m, "ApplyReport", "What apply() did (measured, not estimated).")
      .def_readonly("op", &ApplyReport::op, "Operation.")
      .def_readonly("forward_tokens", &ApplyReport::forward_tokens, "Token-forwards actually computed.")
      .def_readonly("patches_formed", &ApplyReport::patches_formed, "Patches formed and stored.")
      .def_readonly("patch_hits", &ApplyReport::patch_hits, "Stored patches (or conditioned KV) reused.")
      .def_readonly("canonicals_encoded", &ApplyReport::canonicals_encoded, "Canonicals encoded (chunk alone).")
      .def_readonly("bytes_moved", &ApplyReport::bytes_moved, "Bytes read from the store.")
      .def_readonly("seconds", &ApplyReport::seconds, "Wall time of apply().")
      .def_readonly("device_bytes", &ApplyReport::device_bytes, "KV bytes (whole pages) the window holds now.")
      .def_readonly("added", &ApplyReport::added, "Instance ids the operation created.")
      .def_readonly("removed", &ApplyReport::removed, "Instance ids it evicted.")
      .def("__repr__", [](const ApplyReport& r) {
        std::ostringstream o;
        o << "ApplyReport(" << operation_name(r.op) << ", forward_tokens=" << r.forward_tokens
          << ", patches_formed=" << r.patches_formed << ", patch_hits=" << r.patch_hits
          << ", canonicals_encoded=" << r.canonicals_encoded << ", added=" << join(r.added)
          << ", removed=" << join(r.removed) << ", seconds=" << std::setprecision(3) << r.seconds << ")";
        return o.str();
      });

  py::class_<IdleReport>(m, "IdleReport",
                         "What Window.idle() (or heal / prepare_recalls / prepare_moves / prepare_sync) did with idle "
                         "time; all background work.")
      .def_readonly("predicted_kl", &IdleReport::predicted_kl,
                    "The window's predicted KL before (policy.heal_min_kl decides on it).")
      .def_readonly("healed_instances", &IdleReport::healed_instances, "Instances the heal served again.")
      .def_readonly("heal_forward_tokens", &IdleReport::heal_forward_tokens, "Token-forwards of the heal.")
      .def_readonly("heal_refused", &IdleReport::heal_refused,
                    "Why the heal the window needed did not run in Window.idle(), or '': the KV pool had no room\n"
                    "for the healed KV beside the KV it replaces (the window is left as it was).")
      .def_readonly("checked", &IdleReport::checked,
                    "True when the heal checked the fidelity model (a probe before and after it).")
      .def_readonly("measured_kl", &IdleReport::measured_kl,
                    "The check's KL: the probe on the approximate window against the healed one (-1: no check).")
      .def_readonly("check_forward_tokens", &IdleReport::check_forward_tokens,
                    "Token-forwards of the check's two probes (background).")
      .def_readonly("fidelity_correction", &IdleReport::fidelity_correction,
                    "The engine's fidelity correction after this call (EngineStats.fidelity_correction).")
      .def_readonly("recalls_prepared", &IdleReport::recalls_prepared,
                    "Evicted chunks whose patch for a recall to the tail was formed.")
      .def_readonly("moves_prepared", &IdleReport::moves_prepared,
                    "Chunks whose patch for a move behind the window's last chunk was formed; in a window synced\n"
                    "to message lists, learned lists with a message moved to the end prepared.")
      .def_readonly("instances_prepared", &IdleReport::instances_prepared,
                    "Instances Window.prepare_sync forwarded (their KV stored for exact reuse).")
      .def_readonly("lists_prepared", &IdleReport::lists_prepared,
                    "Learned next lists Window.idle() prepared (WindowPolicy.prepare_lists).")
      .def_readonly("prepare_forward_tokens", &IdleReport::prepare_forward_tokens,
                    "Token-forwards of the prepared recalls, moves and prepare_sync.")
      .def_readonly("forward_tokens", &IdleReport::forward_tokens, "heal + check + prepare.")
      .def_readonly("seconds", &IdleReport::seconds, "Wall time.")
      .def_readonly("stopped", &IdleReport::stopped,
                    "The call stopped before every preparation was made (C++ Window::idle(stop)).")
      .def("__repr__", [](const IdleReport& r) {
        std::ostringstream o;
        o << "IdleReport(predicted_kl=" << r.predicted_kl << ", healed_instances=" << r.healed_instances
          << ", heal_forward_tokens=" << r.heal_forward_tokens
          << (r.heal_refused.empty() ? "" : ", heal_refused='" + r.heal_refused + "'")
          << ", recalls_prepared=" << r.recalls_prepared << ", moves_prepared=" << r.moves_prepared
          << ", instances_prepared=" << r.instances_prepared << ", lists_prepared=" << r.lists_prepared
          << ", prepare_forward_tokens=" << r.prepare_forward_tokens << ", seconds=" << std::setprecision(3)
          << r.seconds << ")";
        return o.str();
      });
}

// InstanceInfo and WindowStats.
void def_window_state(py::module_& m) {
  using namespace orbit;

  // ---- window state ---------------------------------------------------------------------------------
  py::class_<InstanceInfo>(m, "InstanceInfo",
                           "One instance (a placement of a chunk, or a live turn) as the window holds it. Accepted\n"
                           "wherever an instance id is (evict, reorder, kv, before=...).")
      .def_readonly("id", &InstanceInfo::id, "Instance id (unique per engine; forks keep their parent's ids).")
      .def_readonly("chunk", &InstanceInfo::chunk, "The chunk (for turns: kind tokens, label 'turn').")
      .def_readonly("is_turn", &InstanceInfo::is_turn, "True for a live turn.")
      .def_readonly("turn_tokens", &InstanceInfo::turn_tokens, "A turn's tokens.")
      .def_readonly("position", &InstanceInfo::position, "First position in the window.")
      .def_readonly("length", &InstanceInfo::length, "Tokens.")
      .def_readonly("formed_by", &InstanceInfo::formed_by, "StepAction that made its current KV.")
      .def_readonly("match", &InstanceInfo::match, "PatchMatch when formed_by is apply_patch.")
      .def_readonly("exact", &InstanceInfo::exact, "Its KV equals a re-prefill of the current window (as tracked).")
      .def_readonly("context_changed", &InstanceInfo::context_changed, "Kept as-is although its context changed.")
      .def_readonly("attention", &InstanceInfo::attention,
                    "The share of the last generate's attention on it (its query's last token, averaged over "
                    "heads and layers); -1 before a generate read it.")
      .def_readonly("deferred", &InstanceInfo::deferred,
                    "An edit left its repair to the next read or forwarding operation (Window.flush runs it).")
      .def_readonly("patch_key", &InstanceInfo::patch_key, "The patch applied, if any.")
      .def("__int__", [](const InstanceInfo& i) { return i.id; })
      .def("__index__", [](const InstanceInfo& i) { return i.id; })
      .def("__repr__", [](const InstanceInfo& i) {
        std::ostringstream o;
        o << "InstanceInfo(id=" << i.id << ", " << (i.is_turn ? "turn " + join(i.turn_tokens) : chunk_repr(i.chunk))
          << ", position=" << i.position << ", length=" << i.length << ", formed_by=" << step_action_name(i.formed_by)
          << ", exact=" << (i.exact ? "True" : "False") << ")";
        return o.str();
      });

  py::class_<WindowStats>(m, "WindowStats", "A window's counters (Window.stats).")
      .def_readonly("instances", &WindowStats::instances, "Instances (chunks + turns).")
      .def_readonly("chunk_instances", &WindowStats::chunk_instances, "Chunk instances.")
      .def_readonly("turns", &WindowStats::turns, "Live turns.")
      .def_readonly("tokens", &WindowStats::tokens, "Tokens in the window.")
      .def_readonly("device_bytes", &WindowStats::device_bytes, "KV bytes held (shared pages counted in each holder).")
      .def_readonly("shared_pages", &WindowStats::shared_pages, "Pages shared with another window (forks).")
      .def_readonly("evicted", &WindowStats::evicted, "Chunk instances evicted and recallable.")
      .def_readonly("forward_tokens", &WindowStats::forward_tokens, "Token-forwards over applied operations.")
      .def_readonly("critical_forward_tokens", &WindowStats::critical_forward_tokens,
                    "Of forward_tokens: those on the critical path (heals and idle-time preparation excluded).")
      .def_readonly("prefix_cache_tokens", &WindowStats::prefix_cache_tokens,
                    "What a prefix cache would have forwarded for the same operations (KV reused only behind a "
                    "prefix computed before): divide critical_forward_tokens by it for the saving.")
      .def_readonly("radix_cache_tokens", &WindowStats::radix_cache_tokens,
                    "What SGLang's radix cache (token granular, holding every call's window, query and generated "
                    "tokens in the engine's KV memory) would forward for this window's generate and disposable "
                    "calls: the strongest yardstick.")
      .def_readonly("operations", &WindowStats::operations, "Applied operations.")
      .def("__repr__", [](const WindowStats& s) {
        std::ostringstream o;
        o << "WindowStats(instances=" << s.instances << ", chunk_instances=" << s.chunk_instances
          << ", turns=" << s.turns << ", tokens=" << s.tokens << ", device_bytes=" << s.device_bytes
          << ", shared_pages=" << s.shared_pages << ", evicted=" << s.evicted << ", forward_tokens=" << s.forward_tokens
          << ", critical_forward_tokens=" << s.critical_forward_tokens
          << ", prefix_cache_tokens=" << s.prefix_cache_tokens << ", radix_cache_tokens=" << s.radix_cache_tokens
          << ", operations=" << s.operations << ")";
        return o.str();
      });
}

// the store's counters: TierStats, RemoteStats, StoreStats.
void def_store_stats(py::module_& m) {
  using namespace orbit;

  py::class_<TierStats>(m, "TierStats", "Counters of one store tier in this process.")
      .def_readonly("tier", &TierStats::tier, "StoreTier.")
      .def_readonly("enabled", &TierStats::enabled, "Whether the tier is in use.")
      .def_readonly("entries", &TierStats::entries, "Entries held.")
      .def_readonly("bytes", &TierStats::bytes, "Bytes charged against the budget.")
      .def_readonly("budget_bytes", &TierStats::budget_bytes, "Budget.")
      .def_readonly("policy", &TierStats::policy, "Its eviction policy: 'lru' or 'cost-aware'.")
      .def_readonly("pinned_entries", &TierStats::pinned_entries, "Pinned entries.")
      .def_readonly("hits", &TierStats::hits, "Reads served by this tier.")
      .def_readonly("evictions", &TierStats::evictions, "Entries that left under budget pressure.")
      .def_readonly("demotions", &TierStats::demotions, "Entries moved to the next tier down.")
      .def_readonly("promotions", &TierStats::promotions, "Entries copied into this tier on access.")
      .def("__repr__", [](const TierStats& t) {
        std::ostringstream o;
        o << "TierStats(" << store_tier_name(t.tier) << ", enabled=" << (t.enabled ? "True" : "False")
          << ", entries=" << t.entries << ", bytes=" << t.bytes << ", hits=" << t.hits << ")";
        return o.str();
      });

  py::class_<RemoteStats>(m, "RemoteStats", "The remote tier's counters (StoreStats.remote).")
      .def_readonly("enabled", &RemoteStats::enabled, "A remote tier is configured.")
      .def_readonly("url", &RemoteStats::url, "Its URL.")
      .def_readonly("available", &RemoteStats::available, "False while considered down (after a failed call).")
      .def_readonly("hits", &RemoteStats::hits, "Values read and verified.")
      .def_readonly("misses", &RemoteStats::misses, "Absent, corrupt, or skipped while down.")
      .def_readonly("corrupt", &RemoteStats::corrupt, "Values that failed verification (removed, never used).")
      .def_readonly("errors", &RemoteStats::errors, "Calls that failed (unreachable, timed out, rejected).")
      .def_readonly("outages", &RemoteStats::outages, "Times the remote went down.")
      .def_readonly("skipped", &RemoteStats::skipped, "Reads answered as a miss at once while down.")
      .def_readonly("writes", &RemoteStats::writes, "Values written.")
      .def_readonly("write_failures", &RemoteStats::write_failures, "Failed write attempts (the local copy stays).")
      .def_readonly("writes_dropped", &RemoteStats::writes_dropped, "Queued writes dropped.")
      .def_readonly("queued", &RemoteStats::queued, "Writes (and removals) waiting now.")
      .def_readonly("removals", &RemoteStats::removals, "Entries removed from the server (erase).")
      .def_readonly("bytes_read", &RemoteStats::bytes_read, "Blob bytes of the hits.")
      .def_readonly("bytes_written", &RemoteStats::bytes_written, "Blob bytes written.")
      .def_readonly("read_seconds", &RemoteStats::read_seconds, "Wall time of the reads that hit.")
      .def_readonly("last_error", &RemoteStats::last_error, "The latest failure, naming the server.")
      .def("__repr__", [](const RemoteStats& r) {
        std::ostringstream o;
        o << "RemoteStats(" << quoted(r.url) << ", available=" << (r.available ? "True" : "False")
          << ", hits=" << r.hits << ", misses=" << r.misses << ", corrupt=" << r.corrupt << ", errors=" << r.errors
          << ", writes=" << r.writes << ")";
        return o.str();
      });

  py::class_<StoreStats>(m, "StoreStats", "The chunk store's counters (EngineStats.store).")
      .def_readonly("tiers", &StoreStats::tiers, "list[TierStats]: device, host, disk.")
      .def_readonly("canonical_encoding", &StoreStats::canonical_encoding,
                    "BlobEncoding the disk tier writes canonicals in (EngineOptions.cold_tier).")
      .def_readonly("pinned_host", &StoreStats::pinned_host, "Host-tier values live in pinned memory (CUDA engines).")
      .def_readonly("misses", &StoreStats::misses, "Lookups no tier served.")
      .def_readonly("refusals", &StoreStats::refusals, "Puts no tier could admit.")
      .def_readonly("corrupt_reads", &StoreStats::corrupt_reads, "Blobs that failed their checksum.")
      .def_readonly("io_errors", &StoreStats::io_errors, "Puts that failed on disk.")
      .def_readonly("disk_degraded", &StoreStats::disk_degraded,
                    "A disk write failed (full, read-only): entries are kept in memory only.")
      .def_readonly("disk_warning", &StoreStats::disk_warning, "The failure, naming the path and the reason.")
      .def_readonly("remote", &StoreStats::remote, "RemoteStats (enabled=False without a remote tier).")
      .def("__repr__", [](const StoreStats& s) {
        std::ostringstream o;
        o << "StoreStats(tiers=" << s.tiers.size() << ", misses=" << s.misses << ", refusals=" << s.refusals
          << ", corrupt_reads=" << s.corrupt_reads << ", io_errors=" << s.io_errors << ")";
        return o.str();
      });
}

// EngineStats.
void def_engine_state(py::module_& m) {
  using namespace orbit;

  py::class_<EngineStats>(m, "EngineStats", "An engine's counters (Engine.stats).")
      .def_readonly("chunks", &EngineStats::chunks, "Chunks registered.")
      .def_readonly("windows", &EngineStats::windows, "Windows alive.")
      .def_readonly("pool_pages", &EngineStats::pool_pages, "KV pool pages.")
      .def_readonly("pool_free_pages", &EngineStats::pool_free_pages, "Free KV pool pages.")
      .def_readonly("pool_bytes_used", &EngineStats::pool_bytes_used, "Bytes of live pages.")
      .def_readonly("pool_canonical_sets", &EngineStats::pool_canonical_sets,
                    "Chunks whose canonical pages windows read in place (shared canonicals).")
      .def_readonly("pool_canonical_pages", &EngineStats::pool_canonical_pages,
                    "Pages of those canonicals (in pool_bytes_used once, however many windows read them).")
      .def_readonly("pool_placements", &EngineStats::pool_placements,
                    "Placements reading a shared canonical (window instances, forks' included).")
      .def_readonly("pool_patches", &EngineStats::pool_patches,
                    "Distinct patch factors those placements carry (added as they are read).")
      .def_readonly("pool_patch_bytes", &EngineStats::pool_patch_bytes,
                    "Bytes of those patch factors (host memory, not pool pages).")
      .def_readonly("canonicals_encoded", &EngineStats::canonicals_encoded, "Forwards of chunks alone.")
      .def_readonly("patches_formed", &EngineStats::patches_formed, "Patches formed.")
      .def_readonly("patch_hits", &EngineStats::patch_hits, "Stored patches reused.")
      .def_readonly("forward_tokens", &EngineStats::forward_tokens,
                    "Token-forwards over all windows' operations and background work (critical + background).")
      .def_readonly("critical_forward_tokens", &EngineStats::critical_forward_tokens,
                    "Of forward_tokens: those on the critical path (inside apply()).")
      .def_readonly("background_forward_tokens", &EngineStats::background_forward_tokens,
                    "Of forward_tokens: those run by background jobs (canonical encodes).")
      .def_readonly("check_forward_tokens", &EngineStats::check_forward_tokens,
                    "Of background_forward_tokens: the fidelity self-checks' probe forwards (Window.idle).")
      .def_readonly("fidelity_correction", &EngineStats::fidelity_correction,
                    "What every fidelity prediction is multiplied by, learned from the self-checks' measured / "
                    "predicted KL (in [1, 64]; 1 until a check finds the model predicting too little).")
      .def_readonly("fidelity_checks", &EngineStats::fidelity_checks, "Self-checks counted in fidelity_correction.")
      .def_readonly("prefix_cache_tokens", &EngineStats::prefix_cache_tokens,
                    "What a prefix cache would have forwarded on the critical path for the same window operations "
                    "(summed over windows): compare with critical_forward_tokens.")
      .def_readonly("radix_cache_tokens", &EngineStats::radix_cache_tokens,
                    "What a radix cache would have forwarded for every window's generate and disposable calls.")
      .def_readonly("critical_seconds", &EngineStats::critical_seconds,
                    "Wall time inside apply() (the critical path; background work run inline excluded).")
      .def_readonly("background_seconds", &EngineStats::background_seconds,
                    "Wall time of background jobs (canonical encode + SVD + store).")
      .def_readonly("background_jobs", &EngineStats::background_jobs, "Background jobs completed.")
      .def_readonly("background_pending", &EngineStats::background_pending, "Background jobs queued, not started.")
      .def_readonly("background_failed", &EngineStats::background_failed,
                    "Background jobs that raised (their patch is not stored).")
      .def_readonly("background_error", &EngineStats::background_error,
                    "The last background failure's message ('' if none).")
      .def_readonly("media_found", &EngineStats::media_found, "find_media() calls answered (no encoder needed).")
      .def_readonly("media_missed", &EngineStats::media_missed, "find_media() calls that found no embeddings.")
      .def_readonly("constraint_cache", &EngineStats::constraint_cache,
                    "ConstraintCacheStats: the compiled constraints generate keeps (tools, response_format).")
      .def_readonly("store", &EngineStats::store, "StoreStats (empty after close()).")
      .def("__repr__", [](const EngineStats& s) {
        std::ostringstream o;
        o << "EngineStats(chunks=" << s.chunks << ", windows=" << s.windows << ", pool_pages=" << s.pool_pages
          << ", pool_free_pages=" << s.pool_free_pages << ", canonicals_encoded=" << s.canonicals_encoded
          << ", patches_formed=" << s.patches_formed << ", patch_hits=" << s.patch_hits
          << ", forward_tokens=" << s.forward_tokens << ", critical_forward_tokens=" << s.critical_forward_tokens
          << ", background_forward_tokens=" << s.background_forward_tokens << ", background_jobs=" << s.background_jobs
          << ", background_pending=" << s.background_pending << ")";
        return o.str();
      });
}

// ConstraintCacheOptions(max_entries=, max_bytes=): Python's ints checked before they become size_t.
orbit::ConstraintCacheOptions constraint_cache_options(int64_t max_entries, int64_t max_bytes) {
  if (max_entries < 0) {
    throw py::value_error("ConstraintCacheOptions: max_entries = " + std::to_string(max_entries) +
                          " must be >= 0 (0 keeps nothing)");
  }
  if (max_bytes < 0) {
    throw py::value_error("ConstraintCacheOptions: max_bytes = " + std::to_string(max_bytes) + " must be >= 0");
  }
  orbit::ConstraintCacheOptions o;
  o.max_entries = static_cast<std::size_t>(max_entries);
  o.max_bytes = static_cast<std::size_t>(max_bytes);
  return o;
}

// ConstraintCacheOptions, ModelInfo and EngineOptions.
void def_model_and_options(py::module_& m) {
  using namespace orbit;

  py::class_<ModelInfo>(m, "ModelInfo", "The engine's model (Engine.model_info).")
      .def_readonly("origin", &ModelInfo::origin, "Path it was loaded from.")
      .def_readonly("architecture", &ModelInfo::architecture, "'llama', 'qwen2', 'qwen2_vl', 'deepseek_v2'.")
      .def_readonly("fingerprint", &ModelInfo::fingerprint, "Model fingerprint (part of every content key).")
      .def_readonly("num_layers", &ModelInfo::num_layers, "Layers.")
      .def_readonly("vocab_size", &ModelInfo::vocab_size, "Vocabulary size (token ids are 0..vocab_size-1).")
      .def_readonly("max_positions", &ModelInfo::max_positions, "Position limit.")
      .def_readonly("position_rows", &ModelInfo::position_rows, "3 for M-RoPE models (grids [3, n]), else 1.")
      .def_readonly("hidden_size", &ModelInfo::hidden_size, "Embedding width (add_embeddings needs [n, hidden_size]).")
      .def_readonly("kv_bytes_per_token", &ModelInfo::kv_bytes_per_token, "KV bytes per token, all layers, float32.")
      .def_readonly("device", &ModelInfo::device, "Where the model runs: 'cpu', 'cuda:0', ...")
      .def_readonly("dtype", &ModelInfo::dtype, "Compute dtype: 'float32', 'bfloat16' or 'float16'.")
      .def("__repr__", [](const ModelInfo& i) {
        std::ostringstream o;
        o << "ModelInfo(" << quoted(i.origin) << ", architecture=" << quoted(i.architecture)
          << ", num_layers=" << i.num_layers << ", hidden_size=" << i.hidden_size << ", vocab_size=" << i.vocab_size
          << ", max_positions=" << i.max_positions << ", position_rows=" << i.position_rows << ")";
        return o.str();
      });

  py::class_<ConstraintCacheOptions>(
      m, "ConstraintCacheOptions",
      "Bounds of an engine's cache of compiled constraints (orbit/constraint_cache.h): Engine(constraint_cache=...),\n"
      "read back as EngineOptions.constraint_cache and, with what it holds, Engine.stats.constraint_cache.")
      .def(py::init(&constraint_cache_options), py::kw_only(),
           py::arg("max_entries") = static_cast<int64_t>(ConstraintCacheOptions{}.max_entries),
           py::arg("max_bytes") = static_cast<int64_t>(ConstraintCacheOptions{}.max_bytes),
           "max_entries: constraints kept at most (64; 0 keeps nothing: every call compiles); max_bytes: the bytes\n"
           "they hold at most, grammars and token masks counted (256 MiB; the entry just used is kept even past it).\n"
           "Past either bound the least recently used are dropped first. ValueError naming the field for a\n"
           "negative value.")
      .def_readonly("max_entries", &ConstraintCacheOptions::max_entries, "Constraints kept at most (0 = none).")
      .def_readonly("max_bytes", &ConstraintCacheOptions::max_bytes, "Bytes they hold at most, masks included.")
      .def("__repr__", [](const ConstraintCacheOptions& o) {
        return "ConstraintCacheOptions(max_entries=" + std::to_string(o.max_entries) +
               ", max_bytes=" + std::to_string(o.max_bytes) + ")";
      });

  py::class_<EngineOptions>(m, "EngineOptions", "The options an Engine was opened with (Engine.options).")
      .def_readonly("model", &EngineOptions::model, "Model path.")
      .def_readonly("store_dir", &EngineOptions::store_dir, "Store directory ('' = memory only).")
      .def_readonly("pool_bytes", &EngineOptions::pool_bytes, "KV pool bytes.")
      .def_readonly("page_size", &EngineOptions::page_size, "Tokens per page.")
      .def_readonly("host_budget_bytes", &EngineOptions::host_budget_bytes, "Store host-tier budget.")
      .def_readonly("disk_budget_bytes", &EngineOptions::disk_budget_bytes, "Store disk budget (0 = unlimited).")
      .def_readonly("threads", &EngineOptions::threads, "Intra-op threads (0 = process setting).")
      .def_readonly("remote", &EngineOptions::remote, "Remote tier URL ('' = none).")
      .def_readonly("remote_ttl_seconds", &EngineOptions::remote_ttl_seconds, "Remote entry TTL (0 = never).")
      .def_readonly("device", &EngineOptions::device, "Device ('cpu', 'cuda', 'cuda:N').")
      .def_readonly("dtype", &EngineOptions::dtype, "Compute dtype ('float32', 'bfloat16', 'float16').")
      .def_readonly("eviction", &EngineOptions::eviction, "Store eviction policy ('lru', 'cost-aware').")
      .def_readonly("cold_tier", &EngineOptions::cold_tier, "How canonicals go to disk ('exact', 'int8').")
      .def_readonly("device_tier_bytes", &EngineOptions::device_tier_bytes, "Device tier bytes (0 = none).")
      .def_readonly("embedding_cache", &EngineOptions::embedding_cache, "Media embeddings kept for find_media().")
      .def_readonly("max_idle_chunks", &EngineOptions::max_idle_chunks,
                    "Chunks kept registered beyond those in use (0 = all, for the engine's life).")
      .def_readonly("background", &EngineOptions::background,
                    "BackgroundMode (where canonicals and patches are formed).")
      .def_readonly("constraint_cache", &EngineOptions::constraint_cache,
                    "ConstraintCacheOptions: the bounds of the engine's cache of compiled constraints.")
      .def("__repr__", [](const EngineOptions& o) {
        std::ostringstream s;
        s << "EngineOptions(model=" << quoted(o.model) << ", store_dir=" << quoted(o.store_dir)
          << ", pool_bytes=" << o.pool_bytes << ", page_size=" << o.page_size
          << ", host_budget_bytes=" << o.host_budget_bytes << ", disk_budget_bytes=" << o.disk_budget_bytes
          << ", threads=" << o.threads << ", device=" << quoted(o.device) << ", dtype=" << quoted(o.dtype)
          << ", background=" << quoted(background_mode_name(o.background)) << ")";
        return s.str();
      });
}

// what reads return: logprobs, Generation, losses, disposability.
void def_reading_results(py::module_& m) {
  using namespace orbit;

  // ---- reading results ------------------------------------------------------------------------------
  py::class_<TokenLogprob>(m, "TokenLogprob", "One token's log probability at a step (Window.generate(logprobs=True)).")
      .def_readonly("token", &TokenLogprob::token, "The token id.")
      .def_readonly("logprob", &TokenLogprob::logprob,
                    "Natural log probability (after penalties, logit_bias and "
                    "the constraint's mask, at temperature 1).")
      .def_property_readonly(
          "bytes", [](const TokenLogprob& t) { return py::bytes(t.bytes); },
          "The bytes the token writes at its place (b'' for EOS/BOS/special tokens; may be part of a character).")
      .def("__repr__", [](const TokenLogprob& t) {
        std::ostringstream s;
        s << "TokenLogprob(token=" << t.token << ", logprob=" << t.logprob
          << ", bytes=" << py::repr(py::bytes(t.bytes)).cast<std::string>() << ")";
        return s.str();
      });
  py::class_<StepLogprobs>(m, "StepLogprobs", "A generated token's log probability and its step's most likely tokens.")
      .def_readonly("chosen", &StepLogprobs::chosen, "The generated token's TokenLogprob.")
      .def_readonly("top", &StepLogprobs::top,
                    "The top_logprobs most likely tokens, most likely first (masked tokens left out).")
      .def_property_readonly(
          "token", [](const StepLogprobs& s) { return s.chosen.token; }, "chosen.token")
      .def_property_readonly(
          "logprob", [](const StepLogprobs& s) { return s.chosen.logprob; }, "chosen.logprob")
      .def("__repr__", [](const StepLogprobs& s) {
        std::ostringstream o;
        o << "StepLogprobs(token=" << s.chosen.token << ", logprob=" << s.chosen.logprob << ", top=" << s.top.size()
          << ")";
        return o.str();
      });
  py::class_<Generation>(m, "Generation", py::dynamic_attr(), "The result of Window.generate().")
      .def_readonly("tokens", &Generation::tokens,
                    "Generated tokens (a stop token, and a stop string's tokens, included when they ended the run).")
      .def_readonly("stop_reason", &Generation::stop_reason,
                    "'stop_token', 'stop_string' (generate's stop; a token that is a stop token and completes a "
                    "stop string gives 'stop_string', the cut that applies), 'max_tokens', 'position_limit', "
                    "'cancelled' (on_text returned False, or a stream left early); with a constraint also "
                    "'constraint_complete' or 'constraint_no_token'.")
      .def_readonly("prompt_forward_tokens", &Generation::prompt_forward_tokens,
                    "Query tokens forwarded: all, or only the last when exact reuse held the others.")
      .def_property_readonly(
          "text", [](const Generation& g) { return utf8_text(g.text); },
          "The tokens as text when the engine has a tokenizer, else ''; with stop_reason 'stop_string', up to the "
          "stop string. Bytes that are not UTF-8 (a character max_tokens cut) read as U+FFFD.")
      .def_readonly("seconds", &Generation::seconds, "Wall time.")
      .def_readonly("logprobs", &Generation::logprobs,
                    "With generate(logprobs=True): one StepLogprobs per generated token, else [].")
      .def("__len__", [](const Generation& g) { return g.tokens.size(); })
      .def("__iter__", [](const Generation& g) { return py::iter(py::cast(g.tokens)); })
      .def("__repr__", [](const Generation& g) {
        return "Generation(tokens=" + join(g.tokens) + ", stop_reason=" + quoted(g.stop_reason) + ")";
      });

  py::class_<InstanceLoss>(m, "InstanceLoss",
                           "One instance's own share of a window's fidelity loss (Window.loss_by_instance()).")
      .def_readonly("instance", &InstanceLoss::instance, "The instance.")
      .def_readonly("label", &InstanceLoss::label, "The chunk's label, or 'turn'.")
      .def_readonly("position", &InstanceLoss::position, "Its first position.")
      .def_readonly("length", &InstanceLoss::length, "Its tokens.")
      .def_readonly("formed_by", &InstanceLoss::formed_by, "How its KV was made.")
      .def_readonly("match", &InstanceLoss::match, "The patch match, for apply_patch.")
      .def_readonly("context_changed", &InstanceLoss::context_changed,
                    "Kept as-is over a change of its context since it was formed.")
      .def_readonly("kv_change", &InstanceLoss::kv_change, "||held - exact|| / ||exact|| over its KV rows.")
      .def_readonly("measured_kl", &InstanceLoss::measured_kl,
                    "KL (nats, mean over the query's rows) vs a re-prefill with this instance alone approximate.")
      .def_readonly("predicted_kl", &InstanceLoss::predicted_kl, "What the fidelity model predicts it carries.")
      .def("__repr__", [](const InstanceLoss& l) {
        std::ostringstream o;
        o << "InstanceLoss(instance=" << l.instance << ", label=" << quoted(l.label) << ", position=" << l.position
          << ", measured_kl=" << l.measured_kl << ", predicted_kl=" << l.predicted_kl << ")";
        return o.str();
      });

  py::class_<DisposabilityReport>(m, "DisposabilityReport", "The result of Window.disposable().")
      .def_readonly("instance", &DisposabilityReport::instance, "The instance examined.")
      .def_readonly("disposable", &DisposabilityReport::disposable,
                    "The greedy answer is the same without its conditioning.")
      .def_readonly("answer", &DisposabilityReport::answer, "Greedy decode with the window as it is.")
      .def_readonly("answer_without", &DisposabilityReport::answer_without,
                    "... with the instance's KV replaced by its canonical.")
      .def_readonly("kl_first", &DisposabilityReport::kl_first, "KL(as-is || without) of the first answer token.")
      .def("__bool__", [](const DisposabilityReport& r) { return r.disposable; })
      .def("__repr__", [](const DisposabilityReport& r) {
        std::ostringstream o;
        o << "DisposabilityReport(instance=" << r.instance << ", disposable=" << (r.disposable ? "True" : "False")
          << ", answer=" << join(r.answer) << ", answer_without=" << join(r.answer_without)
          << ", kl_first=" << r.kl_first << ")";
        return o.str();
      });
}

}  // namespace

void init_types(py::module_& m) {
  def_enums(m);
  def_chunk_ref(m);
  def_plans(m);
  def_reports(m);
  def_window_state(m);
  def_store_stats(m);
  def_engine_state(m);
  def_model_and_options(m);
  def_reading_results(m);
}

}  // namespace orbit_py
