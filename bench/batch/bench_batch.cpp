// bench_batch: decoding several sequences in one forward per step against one after another, side by side
// in one run (ratios; not a test: absolute numbers depend on the machine and its load).
//
//   1. runtime   K sequences, each after its own past of --prompt tokens, decode --tokens tokens greedily;
//                together = one Model::forward_batch per step, apart = K Model::forward per step. "plain":
//                each past a PastKV grown by its rows (gathered, rotated and copied again every step);
//                "cached": each past a slot of one DecodeCache (rotated once, a row appended per step: the
//                path the SDK's decode takes).
//   2. windows   the SDK: K windows (each a chunk of --prompt tokens and a query of 4) decode --tokens tokens
//                greedily; together = orbit::generate_many, apart = Window::generate on each in turn.
//   prefill      K turns of --turn tokens, each after its own past of --prompt tokens (several sessions' new
//                turns, as orbit serve's syncs forward them): together = one Model::forward_batch, apart = K
//                Model::forward; tokens per second counts the turns' tokens.
//   3. forks     n = --forks answers to one query of one window: Window::generate_n (the window forked,
//                the branches decoded together, sampled with seeds Window::answer_seed(seed, i)) against
//                Window::generate on n forks one after another.
// --spread N gives the runtime's sections (plain, cached, prefill) members of uneven lengths, as agents in a
// batch have: sequence i's past is --prompt + i·N tokens (members at different turns).
// Each figure is generated tokens per second of wall time, the fastest of --reps runs (the two sides
// interleaved, each going first in turn), for every K in --batch (default 1,4,8,16), on the bundled
// stories260K, TinyStories-656K and binding-mla (the MLA model test_decode_cache_mla decodes: DeepSeek-V2
// attention, on the CPU a DecodeCache's latent rows read in the absorbed form), or on --model DIR alone (any
// architecture). Prints a table and writes
// JSON. --side together (or apart) runs one side alone, for a profiler (perf record / perf stat) to see that
// side only; the other's figure is then 0.
// --clock cpu times each run by the process's CPU time instead of wall time: on a machine other work keeps
// busy, a run of several milliseconds is preempted more often than a short one, which wall time counts.
//
//   bench_batch [--batch 1,4,8,16] [--tokens 64] [--prompt 128] [--spread 0] [--turn 40] [--forks 8] [--reps 3]
//               [--threads 1]
//               [--sections plain,cached,prefill,windows,forks] [--side both|together|apart] [--clock wall|cpu]
//               [--only MODEL] [--model DIR] [--models DIR] [--json PATH]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/decode_batch.h"
#include "orbit/engine.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/model.h"

namespace {

using namespace orbit;
namespace rt = orbit::runtime;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int64_t> batch{1, 4, 8, 16};
  int64_t tokens = 64;
  int64_t prompt = 128;
  int64_t spread = 0;  // sequence i's past: prompt + i·spread tokens (runtime sections)
  int64_t turn = 40;
  int64_t forks = 8;
  int reps = 3;
  int threads = 1;
  std::vector<std::string> sections{"plain", "cached", "prefill", "windows", "forks"};
  std::string side = "both";  // both, together or apart: which sides run
  bool cpu_clock = false;     // --clock cpu: runs timed by the process's CPU time
  std::string only;           // one bundled model's name, or "" for all three
  std::string model;          // --model: one model directory instead of the bundled three, or ""
  std::string models = ORBIT_MODELS_DIR;
  std::string json = "bench_batch.json";

  bool runs(const std::string& section) const {
    return std::find(sections.begin(), sections.end(), section) != sections.end();
  }
};

