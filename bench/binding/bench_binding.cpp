// bench_binding: paper 000's experiments on tiny trained binding models, side by side in one
// run, printing tables and writing one JSON file that plot_binding.py and make_report.py read.
//
//   bench_binding [--models DIR,DIR] [--stories PATH] [--n N] [--seed S] [--threads T] [--json PATH]
//                 [--quick]
//
// Defaults: models/binding-gqa, models/binding-mla, models/stories260K/stories260K.bin (from the
// repository root), n = 200 probes per kind, seed 2024. --quick: n = 12 and fewer window cases (smoke).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "binding_common.h"
#include "orbit/runtime/loader.h"

namespace bb = orbit::bench::binding;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::string models = "models/binding-gqa,models/binding-mla";
  std::string stories = "models/stories260K/stories260K.bin";
  std::string json_path = "bench/binding/results/binding.json";
  int threads = 1;
  bb::Settings s;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--models")
      models = next();
    else if (a == "--stories")
      stories = next();
    else if (a == "--n")
      s.n = std::atoi(next().c_str());
    else if (a == "--seed")
      s.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--json")
      json_path = next();
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: bench_binding [--models DIR,DIR] [--stories PATH] [--n N] [--seed S] [--threads T]\n"
          "                     [--json PATH] [--quick]\n"
          "  The binding experiments (bench/REPORT.md): accuracy, deficit, rank, recall, reorder.\n"
          "  --models DIR,DIR  the trained binding models (default models/binding-gqa,models/binding-mla)\n"
          "  --stories PATH    the stories260K .bin for its sections\n"
          "  --n N             cases per experiment;  --seed S   seed\n"
          "  --threads T       intra-op threads (default 1)\n"
          "  --json PATH       results (default bench/binding/results/binding.json)\n"
          "  --quick           a small run (n 12, fewer cases)\n");
      return 0;
    } else if (a == "--quick") {
      s.n = 12;
      s.reorder_sets = 2;
      s.window_cases = 8;
      s.recall_cases = 8;
    } else {
      std::fprintf(stderr,
                   "usage: bench_binding [--models DIR,DIR] [--stories PATH] [--n N] [--seed S] "
                   "[--threads T] [--json PATH] [--quick]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  const auto t0 = std::chrono::steady_clock::now();
  bb::json out;
  out["meta"] = {{"command", command},
                 {"threads", threads},
                 {"seed", s.seed},
                 {"n_per_kind", s.n},
                 {"reorder_sets", s.reorder_sets},
                 {"window_cases", s.window_cases},
                 {"recall_cases", s.recall_cases}};
  try {
    size_t start = 0;
    while (start <= models.size()) {
      const size_t comma = models.find(',', start);
      const std::string dir = models.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? models.size() + 1 : comma + 1;
      if (dir.empty()) continue;
      const auto model = orbit::runtime::load_model(dir);
      const std::string name = fs::path(dir).filename().string();
      bb::json m;
      m["path"] = dir;
      m["arch"] = orbit::runtime::arch_name(model->config().arch);
      m["fingerprint"] = model->fingerprint();
      if (fs::exists(fs::path(dir) / "train_log.json")) {
        std::ifstream in(fs::path(dir) / "train_log.json");
        bb::json log = bb::json::parse(in);
        log.erase("loss_curve");
        m["train"] = log;
      }
      m["reuse"] = bb::run_reuse_experiments(*model, name, s);
      m["window"] = bb::run_window_experiments(*model, name, s);
      out["models"][name] = m;
    }
    if (!stories.empty()) {
      const auto model = orbit::runtime::load_model(stories);
      out["stories260K"] = bb::run_stories_experiment(*model, s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_binding: %s\n", e.what());
    return 1;
  }
  out["meta"]["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::create_directories(fs::path(json_path).parent_path());
  std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("\nwrote %s (%.0f s)\n", json_path.c_str(), out["meta"]["seconds"].get<double>());
  return 0;
}
