// orbit.Window: plan_* (const) then apply(), the plan-and-apply shortcuts, fork, and the reading calls (logits
// as numpy float32, disposable, kv); generate and generate_n are in window_generate.cpp. Every call releases the GIL
// and locks the window (py_window.h). A non-ok apply() Status raises CapacityError / RefusedError; the window is
// unchanged.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

#include "answer.h"
#include "bindings.h"
#include "convert.h"
#include "generate_args.h"
#include "py_window.h"

namespace orbit_py {

namespace {

// A token list, or text (str) tokenized by the window's engine without BOS (a continuation).
std::vector<int64_t> tokens_or_text(PyWindow& w, const py::object& obj, const char* what) {
  if (!py::isinstance<py::str>(obj)) return to_tokens(obj, what);
  const std::string text = utf8_arg(obj, what);
  const std::shared_ptr<orbit::Engine> engine = w.engine;
  const NativeCall release;  // a long text's encoding holds no other thread
  return engine->tokenize(text, false);
}

}  // namespace

namespace {

using orbit::ApplyReport;
using orbit::ChunkRef;
using orbit::InstanceId;
using orbit::Plan;
using orbit::Result;
using orbit::Window;

// An instance's KV, copied out of the pool: k/v stacked over layers.
struct PyInstanceKV {
  int64_t length = 0;
  std::vector<int64_t> k_shape;
  std::vector<int64_t> v_shape;
  py::array_t<float> k;  // [layers, length, *k_shape]
  py::array_t<float> v;  // [layers, length, *v_shape]
  py::array_t<int32_t> pages;
};

py::array_t<float> stack_layers(const std::vector<std::vector<float>>& layers, int64_t length,
                                const std::vector<int64_t>& per_token) {
  std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(layers.size()), static_cast<py::ssize_t>(length)};
  for (int64_t d : per_token) shape.push_back(static_cast<py::ssize_t>(d));
  py::array_t<float> out(shape);
  float* dst = out.mutable_data();
  for (const auto& layer : layers) {
    std::memcpy(dst, layer.data(), layer.size() * sizeof(float));
    dst += layer.size();
  }
  return out;
}

// Whether the window holds an instance of the chunk with this key.
bool holds_chunk(const Window& w, const std::string& key) {
  for (const auto& i : w.instances()) {
    if (!i.is_turn && i.chunk.key == key) return true;
  }
  return false;
}

// The `before` argument: None is the tail (the core's 0); a given 0 is refused, as no instance has that id
// (ids start at 1), rather than read as the tail.
InstanceId before_arg(py::handle obj) {
  if (obj.is_none()) return 0;
  const InstanceId id = to_instance(obj, "before");
  if (id == 0)
    throw py::value_error("before: instance id 0 names no instance (ids start at 1; None places at the tail)");
  return id;
}

ApplyReport checked(Result<ApplyReport>&& r) {
  if (!r.is_ok()) raise_status(static_cast<int>(r.status().code()), r.status().reason());
  return std::move(r).value();
}

// Runs a plan_* call and applies its plan; raises CapacityError / RefusedError on a non-ok Status.
template <typename F>
ApplyReport plan_and_apply(PyWindow& w, const char* what, F&& make_plan) {
  Result<ApplyReport> r = w.run(what, [&](Window& win) { return win.apply(make_plan(win)); });
  return checked(std::move(r));
}

// Logits rows as numpy: [vocab] for the last row only, [rows, vocab] for all rows.
py::array_t<float> logits_array(orbit::Logits&& l, bool all_rows) {
  if (all_rows)
    return to_numpy(std::move(l.values), {static_cast<py::ssize_t>(l.rows), static_cast<py::ssize_t>(l.vocab)});
  if (l.rows > 1) l.values.erase(l.values.begin(), l.values.end() - l.vocab);
  return to_numpy(std::move(l.values), {static_cast<py::ssize_t>(l.vocab)});
}

const char* kLogitsDoc =
    "Next-token logits after the query's tokens (live tokens after the window; nothing is stored). Returns a\n"
    "numpy float32 array [vocab] for the last query token, or [len(query), vocab] with all_rows=True\n"
    "(all_rows takes True, False or a numpy bool; None or 0/1 raise TypeError naming it).\n"
    "Repairs earlier edits deferred run first (see flush()).\n"
    "Raises OrbitError for an empty query or ids outside the vocabulary.";

}  // namespace

