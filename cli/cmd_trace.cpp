// `orbit make-trace`: write a generated agent trace (orbit/trace.h make_trace) for `orbit replay`.
//
//   orbit make-trace --kind web|video|agent|browse|coding|videoqa|fanout|rag --steps N --seed S --model PATH --out FILE
//                    [--chunk-tokens N] [--sample-text]
//
// The model decides the vocabulary, the position budget (traces stay within ~3/4 of it) and whether media
// chunks are embeddings with (t, h, w) grids (M-RoPE models) or token ids.
#include <cstdio>
#include <set>
#include <string>

#include "args.h"
#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/trace.h"

namespace orbit::cli {

int run_make_trace(int argc, char** argv, int first) {
  const Args args(
      "make-trace",
      ArgSpec{{"--kind", "--steps", "--seed", "--model", "--out", "--chunk-tokens"},
              {"--sample-text"},
              "usage: orbit make-trace --model PATH --out FILE [--kind K] [--steps N] [--seed S]\n"
              "                        [--chunk-tokens N] [--sample-text]\n"
              "  Writes a generated agent trace (orbit-trace/1) for `orbit replay`.\n"
              "  --kind K           agent patterns, story-like text throughout ({\"text\": ...} chunks, turns and\n"
              "                     probe question; the window filled to the model's positions - 24):\n"
              "                       browse   pages slide over a growing transcript, look-backs at old pages\n"
              "                       coding   files read, tool calls and outputs dropped once used, files edited\n"
              "                       videoqa  frames re-examined under new questions, reorders, set aside and back\n"
              "                       fanout   sub-agents forked over a shared document set, commit / drop\n"
              "                       rag      retrieved documents re-ranked and re-retrieved each turn\n"
              "                     regression workloads (random token ids, or --sample-text):\n"
              "                       web (screenshots, actions, observations), video (frames under changing\n"
              "                       prompts), agent (documents and tool results); default web\n"
              "                     (docs: bench/replay/TRACES.md)\n"
              "  --model PATH       the model it is for (vocabulary, positions, M-RoPE grids)\n"
              "  --out FILE         where to write the trace (an existing file is replaced, but never the model\n"
              "                     or its tokenizer)\n"
              "  --steps N          agent steps (each expands to several trace steps; default 12)\n"
              "  --seed S           generator seed (default 0)\n"
              "  --chunk-tokens N   screenshot / frame / document size (default 0: chosen from the model's positions)\n"
              "  --sample-text      web's observations and agent's documents sampled from the model instead of\n"
              "                     random ids (kinds web and agent only)\n"},
      argc, argv, first);
  MakeTraceOptions o;
  // make_trace checks these too, naming its fields (kind, steps, chunk_tokens): here they are checked first,
  // naming the options.
  o.kind = args.get("--kind").value_or("web");
  static const std::set<std::string> kinds = {"web", "video", "agent", "browse", "coding", "videoqa", "fanout", "rag"};
  ORBIT_CHECK(kinds.count(o.kind) > 0,
              "make-trace: argument '--kind' must be one of web, video, agent, browse, coding, "
              "videoqa, fanout, rag, got '"
                  << o.kind << "'");
  o.steps = args.get_int("--steps", 12, 1);
  ORBIT_CHECK(o.steps <= kMaxTraceSteps,
              "make-trace: argument '--steps' must be <= " << kMaxTraceSteps << ", got " << o.steps);
  o.seed = args.get_seed("--seed", 0);
  o.chunk_tokens = args.get_int("--chunk-tokens", 0, 0);
  o.sample_text = args.flag("--sample-text");
  ORBIT_CHECK(!o.sample_text || o.kind == "web" || o.kind == "agent",
              "make-trace: argument '--sample-text' applies to --kind web and agent only (got '" << o.kind << "')");
  const std::string out = args.required("--out");
  // Not stdout, as replay's --json - is: the trace is a file replay reads, and this command reports on stdout.
  ORBIT_CHECK(out != "-", "make-trace: argument '--out' is '-': give a file path (the trace is written to a file)");
  check_output_argument("make-trace", "--out", out, "the trace file");  // before the model loads and the trace is made
  EngineOptions eo;
  eo.model = args.required("--model");
  check_output_not_input("make-trace", "--out", out, model_inputs(eo.model));
  eo.pool_bytes = int64_t{1} << 20;
  const std::shared_ptr<Engine> engine = Engine::open(eo);
  const ModelInfo info = engine->model_info();
  // The agent patterns are text, which only a model with a tokenizer replays.
  ORBIT_CHECK(engine->has_tokenizer() || o.kind == "web" || o.kind == "video" || o.kind == "agent",
              "make-trace: --kind " << o.kind << " writes text, and the model " << eo.model
                                    << " (--model) has no tokenizer to replay it with (kinds web, video and agent "
                                       "write token ids)");
  if (engine->has_tokenizer()) {
    o.text_tokens = [engine](const std::string& text) {
      return static_cast<int64_t>(engine->tokenize(text, false).size());
    };
  }
  o.max_positions = info.max_positions;
  o.position_rows = info.position_rows;
  ORBIT_CHECK(o.max_positions >= 64,
              "make-trace: the model (--model) has " << o.max_positions << " positions; a trace needs at least 64");
  ORBIT_CHECK(o.chunk_tokens <= o.max_positions / 8, "make-trace: argument '--chunk-tokens' must be <= "
                                                         << o.max_positions / 8 << " (an eighth of the model's "
                                                         << o.max_positions << " positions), got " << o.chunk_tokens);
  Trace t = make_trace(o);
  t.source = out;
  save_trace(t, out);
  std::printf("wrote %s: %s trace, %zu steps, %zu chunks (model %s, %lld positions)\n", out.c_str(), o.kind.c_str(),
              t.steps.size(), t.chunks.size(), info.origin.c_str(), static_cast<long long>(info.max_positions));
  return 0;
}

}  // namespace orbit::cli
