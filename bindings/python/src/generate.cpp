// generate()'s keyword arguments (generate_args.h: stop strings and the on_text callback among them) and
// orbit.generate_many: several windows decoded together, one forward per step (orbit/decode_batch.h).
#include <pybind11/stl.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "generate_args.h"
#include "orbit/decode_batch.h"
#include "orbit/interrupt.h"

namespace orbit_py {

namespace {

// generate's logit_bias: a dict of token id (int or numpy integer, or a str of one as OpenAI's JSON has) to a
// bias read as generate's float arguments are (to_float: a float, an int or a numpy number, not a bool, which
// Python's int check took as 1.0: "generate: logit_bias[5]: expected float, got bool"). The ranges are the SDK's
// to check (GenerateOptions::logit_bias).
std::map<int64_t, double> to_logit_bias(const py::object& obj) {
  if (!py::isinstance<py::dict>(obj)) {
    throw py::type_error("generate: logit_bias must be a dict {token id: bias}, got " +
                         py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  }
  std::map<int64_t, double> out;
  for (const auto& [key, value] : obj.cast<py::dict>()) {
    int64_t token = 0;
    if (is_integer(key)) {  // an int or a numpy integer, not a bool (refused below, as other types)
      token = to_int(key, "generate: logit_bias key");
    } else if (py::isinstance<py::str>(key)) {
      const std::string text = utf8_arg(key, "generate: logit_bias key");
      std::size_t used = 0;
      try {
        token = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != text.size()) {
        throw py::value_error("generate: logit_bias key '" + text + "' is not a token id");
      }
    } else {
      throw py::type_error("generate: logit_bias keys must be token ids (int), got " +
                           py::repr(key).cast<std::string>());
    }
    if (out.count(token) > 0) {  // {5: 1, "5": -1}: two keys for one token, neither silently dropped
      throw py::value_error("generate: logit_bias key " + py::repr(key).cast<std::string>() + " names token " +
                            std::to_string(token) + ", which another key names too");
    }
    out[token] = to_float(value, ("generate: logit_bias[" + std::to_string(token) + "]").c_str());
  }
  return out;
}

// generate's stop: None, a str, or a list/tuple of str; as OpenAI's, at most 4, none empty.
constexpr std::size_t kMaxStopStrings = 4;

std::vector<std::string> to_stop(const py::object& obj) {
  if (obj.is_none()) return {};
  if (py::isinstance<py::str>(obj)) {
    std::string stop = utf8_arg(obj, "generate: stop");
    if (stop.empty()) throw py::value_error("generate: stop is an empty string (None: no stop strings)");
    return {std::move(stop)};
  }
  if (!py::isinstance<py::list>(obj) && !py::isinstance<py::tuple>(obj)) {
    throw py::type_error("generate: stop must be a str, a list of str or None, got " + type_name(obj));
  }
  const py::sequence items = obj.cast<py::sequence>();
  if (items.size() > kMaxStopStrings) {
    throw py::value_error("generate: stop holds " + std::to_string(items.size()) + " strings; at most " +
                          std::to_string(kMaxStopStrings) + " are accepted");
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = "generate: stop[" + std::to_string(i) + "]";
    if (!py::isinstance<py::str>(items[i])) throw py::type_error(at + " must be a str, got " + type_name(items[i]));
    out.push_back(utf8_arg(items[i], at));
    if (out.back().empty()) throw py::value_error(at + " is an empty string");
  }
  return out;
}

// generate's on_text as GenerateOptions::on_text: the callable called with the GIL taken, each piece as a str
// (a last piece cut inside a character has U+FFFD for its bytes). None or a truthy result goes on; a falsy one
// cancels. An exception cancels too and is kept in `error` (the first; later pieces are not sent).
std::function<bool(const std::string&)> text_callback(const py::object& on_text,
                                                      std::shared_ptr<std::exception_ptr> error) {
  if (!PyCallable_Check(on_text.ptr())) {
    throw py::type_error("generate: on_text must be callable (str) -> bool | None, got " + type_name(on_text));
  }
  // Borrowed: the caller's argument outlives the decode, and copies of the options made without the GIL
  // must not touch its reference count.
  PyObject* fn = on_text.ptr();
  return [fn, error = std::move(error)](const std::string& piece) {
    py::gil_scoped_acquire gil;
    if (*error) return false;
    try {
      const py::object result = py::reinterpret_borrow<py::object>(fn)(utf8_text(piece));
      if (result.is_none()) return true;
      const int truthy = PyObject_IsTrue(result.ptr());
      if (truthy < 0) throw py::error_already_set();
      return truthy == 1;
    } catch (...) {
      *error = std::current_exception();
      return false;
    }
  };
}

// generate's constraint_trigger_block: None, or (open, close), two str, close not empty.
orbit::TriggerBlock to_trigger_block(const py::object& obj, const std::string& what) {
  const std::string at = what + ": constraint_trigger_block";
  if (obj.is_none()) return {};
  const bool pair = (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) && py::len(obj) == 2;
  if (!pair) throw py::type_error(at + " must be None or a pair of str (open, close), got " + type_name(obj));
  const py::sequence items = obj.cast<py::sequence>();
  for (std::size_t i = 0; i < 2; ++i) {
    if (!py::isinstance<py::str>(items[i])) {
      throw py::type_error(at + "[" + std::to_string(i) + "] must be a str, got " + type_name(items[i]));
    }
  }
  orbit::TriggerBlock block{utf8_arg(items[0], at + "[0]"), utf8_arg(items[1], at + "[1]")};
  if (block.close.empty()) {
    throw py::value_error(at + ": the close string is empty (None: no block; open '' : the text begins inside it)");
  }
  return block;
}

// A token list, or text (str) tokenized by the window's engine without BOS (a continuation).
std::vector<int64_t> query_tokens(PyWindow& w, const py::object& obj) {
  if (!py::isinstance<py::str>(obj)) return to_tokens(obj, "generate: query");
  const std::string text = utf8_arg(obj, "generate: query");
  const std::shared_ptr<orbit::Engine> engine = w.engine;
  const NativeCall release;  // a long text's encoding holds no other thread
  return engine->tokenize(text, false);
}

}  // namespace

GenerateArgs generate_args(PyWindow& w, const py::object& query, int64_t max_tokens, double temperature, double top_p,
                           uint64_t seed, const py::object& stop_tokens, const py::object& stop,
                           const py::object& on_text, const py::object& tools, const py::object& tool_choice,
                           const py::object& response_format, const py::object& tool_call_format,
                           double presence_penalty, double frequency_penalty, const py::object& logit_bias,
                           bool logprobs, int32_t top_logprobs, const py::object& cancel, bool ignore_eos) {
  // Sampling's arguments at greedy decoding would change nothing: refused, as the CLI refuses them (seed 0, the
  // default, cannot be told from one left out).
  if (temperature == 0 && top_p >= 0 && top_p < 1)  // a top_p out of range is refused as such
    throw py::value_error("generate: top_p applies only with temperature > 0 (greedy decoding otherwise)");
  if (temperature == 0 && seed != 0)
    throw py::value_error("generate: seed applies only with temperature > 0 (greedy decoding otherwise)");
  GenerateArgs a;
  orbit::GenerateOptions& o = a.options;
  o.max_tokens = max_tokens;
  o.temperature = temperature;
  o.top_p = top_p;
  o.seed = seed;
  o.presence_penalty = presence_penalty;
  o.frequency_penalty = frequency_penalty;
  if (!logit_bias.is_none()) o.logit_bias = to_logit_bias(logit_bias);
  o.logprobs = logprobs;
  o.top_logprobs = top_logprobs;
  if (!stop_tokens.is_none()) o.stop_tokens = to_tokens(stop_tokens, "generate: stop_tokens");
  o.ignore_eos = ignore_eos;
  o.stop = to_stop(stop);
  if (!on_text.is_none()) o.on_text = text_callback(on_text, a.callback_error);
  a.answer = answer_spec(w, tools, tool_choice, response_format, tool_call_format);
  o.constraint = a.answer.constraint;
  o.constraint_trigger = a.answer.trigger;
  a.query = query_tokens(w, query);
  if (auto token = to_cancel_token(cancel, "generate: cancel")) a.cancel.tokens.push_back(std::move(token));
  a.cancel.closing = &w.closing;  // the PyWindow outlives the call (its caller holds the Window)
  if (w.decodes) a.cancel.engine_closing = &w.decodes->closing();  // held by the PyWindow too
  a.cancel.signals = main_thread_signal_poll();
  a.arm();
  return a;
}

void set_trigger_block(GenerateArgs& a, const py::object& block, const std::string& what) {
  orbit::TriggerBlock b = to_trigger_block(block, what);
  if (b.empty()) return;
  if (a.answer.constraint == nullptr) {
    // Tools under "auto" whose grammar cannot be had leave the whole answer free, the block's text with it.
    if (a.answer.read_calls && !a.answer.forced_call) return;
    throw py::value_error(what + ": constraint_trigger_block (close '" + b.close +
                          "') needs a constraint: tools or a response_format");
  }
  a.options.constraint_trigger_block = std::move(b);
}

void check_generate_keywords(const py::dict& kwargs, const std::string& what) {
  static const std::set<std::string> known = {"max_tokens",
                                              "temperature",
                                              "top_p",
                                              "seed",
                                              "stop_tokens",
                                              "stop",
                                              "tools",
                                              "tool_choice",
                                              "response_format",
                                              "tool_call_format",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "logit_bias",
                                              "logprobs",
                                              "top_logprobs",
                                              "constraint_trigger_block",
                                              "cancel",
                                              "ignore_eos"};
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::str(key).cast<std::string>();
    if (name == "on_text") {
      throw py::type_error(what + ": on_text streams one answer: Window.generate and Window.stream take it");
    }
    if (known.count(name) == 0) throw py::type_error(what + ": generate() has no argument '" + name + "'");
  }
}

namespace {

// `message` with the "generate: " that generate()'s argument checks begin with as "<what>: ".
std::string named_by(const std::string& message, const std::string& what) {
  static const std::string kGenerate = "generate: ";
  if (message.compare(0, kGenerate.size(), kGenerate) != 0) return message;
  return what + ": " + message.substr(kGenerate.size());
}

// fn(), its errors naming generate (TypeError, ValueError and OrbitError: "generate: logit_bias[5]: expected float,
// got bool") raised naming `what` instead ("generate_n: logit_bias[5]: ...").
template <class F>
GenerateArgs named_as(const std::string& what, F&& fn) {
  try {
    return with_caller_name("generate", what, std::forward<F>(fn));
  } catch (const py::type_error& e) {
    throw py::type_error(named_by(e.what(), what));
  } catch (const py::value_error& e) {
    throw py::value_error(named_by(e.what(), what));
  }
}

}  // namespace

GenerateArgs generate_args(PyWindow& w, const py::object& query, const py::dict& kwargs, const std::string& what) {
  check_generate_keywords(kwargs, what);
  auto get = [&](const char* name, py::object fallback) -> py::object {
    return kwargs.contains(name) ? py::reinterpret_borrow<py::object>(kwargs[name]) : fallback;
  };
  // Read strictly, as generate() reads them (to_float, to_int, to_seed, to_bool): a value refused raises TypeError
  // naming the argument.
  auto named = [&](const char* name) { return what + ": " + name; };
  auto number = [&](const char* name, double fallback) {
    return to_float(get(name, py::float_(fallback)), named(name).c_str());
  };
  to_cancel_token(get("cancel", py::none()), what + ": cancel");  // refused under the caller's name
  // The rest (query, stop, logit_bias, tools, ...) is checked by generate(), its errors named as the caller's.
  GenerateArgs a = named_as(what, [&] {
    return generate_args(
        w, query, to_int(get("max_tokens", py::int_(32)), named("max_tokens").c_str()), number("temperature", 0.0),
        number("top_p", 1.0), to_seed(get("seed", py::int_(0)), named("seed").c_str()), get("stop_tokens", py::none()),
        get("stop", py::none()), py::none(), get("tools", py::none()), get("tool_choice", py::str("auto")),
        get("response_format", py::none()), get("tool_call_format", py::none()), number("presence_penalty", 0.0),
        number("frequency_penalty", 0.0), get("logit_bias", py::none()),
        to_bool(get("logprobs", py::bool_(false)), named("logprobs").c_str()),
        to_int<int32_t>(get("top_logprobs", py::int_(0)), named("top_logprobs").c_str()), get("cancel", py::none()),
        to_bool(get("ignore_eos", py::bool_(false)), named("ignore_eos").c_str()));
  });
  set_trigger_block(a, get("constraint_trigger_block", py::none()), what);
  return a;
}

namespace {

// The windows a generate_many holds: each one's lock and Hold, kept while a request of it decodes and given back
// as soon as its last one ends, so a close() waiting for it returns after that request's next token, not after
// the whole batch (DecodeBatch lets a window be used once its sequences have finished).
class HeldWindows {
 public:
  void add(PyWindow* w, std::unique_lock<std::timed_mutex> lock) {
    Entry& e = held_[w];
    e.lock = std::move(lock);
    e.hold = std::make_unique<PyWindow::Hold>(*w);
  }
  bool holds(PyWindow* w) const { return held_.count(w) != 0; }
  // The Hold first (it marks the thread as inside a call of the window), then the lock.
  void release(PyWindow* w) {
    const auto it = held_.find(w);
    if (it == held_.end()) return;
    it->second.hold.reset();
    held_.erase(it);
  }
  void release_all() {
    while (!held_.empty()) release(held_.begin()->first);
  }
  ~HeldWindows() { release_all(); }

