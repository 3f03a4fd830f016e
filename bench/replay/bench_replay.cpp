// bench_replay: generated agent traces (web, video, agent) replayed under the patch policy and the
// baselines in one run (orbit/trace.h): forward tokens and time per step, as ratios patch vs. re-prefill
// vs. prefix cache (and blind, and a full re-prefill after every step), plus mean KL vs. re-prefill.
//
// Each trace: make_trace(kind, steps, seed) sized to the model's positions; replay() runs every policy on
// its own fresh Engine (memory store). Times are the window operations' wall time (plan + apply; the
// fidelity forwards are not timed). Not a test: absolute numbers depend on the machine; ratios are
// measured side by side in the same run.
//
//   bench_replay [--model PATH] [--preset tiny-llama] [--cache DIR] [--kinds web,video,agent] [--steps 20]
//                [--seed 0] [--policy patch:16] [--threads N] [--no-fidelity] [--json PATH]
//   default model: the bundled stories260K when it exists (ORBIT_MODELS_DIR), else a generated --preset.
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/trace.h"

namespace {

struct Options {
  std::string model;
  std::string preset = "tiny-llama";
  std::string cache = "bench-models";
  std::vector<std::string> kinds{"web", "video", "agent"};
  int64_t steps = 20;
  uint64_t seed = 0;
  std::string policy = "patch:16";
  int threads = 0;
  bool fidelity = true;
  std::string json;
};

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_replay",
      {{"--model", "--preset", "--cache", "--kinds", "--steps", "--seed", "--policy", "--threads", "--json"},
       {"--no-fidelity"},
       "usage: bench_replay [--model PATH] [--preset tiny-llama] [--cache DIR] [--kinds web,video,agent]\n"
       "                    [--steps 20] [--seed 0] [--policy patch:16] [--threads N] [--no-fidelity]\n"
       "                    [--json PATH]\n"
       "  Generated agent traces replayed under the policy and the baselines in one run: forward\n"
       "  tokens and time as ratios vs. re-prefill, prefix cache, blind and a full re-prefill.\n"
       "  --model PATH     default: the bundled stories260K, else a generated --preset model\n"
       "  --preset NAME    generator preset when no model is given (models kept in --cache)\n"
       "  --kinds K,..     trace kinds (web, video, agent)\n"
       "  --steps N        agent steps per trace;  --seed S   trace seed\n"
       "  --policy SPEC    the policy compared with the baselines\n"
       "  --threads N      intra-op threads (0: the process setting)\n"
       "  --no-fidelity    skip the fidelity forwards\n"
       "  --json PATH      also write the reports as JSON\n"},
      argc, argv, 1);
  Options o;
  o.model = a.get_or("--model", o.model);
  o.preset = a.get_or("--preset", o.preset);
  o.cache = a.get_or("--cache", o.cache);
  if (auto v = a.get("--kinds")) o.kinds = orbit::cli::split_commas(*v);
  o.steps = a.get_int("--steps", o.steps, 1);
  o.seed = static_cast<uint64_t>(a.get_int("--seed", static_cast<int64_t>(o.seed), 0));
  o.policy = a.get_or("--policy", o.policy);
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 0));  // 0: the process setting
  o.fidelity = !a.flag("--no-fidelity");
  o.json = a.get_or("--json", o.json);
  return o;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse(argc, argv);
  if (o.model.empty()) {
#ifdef ORBIT_MODELS_DIR
    const std::string stories = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
    if (std::filesystem::exists(stories)) o.model = stories;
#endif
  }
  o.model = orbit::bench::model_path_or_generate(o.model, o.cache, o.preset);
  if (o.threads > 0) at::set_num_threads(o.threads);

  orbit::EngineOptions eo;
  eo.model = o.model;
  eo.page_size = 16;
  const orbit::ModelInfo info = orbit::Engine::open(eo)->model_info();
  std::printf(
      "bench_replay: model %s (%s, %lld layers, %lld positions), policy %s, %lld agent steps per trace, %d threads\n\n",
      info.origin.c_str(), info.architecture.c_str(), static_cast<long long>(info.num_layers),
      static_cast<long long>(info.max_positions), o.policy.c_str(), static_cast<long long>(o.steps),
      at::get_num_threads());
  std::printf("%-6s %5s | %-10s %10s %9s %9s | %-25s %-25s %-25s %-12s\n", "trace", "steps", "policy", "fwd/step",
              "ms/step", "mean-KL", "fwd ratio vs reprefill", "fwd ratio vs prefix", "time ratio vs reprefill",
              "time vs prefix");
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& kind : o.kinds) {
    orbit::MakeTraceOptions mo;
    mo.kind = kind;
    mo.steps = o.steps;
    mo.seed = o.seed;
    mo.max_positions = info.max_positions;
    mo.position_rows = info.position_rows;
    const orbit::Trace trace = orbit::make_trace(mo);
    orbit::ReplayOptions ro;
    ro.engine = eo;
    ro.policies = {o.policy};
    ro.fidelity = o.fidelity;
    ro.progress = [&](std::size_t p, std::size_t np, std::size_t s, std::size_t ns, const std::string& name) {
      if (s == 0)
        std::fprintf(stderr, "  %s: policy %zu/%zu %s (%zu steps)\n", kind.c_str(), p + 1, np, name.c_str(), ns);
    };
    const orbit::ReplayReport r = orbit::replay(trace, ro);
    const orbit::PolicyReplay* reprefill = r.find("reprefill");
    const orbit::PolicyReplay* prefix = r.find("prefix");
    const double n = static_cast<double>(r.steps);
    for (const orbit::PolicyReplay& p : r.policies) {
      const orbit::PolicyTotals& t = p.totals;
      char a[32], b[32], c[32], d[32];
      std::snprintf(a, sizeof a, "%.3f", ratio(t.forward_tokens, reprefill->totals.forward_tokens));
      std::snprintf(b, sizeof b, "%.3f", ratio(t.forward_tokens, prefix->totals.forward_tokens));
      std::snprintf(c, sizeof c, "%.3f", ratio(t.seconds, reprefill->totals.seconds));
      std::snprintf(d, sizeof d, "%.3f", ratio(t.seconds, prefix->totals.seconds));
      std::printf("%-6s %5zu | %-10s %10.1f %9.3f %9.2e | %-25s %-25s %-25s %-12s\n", kind.c_str(), r.steps,
                  p.policy.c_str(), t.forward_tokens / n, 1e3 * t.seconds / n, t.mean_kl, a, b, c, d);
    }
    const orbit::PolicyReplay& chosen = r.policies.front();
    std::printf(
        "%-6s %5s | %-10s %10.1f %9s %9s | (a full re-prefill after every mutating step; %s computes %.3fx of it)\n",
        kind.c_str(), "", "full-pf", chosen.totals.full_prefill_tokens / n, "", "", chosen.policy.c_str(),
        ratio(chosen.totals.forward_tokens, chosen.totals.full_prefill_tokens));
    if (chosen.offline) {
      std::printf(
          "%-6s %5s | offline bound on %s's %lld patch demands: formed online %lld, compulsory %lld, Belady %lld, LRU "
          "%lld\n",
          kind.c_str(), "", chosen.policy.c_str(), static_cast<long long>(chosen.offline->demands),
          static_cast<long long>(chosen.offline->online_formations),
          static_cast<long long>(chosen.offline->compulsory_formations),
          static_cast<long long>(chosen.offline->belady_formations),
          static_cast<long long>(chosen.offline->lru_formations));
    }
    std::printf("\n");
    std::fflush(stdout);
    out.push_back({{"kind", kind}, {"report", nlohmann::json::parse(orbit::replay_report_json(r))}});
  }
  std::printf(
      "fwd/step: token-forwards per trace step; ms/step: wall time of the window operations per step;\n"
      "ratios: policy / baseline over the whole trace (lower is cheaper).\n");
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    ORBIT_CHECK(f.good(), "--json: cannot write '" << o.json << "'");
    f << out.dump(2) << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_replay: error: %s\n", e.what());
  return 1;
}
