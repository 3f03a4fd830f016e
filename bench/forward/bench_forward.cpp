// bench_forward: prefill throughput of the CPU forward pass at several lengths on a model of a real
// shape (default: a random-weight model of Qwen2.5-0.5B's shape, float32 compute). Prints a table and
// writes JSON. Not a test: numbers depend on the machine; the ratios between lengths in one run are
// what to compare.
//
//   bench_forward [--model DIR] [--preset qwen2.5-0.5b] [--lengths 256,512,1024,2048] [--reps 3]
//                 [--json PATH] [--cache DIR] [--threads N (default: all cores)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"

namespace fs = std::filesystem;
namespace rt = orbit::runtime;

namespace {

struct Options {
  std::string model;
  std::string preset = "qwen2.5-0.5b";
  std::vector<int64_t> lengths{256, 512, 1024, 2048};
  int reps = 3;
  std::string json = "bench_forward.json";
  std::string cache = "bench-models";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
};

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_forward",
      {{"--model", "--preset", "--lengths", "--reps", "--json", "--cache", "--threads"},
       {},
       "usage: bench_forward [--model DIR] [--preset NAME] [--lengths 256,512,1024,2048] [--reps 3] [--json PATH]\n"
       "                     [--cache DIR] [--threads N]\n"
       "  Prefill throughput of the CPU forward at several lengths (a table and JSON; ratios between lengths).\n"
       "  --model DIR     a model to time (default: a random-weight model of --preset's shape)\n"
       "  --preset NAME   generator preset for the default model (default qwen2.5-0.5b)\n"
       "  --lengths L,..  prefill lengths in tokens\n"
       "  --reps N        repetitions per length (the median is reported)\n"
       "  --json PATH     where the JSON goes (default bench_forward.json)\n"
       "  --cache DIR     where generated models are kept (default bench-models)\n"
       "  --threads N     intra-op threads (default: all cores)\n"},
      argc, argv, 1);
  Options o;
  o.model = a.get_or("--model", o.model);
  o.preset = a.get_or("--preset", o.preset);
  if (auto v = a.get("--lengths")) o.lengths = orbit::bench::parse_positive_list(*v, "--lengths");
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.json = a.get_or("--json", o.json);
  o.cache = a.get_or("--cache", o.cache);
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  return o;
}

using orbit::seconds_since;

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  // Debian's libtorch starts OpenMP with one thread on some machines; use every core unless told.
  at::set_num_threads(o.threads);
  const std::string path = orbit::bench::model_path_or_generate(o.model, o.cache, o.preset);
  auto start = std::chrono::steady_clock::now();
  const auto model = rt::load_model(path);
  const double load_s = seconds_since(start);
  const rt::ModelConfig& c = model->config();
  std::printf("model %s: %s, %lld layers, hidden %lld, %lld/%lld heads, %.0fM parameters; loaded in %.1f s\n",
              path.c_str(), rt::arch_name(c.arch), (long long)c.num_layers, (long long)c.hidden_size,
              (long long)c.num_heads, (long long)c.num_kv_heads, model->parameter_count() / 1e6, load_s);
  std::printf("threads %d, float32, logits for the last position only, median of %d runs\n\n", at::get_num_threads(),
              o.reps);

  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> token(0, c.vocab_size - 1);
  nlohmann::json rows = nlohmann::json::array();
  double base_tps = 0;
  std::printf("%8s %12s %14s %12s %16s\n", "tokens", "seconds", "tokens/s", "ms/token", "vs first length");
  for (int64_t n : o.lengths) {
    ORBIT_CHECK(n <= c.max_position_embeddings,
                "--lengths: " << n << " is past the model's limit " << c.max_position_embeddings);
    rt::ForwardInput in;
    for (int64_t i = 0; i < n; ++i) in.tokens.push_back(token(rng));
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kLast;
    std::vector<double> times;
    for (int r = 0; r < o.reps; ++r) {
      start = std::chrono::steady_clock::now();
      (void)model->forward(in, nullptr, fo);
      times.push_back(seconds_since(start));
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double tps = static_cast<double>(n) / median;
    if (base_tps == 0) base_tps = tps;
    std::printf("%8lld %12.3f %14.1f %12.3f %15.2fx\n", (long long)n, median, tps, 1e3 * median / n, tps / base_tps);
    std::fflush(stdout);
    rows.push_back({{"tokens", n},
                    {"median_s", median},
                    {"tokens_per_s", tps},
                    {"runs_s", times},
                    {"throughput_vs_first", tps / base_tps}});
  }
  nlohmann::json report = {{"benchmark", "forward_prefill"},
                           {"model", path},
                           {"preset", o.model.empty() ? o.preset : ""},
                           {"parameters", model->parameter_count()},
                           {"threads", at::get_num_threads()},
                           {"dtype", "float32"},
                           {"reps", o.reps},
                           {"results", rows}};
  std::ofstream(o.json) << report.dump(2) << "\n";
  std::printf("\nwrote %s\n", o.json.c_str());
  return 0;
} catch (const orbit::Error& e) {
  std::fprintf(stderr, "bench_forward: error: %s\n", e.what());
  return 1;
}
