// WindowPolicy (exported as both orbit.WindowPolicy and orbit.Policy): a preset spec string
// (orbit::parse_policy) and/or keyword arguments, with a validated property per field.
#include <pybind11/stl.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "orbit/engine.h"
#include "orbit/policy.h"

namespace orbit_py {

namespace {

using orbit::WindowPolicy;
using Setter = std::function<void(WindowPolicy&, py::handle)>;

// An enum field given as the enum, its member name ("token_recompute") or its C++ name ("token-recompute").
template <typename E>
E enum_value(py::handle v, const char* field, const std::vector<std::pair<std::string, E>>& names) {
  if (py::isinstance<E>(v)) return to_enum_member<E>(v, (std::string("WindowPolicy.") + field).c_str());
  if (py::isinstance<py::str>(v)) {
    const std::string s = utf8_arg(v, std::string("WindowPolicy.") + field);
    for (const auto& [name, value] : names) {
      std::string dashed = name;
      for (char& c : dashed) c = c == '_' ? '-' : c;
      if (s == name || s == dashed) return value;
    }
  }
  std::string valid;
  for (const auto& [name, value] : names) valid += (valid.empty() ? "" : ", ") + name;
  if (!py::isinstance<py::str>(v)) {
    throw py::type_error(std::string("WindowPolicy.") + field + ": expected a string or enum, got " + type_name(v) +
                         " (valid: " + valid + ")");
  }
  throw py::value_error(std::string("WindowPolicy.") + field + ": unknown value " + std::string(py::repr(v)) +
                        " (valid: " + valid + ")");
}

// A float field, read as generate()'s float arguments are (to_float: a float, an int or a numpy number, not a bool:
// "WindowPolicy.kl_budget: expected float, got bool"), in [lo, hi] (lo excluded when lo_open).
double number(py::handle v, const char* field, double lo, double hi, bool lo_open) {
  const double x = to_float(v, (std::string("WindowPolicy.") + field).c_str());
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    std::ostringstream o;
    o << "WindowPolicy." << field << " = " << x << " must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    throw py::value_error(o.str());
  }
  return x;
}

bool boolean(py::handle v, const char* field) { return to_bool(v, (std::string("WindowPolicy.") + field).c_str()); }

// A count: an int >= `lo` (to_int: a bool is refused, though Python calls it an int; TypeError naming the field).
int64_t count(py::handle v, const char* field, int64_t lo = 0) {
  const int64_t n = to_int(v, (std::string("WindowPolicy.") + field).c_str());
  if (n < lo) {
    throw py::value_error(std::string("WindowPolicy.") + field + " = " + std::to_string(n) +
                          " must be >= " + std::to_string(lo));
  }
  return n;
}

// A rank: a positive int, or "full" (every singular direction). A negative int is refused: -1 read as
// "full" turned a typo such as rank=-1 into a full-rank patch without a word. The int is read as the counts
// are (to_int: an int or a numpy integer, never a bool: "WindowPolicy.rank: expected int, got bool"); a str
// other than "full" is refused naming both forms.
int64_t rank(py::handle v, const char* field) {
  if (py::isinstance<py::str>(v)) {
    if (v.cast<std::string>() == "full") return -1;
    throw py::type_error(std::string("WindowPolicy.") + field + ": expected a positive int or 'full', got " +
                         std::string(py::repr(v)));
  }
  const int64_t r = to_int(v, (std::string("WindowPolicy.") + field).c_str());
  if (r < 1) {
    throw py::value_error(std::string("WindowPolicy.") + field + " = " + std::to_string(r) +
                          " must be a positive int or 'full' (every singular direction)");
  }
  return r;
}

const std::vector<std::pair<std::string, orbit::MissAction>> kMiss = {
    {"form", orbit::MissAction::kForm},
    {"blind", orbit::MissAction::kBlind},
    {"reprefill", orbit::MissAction::kReprefill},
    {"token_recompute", orbit::MissAction::kTokenRecompute},
    {"first_k", orbit::MissAction::kFirstK}};
const std::vector<std::pair<std::string, orbit::SurvivorAction>> kSurvivors = {
    {"keep", orbit::SurvivorAction::kKeep}, {"recondition", orbit::SurvivorAction::kRecondition}};
const std::vector<std::pair<std::string, orbit::StalePatch>> kStale = {{"rebuild", orbit::StalePatch::kRebuild},
                                                                       {"accept", orbit::StalePatch::kAccept}};

// Field name -> validated setter; also the set of keyword arguments Policy() accepts.
const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"on_miss", [](WindowPolicy& p, py::handle v) { p.on_miss = enum_value(v, "on_miss", kMiss); }},
      {"survivors", [](WindowPolicy& p, py::handle v) { p.survivors = enum_value(v, "survivors", kSurvivors); }},
      {"stale", [](WindowPolicy& p, py::handle v) { p.stale = enum_value(v, "stale", kStale); }},
      {"max_divergence",
       [](WindowPolicy& p, py::handle v) { p.max_divergence = number(v, "max_divergence", 0, 1, false); }},
      {"rank", [](WindowPolicy& p, py::handle v) { p.rank_k = p.rank_v = rank(v, "rank"); }},
      {"rank_k", [](WindowPolicy& p, py::handle v) { p.rank_k = rank(v, "rank_k"); }},
      {"rank_v", [](WindowPolicy& p, py::handle v) { p.rank_v = rank(v, "rank_v"); }},
      {"deep_only", [](WindowPolicy& p, py::handle v) { p.deep_only = boolean(v, "deep_only"); }},
      {"deep_energy", [](WindowPolicy& p, py::handle v) { p.deep_energy = number(v, "deep_energy", 0, 1, true); }},
      {"reuse_stored", [](WindowPolicy& p, py::handle v) { p.reuse_stored = boolean(v, "reuse_stored"); }},
      {"use_orbit_patches",
       [](WindowPolicy& p, py::handle v) { p.use_orbit_patches = boolean(v, "use_orbit_patches"); }},
      {"cascade_on_recall",
       [](WindowPolicy& p, py::handle v) { p.cascade_on_recall = boolean(v, "cascade_on_recall"); }},
      {"store_conditioned",
       [](WindowPolicy& p, py::handle v) { p.store_conditioned = boolean(v, "store_conditioned"); }},
      {"reuse_computed", [](WindowPolicy& p, py::handle v) { p.reuse_computed = boolean(v, "reuse_computed"); }},
      {"cost_aware", [](WindowPolicy& p, py::handle v) { p.cost_aware = boolean(v, "cost_aware"); }},
      {"expected_reuse",
       [](WindowPolicy& p, py::handle v) { p.expected_reuse = number(v, "expected_reuse", 0, 1e9, false); }},
      {"recompute_ratio",
       [](WindowPolicy& p, py::handle v) { p.recompute_ratio = number(v, "recompute_ratio", 0, 1, true); }},
      {"kl_budget", [](WindowPolicy& p, py::handle v) { p.kl_budget = number(v, "kl_budget", 0, 1e9, false); }},
      {"defer_repairs", [](WindowPolicy& p, py::handle v) { p.defer_repairs = boolean(v, "defer_repairs"); }},
      {"heal_when_idle", [](WindowPolicy& p, py::handle v) { p.heal_when_idle = boolean(v, "heal_when_idle"); }},
      {"self_check", [](WindowPolicy& p, py::handle v) { p.self_check = boolean(v, "self_check"); }},
      {"heal_min_kl", [](WindowPolicy& p, py::handle v) { p.heal_min_kl = number(v, "heal_min_kl", 0, 1e9, false); }},
      {"prepare_recalls", [](WindowPolicy& p, py::handle v) { p.prepare_recalls = count(v, "prepare_recalls"); }},
      {"prepare_moves", [](WindowPolicy& p, py::handle v) { p.prepare_moves = count(v, "prepare_moves"); }},
      {"prepare_lists", [](WindowPolicy& p, py::handle v) { p.prepare_lists = count(v, "prepare_lists"); }},
      {"trust_hints", [](WindowPolicy& p, py::handle v) { p.trust_hints = count(v, "trust_hints"); }},
      {"read_through", [](WindowPolicy& p, py::handle v) { p.read_through = number(v, "read_through", 0, 1, false); }},
      {"attention_weight",
       [](WindowPolicy& p, py::handle v) { p.attention_weight = number(v, "attention_weight", 0, 1e6, false); }},
      {"content_weight",
       [](WindowPolicy& p, py::handle v) { p.content_weight = number(v, "content_weight", 0, 1e6, false); }},
      {"read_attention_weight",
       [](WindowPolicy& p, py::handle v) {
         p.read_attention_weight = number(v, "read_attention_weight", 0, 1e6, false);
       }},
      {"read_attention_raised_only",
       [](WindowPolicy& p, py::handle v) { p.read_attention_raised_only = boolean(v, "read_attention_raised_only"); }},
      {"first_k", [](WindowPolicy& p, py::handle v) { p.first_k = count(v, "first_k", 1); }},
  };
  return table;
}