std::vector<std::string> split_sections(const std::string& list) {
  const std::vector<std::string> known{"plain", "cached", "prefill", "windows", "forks"};
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= list.size()) {
    const std::size_t comma = std::min(list.find(',', from), list.size());
    const std::string name = list.substr(from, comma - from);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw std::invalid_argument("--sections: unknown section '" + name +
                                  "' (plain, cached, prefill, windows, forks)");
    }
    out.push_back(name);
    from = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_batch",
      {{"--batch", "--tokens", "--prompt", "--spread", "--turn", "--forks", "--reps", "--threads", "--sections",
        "--side", "--clock", "--only", "--model", "--models", "--json"},
       {},
       "usage: bench_batch [--batch 1,4,8,16] [--tokens 64] [--prompt 128] [--spread 0] [--turn 40] [--forks 8]\n"
       "                   [--reps 3] [--threads 1] [--sections plain,cached,prefill,windows,forks]\n"
       "                   [--side both|together|apart] [--clock wall|cpu] [--only MODEL] [--model DIR]\n"
       "                   [--models DIR] [--json PATH]\n"
       "  K sequences decoded in one forward per step against one after another (runtime, windows, forks),\n"
       "  and K turns prefilled in one forward against one after another (prefill).\n"
       "  --batch K,..    sequence counts compared\n"
       "  --tokens N      tokens each sequence decodes\n"
       "  --prompt N      tokens of each sequence's past (its window's chunk)\n"
       "  --spread N      sequence i's past has --prompt + i*N tokens in plain, cached and prefill (members\n"
       "                  of uneven lengths; default 0)\n"
       "  --turn N        tokens of each turn the prefill section forwards after its past\n"
       "  --forks N       answers of the forks comparison (Window::generate_n)\n"
       "  --reps N        runs per figure (the fastest is reported)\n"
       "  --threads N     intra-op threads (default 1)\n"
       "  --sections S,.. which comparisons run (default all five)\n"
       "  --side SIDE     both (default), or together or apart alone (to profile one side; the other reads 0)\n"
       "  --clock C       wall (default) or cpu: each run timed by the process's CPU time (loaded machines)\n"
       "  --only MODEL    stories260K, tinystories-656k or binding-mla (MLA) alone\n"
       "  --model DIR     this model alone instead (a directory or .bin of any architecture, e.g. an MLA\n"
       "                  model from orbit make-model); named by its file name\n"
       "  --models DIR    where stories260K/, tinystories-656k/ and binding-mla/ are\n"
       "  --json PATH     where the JSON goes (default bench_batch.json)\n"},
      argc, argv, 1);
  Options o;
  if (auto v = a.get("--batch")) o.batch = orbit::bench::parse_positive_list(*v, "--batch");
  o.tokens = a.get_int("--tokens", o.tokens, 1);
  o.prompt = a.get_int("--prompt", o.prompt, 1);
  o.spread = a.get_int("--spread", o.spread, 0);
  o.turn = a.get_int("--turn", o.turn, 1);
  o.forks = a.get_int("--forks", o.forks, 1);
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  if (auto v = a.get("--sections")) o.sections = split_sections(*v);
  o.side = a.get_or("--side", o.side);
  if (o.side != "both" && o.side != "together" && o.side != "apart") {
    throw std::invalid_argument("--side: unknown side '" + o.side + "' (both, together or apart)");
  }
  const std::string clock = a.get_or("--clock", "wall");
  if (clock != "wall" && clock != "cpu")
    throw std::invalid_argument("--clock: unknown clock '" + clock + "' (wall or cpu)");
  o.cpu_clock = clock == "cpu";
  o.only = a.get_or("--only", o.only);
  if (!o.only.empty() && o.only != "stories260K" && o.only != "tinystories-656k" && o.only != "binding-mla") {
    throw std::invalid_argument("--only: unknown model '" + o.only +
                                "' (stories260K, tinystories-656k or binding-mla)");
  }
  o.model = a.get_or("--model", o.model);
  if (!o.model.empty() && !o.only.empty()) throw std::invalid_argument("--model and --only: give one of them");
  o.models = a.get_or("--models", o.models);
  o.json = a.get_or("--json", o.json);
  return o;
}