 private:
  struct Entry {
    std::unique_lock<std::timed_mutex> lock;  // declared first: destroyed after the Hold
    std::unique_ptr<PyWindow::Hold> hold;
  };
  std::map<PyWindow*, Entry> held_;
};

// Without the GIL, holding the windows `held` gives: decodes together the requests not cancelled before the
// call (a request of a window closed while the call waited for it is cancelled so); those answer
// cancelled_generation() in their place. Each window is given back once its requests are answered.
std::vector<orbit::Generation> decode_uncancelled(const std::vector<PyWindow*>& windows,
                                                  const std::vector<GenerateArgs>& args, HeldWindows& held) {
  std::vector<orbit::Generation> out(windows.size(), cancelled_generation());
  orbit::DecodeBatch batch;
  std::map<uint64_t, std::size_t> place;  // sequence id -> request index
  std::map<PyWindow*, int64_t> running;   // sequences still decoding per window
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const std::string named = "generate_many: request " + std::to_string(i) + ": ";
    if (args[i].cancelled_before() || !held.holds(windows[i])) {
      // Answered without decoding, its arguments refused as generate() would refuse them.
      const orbit::Engine& engine = *windows[i]->engine;
      try {
        orbit::check_generate(args[i].query, args[i].options, engine.model_info().vocab_size, engine.has_tokenizer());
      } catch (const orbit::Error& e) {
        throw orbit::Error(named + e.what(), __FILE__, __LINE__);
      }
      continue;
    }
    try {
      place[batch.add({&*windows[i]->window, args[i].query, args[i].options})] = i;
    } catch (const orbit::Error& e) {
      throw orbit::Error(named + e.what(), __FILE__, __LINE__);
    }
    ++running[windows[i]];
  }
  for (PyWindow* w : windows) {
    if (running.count(w) == 0) held.release(w);  // nothing of it decodes
  }
  while (!batch.empty()) {
    for (auto& [id, g] : batch.step().finished) {
      const std::size_t i = place.at(id);
      out[i] = std::move(g);
      if (--running[windows[i]] == 0) held.release(windows[i]);
    }
  }
  return out;
}

// generate_many's requests: a sequence (not a str) of at most orbit::kMaxGenerateMany requests, refused
// before any request is read: each becomes a sequence of one batch (its arguments, sampler and KV slot), all
// made before the first step.
py::sequence request_sequence(const py::object& request_list) {
  if (!py::isinstance<py::sequence>(request_list) || py::isinstance<py::str>(request_list)) {
    throw py::type_error("generate_many: requests must be a list of (window, query[, options]), got " +
                         type_name(request_list));
  }
  const py::sequence requests = request_list.cast<py::sequence>();
  ORBIT_CHECK(requests.size() <= static_cast<std::size_t>(orbit::kMaxGenerateMany),
              "generate_many: requests: " << requests.size() << " requests, more than the " << orbit::kMaxGenerateMany
                                          << " one call takes (each is a sequence of one batch, added before "
                                             "it decodes); split them into several calls");
  return requests;
}

// One of generate_many's requests, named `what`: (window, query) or (window, query, {generate() keyword
// arguments}). Returns its window, checked free for the call, and its arguments, not armed (the caller adds
// the batch's cancel token and signal poll first).
// A request read: its window and the Window object that owns it (held for the call: the caller's request list may
// be changed by another thread while the decode runs without the GIL, or build its items as they are read).
struct ReadRequest {
  py::object owner;
  PyWindow* window = nullptr;
  GenerateArgs args;
};

ReadRequest read_request(const py::object& item, const std::string& what) {
  if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item)) {
    throw py::type_error(what + " must be (window, query) or (window, query, options), got " +
                         py::repr(item).cast<std::string>());
  }
  const py::sequence parts = item.cast<py::sequence>();
  if (parts.size() != 2 && parts.size() != 3) {
    throw py::type_error(what + " must be (window, query) or (window, query, options)");
  }
  if (!py::isinstance<PyWindow>(parts[0])) {
    throw py::type_error(what + "[0] must be a Window, got " + type_name(parts[0]));
  }
  PyWindow* w = parts[0].cast<PyWindow*>();
  w->check_not_held("orbit.generate_many");      // generate's on_text batching its own window would wait for itself
  w->check_not_streamed("orbit.generate_many");  // a stream's decode holding it would wait for this loop
  w->check_engine_open("generate_many");         // its arguments are read against the engine's tokenizer
  py::dict options;
  if (parts.size() == 3 && !parts[2].is_none()) {
    if (!py::isinstance<py::dict>(parts[2])) throw py::type_error(what + ": options must be a dict");
    options = parts[2].cast<py::dict>();
  }
  return {parts[0], w, generate_args(*w, parts[1], options, what)};
}

