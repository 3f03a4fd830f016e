// Enums and the read-only value objects: ChunkRef, PlanStep, Plan, ApplyReport, InstanceInfo, stats and
// infos. Each mirrors its C++ struct field for field (the headers in sdk/include/orbit/ document them).
#include <pybind11/stl.h>

#include <iomanip>
#include <sstream>

#include "bindings.h"
#include "convert.h"
#include "enums.h"
#include "field_repr.h"
#include "orbit/engine.h"

namespace orbit_py {

void def_store_stats(py::module_& m);  // types_engine.cpp: the store's and engine's counters, model and options
void def_engine_state(py::module_& m);
void def_model_and_options(py::module_& m);

namespace {

// orbit::chunk_kind_name is declared in orbit/chunk.h but not yet defined by the SDK: a local copy.
const char* kind_name(orbit::ChunkKind k) noexcept {
  switch (k) {
    case orbit::ChunkKind::kTokens: return "tokens";
    case orbit::ChunkKind::kEmbeddings: return "embeddings";
  }
  return "unknown";
}

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
  refuse_unknown_values(
      bind_enum<ChunkKind>(m, "ChunkKind", "What a chunk holds: token ids or input embeddings (media).", kind_name)
          .value("tokens", ChunkKind::kTokens)
          .value("embeddings", ChunkKind::kEmbeddings));
  refuse_unknown_values(
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
          .value("sync", Operation::kSync));
  refuse_unknown_values(
      bind_enum<StepAction>(m, "StepAction", "What a plan step does to one instance (see orbit/plan.h).",
                            step_action_name)
          .value("keep", StepAction::kKeep, "content unchanged, relocated if it moved (rotation only)")
          .value("canonical", StepAction::kCanonical, "the canonical alone is exact (nothing precedes the chunk)")
          .value("apply_patch", StepAction::kApplyPatch, "canonical + a stored patch")
          .value("load_conditioned", StepAction::kLoadConditioned, "a stored conditioned KV for exactly this context")
          .value("form", StepAction::kForm, "one forward in context; its patch is formed and stored")
          .value("reprefill", StepAction::kReprefill, "one forward in context, nothing stored")
          .value("blind", StepAction::kBlind, "the canonical relocated, no repair (approximate)")
          .value("recompute", StepAction::kRecompute, "some tokens forwarded in context (CacheBlend / first-k)")
          .value("prefill_turn", StepAction::kPrefillTurn, "a live turn prefilled in context")
          .value("evict", StepAction::kEvict, "the instance leaves the window (its canonical stays stored)"));
  refuse_unknown_values(
      bind_enum<PatchMatch>(m, "PatchMatch", "How the patch of an apply_patch step was found.", patch_match_name)
          .value("none", PatchMatch::kNone)
          .value("exact", PatchMatch::kExact)
          .value("orbit", PatchMatch::kOrbit)
          .value("stale", PatchMatch::kStale));
  refuse_unknown_values(
      bind_enum<MissAction>(m, "MissAction", "What a window does when no usable stored patch exists.", miss_action_name)
          .value("form", MissAction::kForm, "one forward in context; a patch stored for next time")
          .value("blind", MissAction::kBlind, "the canonical, relocated; no repair")
          .value("reprefill", MissAction::kReprefill, "one forward in context, nothing stored")
          .value("token_recompute", MissAction::kTokenRecompute,
                 "CacheBlend: recompute the top recompute_ratio of tokens")
          .value("first_k", MissAction::kFirstK, "EPIC: recompute the first first_k tokens in context"));
  refuse_unknown_values(
      bind_enum<SurvivorAction>(m, "SurvivorAction", "What happens to instances whose context changed.", survivor_name)
          .value("keep", SurvivorAction::kKeep, "relocation only")
          .value("recondition", SurvivorAction::kRecondition,
                 "look up a patch for the new context, else the miss action"));
  refuse_unknown_values(
      bind_enum<StalePatch>(m, "StalePatch", "Whether a patch formed under another context may be used.", stale_name)
          .value("rebuild", StalePatch::kRebuild, "never: treat as a miss")
          .value("accept", StalePatch::kAccept, "use the closest one when its divergence <= max_divergence"));
  refuse_unknown_values(
      bind_enum<BackgroundMode>(
          m, "BackgroundMode",
          "Where a chunk's canonical and patch are formed after its first sight (Engine(background=...)).",
          background_mode_name)
          .value("thread", BackgroundMode::kThread, "a worker thread forms them as they are queued (the default)")
          .value("deferred", BackgroundMode::kDeferred, "they wait for Engine.run_background() (idle time you pick)")
          .value("inline", BackgroundMode::kInline, "at the end of the apply() that queued them, on its thread"));
  refuse_unknown_values(bind_enum<StoreTier>(m, "StoreTier", "A tier of the chunk store.", store_tier_name_of)
                            .value("device", StoreTier::kDevice)
                            .value("host", StoreTier::kHost)
                            .value("disk", StoreTier::kDisk)
                            .value("remote", StoreTier::kRemote));
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
      .def_property_readonly(
          "valid", [](const ChunkRef& c) { return chunk_registered(c.key); },
          "True while an open engine holds the chunk: the engine that made it (or another of this process that\n"
          "registered the same content: references compare by key). False once that engine is closed, once\n"
          "the engine forgot the chunk (EngineOptions.max_idle_chunks: add it again), and for an empty reference.\n"
          "Asking is no use of the chunk: it does not change which one max_idle_chunks forgets next.")
      .def(
          "__len__", [](const ChunkRef& c) { return c.length; }, "Tokens.")
      .def(
          "__eq__", [](const ChunkRef& a, const ChunkRef& b) { return a == b; }, py::is_operator())
      .def(
          "__ne__", [](const ChunkRef& a, const ChunkRef& b) { return a != b; }, py::is_operator())
      .def("__hash__", [](const ChunkRef& c) { return py::hash(py::str(c.key)); })
      .def("__repr__", &chunk_repr);
}

// PlanStep: one step of a plan.
void def_plan_step(py::module_& m) {
  using namespace orbit;
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
      .def_readonly("rank_k", &PlanStep::rank_k,
                    "Patch rank of keys this step forms or reads (a stale match: the read patch's, which may be\n"
                    "above the policy's); 0 when no patch is involved.")
      .def_readonly("rank_v", &PlanStep::rank_v, "As rank_k, for values.")
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
                    "The fidelity model's next-token KL vs a re-prefill this instance carries after the step\n"
                    "(the statistic Plan.predicted_kl describes).")
      .def_readonly("shortfall_kl", &PlanStep::shortfall_kl,
                    "Of predicted_kl, dynamic-NTK RoPE's: the instance's content formed in a window of another\n"
                    "length than the window after the plan (priced anew by every plan from the length it was\n"
                    "formed at); 0 for every other model.")
      .def_readonly("quantized_kl", &PlanStep::quantized_kl,
                    "Of predicted_kl, the int8 cold tier's: the stored KV this step reads came back from int8\n"
                    "rows (Engine cold_tier='int8'); 0 for exact KV.")
      .def_readonly("reused_tokens", &PlanStep::reused_tokens,
                    "Leading rows loaded from KV stored behind the same tokens and KV states (a radix cache's\n"
                    "partial match; forward_tokens counts only the rest); 0: none.")
      .def_readonly("reused_formed_window", &PlanStep::reused_formed_window,
                    "Dynamic-NTK RoPE past the anchor: the window length the loaded rows (reused_tokens) were\n"
                    "formed at when it is not the plan's rope window (a read's query and answer, loaded by the\n"
                    "next turn; shortfall_kl prices it); 0 otherwise.")
      .def_readonly("sensitivity", &PlanStep::sensitivity,
                    "The measured sensitivity the prediction was scaled by (a chunk's patches', a turn's own;\n"
                    "a chunk never measured: the largest patch sensitivity the engine measured, its prior);\n"
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
}

// Plan: what an operation would do, its steps and totals.
void def_plan(py::module_& m) {
  using namespace orbit;
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
                    "budgeted policy keeps it within policy.kl_budget when it can. What it predicts: KL(p_ref ||\n"
                    "p), p_ref from Window.reference_logits and p from Window.logits (all_rows=True) of a short\n"
                    "query read after the window (a few tokens of text), averaged over the query's rows; not\n"
                    "the largest row's, which runs several times the mean. An estimate from plan metadata, not a\n"
                    "bound: on the bundled models it errs high on text that starts afresh and can err low on\n"
                    "random ids (planner/fidelity_model.h).")
      .def_readonly("estimated_seconds", &Plan::estimated_seconds, "Critical-path seconds by the cost model (sum).")
      .def_readonly(
          "policy", &Plan::policy,
          "The WindowPolicy it was made under, for the record; apply() follows the steps, which carry what it decided.")
      .def_readonly("attention", &Plan::attention, "How reads attend over the KV on the engine's device.")
      .def_readonly("bytes_moved", &Plan::bytes_moved, "Estimated store bytes read (sum over steps).")
      .def_readonly("device_bytes_after", &Plan::device_bytes_after, "KV bytes (whole pages) the window holds after.")
      .def_readonly("window_tokens_after", &Plan::window_tokens_after, "Tokens in the window after.")
      .def_readonly("rope_window", &Plan::rope_window,
                    "Dynamic-NTK RoPE past its anchor: the window length the plan's forwards run at\n"
                    "(window_tokens_after), so what it forms carries the rotary base the window is read at; 0 (each\n"
                    "forward at its own end) for every other model and window.")
      .def_readonly("exact", &Plan::exact, "Every instance's KV equals a re-prefill after apply.")
      .def_readonly("cascade", &Plan::cascade, "Recall: dependents re-conditioned, in topological order.")
      .def_readonly("refusal", &Plan::refusal,
                    "Non-empty: apply() will refuse the plan with this reason (nothing runs; the totals are 0).")
      .def_readonly("refused_capacity", &Plan::refused_capacity,
                    "The refusal is a capacity one (apply raises CapacityError; else RefusedError).")
      .def_readonly("pool_pages_short", &Plan::pool_pages_short,
                    "A refusal for the engine's KV pool: the pages the plan needs beyond those free as of planning\n"
                    "(how much room closing other windows must give back); 0 for any other plan.")
      .def(
          "count",
          [](const Plan& p, const TypedArg<StepAction>& action) { return p.count(action.get("Plan.count: action")); },
          py::arg("action"), "Number of steps with this StepAction (TypeError naming action for another type).")
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

// PlanStep and Plan, PlanStep first so that the signatures of Plan name it.
void def_plans(py::module_& m) {
  def_plan_step(m);
  def_plan(m);
}

// ApplyReport and IdleReport.
void def_reports(py::module_& m) {
  using namespace orbit;

  py::class_<ApplyReport>(m, "ApplyReport", "What apply() did (measured, not estimated).")
      .def_readonly("op", &ApplyReport::op, "Operation.")
      .def_readonly("forward_tokens", &ApplyReport::forward_tokens, "Token-forwards actually computed.")
      .def_readonly("patches_formed", &ApplyReport::patches_formed,
                    "Patch formations this operation queued; background work forms and stores each\n"
                    "(EngineStats.patches_formed counts those formed: one dropped under max_background_bytes, or\n"
                    "found stored already, forms none).")
      .def_readonly("patch_hits", &ApplyReport::patch_hits, "Stored patches (or conditioned KV) reused.")
      .def_readonly("canonicals_encoded", &ApplyReport::canonicals_encoded, "Canonicals encoded (chunk alone).")
      .def_readonly("bytes_moved", &ApplyReport::bytes_moved, "Bytes read from the store.")
      .def_readonly("seconds", &ApplyReport::seconds, "Wall time of apply().")
      .def_readonly("device_bytes", &ApplyReport::device_bytes, "KV bytes (whole pages) the window holds now.")
      .def_readonly("added", &ApplyReport::added, "Instance ids the operation created.")
      .def_readonly("removed", &ApplyReport::removed, "Instance ids it evicted.")
      .def("__repr__", &fields_repr);

  py::class_<IdleReport>(m, "IdleReport",
                         "What Window.idle() (or heal / prepare_recalls / prepare_moves / prepare_sync) did with idle "
                         "time; all background work.")
      .def_readonly("predicted_kl", &IdleReport::predicted_kl, "The window's predicted KL before.")
      .def_readonly("heal_planned", &IdleReport::heal_planned,
                    "Window.idle() planned a heal: the predicted KL of the instances it would re-form (the first\n"
                    "formed approximately or over a changed context, and every one after it) was at least\n"
                    "policy.heal_min_kl, or the sampled self-check chose the window. Not when only what the heal\n"
                    "keeps passes the threshold (a dynamic-NTK model's shortfall of exact content formed at a\n"
                    "shorter window).")
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
      .def_readonly("hints_trusted", &IdleReport::hints_trusted,
                    "Window.idle() prepared no learned lists or moves: the agent's own prepare_sync hints reached\n"
                    "as far as they would have for WindowPolicy.trust_hints syncs in a row. From prepare_sync: the\n"
                    "hint was also prepared one message further (the learned lists and moves that are the hint and\n"
                    "one message more).")
      .def_readonly("predictions_missed", &IdleReport::predictions_missed,
                    "Window.idle() prepared no learned lists or moves: those learned from the agent's last edits\n"
                    "would not have served its syncs since (an edit made once, such as a summary, is not prepared\n"
                    "again at every step; WindowPolicy.prepare_lists).")
      .def_readonly("prepare_forward_tokens", &IdleReport::prepare_forward_tokens,
                    "Token-forwards of the prepared recalls, moves and prepare_sync.")
      .def_readonly("forward_tokens", &IdleReport::forward_tokens, "heal + check + prepare.")
      .def_readonly("seconds", &IdleReport::seconds, "Wall time.")
      .def_readonly("stopped", &IdleReport::stopped,
                    "The call stopped before every preparation was made (C++ Window::idle(stop)).")
      .def("__repr__", &fields_repr);
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
      .def_readonly("past_bytes", &WindowStats::past_bytes,
                    "Host bytes of the window's KV kept as one contiguous past between reads (Engine's window_past).")
      .def_readonly("evicted", &WindowStats::evicted, "Chunk instances evicted and recallable.")
      .def_readonly("forward_tokens", &WindowStats::forward_tokens,
                    "Token-forwards over applied operations, and the canonical disposable encodes when none is "
                    "stored (the reads' query forwards are apart: query_forward_tokens, logits_forward_tokens).")
      .def_readonly("critical_forward_tokens", &WindowStats::critical_forward_tokens,
                    "Of forward_tokens: those on the critical path (heals and idle-time preparation excluded; "
                    "disposable's canonical encode included, as in EngineStats).")
      .def_readonly("query_forward_tokens", &WindowStats::query_forward_tokens,
                    "Query tokens forwarded by this window's generate (Generation.prompt_forward_tokens) and "
                    "disposable (the query twice) calls, on the critical path, not in forward_tokens. "
                    "critical_forward_tokens + query_forward_tokens is what compares with radix_cache_tokens.")
      .def_readonly("logits_forward_tokens", &WindowStats::logits_forward_tokens,
                    "Query tokens forwarded by this window's logits() calls, on the critical path, not in "
                    "forward_tokens (radix_cache_tokens does not count logits() calls).")
      .def_readonly("prefix_cache_tokens", &WindowStats::prefix_cache_tokens,
                    "What a prefix cache would have forwarded for the same operations (KV reused only behind a "
                    "prefix computed before): divide critical_forward_tokens by it for the saving.")
      .def_readonly("radix_cache_tokens", &WindowStats::radix_cache_tokens,
                    "What SGLang's radix cache (token granular, holding every call's window, query and generated "
                    "tokens in the engine's KV memory) would forward for this window's generate and disposable "
                    "calls: the strongest yardstick. Compare with critical_forward_tokens + query_forward_tokens.")
      .def_readonly("operations", &WindowStats::operations, "Applied operations.")
      .def("__repr__", [](const WindowStats& s) {
        std::ostringstream o;
        o << "WindowStats(instances=" << s.instances << ", chunk_instances=" << s.chunk_instances
          << ", turns=" << s.turns << ", tokens=" << s.tokens << ", device_bytes=" << s.device_bytes
          << ", shared_pages=" << s.shared_pages << ", past_bytes=" << s.past_bytes << ", evicted=" << s.evicted
          << ", forward_tokens=" << s.forward_tokens << ", critical_forward_tokens=" << s.critical_forward_tokens
          << ", query_forward_tokens=" << s.query_forward_tokens
          << ", logits_forward_tokens=" << s.logits_forward_tokens << ", prefix_cache_tokens=" << s.prefix_cache_tokens
          << ", radix_cache_tokens=" << s.radix_cache_tokens << ", operations=" << s.operations << ")";
        return o.str();
      });
}

// What Window.generate returns: TokenLogprob, StepLogprobs (its logprobs) and Generation.
void def_generation(py::module_& m) {
  using namespace orbit;
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
                    "The top_logprobs most likely tokens, most likely first; where a constraint allows fewer, "
                    "then the masked tokens most likely before the mask, at logprob -inf.")
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
                    "Query tokens forwarded: all, or only the last when exact reuse held the others; under "
                    "Policy.read_attention_weight, plus the query's look when the read's plan repaired the window.")
      .def_property_readonly(
          "text", [](const Generation& g) { return utf8_text(g.text); },
          "The tokens as text when the engine has a tokenizer, else ''; with stop_reason 'stop_string', up to the "
          "stop string. Bytes that are not UTF-8 (a character max_tokens cut) read as U+FFFD.")
      .def_readonly("seconds", &Generation::seconds, "Wall time.")
      .def_readonly("logprobs", &Generation::logprobs,
                    "With generate(logprobs=True): one StepLogprobs per generated token, else [].")
      .def("__len__", [](const Generation& g) { return g.tokens.size(); })
      .def("__iter__", [](const Generation& g) { return py::iter(py::cast(g.tokens)); })
      .def("__repr__", &fields_repr);
}