// The process's CPU time in seconds (every thread's, the kernel's work for it included: page faults).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// f's run time: wall, or the process's CPU time when `cpu`.
double seconds_of(bool cpu, const std::function<void()>& f) {
  if (cpu) {
    const double t0 = cpu_seconds();
    f();
    return cpu_seconds() - t0;
  }
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The fastest of `reps` runs of each side, interleaved, each side going first in turn. A side --side leaves
// out is not run and reads as taking forever (0 tokens per second).
std::pair<double, double> fastest(const Options& o, const std::function<void()>& together,
                                  const std::function<void()>& apart) {
  const bool run_t = o.side != "apart", run_a = o.side != "together";
  double t = std::numeric_limits<double>::infinity(), a = t;
  for (int r = 0; r < o.reps; ++r) {
    if (r % 2 == 0) {
      if (run_t) t = std::min(t, seconds_of(o.cpu_clock, together));
      if (run_a) a = std::min(a, seconds_of(o.cpu_clock, apart));
    } else {
      if (run_a) a = std::min(a, seconds_of(o.cpu_clock, apart));
      if (run_t) t = std::min(t, seconds_of(o.cpu_clock, together));
    }
  }
  return {t, a};
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int64_t> d(3, vocab - 1);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(d(rng));
  return out;
}

struct Row {
  std::string model, section;
  int64_t k = 0;
  double together = 0, apart = 0;  // tokens per second
  // together / apart, or 0 when --side left a side out.
  double ratio() const { return together > 0 && apart > 0 ? together / apart : 0.0; }
};

void print(const Row& r) {
  std::printf("  %-17s %-8s K=%-3lld  together %8.0f tok/s   one after another %8.0f tok/s   ratio %5.2fx\n",
              r.model.c_str(), r.section.c_str(), static_cast<long long>(r.k), r.together, r.apart, r.ratio());
  std::fflush(stdout);
}

// Sequence i's past length: --prompt + i·--spread tokens.
int64_t past_length(const Options& o, std::size_t i) { return o.prompt + static_cast<int64_t>(i) * o.spread; }

// K pasts of random tokens (sequence i's past_length; the same for every run of a section: seed 7) and each
// one's first decode token.
std::pair<std::vector<rt::PastKV>, std::vector<int64_t>> prompts(const rt::Model& m, int64_t K, const Options& o) {
  std::mt19937_64 rng(7);
  std::vector<rt::PastKV> pasts(static_cast<std::size_t>(K));
  std::vector<int64_t> firsts;
  for (std::size_t i = 0; i < pasts.size(); ++i) {
    rt::PastKV& p = pasts[i];
    rt::ForwardInput in;
    in.tokens = random_tokens(rng, past_length(o, i), m.config().vocab_size);
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kNone;
    p.layers = m.forward(in, nullptr, fo).content;
    p.positions = at::arange(past_length(o, i), at::kLong);
    firsts.push_back(random_tokens(rng, 1, m.config().vocab_size)[0]);
  }
  return {pasts, firsts};
}

// The runtime: K turns of --turn tokens, each after its own past, forwarded in one Model::forward_batch
// against K Model::forward (last-token logits, as a sync's forward reads them).
Row bench_prefill(const rt::Model& m, const std::string& name, int64_t K, const Options& o) {
  const std::vector<rt::PastKV> pasts = prompts(m, K, o).first;
  std::mt19937_64 rng(11);
  std::vector<rt::ForwardInput> turns(static_cast<std::size_t>(K));
  for (std::size_t i = 0; i < turns.size(); ++i) {
    turns[i].tokens = random_tokens(rng, o.turn, m.config().vocab_size);
    turns[i].positions = at::arange(past_length(o, i), past_length(o, i) + o.turn, at::kLong);
  }
  rt::ForwardOptions fo;
  fo.logits = rt::LogitsMode::kLast;
  auto together = [&] {
    std::vector<rt::SequenceForward> batch;
    for (std::size_t i = 0; i < turns.size(); ++i) batch.push_back({&turns[i], &pasts[i], &fo});
    (void)m.forward_batch(batch);
  };
  auto apart = [&] {
    for (std::size_t i = 0; i < turns.size(); ++i) (void)m.forward(turns[i], &pasts[i], fo);
  };
  const auto [t, a] = fastest(o, together, apart);
  const double tokens = static_cast<double>(K * o.turn);
  return {name, "prefill", K, tokens / t, tokens / a};
}

// The runtime: K decodes, each after its own past, greedy, the past grown by each step's rows.
Row bench_forward(const rt::Model& m, const std::string& name, int64_t K, const Options& o) {
  const auto start = prompts(m, K, o);
  const std::vector<rt::PastKV>& pasts = start.first;
  const std::vector<int64_t>& firsts = start.second;
  auto grow = [](rt::PastKV& p, const rt::ForwardResult& r, int64_t pos) {
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      p.layers[l].k = at::cat({p.layers[l].k, r.content[l].k});
      p.layers[l].v = at::cat({p.layers[l].v, r.content[l].v});
    }
    p.positions = at::cat({p.positions, at::full({1}, pos, at::kLong)});
  };
  auto together = [&] {
    std::vector<rt::PastKV> ps = pasts;
    std::vector<rt::ForwardInput> ins(static_cast<std::size_t>(K));
    for (std::size_t i = 0; i < ins.size(); ++i) ins[i].tokens = {firsts[i]};
    rt::ForwardOptions fo;
    for (int64_t t = 0; t < o.tokens; ++t) {
      std::vector<rt::SequenceForward> batch;
      for (std::size_t i = 0; i < ins.size(); ++i) {
        ins[i].positions = at::full({1}, past_length(o, i) + t, at::kLong);
        batch.push_back({&ins[i], &ps[i], &fo});
      }
      const std::vector<rt::ForwardResult> rs = m.forward_batch(batch);
      for (std::size_t i = 0; i < ins.size(); ++i) {
        grow(ps[i], rs[i], past_length(o, i) + t);
        ins[i].tokens = {rs[i].logits.argmax(-1).item<int64_t>()};
      }
    }
  };
  auto apart = [&] {
    for (std::size_t i = 0; i < pasts.size(); ++i) {
      rt::PastKV p = pasts[i];
      rt::ForwardInput in;
      in.tokens = {firsts[i]};
      rt::ForwardOptions fo;
      for (int64_t t = 0; t < o.tokens; ++t) {
        in.positions = at::full({1}, past_length(o, i) + t, at::kLong);
        const rt::ForwardResult r = m.forward(in, &p, fo);
        grow(p, r, past_length(o, i) + t);
        in.tokens = {r.logits.argmax(-1).item<int64_t>()};
      }
    }
  };
  const auto [t, a] = fastest(o, together, apart);
  const double n = static_cast<double>(K * o.tokens);
  return {name, "plain", K, n / t, n / a};
}