// Holding the GIL: releases it and, every distinct window locked in one order (no deadlock with another
// call), decodes the requests (decode_uncancelled), each window held until its own requests are answered. On the
// main thread the batch's signal poll is also the check of an InterruptScope (orbit/interrupt.h), as in
// PyWindow::run: the repairs the windows deferred, which the decode runs first, stop at their interruption points
// (orbit::Interrupted, the handler's exception kept in the poll). A window closed before the call is refused
// (OrbitError "generate_many: requests[i]: window N is closed", naming the first request that reads it). While another
// thread's call holds a window, the wait takes the signals too; a window closed meanwhile is not waited for (its
// requests answer cancelled, as close() stops a running one), and the wait gives up once every request's tokens are
// cancelled: each then answers as cancelled before the call.
std::vector<orbit::Generation> decode_locked(const std::vector<PyWindow*>& windows,
                                             const std::vector<GenerateArgs>& args) {
  const std::shared_ptr<SignalPoll> poll = args.empty() ? nullptr : args.front().cancel.signals;
  const NativeCall release;
  std::vector<PyWindow*> order = windows;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (std::size_t i = 0; i < windows.size(); ++i) {
    ORBIT_CHECK(!windows[i]->closing.is_set(),
                "generate_many: requests[" << i << "]: window " << windows[i]->id << " is closed");
  }
  const auto all_cancelled = [&args] {
    return std::all_of(args.begin(), args.end(), [](const GenerateArgs& a) { return a.cancelled_before(); });
  };
  HeldWindows held;
  for (PyWindow* w : order) {
    std::unique_lock<std::timed_mutex> lock = lock_unless(*w->mutex, [&] {
      if (poll && poll->raised()) throw orbit::Interrupted("generate_many");
      return w->closing.is_set() || all_cancelled();
    });
    if (!lock.owns_lock() && all_cancelled()) {
      held.release_all();
      return decode_uncancelled(windows, args, held);  // every request cancelled: none reads its window
    }
    if (!lock.owns_lock() || w->closing.is_set()) continue;  // closed: its requests answer cancelled
    held.add(w, std::move(lock));
  }
  const orbit::InterruptScope interrupt(poll ? std::function<bool()>([&poll] { return poll->raised(); }) : nullptr);
  return decode_uncancelled(windows, args, held);
}