bool in_window_call(const orbit::Engine* engine) {
  const std::vector<const orbit::Engine*>& called = PyWindow::engines_called();
  return std::find(called.begin(), called.end(), engine) != called.end();
}

py::object wrap_window(std::shared_ptr<orbit::Engine> engine, Window window) {
  return py::cast(std::make_unique<PyWindow>(std::move(engine), std::move(window)));
}

namespace {

// Window: close, the context manager and what says whether the window is open.
void def_lifetime(py::class_<PyWindow>& c) {
  // ---- lifetime ----
  c.def("close", &PyWindow::close,
        "Destroys the window now (its pages return to the pool; forks keep shared pages). Idempotent; later\n"
        "calls raise OrbitError. A call running on the window (another thread's) is waited for, but a decode\n"
        "(generate, generate_n, generate_many's requests on it, a Window.stream, e.g. closed from the loop's body)\n"
        "first stops at its next token, stop_reason 'cancelled' (a stream's decode waiting for its reader is woken\n"
        "at once; a generate_many gives the window back once its requests stopped, the other windows decoding\n"
        "on). Engine.close() stops them the same way.");
  c.def_property_readonly(
      "closed", [](const PyWindow& w) { return w.closing.is_set() || w.engine->closed(); },
      "True once close() was called on it or on its engine (from any thread: it reads no lock): every call but\n"
      "close() then raises OrbitError. A call in progress stops at its next token when it decodes, else finishes,\n"
      "before the window is destroyed.");
  c.def(
      "__enter__",
      [](py::object self) {
        const PyWindow& w = self.cast<const PyWindow&>();
        ORBIT_CHECK(!w.closing.is_set(), "with window: window " << w.id << " is closed (close() was called)");
        const bool engine_closing = (w.decodes && w.decodes->closing().is_set()) || w.engine->closed();
        ORBIT_CHECK(!engine_closing, "with window: window " << w.id << "'s engine is closed");
        return self;
      },
      "Returns the window; OrbitError when it or its engine is closed.");
  c.def(
      "__exit__",
      [](PyWindow& w, py::args) {
        w.close();
        return false;
      },
      "Closes the window.");
  c.def_property_readonly(
      "engine", [](const PyWindow& w) { return w.engine; }, "The Engine it belongs to.");
}

// Window: the window's instances, stats and policy.
void def_state(py::class_<PyWindow>& c) {
  // ---- state ----
  c.def_property_readonly(
      "id", [](const PyWindow& w) { return w.id; }, "Window id (unique per engine).");
  c.def_property_readonly(
      "label", [](PyWindow& w) { return w.run_fields("Window.label", [](Window& x) { return x.options().label; }); },
      "Its label.");
  c.def_property_readonly(
      "max_bytes",
      [](PyWindow& w) { return w.run_fields("Window.max_bytes", [](Window& x) { return x.options().max_bytes; }); },
      "Most KV bytes it may hold (0 = the pool's limit).");
  c.def_property(
      "policy", [](PyWindow& w) { return w.run_fields("Window.policy", [](Window& x) { return x.policy(); }); },
      [](PyWindow& w, const py::object& p) {
        const orbit::WindowPolicy policy = to_policy(p, "Window.policy");
        w.run("Window.policy", [&](Window& x) { x.set_policy(policy); });
      },
      "Its WindowPolicy (a copy; assign a Policy or a spec string to change it for later operations).");
  c.def_property_readonly(
      "instances", [](PyWindow& w) { return w.run("Window.instances", [](Window& x) { return x.instances(); }); },
      "list[InstanceInfo] in window order.");
  c.def(
      "instance",
      [](PyWindow& w, const py::object& id) {
        const InstanceId i = to_instance(id, "instance");
        return w.run("Window.instance", [&](Window& x) { return x.instance(i); });
      },
      py::arg("id"), "The InstanceInfo with this id, or None when the window does not hold it.");
  c.def_property_readonly(
      "tokens", [](PyWindow& w) { return w.run("Window.tokens", [](Window& x) { return x.tokens(); }); },
      "Tokens in the window.");
  c.def_property_readonly(
      "evicted", [](PyWindow& w) { return w.run("Window.evicted", [](Window& x) { return x.evicted(); }); },
      "list[ChunkRef] of evicted chunks (what recall() accepts).");
  c.def_property_readonly(
      "stats", [](PyWindow& w) { return w.run("Window.stats", [](Window& x) { return x.stats(); }); }, "WindowStats.");
  c.def_property_readonly(
      "version", [](PyWindow& w) { return w.run_fields("Window.version", [](Window& x) { return x.version(); }); },
      "Bumps on every applied operation (a plan is valid only at the version it was made).");
  c.def(
      "__len__", [](PyWindow& w) { return w.run("Window.__len__", [](Window& x) { return x.instances().size(); }); },
      "Number of instances.");
  c.def(
      "__iter__",
      [](PyWindow& w) { return py::iter(py::cast(w.run("Window.__iter__", [](Window& x) { return x.instances(); }))); },
      "Iterates over the instances (a snapshot).");
  c.def(
      "__contains__",
      [](PyWindow& w, const py::object& item) {
        if (py::isinstance<ChunkRef>(item) || py::isinstance<py::str>(item)) {
          const std::string key =
              py::isinstance<ChunkRef>(item) ? item.cast<ChunkRef>().key : utf8_arg(item, "in Window: chunk key");
          return w.run("Window.__contains__", [&](Window& x) { return holds_chunk(x, key); });
        }
        if (!py::isinstance<orbit::InstanceInfo>(item) && !is_integer(item)) {
          throw py::type_error(
              "in Window: expected a ChunkRef, a chunk key (str), an instance id (int) or an "
              "InstanceInfo, got " +
              type_name(item));
        }
        const InstanceId id = to_instance(item, "in Window");
        return w.run("Window.__contains__", [&](Window& x) { return x.instance(id).has_value(); });
      },
      "`chunk in window`: a ChunkRef or a chunk key (str) placed here (an unknown key is not); or `instance in\n"
      "window`: an instance id (int) or InstanceInfo it holds. TypeError for anything else.");
}

// Window: the plan_* calls: what an operation would do, nothing changed. The SDK's checks name the operation
// ("slide: chunks = -1 must be in ..."); raised here naming the plan call ("plan_slide: ...").
void def_planning(py::class_<PyWindow>& c) {
  // ---- planning (const) ----
  c.def(
      "plan_admit",
      [](PyWindow& w, const py::object& chunk, const py::object& before) {
        const ChunkRef ref = resolve_chunk(*w.engine, chunk, "plan_admit: chunk");
        const InstanceId b = before_arg(before);
        return with_caller_name("admit", "plan_admit", [&] {
          return w.run("Window.plan_admit", [&](Window& x) { return x.plan_admit(ref, b); });
        });
      },
      py::arg("chunk"), py::kw_only(), py::arg("before") = py::none(),
      "Plan placing the chunk at the tail (or before instance `before`). Raises OrbitError for a chunk of\n"
      "another engine, an unknown instance, or a chunk already in the window.");
  c.def(
      "plan_add_turn",
      [](PyWindow& w, const py::object& tokens) {
        const auto t = tokens_or_text(w, tokens, "plan_add_turn: tokens");
        return with_caller_name("add_turn", "plan_add_turn", [&] {
          return w.run("Window.plan_add_turn", [&](Window& x) { return x.plan_add_turn(t); });
        });
      },
      py::arg("tokens"), "Plan a live turn (tokens prefilled in context; not reusable).");
  c.def(
      "plan_evict",
      [](PyWindow& w, const py::object& instance) {
        const InstanceId i = to_instance(instance, "plan_evict: instance");
        return with_caller_name("evict", "plan_evict",
                                [&] { return w.run("Window.plan_evict", [&](Window& x) { return x.plan_evict(i); }); });
      },
      py::arg("instance"), "Plan dropping one instance (a chunk stays recallable).");
  c.def(
      "plan_slide",
      [](PyWindow& w, const IntArg& chunks_arg) {
        const int64_t chunks = chunks_arg.get("plan_slide: chunks");
        return with_caller_name("slide", "plan_slide", [&] {
          return w.run("Window.plan_slide", [&](Window& x) { return x.plan_slide(chunks); });
        });
      },
      py::arg("chunks") = 1, "Plan evicting the `chunks` oldest chunk instances (turns stay).");
  c.def(
      "plan_recall",
      [](PyWindow& w, const py::object& chunk, const py::object& before) {
        const ChunkRef ref = resolve_chunk(*w.engine, chunk, "plan_recall: chunk");
        const InstanceId b = before_arg(before);
        return with_caller_name("recall", "plan_recall", [&] {
          return w.run("Window.plan_recall", [&](Window& x) { return x.plan_recall(ref, b); });
        });
      },
      py::arg("chunk"), py::kw_only(), py::arg("before") = py::none(),
      "Plan re-admitting an evicted chunk (Plan.cascade: dependents re-conditioned).");
  c.def(
      "plan_reorder",
      [](PyWindow& w, const py::object& order) {
        const auto o = to_instances(order, "plan_reorder: order");
        return with_caller_name("reorder", "plan_reorder", [&] {
          return w.run("Window.plan_reorder", [&](Window& x) { return x.plan_reorder(o); });
        });
      },
      py::arg("order"), "Plan a permutation of the instances (ids or InstanceInfo, every instance once).");
  c.def(
      "plan_place", [](PyWindow& w) { return w.run("Window.plan_place", [](Window& x) { return x.plan_place(); }); },
      "Plan the reorder the planner finds cheapest (stored-patch hits).");
  c.def(
      "plan_recondition",
      [](PyWindow& w) { return w.run("Window.plan_recondition", [](Window& x) { return x.plan_recondition(); }); },
      "Plan re-conditioning every instance whose context changed.");
  c.def(
      "plan_flush", [](PyWindow& w) { return w.run("Window.plan_flush", [](Window& x) { return x.plan_flush(); }); },
      "Plan the repairs earlier edits deferred (policy.defer_repairs); every instance is kept when none wait.");
  c.def(
      "plan_heal", [](PyWindow& w) { return w.run("Window.plan_heal", [](Window& x) { return x.plan_heal(); }); },
      "Plan healing: every instance from the first approximate one (InstanceInfo.exact false) to the end formed\n"
      "again in context, turns prefilled again; every instance is kept when the window is exact.");
}

// The docstring of an operation planned and applied in one call; `plan_call` is the plan it applies, e.g.
// "plan_evict(instance)".
std::string one_call_doc(const char* plan_call) {
  return std::string("apply(") + plan_call +
         ") in one call: returns the ApplyReport;\n"
         "raises CapacityError / RefusedError (window unchanged) when it cannot be applied, OrbitError for bad\n"
         "arguments.";
}

// Window: apply, and in one call the operations that add or remove an instance (admit, add_turn, evict).
void def_apply(py::class_<PyWindow>& c) {
  c.def(
      "apply",
      [](PyWindow& w, const TypedArg<Plan>& plan_arg) {
        const Plan& plan = plan_arg.get("apply: plan");
        return plan_and_apply(w, "Window.apply", [&](Window&) { return plan; });
      },
      py::arg("plan"),
      "Executes a plan this window made at its current version; returns the ApplyReport. Raises CapacityError\n"
      "(the pool or max_bytes cannot hold the result) or RefusedError (e.g. positions past the model's limit),\n"
      "leaving the window unchanged; OrbitError for a plan of another window or an older version; TypeError\n"
      "naming plan for anything but a Plan (None included).");
  c.def(
      "admit",
      [](PyWindow& w, const py::object& chunk, const py::object& before) {
        const ChunkRef ref = resolve_chunk(*w.engine, chunk, "admit: chunk");
        const InstanceId b = before_arg(before);
        return plan_and_apply(w, "Window.admit", [&](Window& x) { return x.plan_admit(ref, b); });
      },
      py::arg("chunk"), py::kw_only(), py::arg("before") = py::none(),
      one_call_doc("plan_admit(chunk, before=before)").c_str());
  c.def(
      "add_turn",
      [](PyWindow& w, const py::object& tokens) {
        const auto t = tokens_or_text(w, tokens, "add_turn: tokens");
        return plan_and_apply(w, "Window.add_turn", [&](Window& x) { return x.plan_add_turn(t); });
      },
      py::arg("tokens"), one_call_doc("plan_add_turn(tokens)").c_str());
  c.def(
      "evict",
      [](PyWindow& w, const py::object& instance) {
        const InstanceId i = to_instance(instance, "evict: instance");
        return plan_and_apply(w, "Window.evict", [&](Window& x) { return x.plan_evict(i); });
      },
      py::arg("instance"), one_call_doc("plan_evict(instance)").c_str());
}

// Window: in one call the operations that move what the window holds (slide, recall, reorder, place,
// recondition).
void def_apply_moves(py::class_<PyWindow>& c) {
  c.def(
      "slide",
      [](PyWindow& w, const IntArg& chunks_arg) {
        const int64_t chunks = chunks_arg.get("slide: chunks");
        if (chunks == 0)
          return w.run("Window.slide", [](Window& x) { return x.slide(0); });  // no operation: the version stays
        return plan_and_apply(w, "Window.slide", [&](Window& x) { return x.plan_slide(chunks); });
      },
      py::arg("chunks") = 1, one_call_doc("plan_slide(chunks)").c_str());
  c.def(
      "recall",
      [](PyWindow& w, const py::object& chunk, const py::object& before) {
        const ChunkRef ref = resolve_chunk(*w.engine, chunk, "recall: chunk");
        const InstanceId b = before_arg(before);
        return plan_and_apply(w, "Window.recall", [&](Window& x) { return x.plan_recall(ref, b); });
      },
      py::arg("chunk"), py::kw_only(), py::arg("before") = py::none(),
      one_call_doc("plan_recall(chunk, before=before)").c_str());
  c.def(
      "reorder",
      [](PyWindow& w, const py::object& order) {
        const auto o = to_instances(order, "reorder: order");
        return plan_and_apply(w, "Window.reorder", [&](Window& x) { return x.plan_reorder(o); });
      },
      py::arg("order"), one_call_doc("plan_reorder(order)").c_str());
  c.def(
      "place", [](PyWindow& w) { return plan_and_apply(w, "Window.place", [](Window& x) { return x.plan_place(); }); },
      one_call_doc("plan_place()").c_str());
  c.def(
      "recondition",
      [](PyWindow& w) {
        return plan_and_apply(w, "Window.recondition", [](Window& x) { return x.plan_recondition(); });
      },
      one_call_doc("plan_recondition()").c_str());
}

// Window: flush, heal, the idle-time preparations and fork.
void def_repairs(py::class_<PyWindow>& c) {
  c.def(
      "flush", [](PyWindow& w) { return w.run("Window.flush", [](Window& x) { return x.flush(); }); },
      "Runs the repairs earlier edits deferred (policy.defer_repairs) now; reads (logits, generate) and the next\n"
      "admit / add_turn / recall run them first anyway. With none waiting it does nothing (the version stays).\n"
      "Returns the ApplyReport (its forward_tokens: the repairs' cost).");
  c.def(
      "heal", [](PyWindow& w) { return w.run("Window.heal", [](Window& x) { return x.heal(); }); },
      "Makes the window exact again; call it in time the agent would otherwise idle (while a tool runs).\n"
      "What earlier operations approximated (kept survivors, stale patches, recomputed tokens, turns prefilled\n"
      "after approximate KV) is prefilled again from the first approximate instance, and the patches formed\n"
      "on the way are stored for the contexts the window holds now. Its forwards count as background work\n"
      "(EngineStats.background_forward_tokens), not critical. An exact window is left as it is (the version\n"
      "stays). Returns the ApplyReport.");
  c.def(
      "prepare_recalls",
      [](PyWindow& w, const IntArg& max_chunks_arg) {
        const int64_t max_chunks = max_chunks_arg.get("prepare_recalls: max_chunks");
        if (max_chunks < 0)
          throw py::value_error("prepare_recalls: max_chunks must be >= 0, got " + std::to_string(max_chunks));
        return w.run("Window.prepare_recalls", [&](Window& x) { return x.prepare_recalls(max_chunks); });
      },
      py::arg("max_chunks") = 1,
      "Forms, in idle time, the patches recalls to the tail would need: for each of the max_chunks chunks evicted\n"
      "most recently, one forward of the chunk behind the window as it is now, its patch stored (the window is\n"
      "not changed). A recall to the end of the window before anything else changes is then a patch hit, with\n"
      "no forward on the critical path. Background work; nothing while repairs are deferred. Returns an IdleReport.");
  c.def(
      "prepare_evictions",
      [](PyWindow& w, const py::object& instances) {
        const auto ids = to_instances(instances, "prepare_evictions: instances");
        return w.run("Window.prepare_evictions", [&](Window& x) { return x.prepare_evictions(ids); });
      },
      py::arg("instances"),
      "Prepares, in idle time, evicting these instances (prepare_sync for a window edited instance by\n"
      "instance): in a throwaway fork they are evicted under `prefix`, every instance behind them prefilled\n"
      "exactly and stored for exact reuse, so when the window evicts them its survivors are served from that KV\n"
      "(no forward on the critical path, no error). The window is not changed. Window.idle() does it on its own\n"
      "for the evictions it learned (WindowPolicy.prepare_lists). Returns an IdleReport.");
  c.def(
      "prepare_moves",
      [](PyWindow& w, const IntArg& max_chunks_arg) {
        const int64_t max_chunks = max_chunks_arg.get("prepare_moves: max_chunks");
        if (max_chunks < 0)
          throw py::value_error("prepare_moves: max_chunks must be >= 0, got " + std::to_string(max_chunks));
        return w.run("Window.prepare_moves", [&](Window& x) { return x.prepare_moves(max_chunks); });
      },
      py::arg("max_chunks") = 8,
      "Forms, in idle time, the patches moving a chunk behind the window's other chunks would need (what an agent\n"
      "does to attend to one: the frame a question is about, a page looked at again): for up to max_chunks chunk\n"
      "instances, nearest the last chunk first, one forward of the chunk in the context such a move gives it, its\n"
      "patch stored (the window is not changed). That reorder is then served from a stored patch, with no forward\n"
      "on the critical path. Background work; nothing while repairs are deferred. Returns an IdleReport.");
  c.def(
      "idle", [](PyWindow& w) { return w.run("Window.idle", [](Window& x) { return x.idle(); }); },
      "What the policy asks of idle time, in one call: heal() when policy.heal_when_idle (and the predicted KL it\n"
      "would remove is at least policy.heal_min_kl), then prepare_recalls(policy.prepare_recalls), then, in a\n"
      "window that has reordered and never synced, prepare_moves(policy.prepare_moves); in a window synced to\n"
      "message lists, prepare_sync of up to policy.prepare_lists lists the next sync most likely starts with,\n"
      "learned from the agent's earlier edits (IdleReport.lists_prepared); in a window never synced, the\n"
      "evictions learned the same way (prepare_evictions). Call it whenever the agent waits (a tool runs, the user\n"
      "types); the default policy asks for all of these. Returns an IdleReport (all of it background work).");
  c.def(
      "fork",
      [](PyWindow& w) {
        Window child = w.run("Window.fork", [](Window& x) { return x.fork(); });
        return wrap_window(w.engine, std::move(child));
      },
      "A copy-on-write child Window: shares pages and patches; writes go to private pages. Its instances keep\n"
      "the parent's ids. Operations on either never change the other. Drop it (close()) to discard the branch.");
}

// Window.__repr__: its id and, where the window can answer, its size and policy; else one word for its state
// ("closed", "engine closed", "streaming": this thread reads a Window.stream on it, "busy": this thread is inside
// a call of it). Never raises and never carries an error message; waits only for another thread's call.
std::string window_repr(PyWindow& w) {
  const std::thread::id me = std::this_thread::get_id();
  const char* state = w.closing.is_set()            ? "closed"
                      : w.engine->closed()          ? "engine closed"
                      : w.stream_readers->reads(me) ? "streaming"
                      : w.holder.load() == me       ? "busy"
                                                    : nullptr;
  std::ostringstream o;
  o << "Window(id=" << w.id;
  if (state == nullptr) {
    try {
      const auto [stats, policy] =
          w.run("Window.__repr__", [](Window& x) { return std::make_pair(x.stats(), x.policy().name()); });
      o << ", instances=" << stats.instances << ", tokens=" << stats.tokens << ", policy='" << policy << "')";
      return o.str();
    } catch (const orbit::Error&) {
      // closed by another thread meanwhile (nothing else in it raises)
      state = w.closing.is_set() ? "closed" : w.engine->closed() ? "engine closed" : "unavailable";
    }
  }
  o << ", " << state << ")";
  return o.str();
}

// Window: logits and the other reads, and __repr__.
void def_reading(py::class_<PyWindow>& c) {
  // ---- reading (const) ----
  c.def(
      "logits",
      [](PyWindow& w, const py::object& query, const py::object& all_rows_arg) {
        const bool all_rows = to_bool(all_rows_arg, "logits: all_rows");
        const auto q = tokens_or_text(w, query, "logits: query");
        return logits_array(w.run("Window.logits", [&](Window& x) { return x.logits(q, all_rows); }), all_rows);
      },
      py::arg("query"), py::kw_only(), py::arg("all_rows") = false, kLogitsDoc);
  c.def(
      "reference_logits",
      [](PyWindow& w, const py::object& query, const py::object& all_rows_arg) {
        const bool all_rows = to_bool(all_rows_arg, "reference_logits: all_rows");
        const auto q = tokens_or_text(w, query, "reference_logits: query");
        return logits_array(
            w.run("Window.reference_logits", [&](Window& x) { return x.reference_logits(q, all_rows); }), all_rows);
      },
      py::arg("query"), py::kw_only(), py::arg("all_rows") = false,
      "The logits a re-prefill of the same contents in the same order would give (one forward of the whole\n"
      "window; nothing stored): the reference for fidelity. Same shapes as logits().");
  c.def(
      "disposable",
      [](PyWindow& w, const py::object& instance, const py::object& query, const IntArg& answer_tokens_arg) {
        const int64_t answer_tokens = answer_tokens_arg.get("disposable: answer_tokens");
        const InstanceId i = to_instance(instance, "disposable: instance");
        const auto q = tokens_or_text(w, query, "disposable: query");
        return w.run("Window.disposable", [&](Window& x) { return x.disposable(i, q, answer_tokens); });
      },
      py::arg("instance"), py::arg("query"), py::kw_only(), py::arg("answer_tokens") = 4,
      "Greedy-decodes answer_tokens after the query with the instance as it is and with its conditioning\n"
      "switched off (its canonical KV); a DisposabilityReport (truthy when the answers agree). answer_tokens\n"
      "past the model's positions (after the window and the query) raises OrbitError naming it, before anything\n"
      "runs.");
  c.def(
      "loss_by_instance",
      [](PyWindow& w, const py::object& query) {
        const auto q = tokens_or_text(w, query, "loss_by_instance: query");
        return w.run("Window.loss_by_instance", [&](Window& x) { return x.loss_by_instance(q); });
      },
      py::arg("query"),
      "Each approximate instance's own share of the window's fidelity loss after the query: the KL (mean over\n"
      "the query's rows, vs a re-prefill) with that instance alone served as held and the rest exact, beside\n"
      "the fidelity model's prediction. A list of InstanceLoss in window order; exact instances are left out.\n"
      "One forward of the whole window plus one of the query per approximate instance.");
  c.def(
      "kv",
      [](PyWindow& w, const py::object& instance) {
        const InstanceId i = to_instance(instance, "kv: instance");
        orbit::InstanceKV kv = w.run("Window.kv", [&](Window& x) { return x.kv(i); });
        PyInstanceKV out;
        out.length = kv.length;
        out.k_shape = kv.k_shape;
        out.v_shape = kv.v_shape;
        out.k = stack_layers(kv.k, kv.length, kv.k_shape);
        out.v = stack_layers(kv.v, kv.length, kv.v_shape);
        out.pages = to_numpy(std::move(kv.pages), {static_cast<py::ssize_t>(kv.pages.size())});
        return out;
      },
      py::arg("instance"),
      "The instance's stored KV as numpy arrays (InstanceKV: k, v [layers, length, ...], pages). Raises\n"
      "OrbitError for an unknown instance.");
  c.def("__repr__", &window_repr);
}

}  // namespace