// The same decodes over slots of a DecodeCache: each side opens its slots from the same pasts per run.
Row bench_cached(const rt::Model& m, const std::string& name, int64_t K, const Options& o) {
  const auto start = prompts(m, K, o);
  const std::vector<rt::PastKV>& pasts = start.first;
  const std::vector<int64_t>& firsts = start.second;
  auto run = [&](bool together) {
    rt::DecodeCache cache(m);
    std::vector<rt::PastKV> slots;
    for (const rt::PastKV& p : pasts) slots.push_back(cache.past(cache.open(&p)));
    std::vector<rt::ForwardInput> ins(static_cast<std::size_t>(K));
    for (std::size_t i = 0; i < ins.size(); ++i) ins[i].tokens = {firsts[i]};
    rt::ForwardOptions fo;
    fo.return_content = false;
    for (int64_t t = 0; t < o.tokens; ++t) {
      std::vector<rt::SequenceForward> batch;
      for (std::size_t i = 0; i < ins.size(); ++i) {
        ins[i].positions = at::full({1}, past_length(o, i) + t, at::kLong);
        batch.push_back({&ins[i], &slots[i], &fo});
      }
      std::vector<rt::ForwardResult> rs;
      if (together) {
        rs = m.forward_batch(batch);
      } else {
        for (const rt::SequenceForward& s : batch) rs.push_back(m.forward(*s.input, s.past, fo));
      }
      for (std::size_t i = 0; i < ins.size(); ++i) ins[i].tokens = {rs[i].logits.argmax(-1).item<int64_t>()};
    }
  };
  const auto [t, a] = fastest(
      o, [&] { run(true); }, [&] { run(false); });
  const double n = static_cast<double>(K * o.tokens);
  return {name, "cached", K, n / t, n / a};
}