void apply_kwargs(WindowPolicy& p, const py::kwargs& kwargs) {
  // rank sets both ranks: beside rank_k or rank_v the one given last would win, whatever the call's order meant.
  for (const char* one : {"rank_k", "rank_v"}) {
    if (kwargs.contains("rank") && kwargs.contains(one)) {
      throw py::value_error(std::string("Policy(): rank sets rank_k and rank_v together; give rank alone, or ") +
                            "rank_k and rank_v (" + one + " was given too)");
    }
  }
  for (auto item : kwargs) {
    const std::string key = py::str(item.first);
    const auto it = setters().find(key);
    if (it == setters().end()) {
      std::string valid;
      for (const auto& [name, fn] : setters()) valid += (valid.empty() ? "" : ", ") + name;
      throw py::type_error("Policy(): unknown option '" + key + "' (valid: " + valid + ")");
    }
    it->second(p, item.second);
  }
}

// The policy as built, refused (ValueError) when it sets a field its strategy never reads. Checked on the
// whole: Policy() and replace() set their options one at a time, in any order.
WindowPolicy validated(const WindowPolicy& p) {
  try {
    orbit::validate_policy(p);
  } catch (const orbit::Error& e) {
    throw py::value_error(e.what());
  }
  return p;
}

WindowPolicy make_policy(const py::object& spec, const py::kwargs& kwargs) {
  WindowPolicy p;
  if (!spec.is_none()) {
    if (py::isinstance<WindowPolicy>(spec)) {
      p = spec.cast<WindowPolicy>();
    } else if (py::isinstance<py::str>(spec)) {
      p = orbit::parse_policy(utf8_arg(spec, "Policy(): spec"));  // orbit::Error -> OrbitError listing valid specs
    } else {
      throw py::type_error("Policy(): spec must be a string such as 'patch:16' (or a Policy), got " + type_name(spec));
    }
  }
  apply_kwargs(p, kwargs);
  return validated(p);
}

