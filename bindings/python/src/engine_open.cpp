// orbit.Engine's opening and closing (engine_open.h): the constructor, the open engines' registry (ChunkRef.valid,
// the close at exit) and close().
#include "engine_open.h"

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
#include "orbit/common/error.h"
#include "orbit/store.h"
#include "py_window.h"

namespace orbit_py {

namespace {

using orbit::Engine;

// The remote tier is optional (down, the engine works on its local tiers and the tier tries again on use),
// so a remote that does not answer at open is no error; but a wrong host, port or password should show at
// once, not at the first store operation: one PING (orbit::ping_remote, as orbit serve --remote does) and
// an orbit.RemoteUnreachableWarning naming the URL (password redacted) and the cause.
void warn_if_remote_unreachable(const std::string& url) {
  orbit::RemotePing ping;
  {
    const NativeCall release;
    ping = orbit::ping_remote(url);
  }
  if (ping.status.is_ok()) return;
  warn_remote_unreachable("Engine: remote " + ping.url + " is unreachable at open (" + ping.status.reason() +
                          "); the engine runs on its local tiers, the remote tier retrying on use "
                          "(stats().store.remote)");
}

// The deleter of the shared_ptr every Python reference to an engine shares (the pybind11 holder, each
// PyWindow's `engine`): it owns the engine, and carries the decodes Engine.close() stops first, found again
// from any copy of that shared_ptr by std::get_deleter (engine_decodes()).
struct EngineKeeper {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<EngineDecodes> decodes;
  std::string repr_fields;  // "model='...', store_dir='...'" for __repr__, which answers after close() too