// orbit::generate_many names a request's error "generate_many: request 3: generate: temperature = -1 ...": raised
// as "generate_many: requests[3]: temperature = -1 ...", as read_request names that request's arguments. Returns
// without raising for another message.
void raise_as_request_error(const orbit::Error& e) {
  static const std::string kHead = "generate_many: request ";
  const std::string message = e.what();
  if (message.compare(0, kHead.size(), kHead) != 0) return;
  const std::size_t end = message.find_first_not_of("0123456789", kHead.size());
  if (end == kHead.size() || end == std::string::npos) return;
  const std::string index = message.substr(kHead.size(), end - kHead.size());
  raise_with_caller_name(e, kHead + index + ": generate", "generate_many: requests[" + index + "]");
}

// orbit.generate_many: the requests read and checked, decoded together, their Generations in request order.
py::list run_generate_many(const py::object& request_list, const py::object& cancel) {
  const std::shared_ptr<const CancelToken> all = to_cancel_token(cancel, "generate_many: cancel");
  const py::sequence requests = request_sequence(request_list);
  std::vector<py::object> owners;  // the windows' objects, alive until the Generations are made
  std::vector<PyWindow*> windows;
  std::vector<GenerateArgs> args;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    ReadRequest r = read_request(requests[i], "generate_many: requests[" + std::to_string(i) + "]");
    owners.push_back(std::move(r.owner));
    windows.push_back(r.window);
    args.push_back(std::move(r.args));
    if (all) args.back().cancel.tokens.push_back(all);
    // One poll for the batch: the requests step together, so one GIL take per interval serves them all.
    if (i > 0) args.back().cancel.signals = args.front().cancel.signals;
    args.back().arm();
  }
  // Each engine's close() waits for the call (and refuses it once begun: "generate_many: engine is closed").
  std::vector<DecodeScope> decoding;
  std::set<EngineDecodes*> engines;
  for (PyWindow* w : windows) {
    if (engines.insert(w->decodes.get()).second) decoding.emplace_back(w->decodes.get(), "generate_many");
  }
  std::vector<orbit::Generation> out;
  try {
    out = decode_locked(windows, args);
  } catch (const orbit::Error& e) {
    if (!args.empty()) args.front().rethrow_raised();  // as below
    raise_as_request_error(e);
    throw;
  } catch (...) {
    // A signal handler's exception first (an Interrupted from a deferred repair, or a decode's error after
    // Ctrl-C stopped it): KeyboardInterrupt is what the caller asked for.
    if (!args.empty()) args.front().rethrow_raised();
    throw;
  }
  if (!args.empty()) args.front().rethrow_raised();  // the batch's signal poll: Ctrl-C stopped every request
  py::list result;
  for (std::size_t i = 0; i < out.size(); ++i) {
    py::object g = py::cast(std::move(out[i]));
    read_answer(args[i].answer, g);
    result.append(g);
  }
  return result;
}

}  // namespace