std::string rank_str(int64_t r) { return r == -1 ? "'full'" : std::to_string(r); }

template <typename T>
void field(py::class_<WindowPolicy>& c, const char* name, T WindowPolicy::*member, const char* doc) {
  c.def_property(
      name, [member](const WindowPolicy& p) { return p.*member; },
      [name](WindowPolicy& p, py::handle v) { setters().at(name)(p, v); }, doc);
}

}  // namespace

namespace {

// Policy's fields, each a property that checks what it is set to.
void def_policy_fields(py::class_<WindowPolicy>& c) {
  field(c, "on_miss", &WindowPolicy::on_miss, "MissAction (or its name as a string when set).");
  field(c, "survivors", &WindowPolicy::survivors, "SurvivorAction for instances whose context changed.");
  field(c, "stale", &WindowPolicy::stale,
        "StalePatch: whether a patch formed under another context is used (under a kl_budget the budget weighs\n"
        "the closest one at any divergence; accept with max_divergence caps it).");
  field(c, "max_divergence", &WindowPolicy::max_divergence, "Largest accepted context divergence, in [0, 1].");
  field(c, "rank_k", &WindowPolicy::rank_k, "Patch rank for keys; reads -1 when full rank (set it with 'full').");
  field(c, "rank_v", &WindowPolicy::rank_v, "Patch rank for values; reads -1 when full rank (set it with 'full').");
  field(c, "deep_only", &WindowPolicy::deep_only, "Patch only the deep layers holding deep_energy of the deficit.");
  field(c, "deep_energy", &WindowPolicy::deep_energy, "Energy fraction for deep_only, in (0, 1].");
  field(c, "reuse_stored", &WindowPolicy::reuse_stored, "Look up stored patches at all.");
  field(c, "use_orbit_patches", &WindowPolicy::use_orbit_patches, "Accept patches keyed by the antecedent set.");
  field(c, "cascade_on_recall", &WindowPolicy::cascade_on_recall, "A recall re-conditions its dependents.");
  field(c, "store_conditioned", &WindowPolicy::store_conditioned,
        "Store whole conditioned KV under its exact context.");
  field(c, "reuse_computed", &WindowPolicy::reuse_computed,
        "Exact reuse: keep what forwards computed and serve the same window's instances from it.");
  field(c, "cost_aware", &WindowPolicy::cost_aware,
        "Let the cost model (Engine.calibrate) choose per chunk between a stored patch, forming one and recompute, "
        "by\nestimated seconds over this use and expected_reuse more (':cost[=R]'; not beside a kl_budget).");
  field(c, "expected_reuse", &WindowPolicy::expected_reuse,
        "cost_aware: the uses of a chunk expected after this one, in [0, 1e9] (default 1).");
  field(c, "recompute_ratio", &WindowPolicy::recompute_ratio, "token_recompute: fraction of tokens, in (0, 1].");
  field(c, "kl_budget", &WindowPolicy::kl_budget,
        "Per-step fidelity budget (predicted next-token KL, nats); 0 = none. The default policy has one.");
  field(c, "first_k", &WindowPolicy::first_k, "first_k: tokens recomputed in context.");
  field(c, "defer_repairs", &WindowPolicy::defer_repairs,
        "Edits (evict, slide, reorder) leave the survivors' repairs to the next read or forwarding operation\n"
        "(on by default; the ':eager' spec modifier turns it off).");
  field(c, "heal_when_idle", &WindowPolicy::heal_when_idle,
        "The window wants Window.heal() whenever the agent waits (a tool runs, the user types): what operations\n"
        "approximated is prefilled again off the critical path. On in the default policy (spec modifier ':heal');\n"
        "orbit.replay heals after every generate step.");
  field(c, "self_check", &WindowPolicy::self_check,
        "Idle-time heals measure the loss the window carried (a probe read before and after) and the engine\n"
        "scales its fidelity model's predictions by measured / predicted (never below 1). Off by default; spec\n"
        "modifier ':check'. The probe's forwards are background work.");
  field(c, "heal_min_kl", &WindowPolicy::heal_min_kl,
        "Heal in idle time only when the window's predicted KL (what its approximate instances carry) is at least\n"
        "this; 0 = whenever an instance is not exact. Spec modifier ':heal=X'; the default policy: budget / 10.");
  field(c, "prepare_recalls", &WindowPolicy::prepare_recalls,
        "Window.idle() also prepares the recalls of this many most recently evicted chunks (their patches formed\n"
        "behind the window as it is), so a recall to the tail costs no forward on the critical path; 0 = off.\n"
        "1 in the default policy (spec modifier ':prep=N').");
  field(c, "prepare_moves", &WindowPolicy::prepare_moves,
        "In a window that has reordered, Window.idle() also prepares moving this many of its chunks behind the\n"
        "others (Window.prepare_moves), so the move an agent makes to attend to a chunk costs no forward on the\n"
        "critical path; 0 = off. 8 in the default policy (spec modifier ':move=N').");
  field(c, "prepare_lists", &WindowPolicy::prepare_lists,
        "In a window synced to message lists, Window.idle() also prepares (as prepare_sync does with a hint) up\n"
        "to this many lists the next sync most likely starts with, learned from the messages earlier syncs\n"
        "dropped; 0 = off. 3 in the default policy (spec modifier ':lists=N'). Learned lists that missed the\n"
        "agent's last syncs are not prepared until it shows a new pattern or a sync they would have served\n"
        "(IdleReport.predictions_missed): an edit made once, such as a summary, is not prepared at every step.");
  field(c, "trust_hints", &WindowPolicy::trust_hints,
        "In a window synced to message lists, once this many syncs in a row found a list the agent prepared\n"
        "itself (Window.prepare_sync) reaching as far into the synced list as every learned list (prepare_lists,\n"
        "and the moves of prepare_moves) and the list before, Window.idle() prepares no learned lists or moves\n"
        "until a sync finds otherwise (no hint, or a learned list that reached further); 0 = never skip. While\n"
        "it skips them, each hint's prepare_sync also prepares the learned lists and moves that are the hint and\n"
        "one message more (only that message forwarded: the next message's head). 2 in every patch preset that\n"
        "prepares lists or moves (spec modifier ':hinted=N').");
  field(c, "read_through", &WindowPolicy::read_through,
        "Under a kl_budget, an instance forwarded now (a new turn at the tail) behind kept, approximate instances\n"
        "is computed over their error: it passes this share of its recency weight on to what precedes it (the\n"
        "nearest most), and their predicted loss counts it. In [0, 1]; 0 = the query's own reading only. 0.3 in\n"
        "the default policy (spec modifier ':through=F').");
  field(c, "attention_weight", &WindowPolicy::attention_weight,
        "Under a kl_budget, a kept instance weighs at least this many times the share of the last generate's\n"
        "attention it received (InstanceInfo.attention), wherever it sits in the window; 0 = recency alone.\n"
        "In [0, 1e6]; 1 in the default policy (spec modifier ':attend=F').");
  field(c, "content_weight", &WindowPolicy::content_weight,
        "Under a kl_budget, a kept instance weighs at least this many times its share of the content matches of\n"
        "the window's last 32 tokens (each token bigram there that occurred earlier points at its earlier\n"
        "occurrences, a rare one most), wherever it sits: what the next read refers back to by content, which\n"
        "the last query's attention misses when that query did not read it. In [0, 1e6]; 0 (off) in the\n"
        "default policy (spec modifier ':match=F').");
  field(c, "read_attention_weight", &WindowPolicy::read_attention_weight,
        "Under a kl_budget, a generate's first forward of its query re-plans the window with every kept instance\n"
        "weighing at least this many times that forward's attention share on it; when the plan repairs, the\n"
        "repairs run and the query is forwarded again (both forwards count in prompt_forward_tokens and\n"
        "query_forward_tokens), else the forward is the answer's. generate_n looks once before it forks. In\n"
        "[0, 1e6]; 0 (off) in the default policy (spec modifier ':look=F'); above 0 it needs a kl_budget.");
  field(c, "read_attention_raised_only", &WindowPolicy::read_attention_raised_only,
        "With read_attention_weight: the read's plan re-serves only the kept instances whose look weight\n"
        "(read_attention_weight times the query's share on them) is above the weight they carry without it;\n"
        "the others stay kept (a repair an earlier edit deferred still runs). False (off) in the default policy\n"
        "(spec modifier ':lookonly'); true needs read_attention_weight above 0.");
}

const char* enum_label(orbit::MissAction a) {
  for (const auto& [name, value] : kMiss) {
    if (value == a) return name.c_str();
  }
  return "?";
}

std::string py_float(double x) { return py::repr(py::float_(x)).cast<std::string>(); }
std::string py_bool(bool b) { return b ? "True" : "False"; }

// Every field as Policy() reads it back, as a Python literal, in declaration order.
std::vector<std::pair<const char*, std::string>> field_literals(const WindowPolicy& p) {
  return {{"on_miss", "'" + std::string(enum_label(p.on_miss)) + "'"},
          {"survivors", p.survivors == orbit::SurvivorAction::kKeep ? "'keep'" : "'recondition'"},
          {"stale", p.stale == orbit::StalePatch::kRebuild ? "'rebuild'" : "'accept'"},
          {"max_divergence", py_float(p.max_divergence)},
          {"rank_k", rank_str(p.rank_k)},
          {"rank_v", rank_str(p.rank_v)},
          {"deep_only", py_bool(p.deep_only)},
          {"deep_energy", py_float(p.deep_energy)},
          {"reuse_stored", py_bool(p.reuse_stored)},
          {"use_orbit_patches", py_bool(p.use_orbit_patches)},
          {"cascade_on_recall", py_bool(p.cascade_on_recall)},
          {"store_conditioned", py_bool(p.store_conditioned)},
          {"reuse_computed", py_bool(p.reuse_computed)},
          {"cost_aware", py_bool(p.cost_aware)},
          {"expected_reuse", py_float(p.expected_reuse)},
          {"kl_budget", py_float(p.kl_budget)},
          {"defer_repairs", py_bool(p.defer_repairs)},
          {"heal_when_idle", py_bool(p.heal_when_idle)},
          {"heal_min_kl", py_float(p.heal_min_kl)},
          {"prepare_recalls", std::to_string(p.prepare_recalls)},
          {"prepare_moves", std::to_string(p.prepare_moves)},
          {"prepare_lists", std::to_string(p.prepare_lists)},
          {"trust_hints", std::to_string(p.trust_hints)},
          {"self_check", py_bool(p.self_check)},
          {"read_through", py_float(p.read_through)},
          {"attention_weight", py_float(p.attention_weight)},
          {"content_weight", py_float(p.content_weight)},
          {"read_attention_weight", py_float(p.read_attention_weight)},
          {"read_attention_raised_only", py_bool(p.read_attention_raised_only)},
          {"recompute_ratio", py_float(p.recompute_ratio)},
          {"first_k", std::to_string(p.first_k)}};
}

// Policy(name, field=value, ...): the preset `name` spells, then each field where the policy differs from it (a
// field no spec modifier spells: survivors on a patch preset without ':exact', reuse_stored, a budget on
// 'blind', ...). Evaluated, it gives the policy back.
std::string policy_repr(const WindowPolicy& p) {
  std::optional<WindowPolicy> preset;
  try {
    preset = orbit::parse_policy(p.name());
  } catch (const orbit::Error&) {
    // Every field, from the default policy, where the name does not read back.
  }
  const auto mine = field_literals(p);
  const auto base = field_literals(preset.value_or(WindowPolicy{}));
  std::ostringstream o;
  o << "Policy(";
  const char* sep = "";
  if (preset) {
    o << py::repr(py::str(p.name())).cast<std::string>();
    sep = ", ";
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (preset && mine[i].second == base[i].second) continue;
    o << sep << mine[i].first << "=" << mine[i].second;
    sep = ", ";
  }
  return o.str() + ")";
}

// Policy's name, replace, copies and __repr__.
void def_policy_methods(py::class_<WindowPolicy>& c) {
  c.def_property_readonly(
      "name", &WindowPolicy::name,
      "The preset in canonical spec form ('patch:16', 'patch:32/8', 'reprefill', ...): Policy(spec).name reads\n"
      "back as an equal Policy. Fields set apart from a spec that no modifier spells (survivors on a patch\n"
      "preset without ':exact', reuse_stored, a kl_budget on 'blind', ...) are not in it; repr() adds them as\n"
      "keywords: eval(repr(p)) == p.");
  c.def(
      "replace",
      [](const WindowPolicy& p, const py::kwargs& kwargs) {
        WindowPolicy q = p;
        apply_kwargs(q, kwargs);
        return validated(q);
      },
      "A copy with the given fields changed: policy.replace(survivors='recondition'). ValueError as Policy().");
  c.def("__copy__", [](const WindowPolicy& p) { return p; });
  c.def(
      "__deepcopy__", [](const WindowPolicy& p, py::dict) { return p; }, py::arg("memo"));
  c.def(
      "__eq__",
      [](const WindowPolicy& a, const WindowPolicy& b) {
        return a.on_miss == b.on_miss && a.survivors == b.survivors && a.stale == b.stale &&
               a.max_divergence == b.max_divergence && a.rank_k == b.rank_k && a.rank_v == b.rank_v &&
               a.deep_only == b.deep_only && a.deep_energy == b.deep_energy && a.reuse_stored == b.reuse_stored &&
               a.use_orbit_patches == b.use_orbit_patches && a.cascade_on_recall == b.cascade_on_recall &&
               a.store_conditioned == b.store_conditioned && a.reuse_computed == b.reuse_computed &&
               a.cost_aware == b.cost_aware && a.expected_reuse == b.expected_reuse &&
               a.recompute_ratio == b.recompute_ratio && a.first_k == b.first_k && a.kl_budget == b.kl_budget &&
               a.defer_repairs == b.defer_repairs && a.heal_when_idle == b.heal_when_idle &&
               a.heal_min_kl == b.heal_min_kl && a.prepare_recalls == b.prepare_recalls &&
               a.prepare_moves == b.prepare_moves && a.prepare_lists == b.prepare_lists &&
               a.trust_hints == b.trust_hints && a.self_check == b.self_check && a.read_through == b.read_through &&
               a.attention_weight == b.attention_weight && a.content_weight == b.content_weight &&
               a.read_attention_weight == b.read_attention_weight &&
               a.read_attention_raised_only == b.read_attention_raised_only;
      },
      py::is_operator());
  c.def("__repr__", &policy_repr);
}

}  // namespace