void init_window(py::module_& m) {
  py::class_<PyInstanceKV>(m, "InstanceKV",
                           "An instance's stored KV (content channel, keys before RoPE), copied out of the pool.")
      .def_readonly("length", &PyInstanceKV::length, "Tokens.")
      .def_readonly("k_shape", &PyInstanceKV::k_shape, "Per-token key shape (GQA: [H_kv, d]; MLA: [1, d_rope]).")
      .def_readonly("v_shape", &PyInstanceKV::v_shape, "Per-token value shape (GQA: [H_kv, d]; MLA: [1, r_kv]).")
      .def_readonly("k", &PyInstanceKV::k, "numpy float32 [layers, length, *k_shape].")
      .def_readonly("v", &PyInstanceKV::v, "numpy float32 [layers, length, *v_shape].")
      .def_readonly("pages", &PyInstanceKV::pages, "numpy int32: the pool pages holding it (forks share pages).")
      .def("__repr__", [](const PyInstanceKV& kv) {
        return "InstanceKV(length=" + std::to_string(kv.length) + ", k=" + std::string(py::str(kv.k.attr("shape"))) +
               ", v=" + std::string(py::str(kv.v.attr("shape"))) + ", pages=" + std::to_string(kv.pages.size()) + ")";
      });

  py::class_<PyWindow> c(
      m, "Window",
      "An ordered set of chunk instances plus live turns, bound to one Engine (orbit/window.h). Make one with\n"
      "Engine.new_window(). Every operation is planned, then applied:\n\n"
      "    plan = w.plan_admit(chunk)   # nothing changes: what would happen, what it costs, exact or not\n"
      "    report = w.apply(plan)       # does it (CapacityError / RefusedError if it cannot; nothing changed)\n\n"
      "or in one call: w.admit(chunk). Instances are given as ids (int) or InstanceInfo objects; chunks as\n"
      "ChunkRef or their key. A context manager: leaving the block (or close()) returns its pages to the pool.\n"
      "Calls on one window are serialized (a lock); the GIL is released while they run.");
  def_lifetime(c);
  def_state(c);
  def_planning(c);
  def_apply(c);
  def_apply_moves(c);
  def_repairs(c);
  def_window_generate(c);
  def_reading(c);
}

}  // namespace orbit_py