void init_generate(py::module_& m) {
  m.def(
      "_check_stream_arguments",
      [](const TypedArg<PyWindow>& window, const py::object& query, const py::object& kwargs_arg) {
        // Named as the public API names its arguments (pybind11's "incompatible function arguments" named none).
        window.get("_check_stream_arguments: window");  // TypeError naming it for another type
        PyWindow& w = window.value.cast<PyWindow&>();
        // A closed window or engine raises here, at the stream's making, as every other call of it does.
        w.check_open("Window.stream");
        w.check_engine_open("Window.stream");
        if (!py::isinstance<py::dict>(kwargs_arg)) {
          throw py::type_error("_check_stream_arguments: kwargs: expected dict, got " +
                               (kwargs_arg.is_none() ? std::string("None") : type_name(kwargs_arg)));
        }
        const py::dict kwargs = kwargs_arg.cast<py::dict>();
        check_generate_keywords(kwargs, "stream");
        GenerateArgs a = generate_args(w, query, kwargs, "generate");
        a.options.on_text = [](const std::string&) { return true; };  // the stream's own: needs a tokenizer
        const orbit::Engine& engine = *w.engine;
        orbit::check_generate(a.query, a.options, engine.model_info().vocab_size, engine.has_tokenizer());
      },
      py::arg("window"), py::arg("query"), py::arg("kwargs"),
      "Window.stream's arguments (generate()'s keyword arguments but on_text and cancel) checked as generate()\n"
      "checks them, nothing decoded: raises what generate() would raise for them, naming the argument; an\n"
      "unknown keyword raises TypeError 'stream: generate() has no argument ...'; a closed window or engine\n"
      "OrbitError 'Window.stream: window N is closed' ('... engine is closed').");
  m.def("generate_many", &run_generate_many, py::arg("requests"), py::kw_only(), py::arg("cancel") = py::none(),
        "Decodes several windows together, one model forward per step over every sequence still running, each\n"
        "as Window.generate would decode it alone: token for token on the CPU while a step's rows stay within 16;\n"
        "past them the products take BLAS, whose sums move by about 1e-6 with the rows beside them, so a seeded\n"
        "sampled answer can change where a draw falls that close to a boundary (greedy ones at near-ties).\n"
        "requests: a list of (window, query) or (window, query,\n"
        "options) where options is a dict of generate()'s keyword arguments (max_tokens, temperature, seed, tools,\n"
        "logprobs, ...). Windows holding the same KV (a window given twice, or its forks) are read once, and the\n"
        "same query after them forwarded once. Returns the Generations in request order. At most 1024 requests\n"
        "(orbit::kMaxGenerateMany, Window.generate_n's limit: every request is a sequence of one batch, set up\n"
        "before it decodes): OrbitError 'generate_many: requests: ...' beyond, before any is read. The windows of\n"
        "one call belong to one engine; each is locked until its own requests are answered (OrbitError for a\n"
        "window this thread is inside a call of: its own on_text, or the body of a Window.stream loop on it).\n"
        "cancel (an orbit.CancelToken) stops every request at its next token when cancelled from another thread\n"
        "(stop_reason 'cancelled'); a request's options may hold a cancel= of its own, which stops that request\n"
        "alone. A request whose token is cancelled before the call answers a cancelled Generation at once (no\n"
        "tokens, nothing forwarded), the others decoding. close() of a request's window stops that request at its\n"
        "next token and returns then, the other windows decoding on; a window closed while the call waits for it\n"
        "answers its requests cancelled; one closed before the call raises OrbitError as generate() does.\n"
        "Engine.close() stops every request. On the main thread signal handlers run while it decodes (at most\n"
        "100 ms apart): one that raises (Ctrl-C's KeyboardInterrupt) stops every request at its next token and is\n"
        "raised here; while it first runs the repairs its windows deferred, it stops them before an instance or\n"
        "between two layers of its forward, the window as before them.");
}

}  // namespace orbit_py