void init_policy(py::module_& m) {
  py::class_<WindowPolicy> c(
      m, "WindowPolicy",
      "What a window does on a patch miss, with survivors and with stale patches (orbit/policy.h).\n\n"
      "    Policy('patch:16')                      # a preset spec (see orbit.policy_help())\n"
      "    Policy('patch:full:exact')              # the oracle: equals a re-prefill\n"
      "    Policy('blind', reuse_stored=False)     # or Policy(on_miss='blind', kl_budget=0, ...)\n"
      "    Policy('patch:8', survivors='recondition')   # a preset, then keyword overrides\n\n"
      "A mutable value: windows copy it (Window.policy returns a copy; assign it back).");
  c.def(py::init(&make_policy), py::arg("spec") = py::none(),
        "Policy(spec=None, **options): the preset `spec` ('patch[:M][:exact][:deep][:stale=D]', 'reprefill',\n"
        "'prefix', 'blind', 'cacheblend:R', 'firstk:K', 'default'; None: the default policy), then the keyword options "
        "(any field\n"
        "below, plus rank= for rank_k and rank_v together, not beside either). Raises OrbitError for an invalid spec "
        "(listing the\n"
        "valid forms), TypeError for an unknown option or wrong type (a float field takes a float, an int or a numpy\n"
        "number, a count an int or a numpy integer, never a bool), ValueError for an out-of-range value (an\n"
        "enum built from an int that is none of its members, MissAction(7), included) or\n"
        "for a field set to a value other than its default that the policy never reads (first_k without\n"
        "on_miss='first_k' or a kl_budget, deep_energy without deep_only, heal_min_kl without heal_when_idle,\n"
        "on_miss blind/token_recompute/first_k or survivors='recondition' beside a kl_budget (the default has one:\n"
        "give kl_budget=0 with them),\n"
        "...: orbit/policy.h, validate_policy). Assigning a field checks only its range; a window given the\n"
        "policy (new_window, Window.policy) checks the whole.");
  def_policy_fields(c);
  def_policy_methods(c);
  m.attr("Policy") = c;
  m.def("policy_help", &orbit::policy_spec_help, "The valid policy spec forms, one per line.");
}

}  // namespace orbit_py
