// orbit.load_trace / make_trace / validate_trace / save_trace / replay: the orbit-trace/1 format
// (orbit/trace.h; what `orbit make-trace` and `orbit replay` do) in Python. A trace and a replay report are
// plain dicts, exactly their JSON (the format is the contract, and the samples write traces as dicts);
// replay() releases the GIL and calls `progress` with it held.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "orbit/trace.h"

namespace orbit_py {

namespace {

py::object to_dict(const std::string& json_text) { return json_module().attr("loads")(json_text); }

}  // namespace

// replay's policies: a sequence of spec strings (not a str itself), read by policy_specs; its caster takes any
// object and writes "list[str]" in the signature, as pybind11's list conversion did.
struct PolicySpecs {
  static constexpr auto kPythonType = py::detail::const_name("list[str]");
  py::object value;
};

}  // namespace orbit_py

namespace pybind11::detail {
template <>
struct type_caster<orbit_py::PolicySpecs> : object_arg_caster<orbit_py::PolicySpecs> {};
}  // namespace pybind11::detail

namespace orbit_py {

namespace {

// Another type (None, a str alone) or an element that is no str raises TypeError naming it, where pybind11's list
// conversion answered "incompatible function arguments", naming neither.
std::vector<std::string> policy_specs(const PolicySpecs& arg) {
  const py::object& policies = arg.value;
  if (!py::isinstance<py::sequence>(policies) || py::isinstance<py::str>(policies) ||
      py::isinstance<py::bytes>(policies)) {
    throw py::type_error("replay: policies: expected a list of policy specs (str), got " +
                         (policies.is_none() ? std::string("None") : type_name(policies)));
  }
  std::vector<std::string> specs;
  const py::sequence items = policies.cast<py::sequence>();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const py::object item = items[i];
    specs.push_back(StrArg{item}.get("replay: policies[" + std::to_string(i) + "]"));
  }
  return specs;
}

// A trace given as a dict (the JSON object) or a str/PathLike path to an orbit-trace/1 .json file. A dict's
// numpy scalars are read as the values they equal, anything JSON cannot hold refused naming its path under
// `what` ("replay: trace['steps'][3]['tokens']": json_text).
orbit::Trace trace_arg(const py::object& trace, const std::string& what) {
  if (py::isinstance<py::dict>(trace)) return orbit::parse_trace(json_text(trace, what), "<dict>");
  if (py::isinstance<py::str>(trace) || py::hasattr(trace, "__fspath__")) {
    const std::string path = path_arg(trace, what.c_str());
    const NativeCall release;
    return orbit::load_trace(path);
  }
  throw py::type_error(what + ": expected a dict (orbit-trace/1 JSON object) or a path, got " +
                       std::string(py::str(py::type::of(trace).attr("__name__"))));
}

// load_trace, validate_trace, save_trace and make_trace: traces as dicts and files.
void def_trace_files(py::module_& m) {
  m.def(
      "load_trace",
      [](const py::object& path) { return to_dict(orbit::trace_to_json(trace_arg(path, "load_trace: path"))); },
      py::arg("path"),
      "Reads and validates an orbit-trace/1 file; returns it as a dict (its JSON, defaults filled in).\n"
      "Raises OrbitError naming the file and the JSON path of the first bad field.");
  m.def(
      "validate_trace", [](const py::object& trace) { (void)trace_arg(trace, "validate_trace: trace"); },
      py::arg("trace"),
      "Checks a trace (dict or path) against orbit-trace/1: known ops, chunks defined before use, branches\n"
      "forked before use, ... Returns None; raises OrbitError naming the step and field at fault.\n"
      "A dict may hold numpy values: its scalars are read as the ints, floats and bools they equal exactly\n"
      "(numpy.int64(7) as 7) and arrays of ints, floats or bools as lists. A value JSON cannot hold (NaN, a\n"
      "complex, another object) raises ValueError or TypeError naming its path (\"validate_trace:\n"
      "trace['steps'][3]['tokens'][0]: expected a JSON value ..., got complex128\"). save_trace and replay read\n"
      "a dict the same way.");
  m.def(
      "save_trace",
      [](const py::object& trace, const py::object& path) {
        const orbit::Trace t = trace_arg(trace, "save_trace: trace");
        const std::string p = path_arg(path, "save_trace: path");
        const NativeCall release;
        orbit::save_trace(t, p);
      },
      py::arg("trace"), py::arg("path"),
      "Validates a trace (dict or path; a dict's numpy values read as validate_trace reads them) and writes it\n"
      "to PATH atomically (a crash leaves the old file).");
  m.def(
      "make_trace",
      [](const StrArg& kind, const IntArg& steps, const py::object& seed, const IntArg& max_positions,
         const IntArg& position_rows, const IntArg& chunk_tokens, const BoolArg& sample_text) {
        orbit::MakeTraceOptions o;
        o.kind = kind.get("make_trace: kind");
        o.steps = steps.get("make_trace: steps");
        o.seed = to_seed(seed, "make_trace: seed");
        o.max_positions = max_positions.get("make_trace: max_positions");
        o.position_rows = position_rows.get("make_trace: position_rows");
        o.chunk_tokens = chunk_tokens.get("make_trace: chunk_tokens");
        o.sample_text = sample_text.get("make_trace: sample_text");
        return to_dict(orbit::trace_to_json(orbit::make_trace(o)));
      },
      py::arg("kind") = "web", py::kw_only(), py::arg("steps") = 12, py::arg("seed") = 0,
      py::arg("max_positions") = 512, py::arg("position_rows") = 1, py::arg("chunk_tokens") = 0,
      py::arg("sample_text") = false,
      "A synthetic agent trace (dict), as `orbit make-trace` writes: kind 'web' (screenshots slid over a\n"
      "growing transcript, look-backs), 'video' (frames re-examined, reorders) or 'agent' (tool results, forks,\n"
      "placement), random token ids (a count and a seed: the replaying model's vocabulary draws them), the window\n"
      "under ~3/4 of max_positions; or an agent\n"
      "pattern of story-like text chunks, the window filled to max_positions - 24: 'browse' (pages slide over a\n"
      "growing transcript, look-backs), 'coding' (files read, tool outputs dropped once used, files edited),\n"
      "'videoqa' (frames re-examined under new questions, reorders), 'fanout' (sub-agents forked over shared\n"
      "documents, commit / drop) or 'rag' (retrieved documents re-ranked each turn); their sizes count a text's\n"
      "UTF-8 bytes + 1 as its tokens (an upper bound: `orbit make-trace` counts the model's tokens instead).\n"
      "steps: agent steps (each several trace steps); max_positions: the model's, in [64, 2^40]; position_rows=3 makes "
      "media chunks embeddings with\n"
      "(t, h, w) grids; chunk_tokens: the screenshot / frame / document size (0 = from max_positions);\n"
      "sample_text: web's observations and agent's documents sampled from the model at replay (kinds 'web' and\n"
      "'agent' only; OrbitError otherwise).");
}

// replay: a trace under policies, with progress and Ctrl-C between steps.
void def_replay(py::module_& m) {
  m.def(
      "replay",
      [](const py::object& trace, const py::object& model, const PolicySpecs& policies, const BoolArg& baselines,
         const BoolArg& fidelity, const BoolArg& explain, const BoolArg& attribute, const IntArg& threads,
         const IntArg& pool_bytes, const IntArg& page_size, const StrArg& device, const StrArg& dtype,
         const IntArg& host_budget_bytes, const StrArg& eviction, const IntArg& device_tier_bytes,
         const py::object& progress) {
        const orbit::Trace t = trace_arg(trace, "replay: trace");
        orbit::ReplayOptions o;
        o.engine.model = path_arg(model, "replay: model");
        // path_arg reads None as "no path": a replay needs one (the engine's error named its C++ option).
        if (o.engine.model.empty())
          throw py::value_error("replay: model: a model path is required, got " + std::string(py::repr(model)));
        o.engine.threads = threads.get<int>("replay: threads");
        o.engine.pool_bytes = pool_bytes.get("replay: pool_bytes");
        o.engine.page_size = page_size.get("replay: page_size");
        o.engine.device = device.get("replay: device");
        o.engine.dtype = dtype.get("replay: dtype");
        o.engine.host_budget_bytes = host_budget_bytes.get("replay: host_budget_bytes");
        o.engine.eviction = eviction.get("replay: eviction");
        o.engine.device_tier_bytes = device_tier_bytes.get("replay: device_tier_bytes");
        o.policies = policy_specs(policies);
        orbit::check_policy_columns(o.policies, "replay: policies");
        o.baselines = baselines.get("replay: baselines");
        o.fidelity = fidelity.get("replay: fidelity");
        o.explain = explain.get("replay: explain");
        o.attribute = attribute.get("replay: attribute");
        if (o.attribute && !o.fidelity)
          throw py::value_error("replay: attribute=True needs fidelity=True (its probes)");
        if (!progress.is_none() && !PyCallable_Check(progress.ptr())) {
          throw py::type_error("progress: expected a callable or None");
        }
        // Before every step: deliver pending signals (Ctrl-C raises KeyboardInterrupt between steps, not
        // at the end), then the caller's progress callback.
        // Borrowed: the caller's argument outlives the replay, and the copies replay makes of its options run
        // without the GIL, so they must not touch its reference count.
        PyObject* callback = progress.is_none() ? nullptr : progress.ptr();
        o.progress = [callback](std::size_t policy, std::size_t policies_total, std::size_t step,
                                std::size_t steps_total, const std::string& name) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
          if (callback != nullptr) {
            py::reinterpret_borrow<py::object>(callback)(policy, policies_total, step, steps_total, name);
          }
        };
        // Each engine's checks name EngineOptions' fields, which are replay's keywords ("replay: page_size").
        const std::string report = with_keyword_names("EngineOptions", "replay", [&] {
          const NativeCall release;
          return orbit::replay_report_json(orbit::replay(t, o));
        });
        return to_dict(report);
      },
      py::arg("trace"), py::arg("model"), py::kw_only(), py::arg("policies") = std::vector<std::string>{"default"},
      py::arg("baselines") = true, py::arg("fidelity") = true, py::arg("explain") = false, py::arg("attribute") = false,
      py::arg("threads") = 0, py::arg("pool_bytes") = orbit::EngineOptions{}.pool_bytes,
      py::arg("page_size") = orbit::EngineOptions{}.page_size, py::arg("device") = "cpu", py::arg("dtype") = "float32",
      py::arg("host_budget_bytes") = orbit::EngineOptions{}.host_budget_bytes, py::arg("eviction") = "lru",
      py::arg("device_tier_bytes") = 0, py::arg("progress") = py::none(),
      "Replays a trace (dict or path; a dict's numpy values read as validate_trace reads them) on MODEL under each "
      "policy spec, on a fresh engine each, plus the\n"
      "baselines reprefill, prefix and blind (baselines=False: only those asked); returns the report as a dict\n"
      "(what `orbit replay --json` writes): per policy its steps (forward tokens, seconds, fidelity vs. a\n"
      "re-prefill: KL and top-1, ...), totals and, for patch-forming policies, the offline bound.\n"
      "device / dtype: where and in which precision every engine runs (as Engine's); host_budget_bytes,\n"
      "eviction, device_tier_bytes: every engine's store tiers (as Engine's).\n"
      "fidelity=False skips the per-step re-prefill; explain=True keeps each step's plan text; attribute=True\n"
      "adds each approximate instance's own KL per step (instance_losses) and, per policy, how the fidelity\n"
      "model's predictions compare by way of serving (totals.loss_agreement), as Window.loss_by_instance.\n"
      "progress(policy_index, policies, step_index, steps, policy_name) is called before every step (the GIL\n"
      "is held for it; an exception it raises stops the replay and propagates). Signals are checked before\n"
      "every step too, so Ctrl-C raises KeyboardInterrupt promptly. The GIL is released otherwise. Raises\n"
      "OrbitError for a bad trace, model or policy spec, or for two specs that give one policy (each is one\n"
      "column of the report).");
}

}  // namespace

void init_trace(py::module_& m) {
  m.attr("TRACE_FORMAT") = orbit::kTraceFormat;
  def_trace_files(m);
  def_replay(m);
}

}  // namespace orbit_py