  void operator()(Engine*) { engine.reset(); }
};

// Every Engine opened from Python, weakly: ChunkRef.valid asks the open ones whether they hold a key.
struct OpenedEngines {
  std::mutex mutex;
  std::vector<std::weak_ptr<Engine>> engines;
};

OpenedEngines& opened_engines() {
  static OpenedEngines* opened = new OpenedEngines;  // never destroyed: read until the interpreter exits
  return *opened;
}

void remember_engine(const std::shared_ptr<Engine>& engine) {
  OpenedEngines& o = opened_engines();
  const std::lock_guard<std::mutex> lock(o.mutex);
  o.engines.erase(
      std::remove_if(o.engines.begin(), o.engines.end(), [](const std::weak_ptr<Engine>& e) { return e.expired(); }),
      o.engines.end());
  o.engines.push_back(engine);
}

// Engine(model, **keywords): the keywords read and checked into EngineOptions (engine_args.h), the engine
// opened without the GIL, the remote tier pinged.
std::shared_ptr<Engine> open_engine(const py::object& model, const py::kwargs& kwargs) {
  const orbit::EngineOptions o = engine_options(model, engine_args(kwargs));
  // Its checks name EngineOptions' fields, which are Engine's keywords: "Engine: page_size must be >= 1".
  std::shared_ptr<Engine> engine = with_keyword_names("EngineOptions", "Engine", [&] {
    const NativeCall release;
    return Engine::open(o);
  });
  flush_warnings();  // opening the store may have warned (a remote tier without a secret)
  if (!o.remote.empty()) warn_if_remote_unreachable(o.remote);
  const py::object fsdecode = py::module_::import("os").attr("fsdecode");  // the bytes path_arg made, as a str
  std::string fields = "model=" + std::string(py::repr(fsdecode(py::bytes(o.model))));
  if (!o.store_dir.empty()) fields += ", store_dir=" + std::string(py::repr(fsdecode(py::bytes(o.store_dir))));
  Engine* raw = engine.get();
  std::shared_ptr<Engine> kept(raw,
                               EngineKeeper{std::move(engine), std::make_shared<EngineDecodes>(), std::move(fields)});
  remember_engine(kept);
  return kept;
}

}  // namespace

// Whether close() was called (from any thread; reads no lock): Engine.closed.
bool engine_closed(const std::shared_ptr<Engine>& e) {
  const std::shared_ptr<EngineDecodes> decodes = engine_decodes(e);
  return (decodes && decodes->closing().is_set()) || e->closed();
}

// Engine.close() and __exit__: stops the decodes on the engine's windows at their next token and waits for
// them (decodes.h), then closes the engine, waiting for the other calls in flight. Refused from inside a call
// of one of its windows, or of the engine itself (calibrate_fidelity's progress, a signal handler run during
// run_background), on this thread before anything is stopped (the close would wait for that call).
// finish_seconds: CloseOptions::finish_seconds (None: no bound). A signal handler that raises while the queued
// background work is finished (Ctrl-C's KeyboardInterrupt) drops the rest; the engine is closed all the same and
// the exception raised after.
void close_engine(const std::shared_ptr<Engine>& e, const std::optional<FloatArg>& finish_seconds) {
  if (e->forked()) return;  // a child of fork(): nothing of the engine is this process's to stop (Engine::forked)
  ORBIT_CHECK(!in_window_call(e.get()) && !e->in_operation_on_this_thread(),
              "close(): called from inside an operation of this engine on the same thread; close the engine after "
              "that operation returns");
  orbit::CloseOptions options;
  if (finish_seconds) {  // a float or an int; another type (a bool, a str) raises TypeError naming it
    const double seconds = finish_seconds->get("close: finish_seconds");
    ORBIT_CHECK(seconds >= 0, "close: finish_seconds = " << seconds << " (want seconds >= 0, or None)");
    options.finish_seconds = seconds;
  }
  const std::shared_ptr<EngineDecodes> decodes = engine_decodes(e);
  SignalPoll signals = SignalPoll::main_thread_only();
  options.stop = [&signals] { return signals.raised(); };
  {
    const NativeCall release;
    if (decodes) decodes->stop_all();
    e->close(options);
  }
  flush_warnings();  // closing the store may have warned (entries that never reached the disk)
  signals.rethrow();
}

// Closes every engine still open (Python's atexit runs it, before the interpreter is torn down): a decode or
// run_background left running on a daemon thread (a Window.stream read in part, then the script ended) stops and
// returns while the interpreter can still take its thread back. Torn down under it, the thread's return into
// Python ended it inside orbit's C++ frames (std::terminate), or its signal poll took the GIL of a finalized
// interpreter (a crash). It also writes what close() warns of (entries only in memory, remote writes not sent).
// An engine whose close fails is left as it is.
void close_engines_at_exit() {
  std::vector<std::shared_ptr<Engine>> open;
  {
    OpenedEngines& o = opened_engines();
    const std::lock_guard<std::mutex> lock(o.mutex);
    for (const std::weak_ptr<Engine>& weak : o.engines) {
      std::shared_ptr<Engine> e = weak.lock();
      if (e && !engine_closed(e) && !e->forked()) open.push_back(std::move(e));
    }
  }
  for (const std::shared_ptr<Engine>& e : open) {
    try {
      close_engine(e);
    } catch (const orbit::Error&) {
    }
  }
  py::gil_scoped_release release;  // not a NativeCall: the wait below is for the others
  const bool closed_any = !open.empty();
  open.clear();  // without the GIL, as chunk_registered drops its references
  // The calls left running on other threads ended with their engines: let them take the GIL back now, while
  // the interpreter can still give it (NativeCall).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (closed_any && native_calls().load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::atomic<int>& native_calls() {
  static std::atomic<int> count{0};
  return count;
}

std::shared_ptr<EngineDecodes> engine_decodes(const std::shared_ptr<Engine>& engine) {
  const EngineKeeper* keeper = std::get_deleter<EngineKeeper>(engine);
  return keeper != nullptr ? keeper->decodes : nullptr;
}

std::string engine_repr(const std::shared_ptr<Engine>& e) {
  const EngineKeeper* keeper = std::get_deleter<EngineKeeper>(e);
  std::ostringstream o;
  o << "Engine(" << (keeper != nullptr ? keeper->repr_fields : std::string("?"));
  if (e->closed()) o << ", closed";
  o << ")";
  return o.str();
}

bool chunk_registered(const std::string& key) {
  if (key.empty()) return false;
  std::vector<std::shared_ptr<Engine>> open;
  {
    OpenedEngines& o = opened_engines();
    const std::lock_guard<std::mutex> lock(o.mutex);
    for (const std::weak_ptr<Engine>& weak : o.engines) {
      std::shared_ptr<Engine> e = weak.lock();
      if (e && !engine_closed(e)) open.push_back(std::move(e));
    }
  }
  const NativeCall release;
  bool found = false;
  for (const std::shared_ptr<Engine>& e : open) {
    try {
      // Not chunk(key), which counts as a use: asking whether a chunk is valid must not keep it from being
      // forgotten (EngineOptions.max_idle_chunks) in the order the engine's own uses give.
      found = e->has_chunk(key);
    } catch (const orbit::Error&) {  // closed meanwhile
    }
    if (found) break;
  }
  open.clear();  // without the GIL: the last reference (dropped meanwhile by Python) closes its engine here
  return found;
}

namespace {

// Engine(...)'s docstring, below its signature line.
const char* const kEngineInitDoc =
    "Loads the model (a llama2.c .bin file or a Hugging Face directory) and opens the store (store_dir: a\n"
    "directory, created if missing, which several processes may share; None = memory only). pool_bytes: the\n"
    "windows' KV pool (whole pages of page_size tokens); host_budget_bytes / disk_budget_bytes (0 =\n"
    "unlimited; a disk budget needs store_dir): the store's tiers; threads: intra-op threads (0 = keep the\n"
    "process setting). remote: a shared remote tier, 'redis://host:port[/db]' or\n"
    "'redis-cluster://h1:p1,h2:p2' ('' = none; rediss:// for TLS, its CA and client certificate from the\n"
    "ORBIT_REDIS_TLS_* environment variables), whose entries expire after remote_ttl_seconds (0 = never;\n"
    "> 0 needs remote, as remote_secret does); the remote down never stops the engine (see\n"
    "stats().store.remote), and one that does not answer a PING at open issues a RemoteUnreachableWarning\n"
    "naming the URL (password redacted) and the cause. remote_secret: the secret the engines sharing the\n"
    "remote authenticate its values and manifests with (HMAC-SHA256; '' = the ORBIT_REMOTE_SECRET environment\n"
    "variable, else none: values\n"
    "are then checked but not authenticated, and opening warns once). remote_max_held_fraction: the share (0..1)\n"
    "of the disk budget that entries kept for their undelivered remote writes may fill (past it the oldest are\n"
    "evicted, their writes given up: stats().store.remote.abandoned, one warning a run; 1 = keep every one, a\n"
    "put needing their room refused; 0 = none). device: 'cpu', 'cuda' or 'cuda:N'\n"
    "(model, KV pool and windows live there);\n"
    "dtype: 'float32', 'bfloat16' or 'float16' (float16 on CUDA only), the compute dtype weights load straight into.\n"
    "The store's tiers: eviction: 'lru' or 'cost-aware' (evicts what saves the fewest recompute tokens per\n"
    "byte first: (expected reuse + hits) x tokens / bytes); cold_tier: 'exact' or 'int8' (canonicals on disk\n"
    "as int8 rows + a float32 scale each: ~1/4 of the bytes, every value within max|row|/254);\n"
    "device_tier_bytes: a device tier of canonicals in GPU memory (0 = none; needs device='cuda', else\n"
    "OrbitError naming it; a CUDA engine's host tier is pinned memory either way); embedding_cache: keep\n"
    "the embeddings of media chunks added with a media_digest, so find_media() finds them later.\n"
    "background: where a chunk's canonical and patch are formed after its first sight (an exact in-context\n"
    "prefill on the critical path): 'thread' (a worker thread, as they are queued), 'deferred' (only when\n"
    "run_background() is called: idle time you pick, e.g. while a tool runs) or 'inline' (at the end of the\n"
    "apply() that queued them); a BackgroundMode is accepted too. ValueError for any other name.\n"
    "shared_canonicals: windows placing the same chunk read one set of its canonical pages in the pool, each\n"
    "adding its own patch factors (stats().pool_canonical_pages, pool_patch_bytes); False: every placement\n"
    "writes a patched copy of its own.\n"
    "max_idle_chunks: 0 keeps every chunk registered for the engine's life; N keeps the N most recently added\n"
    "or used, and forgets a chunk past them once no window holds it (its ChunkRef then raises OrbitError\n"
    "until it is added again): for long-running processes that see ever new content.\n"
    "max_background_bytes: the KV queued background jobs may hold (0 = no bound); past it the oldest queued jobs\n"
    "are dropped and their patches not formed (stats().background_dropped): for background='deferred' work that\n"
    "may not find idle time for long.\n"
    "constraint_cache: a ConstraintCacheOptions bounding the compiled constraints generate keeps for tools and\n"
    "response_format (None = 64 entries, 256 MiB; Engine.stats.constraint_cache counts them).\n"
    "tokenizer: the tokenizer file for text (str or os.PathLike): llama2.c's (tok512.bin, tokenizer.bin) or\n"
    "Hugging Face's tokenizer.json (or a directory holding one); None = the model directory's tokenizer.json,\n"
    "else tok<vocab>.bin / tokenizer.bin beside a llama2.c model, if any (model_info.tokenizer names the one in\n"
    "use). Its ids must fit the model's vocabulary; a missing or unreadable file raises OrbitError naming\n"
    "EngineOptions::tokenizer and the path.\n"
    "stored_calibration: with a store_dir or remote, calibrate() / calibrate_fidelity() write the deficits they\n"
    "measured there (to both when both are given), and an engine opening this model on that store directory or\n"
    "remote fits its fidelity model from them without measuring (fidelity_calibration() says 'store', or\n"
    "'remote' for the remote's): the directory's is read at open, the remote's (when the directory holds none)\n"
    "at the first plan or fidelity question, never at open, and again at a later one while the remote does not\n"
    "answer; an entry that does not decode is ignored with a warning on stderr naming its key, the defaults\n"
    "kept; False: neither read nor written.\n"
    "window_past: each window of a CPU engine keeps its KV as one contiguous past between its reads, so a read\n"
    "after a short append copies what was appended, not the whole window (equal bit for bit); it costs up to\n"
    "twice the window's KV bytes (64 rows' at least) of host memory per window, fitted again when the window\n"
    "shrinks (Window.stats.past_bytes). False: every read copies\n"
    "the whole window. Unused on CUDA, whose reads read the pool's pages in place.\n"
    "A keyword Engine does not take, or a value of another type than the signature's, raises TypeError naming\n"
    "the keyword; a bool keyword takes True, False or a numpy bool only (not None, 0/1 or a str).\n"
    "Raises OrbitError naming the file or option at fault (CUDA asked for where there is none included).";

}  // namespace

// Engine: opening: the constructor.
void def_engine_open(py::class_<Engine, std::shared_ptr<Engine>>& c) {
  // The keywords come as **kwargs read by engine_args(), so pybind11 would write "(self, model, **kwargs)":
  // the docstring's signature line is written from EngineArgs instead, the one a function of those parameters has.
  const std::string self_type =
      std::string(py::str(c.attr("__module__"))) + "." + std::string(py::str(c.attr("__qualname__")));
  static const std::string doc = engine_signature(self_type) + "\n\n" + kEngineInitDoc + "\n";
  py::options options;
  options.disable_function_signatures();
  c.def(py::init(&open_engine), py::arg("model"), doc.c_str());
}

}  // namespace orbit_py