// What the window's fidelity reads return: InstanceLoss (Window.loss_by_instance) and DisposabilityReport
// (Window.disposable).
void def_loss_reports(py::module_& m) {
  using namespace orbit;
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
      .def("__repr__", &fields_repr);

  py::class_<DisposabilityReport>(m, "DisposabilityReport", "The result of Window.disposable().")
      .def_readonly("instance", &DisposabilityReport::instance, "The instance examined.")
      .def_readonly("disposable", &DisposabilityReport::disposable,
                    "The greedy answer is the same without its conditioning.")
      .def_readonly("answer", &DisposabilityReport::answer, "Greedy decode with the window as it is.")
      .def_readonly("answer_without", &DisposabilityReport::answer_without,
                    "... with the instance's KV replaced by its canonical.")
      .def_readonly("kl_first", &DisposabilityReport::kl_first, "KL(as-is || without) of the first answer token.")
      .def("__bool__", [](const DisposabilityReport& r) { return r.disposable; })
      .def("__repr__", &fields_repr);
}

// The results of reading a window: generations and fidelity reports.
void def_reading_results(py::module_& m) {
  def_generation(m);
  def_loss_reports(m);
}

}  // namespace

void init_types(py::module_& m) {
  def_enums(m);
  def_chunk_ref(m);
  def_plans(m);
  def_reports(m);
  def_window_state(m);
  def_store_stats(m);  // types_engine.cpp
  def_engine_state(m);
  def_model_and_options(m);
  def_reading_results(m);
}

}  // namespace orbit_py
