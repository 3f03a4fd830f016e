// orbit.Window's decodes: generate (one answer, on_text, constraints, logprobs) and generate_n (n answers to one
// query decoded together over forks). Both take generate_args' arguments and answer at once, without decoding,
// when a token of their cancel= was cancelled before the call (their arguments checked all the same).
#include <pybind11/stl.h>

#include <functional>
#include <string>
#include <vector>

#include "answer.h"
#include "bindings.h"
#include "convert.h"
#include "generate_args.h"
#include "py_window.h"

namespace orbit_py {

namespace {

using orbit::Window;

// Whether a decode is answered without running because a token of its cancel= was cancelled before the call.
// The window must be open and free for this thread, as for the call itself (OrbitError otherwise); it is not
// locked, so the answer comes at once even while another thread's call holds the window. Its arguments are
// checked as generate() checks them (orbit::check_generate) all the same.
bool cancelled_before(const PyWindow& w, const GenerateArgs& a, const char* what) {
  w.check_not_held(what);
  w.check_open(what);
  if (!a.cancelled_before()) return false;
  // Answered without decoding, but what generate() refuses is refused still (a query token outside the
  // vocabulary, top_p = 2, ...): a bad argument does not wait for a call whose token is not cancelled.
  orbit::check_generate(a.query, a.options, w.engine->model_info().vocab_size, w.engine->has_tokenizer());
  return true;
}

// While the call waits for another thread's call on its window: whether a token of its cancel= was cancelled
// (it then gives up waiting, and answers as cancelled before the call).
std::function<bool()> cancelled_waiting(const GenerateArgs& a) {
  return [&a] { return a.cancelled_before(); };
}

// Without the GIL, a token of the call's cancel= cancelled while it waited for the window: its arguments checked
// as cancelled_before() checks them, the answer cancelled_generation().
orbit::Generation cancelled_after_wait(const PyWindow& w, const GenerateArgs& a) {
  orbit::check_generate(a.query, a.options, w.engine->model_info().vocab_size, w.engine->has_tokenizer());
  return cancelled_generation();
}

// generate()'s docstring (the stub, bindings/python/orbit/_orbit.pyi, says the same at more length).
const char* kGenerateDoc =
    "Decodes after the query (nothing is stored in the window). temperature 0 = greedy; top_p < 1 with\n"
    "temperature > 0 = nucleus sampling, reproducible by seed (an int in [0, 2**64): another type raises\n"
    "TypeError, an int out of range ValueError, naming seed; top_p other than 1 or seed other than 0 at\n"
    "temperature 0 raises ValueError: greedy decoding samples nothing); the run ends after emitting any of\n"
    "stop_tokens, or of the tokenizer's end tokens (its EOS and BOS; stop_reason 'stop_token') unless\n"
    "ignore_eos=True. Returns a Generation (tokens, text, stop_reason, seconds). Repairs earlier edits\n"
    "deferred run first (see flush()).\n"
    "stop (a str or up to 4, OpenAI's `stop`) ends the run at the token that completes one: the text ends\n"
    "right before it, stop_reason 'stop_string' (tokens keep the stop string's). on_text(piece) is called,\n"
    "with the GIL taken (the decode runs without it), with each piece of text as it becomes final (whole\n"
    "characters no stop string can take back); the pieces join to Generation.text. Returning False cancels\n"
    "(stop_reason 'cancelled': the Generation holds every token so far); an exception it raises cancels the\n"
    "run and is raised here once the decode stopped. It must not use this window nor close the engine\n"
    "(OrbitError); other windows and calls may be used. With tools the pieces are the raw answer, call markup\n"
    "included; tool_calls, content and json are read from the whole text.\n"
    "cancel (an orbit.CancelToken) stops the run from any thread: cancel() ends it at its next token\n"
    "(stop_reason 'cancelled', every token so far kept), read without the GIL and with no tokenizer needed; a\n"
    "token cancelled before the call returns a cancelled Generation at once (no tokens, nothing forwarded).\n"
    "close() of this window from another thread (a Window.stream loop's body) stops the run the same way.\n"
    "On the main thread the decode runs signal handlers as it goes (at most 100 ms apart): one that raises\n"
    "(Ctrl-C's KeyboardInterrupt) stops the run at its next token and is raised here, the answer dropped.\n"
    "OpenAI's logit processors: presence_penalty and frequency_penalty in [-2, 2] subtract\n"
    "presence + frequency * count from the logit of each token generated count > 0 times so far;\n"
    "logit_bias {token id: bias in [-100, 100]} (int or numeric str keys) is added to the logits. With\n"
    "logprobs=True, Generation.logprobs holds per token its log probability and the top_logprobs (0..20) most\n"
    "likely tokens of its step, of the distribution after those processors and the constraint, at\n"
    "temperature 1. temperature, top_p, presence_penalty and frequency_penalty are floats (an int or a numpy\n"
    "float too; None, a str or a bool raise TypeError naming the argument, here and in generate_n / generate_many's\n"
    "options). Out-of-range values raise OrbitError naming the argument (temperature >= 0 and finite, top_p in\n"
    "[0, 1]: 0 keeps the top token alone).\n"
    "Tool calls and JSON (the tools reach the prompt through sync(messages, tools=...)): with `tools` (OpenAI\n"
    "tools), tool_choice 'required' or a tool's name (or OpenAI's {'type': 'function', 'function': {'name':\n"
    "...}}) makes the model call one (its answer decoded under the\n"
    "tools' grammar, orbit/constraint.h), 'auto' lets it choose (a call it starts, once it writes the format's\n"
    "mark such as <tool_call>, is decoded under that grammar; None is 'auto'), 'none' reads no call; the calls\n"
    "are read back\n"
    "in tool_call_format (None: Engine.tool_call_format()). response_format 'json_object', a\n"
    "{'type': 'json_schema', 'json_schema': {'schema': ...}} dict or a schema dict makes the answer JSON of it\n"
    "(with tools under 'auto': a call or that JSON, either decoded from the first byte; with a forced call,\n"
    "the whole answer, it raises ValueError, as tool_call_format does under 'none'). What these arguments\n"
    "compile to is kept in the engine's constraint cache (Engine.stats.constraint_cache: 64 entries, 256 MiB,\n"
    "least recently used dropped first), so the same arguments again compile nothing.\n"
    "The Generation then also has tool_calls ([{'id', 'type': 'function', 'function': {'name', 'arguments'}}],\n"
    "ready to append as an assistant message's), content (the text that is not a call) and json (the parsed\n"
    "answer, or None). An answer max_tokens ended inside a call gives that call last as far as it was written\n"
    "(tool_call_cut: do not run it); a forced call ('required' or a name) wherever the cut fell, inside the\n"
    "'<tool_call>' mark too. One cut inside or before its name is the one tool it can still become (arguments\n"
    "''), else left out, as orbit serve answers it. A schema outside the supported subset raises OrbitError\n"
    "naming the keyword.\n"
    "constraint_trigger_block (open, close), e.g. ('<think>', '</think>'): a reasoning model's block at the\n"
    "answer's start, free text the constraint (tools, response_format) does not apply in: open '' means the\n"
    "text begins inside it (the prompt opened it); otherwise the block is there only where the text begins,\n"
    "whitespace aside, with open, and the model may choose. The constraint applies after close (a call's mark\n"
    "under 'auto' counts only there). None (the default): no block. A wrong type raises TypeError, an empty\n"
    "close or no constraint ValueError, naming constraint_trigger_block.";

// Window: generate.
void def_generate(py::class_<PyWindow>& c) {
  c.def(
      "generate",
      [](PyWindow& w, const py::object& query, const IntArg& max_tokens, const FloatArg& temperature,
         const FloatArg& top_p, const py::object& seed, const py::object& stop_tokens, const py::object& stop,
         const py::object& on_text, const py::object& tools, const py::object& tool_choice,
         const py::object& response_format, const py::object& tool_call_format, const FloatArg& presence_penalty,
         const FloatArg& frequency_penalty, const py::object& logit_bias, const py::object& logprobs,
         const IntArg& top_logprobs, const py::object& constraint_trigger_block, const py::object& cancel,
         const py::object& ignore_eos) {
        w.check_engine_open("Window.generate");
        GenerateArgs a = generate_args(
            w, query, max_tokens.get("generate: max_tokens"), temperature.get("generate: temperature"),
            top_p.get("generate: top_p"), to_seed(seed, "generate: seed"), stop_tokens, stop, on_text, tools,
            tool_choice, response_format, tool_call_format, presence_penalty.get("generate: presence_penalty"),
            frequency_penalty.get("generate: frequency_penalty"), logit_bias, to_bool(logprobs, "generate: logprobs"),
            top_logprobs.get<int32_t>("generate: top_logprobs"), cancel, to_bool(ignore_eos, "generate: ignore_eos"));
        set_trigger_block(a, constraint_trigger_block, "generate");
        const DecodeScope decoding(w.decodes.get(), "Window.generate");  // Engine.close() waits for it (or refuses it)
        orbit::Generation generation;
        try {
          generation = cancelled_before(w, a, "Window.generate")
                           ? cancelled_generation()
                           : w.run_unless(
                                 "Window.generate", cancelled_waiting(a),
                                 [&](Window& x) { return x.generate(a.query, a.options); },
                                 [&] { return cancelled_after_wait(w, a); });
        } catch (...) {
          a.rethrow_raised();  // the callback's (or a signal handler's) exception first: the decode's may follow
          throw;
        }
        a.rethrow_raised();  // on_text or a signal handler raised: the run stopped there ("cancelled")
        py::object g = py::cast(std::move(generation));
        read_answer(a.answer, g);
        return g;
      },
      py::arg("query"), py::kw_only(), py::arg("max_tokens") = 32, py::arg("temperature") = 0.0, py::arg("top_p") = 1.0,
      py::arg("seed") = 0, py::arg("stop_tokens") = py::none(), py::arg("stop") = py::none(),
      py::arg("on_text") = py::none(), py::arg("tools") = py::none(), py::arg("tool_choice") = "auto",
      py::arg("response_format") = py::none(), py::arg("tool_call_format") = py::none(),
      py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0, py::arg("logit_bias") = py::none(),
      py::arg("logprobs") = false, py::arg("top_logprobs") = 0, py::arg("constraint_trigger_block") = py::none(),
      py::arg("cancel") = py::none(), py::arg("ignore_eos") = false, kGenerateDoc);
}

// Window: generate_n.
void def_generate_n(py::class_<PyWindow>& c) {
  c.def(
      "generate_n",
      [](PyWindow& w, const py::object& query, const IntArg& n_arg, const py::kwargs& kwargs) {
        w.check_engine_open("Window.generate_n");
        const int64_t n = n_arg.get("generate_n: n");
        const GenerateArgs a = generate_args(w, query, kwargs, "generate_n");
        const DecodeScope decoding(w.decodes.get(),
                                   "Window.generate_n");  // Engine.close() waits for it (or refuses it)
        std::vector<orbit::Generation> gs;
        try {
          // The SDK checks the query and options as generate's ("generate: temperature = -1 ..."): named here as
          // generate_n's, as the binding's own checks name them.
          gs = with_caller_name("generate", "generate_n", [&] {
            return n >= 1 && cancelled_before(w, a, "Window.generate_n")
                       ? std::vector<orbit::Generation>(static_cast<std::size_t>(n), cancelled_generation())
                       : w.run_unless(
                             "Window.generate_n", cancelled_waiting(a),
                             [&](Window& x) { return x.generate_n(a.query, n, a.options); },
                             [&] {
                               cancelled_after_wait(w, a);
                               return std::vector<orbit::Generation>(static_cast<std::size_t>(n),
                                                                     cancelled_generation());
                             });
          });
        } catch (...) {
          a.rethrow_raised();  // a signal handler's exception first: the decode's error may have followed it
          throw;
        }
        a.rethrow_raised();  // a signal handler raised (Ctrl-C): every branch stopped at its next token
        py::list out;
        for (orbit::Generation& g : gs) {
          py::object o = py::cast(std::move(g));
          read_answer(a.answer, o);
          out.append(o);
        }
        return out;
      },
      py::arg("query"), py::arg("n"),
      "n answers to one query, decoded together: the window is forked n - 1 times (copy-on-write, its pages\n"
      "shared and read once), the query forwarded once, and the n branches decoded in one forward per step, answer\n"
      "i sampled with seed + i * 2**32 (seeds s and s + 1 share no answer; at temperature 0 every answer is the\n"
      "greedy one; with n above 16, answers can differ from the same forks decoded alone where a draw falls within\n"
      "about 1e-6 of a boundary, as generate_many says). Takes generate()'s keyword arguments, cancel included: one "
      "CancelToken stops all n\n"
      "answers at their next token (stop_reason 'cancelled'); one cancelled before the call gives n cancelled "
      "Generations at once; on the main thread\n"
      "Ctrl-C stops all n too (KeyboardInterrupt raised here, as generate). Returns a list of n\n"
      "Generations; the window is unchanged. n must be an int in [1, 1024] (OrbitError naming n otherwise):\n"
      "every branch is forked before the first step. Errors name generate_n and the argument.");
}

}  // namespace

void def_window_generate(py::class_<PyWindow>& c) {
  def_generate(c);
  def_generate_n(c);
}

}  // namespace orbit_py