// K windows, each a chunk of its own, decoded greedily (the exact-reuse head of a repeated query is the
// same on both sides: each rep reads every window again).
Row bench_windows(Engine& engine, const std::string& name, int64_t K, const Options& o) {
  std::mt19937_64 rng(11);
  const int64_t vocab = engine.model_info().vocab_size;
  std::vector<Window> windows;
  std::vector<std::vector<int64_t>> queries;
  for (int64_t i = 0; i < K; ++i) {
    windows.push_back(engine.new_window());
    windows.back().admit(engine.add_tokens(random_tokens(rng, o.prompt, vocab)));
    queries.push_back(random_tokens(rng, 4, vocab));
  }
  GenerateOptions g;
  g.max_tokens = o.tokens;
  g.ignore_eos = true;  // decode throughput over fixed lengths, as vLLM's benchmarks measure it
  std::vector<GenerateRequest> requests;
  for (int64_t i = 0; i < K; ++i) requests.push_back({&windows[static_cast<std::size_t>(i)], queries[i], g});
  // Warm: the same reads. Greedy, so every run generates what this one did: the tokens counted, which are
  // fewer than K · --tokens where an answer reaches the model's position limit.
  int64_t generated = 0;
  for (const GenerateRequest& r : requests) {
    generated += static_cast<int64_t>(r.window->generate(r.query, r.options).tokens.size());
  }
  auto together = [&] { generate_many(requests); };
  auto apart = [&] {
    for (const GenerateRequest& r : requests) r.window->generate(r.query, r.options);
  };
  const auto [t, a] = fastest(o, together, apart);
  const double n = static_cast<double>(generated);
  return {name, "windows", K, n / t, n / a};
}

// n answers to one query: generate_n against generate on n forks in turn, sampled (temperature 0.8).
Row bench_forks(Engine& engine, const std::string& name, const Options& o) {
  std::mt19937_64 rng(13);
  const int64_t vocab = engine.model_info().vocab_size;
  Window w = engine.new_window();
  w.admit(engine.add_tokens(random_tokens(rng, o.prompt, vocab)));
  const std::vector<int64_t> query = random_tokens(rng, 4, vocab);
  GenerateOptions g;
  g.max_tokens = o.tokens;
  g.ignore_eos = true;
  g.temperature = 0.8;
  g.seed = 1;
  w.generate(query, g);  // warm: both sides then find the query's head stored
  auto together = [&] { w.generate_n(query, o.forks, g); };
  auto apart = [&] {
    for (int64_t i = 0; i < o.forks; ++i) {
      Window f = w.fork();
      GenerateOptions branch = g;
      branch.seed = Window::answer_seed(g.seed, i);
      f.generate(query, branch);
    }
  };
  const auto [t, a] = fastest(o, together, apart);
  const double n = static_cast<double>(o.forks * o.tokens);
  return {name, "forks", o.forks, n / t, n / a};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  std::printf(
      "bench_batch: %lld tokens per sequence after %lld (+ %lld per sequence), %d thread(s), fastest of %d "
      "(%s time)\n",
      static_cast<long long>(o.tokens), static_cast<long long>(o.prompt), static_cast<long long>(o.spread), o.threads,
      o.reps, o.cpu_clock ? "CPU" : "wall");
  nlohmann::json out = nlohmann::json::array();
  auto record = [&](const Row& r) {
    print(r);
    out.push_back({{"model", r.model},
                   {"section", r.section},
                   {"k", r.k},
                   {"together_tokens_per_s", r.together},
                   {"apart_tokens_per_s", r.apart},
                   {"ratio", r.ratio()}});
  };
  std::vector<std::pair<std::string, std::string>> models{{"stories260K", o.models + "/stories260K/stories260K.bin"},
                                                          {"tinystories-656k", o.models + "/tinystories-656k"},
                                                          {"binding-mla", o.models + "/binding-mla"}};
  if (!o.model.empty()) models = {{std::filesystem::path(o.model).lexically_normal().filename().string(), o.model}};
  for (const auto& [name, path] : models) {
    if (!o.only.empty() && name != o.only) continue;
    const auto m = rt::load_model(path);
    for (int64_t K : o.batch) {
      if (o.runs("plain")) record(bench_forward(*m, name, K, o));
    }
    for (int64_t K : o.batch) {
      if (o.runs("cached")) record(bench_cached(*m, name, K, o));
    }
    for (int64_t K : o.batch) {
      if (o.runs("prefill")) record(bench_prefill(*m, name, K, o));
    }
    EngineOptions eo;
    eo.model = path;
    auto engine = Engine::open(eo);
    for (int64_t K : o.batch) {
      if (o.runs("windows")) record(bench_windows(*engine, name, K, o));
    }
    if (o.runs("forks")) record(bench_forks(*engine, name, o));
  }
  std::ofstream f(o.json);
  f << out.dump(2) << "\n";
  ORBIT_CHECK(f.good(), "--json: cannot write '" << o.json << "'");
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_batch: %s\n", e.what());
  return 1;
}
