// orbit.Engine: one model, one KV pool, one chunk store (orbit/engine.h). A context manager; the GIL is
// released while the model loads, chunks are hashed or encoded, and the store closes.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "cancel.h"
#include "convert.h"
#include "decodes.h"
#include "engine_args.h"
#include "engine_open.h"
#include "orbit/common/error.h"
#include "orbit/interrupt.h"
#include "orbit/store.h"
#include "py_window.h"

namespace orbit_py {

namespace {

using orbit::ChunkOptions;
using orbit::ChunkRef;
using orbit::Engine;

ChunkOptions chunk_options(const std::string& label, bool pin) {
  ChunkOptions o;
  o.label = label;
  o.pin = pin;
  return o;
}

}  // namespace

// A chunk argument: a ChunkRef, or a chunk key (str) this engine knows.
ChunkRef resolve_chunk(Engine& engine, py::handle obj, const char* what) {
  if (py::isinstance<ChunkRef>(obj)) return obj.cast<ChunkRef>();
  if (py::isinstance<py::str>(obj)) return engine.chunk(utf8_arg(obj, what));  // OrbitError if unknown
  throw py::type_error(std::string(what) + ": expected a ChunkRef or a chunk key (str), got " +
                       std::string(py::str(py::type::handle_of(obj).attr("__qualname__"))));
}

orbit::WindowPolicy to_policy(py::handle obj, const char* what) {
  if (py::isinstance<orbit::WindowPolicy>(obj)) return obj.cast<orbit::WindowPolicy>();
  if (py::isinstance<py::str>(obj)) return orbit::parse_policy(utf8_arg(obj, what));
  throw py::type_error(std::string(what) + ": expected a Policy or a spec string such as 'patch:16', got " +
                       std::string(py::str(py::type::handle_of(obj).attr("__qualname__"))));
}

namespace {
// Engine: calibrate and calibrate_fidelity (the GIL released while they run).
void def_calibration(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def(
      "calibrate",
      [](Engine& e) {
        const NativeCall release;
        return naming_closed("calibrate", [&] { return e.calibrate(); });
      },
      "Fits the planner's cost model on this machine (times forwards, key relocation, patch forming and\n"
      "applying, tier reads; with a remote tier a probe read from the server) and its fidelity model (deficits\n"
      "measured on this model as the next-token KL against a re-prefill): plans then carry calibrated\n"
      "estimated_seconds and predicted_kl. About a second on the bundled model, longer on large ones. Returns a\n"
      "CalibrationReport. OrbitError for a closed engine.");
  c.def(
      "calibrate_fidelity",
      [](Engine& e, const py::object& progress) {
        if (!progress.is_none() && !PyCallable_Check(progress.ptr())) {
          throw py::type_error("calibrate_fidelity: progress: expected a callable or None");
        }
        orbit::CalibrationProgress report_seed;
        if (!progress.is_none()) {
          // After each seed, with the GIL: pending signals first (Ctrl-C raises KeyboardInterrupt between
          // seeds), then the caller's callback; what either raises stops the calibration and propagates.
          // Borrowed: the argument outlives the call, and copies of the callback made without the GIL must not
          // touch its reference count.
          PyObject* callback = progress.ptr();
          report_seed = [callback](int64_t done, int64_t seeds) {
            py::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            py::reinterpret_borrow<py::object>(callback)(done, seeds);
          };
        }
        const NativeCall release;
        return naming_closed("calibrate_fidelity", [&] { return e.calibrate_fidelity(report_seed); });
      },
      py::kw_only(), py::arg("progress") = py::none(),
      "Fits only the fidelity model, as calibrate() does (plans' predicted_kl, the `:kl=X` budgets), and leaves\n"
      "the cost model as it is: estimated_seconds do not change, and the report's samples is 0 and cost_model\n"
      "''. Nothing is timed and the samples are seeded, so two engines of one model fit the same model and plan\n"
      "the same (what a replay comparing policies or models needs). Both calibrations move the model halfway\n"
      "from the defaults (fitted on stories260K) toward this model's fit, in log space. progress(seeds_done,\n"
      "seeds) is called after each seed is measured (the GIL held for it; an exception it raises, or Ctrl-C,\n"
      "stops the calibration, nothing fitted or stored, and propagates). Returns a CalibrationReport. OrbitError\n"
      "for a closed engine.");
  c.def("fidelity_model_description", &Engine::fidelity_model_description, py::call_guard<NativeCall>(),
        "The fidelity model plans predict with now, one line: each loss kind's coefficient (KL per unit of\n"
        "loss) marked fitted or default, the reference sensitivity s_ref, and ', correction xF' once the\n"
        "self-checks scaled it (stats.fidelity_correction). Answers after close() too.");
  c.def("fidelity_calibration", &Engine::fidelity_calibration, py::call_guard<NativeCall>(),
        "Where that model comes from: 'default' (never calibrated, or no stored calibration read yet), 'store'\n"
        "(fitted from the calibration the store directory holds for this model, the stored_calibration keyword),\n"
        "'remote' (fitted from the remote's, asked by the first plan or call of this or\n"
        "fidelity_model_description() when the directory holds none; again at a later one while the remote does\n"
        "not answer) or 'calibrated' (calibrate() or calibrate_fidelity() ran on this engine). Answers after\n"
        "close() too.");
}

// Engine: the context manager, close and the engine's state.
void def_engine_life(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def(
      "__enter__",
      [](std::shared_ptr<Engine> e) {
        ORBIT_CHECK(!engine_closed(e), "with engine: the engine is closed (close() was called); open a new Engine");
        return e;
      },
      "Returns the engine; OrbitError when it is closed.");
  c.def(
      "__exit__",
      [](const std::shared_ptr<Engine>& e, py::args) {
        close_engine(e);
        return false;
      },
      "Closes the engine (see close()); exceptions propagate.");
  c.def("close", &close_engine, py::arg("finish_seconds") = py::none(),
        "Finishes the background work queued so far (canonicals and patches of first sights, for the store\n"
        "directory or remote to keep; without either none is run), then flushes and closes the store, once the\n"
        "calls in flight on other threads returned (the KV pool and the weights are freed with the last\n"
        "reference to the engine or one of its windows). finish_seconds (None: no bound) bounds that\n"
        "work; what is left then is dropped (formed again when a later run needs it), as it is when Ctrl-C comes\n"
        "meanwhile (the engine is closed, then KeyboardInterrupt raised). finish_seconds is a float or an int\n"
        "(TypeError for a bool or another type); a negative or NaN one raises OrbitError. A close() called while\n"
        "another thread's runs waits for it, under the first one's finish_seconds.\n"
        "A decode running on any of its windows (generate, generate_n, orbit.generate_many, a Window.stream,\n"
        "an orbit.aio call) is first stopped at its next token, stop_reason 'cancelled' as a CancelToken gives,\n"
        "so close() waits for that token, not for the whole answer (a stream waiting for its reader is woken at\n"
        "once); one started meanwhile raises OrbitError('Window.generate: engine is closed'), and none runs once\n"
        "close() returned. Idempotent. Later calls on the engine or its windows raise OrbitError naming the call\n"
        "('tokenize: engine is closed', 'Window.sync: engine is closed'), the tokenizer's (tokenize, detokenize,\n"
        "piece, has_tokenizer) and options included; only closed, stats, fidelity_model_description(),\n"
        "fidelity_calibration() and repr() answer.\n"
        "Called from inside a call of this engine on the same thread (generate's on_text) it raises OrbitError\n"
        "instead of waiting for that call, which waits for it, and stops nothing.");
  c.def_property_readonly(
      "closed", [](const std::shared_ptr<Engine>& e) { return engine_closed(e); },
      "True once close() was called (from any thread; it reads no lock): close() may still be stopping the\n"
      "decodes and closing the store.");
  c.def_property_readonly(
      "options", [](const Engine& e) { return naming_closed("options", [&] { return e.options(); }); },
      "EngineOptions it was opened with.");
  c.def_property_readonly(
      "model_info", [](const Engine& e) { return naming_closed("model_info", [&] { return e.model_info(); }); },
      "ModelInfo of the loaded model.");
  c.def_property_readonly("stats", &Engine::stats,
                          "EngineStats: chunks, windows, pool pages, forwards (critical path and background apart),\n"
                          "background jobs, store. Unlike every other call it answers after close() too, so the\n"
                          "final counts can be read once the engine is closed: the counters as close() left them,\n"
                          "and store empty (no tiers, zero counts: the store is closed and has nothing to report).");
  c.def(
      "run_background",
      [](Engine& e, const FloatArg& max_seconds_arg) {
        const double max_seconds = max_seconds_arg.get("run_background: max_seconds");
        // On the main thread signals are delivered at its interruption points (before each job, before each
        // layer of a job's forward: orbit/interrupt.h), as in a window call (PyWindow::run).
        SignalPoll signals = SignalPoll::main_thread_only();
        try {
          const NativeCall release;
          const orbit::InterruptScope interrupt([&signals] { return signals.raised(); });
          return naming_closed("run_background", [&] { return e.run_background(max_seconds); });
        } catch (const orbit::Interrupted&) {
          signals.rethrow();  // the GIL is held again here
          throw;
        }
      },
      py::arg("max_seconds") = 1e30,
      "Runs queued background work (canonical encodes and patch forming of first sights) on this thread, one\n"
      "job at a time, until none is left or max_seconds passed (checked after each job, so one job runs even\n"
      "with max_seconds=0), then waits for the worker's job in flight ('thread' mode). Returns\n"
      "the number of jobs run here. Call it in idle time under background='deferred' (until then their\n"
      "patches are not stored: stats.background_pending counts them); under 'thread' it waits for the queue\n"
      "to drain. The GIL is released meanwhile. max_seconds is a float (an int too; another type, None or a bool\n"
      "raises TypeError naming it); OrbitError for a negative or NaN max_seconds or a closed engine.\n"
      "On the main thread signal handlers run while it works (at most 100 ms apart, orbit.set_signal_interval):\n"
      "one that raises (Ctrl-C's KeyboardInterrupt) stops it before the next job or inside a job's forward\n"
      "(between two layers) and is raised here; nothing is lost: the jobs not run, and the one stopped, stay\n"
      "queued (stats.background_pending) for a later call.");
  def_calibration(c);
}

// Engine: the tokenizer.
void def_engine_text(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def_property_readonly(
      "has_tokenizer",
      [](const Engine& e) { return naming_closed("has_tokenizer", [&] { return e.has_tokenizer(); }); },
      "True when the engine has a tokenizer: a Hugging Face directory's tokenizer.json, llama2.c's tokenizer.bin\n"
      "beside the model, or Engine(tokenizer=...).");
  c.def(
      "tokenize",
      [](const Engine& e, const StrArg& text, const BoolArg& bos) {
        const std::string t = text.get("tokenize: text");
        const bool b = bos.get("tokenize: bos");
        const NativeCall release;  // a long text's encoding holds no other thread
        return naming_closed("tokenize", [&] { return e.tokenize(t, b); });
      },
      py::arg("text"), py::arg("bos") = true,
      "Token ids of text with the engine's tokenizer (a Hugging Face directory's tokenizer.json, as Hugging Face's\n"
      "tokenizers encode it; llama2.c's tokenizer.bin as llama2.c does), BOS first when bos. Raises OrbitError when\n"
      "the engine has no tokenizer (has_tokenizer).");
  c.def(
      "detokenize",
      [](const Engine& e, const py::object& tokens, const IntArg& previous) {
        const std::vector<int64_t> ids = to_tokens(tokens, "detokenize: tokens");
        const int64_t after = previous.get("detokenize: previous");
        const std::string bytes = [&] {
          const NativeCall release;
          return naming_closed("detokenize", [&] { return e.detokenize(ids, after); });
        }();
        return py::reinterpret_steal<py::str>(
            PyUnicode_DecodeUTF8(bytes.data(), static_cast<py::ssize_t>(bytes.size()), "replace"));
      },
      py::arg("tokens"), py::arg("previous") = -1,
      "The text of tokens as if they followed `previous` (BOS drops the first leading space); BOS/EOS give no text.");
  c.def(
      "piece",
      [](const Engine& e, const IntArg& token) {
        const int64_t id = token.get("piece: token");
        return naming_closed("piece", [&] { return e.piece(id); });
      },
      py::arg("token"), "The vocabulary entry of one id as stored (e.g. ' the', '<0x0A>').");
}

// Engine: registering text and token chunks, and finding chunks by key.
void def_engine_chunks(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def(
      "add_text",
      [](Engine& e, const StrArg& text_arg, const StrArg& label, const BoolArg& pin_arg, const BoolArg& bos_arg) {
        const std::string text = text_arg.get("add_text: text");
        const ChunkOptions o = chunk_options(label.get("add_text: label"), pin_arg.get("add_text: pin"));
        const bool bos = bos_arg.get("add_text: bos");
        const NativeCall release;
        return naming_closed("add_text", [&] { return e.add_text(text, o, bos); });
      },
      py::arg("text"), py::kw_only(), py::arg("label") = "", py::arg("pin") = false, py::arg("bos") = false,
      "add_tokens(tokenize(text, bos)): a chunk of text. bos=True for a window's first chunk.");
  c.def(
      "add_tokens",
      [](Engine& e, const py::object& tokens, const StrArg& label_arg, const BoolArg& pin_arg) {
        const std::string label = label_arg.get("add_tokens: label");
        const bool pin = pin_arg.get("add_tokens: pin");
        const bool text = py::isinstance<py::str>(tokens);
        const std::string utf8 = text ? utf8_arg(tokens, "add_tokens: tokens") : std::string();
        std::vector<int64_t> ids = text ? std::vector<int64_t>() : to_tokens(tokens, "add_tokens: tokens");
        const NativeCall release;
        return naming_closed("add_tokens", [&] {
          if (text) ids = e.tokenize(utf8, false);
          return e.add_tokens(ids, chunk_options(label, pin));
        });
      },
      py::arg("tokens"), py::kw_only(), py::arg("label") = "", py::arg("pin") = false,
      "Registers a chunk of token ids (list, 1-D integer numpy array or torch tensor) and returns its ChunkRef.\n"
      "Idempotent: the same tokens give the same key. Nothing is computed until a window needs its canonical.\n"
      "label names it in plans and errors (the first add's stays); pin keeps its canonical resident in the store\n"
      "(a re-add with pin=True pins a chunk added without; pin=False never unpins). Raises OrbitError for\n"
      "an empty chunk or ids outside the vocabulary, TypeError for non-integer input.");
  c.def(
      "chunk",
      [](const Engine& e, const StrArg& key_arg) {
        const std::string key = key_arg.get("chunk: key");
        return naming_closed("chunk", [&] { return e.chunk(key); });
      },
      py::arg("key"), "The registered chunk with this key. Raises OrbitError when this engine does not know it.");
  c.def_property_readonly(
      "chunks", [](const Engine& e) { return naming_closed("chunks", [&] { return e.chunks(); }); },
      "list[ChunkRef] of every registered chunk.");
}

// Engine: registering media chunks by their embeddings, and finding them again by their digest.
void def_engine_media(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def(
      "add_embeddings",
      [](Engine& e, const py::object& embeddings, const py::object& grid, const StrArg& digest_arg,
         const StrArg& label_arg, const BoolArg& pin_arg) {
        const std::string media_digest = digest_arg.get("add_embeddings: media_digest");
        const bool pin = pin_arg.get("add_embeddings: pin");
        const std::string label = label_arg.get("add_embeddings: label");
        const Borrowed emb = to_embeddings(embeddings, "add_embeddings: embeddings");
        const Borrowed g = to_grid(grid, "add_embeddings: grid");
        const orbit::ModelInfo info = naming_closed("add_embeddings", [&] { return e.model_info(); });
        if (emb.view.shape[1] != info.hidden_size) {
          throw py::value_error("add_embeddings: embeddings shape " + shape_string(emb.view.shape) + ": width " +
                                std::to_string(emb.view.shape[1]) + " != the model's hidden size " +
                                std::to_string(info.hidden_size));
        }
        orbit::EmbeddingChunk chunk;
        chunk.embeddings = emb.view;
        chunk.grid = g.view;
        chunk.media_digest = media_digest;
        const NativeCall release;
        return naming_closed("add_embeddings", [&] { return e.add_embeddings(chunk, chunk_options(label, pin)); });
      },
      py::arg("embeddings"), py::kw_only(), py::arg("grid") = py::none(), py::arg("media_digest") = "",
      py::arg("label") = "", py::arg("pin") = false,
      "Registers a media chunk given as input embeddings [n, hidden_size] (numpy float32/float16, or a torch\n"
      "tensor float32/bfloat16/float16; CPU C-contiguous input is read in place, anything else copied once).\n"
      "grid: optional int64 positions [3, n] (M-RoPE (t, h, w)) or [n]; None = 0..n-1. media_digest: your\n"
      "digest of the pixels; when given, the key hashes it (and the grid) instead of the embedding bytes.\n"
      "Raises TypeError for a wrong dtype, ValueError for a wrong shape, OrbitError for NaN/Inf or a bad grid.");
  c.def(
      "find_media",
      [](Engine& e, const StrArg& digest_arg, const py::object& grid, const IntArg& rows, const StrArg& label_arg,
         const BoolArg& pin_arg) -> std::optional<ChunkRef> {
        const std::string media_digest = digest_arg.get("find_media: media_digest");
        const bool pin = pin_arg.get("find_media: pin");
        const std::string label = label_arg.get("find_media: label");
        const Borrowed g = to_grid(grid, "find_media: grid");
        orbit::MediaLookup lookup;
        lookup.media_digest = media_digest;
        lookup.grid = g.view;
        lookup.rows = rows.get("find_media: rows");
        return naming_closed("find_media", [&] {
          return with_keyword_names("MediaLookup", "find_media", [&] {
            const NativeCall release;
            return e.find_media(lookup, chunk_options(label, pin));
          });
        });
      },
      py::arg("media_digest"), py::kw_only(), py::arg("grid") = py::none(), py::arg("rows") = 0, py::arg("label") = "",
      py::arg("pin") = false,
      "The media chunk an earlier add_embeddings(..., media_digest=media_digest, grid=grid) registered: this\n"
      "engine's own while it keeps it, else read from the embedding cache (this engine's store, another\n"
      "process's through a shared store_dir, or the remote tier; off with embedding_cache=False) and registered\n"
      "here; None when neither holds it: run your vision encoder and\n"
      "call add_embeddings. grid: the same grid as then (None if it had none, and give rows, the number of\n"
      "embedding rows). Counted in stats.media_found / media_missed.\n\n"
      "    ref = engine.find_media(digest, grid=grid)\n"
      "    if ref is None:\n"
      "        ref = engine.add_embeddings(encode(pixels), grid=grid, media_digest=digest)\n");
}

// Engine: precompute, new_window and __repr__.
void def_engine_windows(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  c.def(
      "precompute",
      [](Engine& e, const py::object& chunk) {
        naming_closed("precompute", [&] {
          const ChunkRef ref = resolve_chunk(e, chunk, "precompute: chunk");
          const NativeCall release;
          e.precompute(ref);
        });
      },
      py::arg("chunk"), "Encodes the chunk's canonical now (one forward of the chunk alone) unless stored.");
  c.def(
      "new_window",
      [](std::shared_ptr<Engine> e, const py::object& policy, const IntArg& max_bytes, const StrArg& label) {
        orbit::WindowOptions o;
        if (!policy.is_none()) o.policy = to_policy(policy, "new_window: policy");
        o.max_bytes = max_bytes.get("new_window: max_bytes");
        o.label = label.get("new_window: label");
        orbit::Window w = naming_closed("new_window", [&] {
          return with_keyword_names("WindowOptions", "new_window", [&] { return e->new_window(o); });
        });
        return wrap_window(e, std::move(w));
      },
      py::kw_only(), py::arg("policy") = py::none(), py::arg("max_bytes") = 0, py::arg("label") = "",
      "A new empty Window. policy: a Policy or a spec string (the default policy, 'default', when None); max_bytes: "
      "most KV bytes\n"
      "(whole pages) it may hold, 0 = limited only by the pool; label: its name in traces.");
  c.def("__repr__", &engine_repr);
}

}  // namespace

void init_engine(py::module_& m) {
  py::class_<Engine, std::shared_ptr<Engine>> c(
      m, "Engine",
      "One model, one KV pool, one chunk store (orbit/engine.h). The entry point:\n\n"
      "    with orbit.Engine(model='models/stories260K/stories260K.bin', store_dir='store') as engine:\n"
      "        page = engine.add_tokens([1, 365, 169], label='page 1')\n"
      "        w = engine.new_window(policy='patch:16')\n"
      "        w.admit(page)\n"
      "        print(w.generate([1, 2], max_tokens=8).tokens)\n\n"
      "Chunks are registered once and placed into any number of windows. Leaving the `with` block (or\n"
      "close()) flushes and closes the store; windows still alive raise OrbitError on use. The KV pool and the\n"
      "weights are freed once the engine and its windows are gone (del, or garbage collection).\n"
      "Safe to use from several threads.");
  def_engine_open(c);
  def_engine_life(c);
  def_engine_text(c);
  def_engine_chunks(c);
  def_engine_media(c);
  def_engine_windows(c);
  m.def("_close_engines_at_exit", &close_engines_at_exit,
        "Closes every Engine still open (orbit/__init__.py registers it with atexit): decodes and run_background "
        "left running on daemon threads return before the interpreter is torn down.");
}

}  // namespace orbit_py
