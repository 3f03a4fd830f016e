// bench_binding: paper 000's experiments on tiny trained binding models, side by side in one
// run, printing tables and writing one JSON file that plot_binding.py and make_report.py read.
//
//   bench_binding [--models DIR,DIR] [--stories PATH] [--n N] [--seed S] [--threads T] [--json PATH]
//                 [--quick]
//
// Defaults: models/binding-gqa, models/binding-mla, models/stories260K/stories260K.bin (from the
// repository root), n = 200 probes per kind, seed 2024. --quick: n = 12 and fewer window cases (smoke; an
// --n beside it wins). A bad or missing value is an error naming the argument (exit status 2).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "args.h"
#include "binding_common.h"
#include "orbit/runtime/loader.h"

namespace bb = orbit::bench::binding;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string models = "models/binding-gqa,models/binding-mla";
  std::string stories = "models/stories260K/stories260K.bin";
  std::string json_path = "bench/binding/results/binding.json";
  int threads = 1;
  bb::Settings settings;
};

// --quick sets the smoke sizes; an --n given beside it wins.
Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_binding",
      {{"--models", "--stories", "--n", "--seed", "--threads", "--json"},
       {"--quick"},
       "usage: bench_binding [--models DIR,DIR] [--stories PATH] [--n N] [--seed S] [--threads T]\n"
       "                     [--json PATH] [--quick]\n"
       "  The binding experiments (bench/REPORT.md): accuracy, deficit, rank, recall, reorder.\n"
       "  --models DIR,DIR  the trained binding models (default models/binding-gqa,models/binding-mla)\n"
       "  --stories PATH    the stories260K .bin for its sections ('' = none)\n"
       "  --n N             cases per experiment;  --seed S   seed\n"
       "  --threads T       intra-op threads (default 1)\n"
       "  --json PATH       results (default bench/binding/results/binding.json)\n"
       "  --quick           a small run (n 12, fewer cases)\n"},
      argc, argv, 1);
  Options o;
  o.models = a.get_or("--models", o.models);
  o.stories = a.get_or("--stories", o.stories);
  o.json_path = a.get_or("--json", o.json_path);
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  bb::Settings& s = o.settings;
  if (a.flag("--quick")) {
    s.n = 12;
    s.reorder_sets = 2;
    s.window_cases = 8;
    s.recall_cases = 8;
  }
  s.n = static_cast<int>(a.get_int("--n", s.n, 1));
  s.seed = static_cast<uint64_t>(a.get_int("--seed", static_cast<int64_t>(s.seed), 0));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const bb::Settings& s = o.settings;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  at::set_num_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  bb::json out;
  out["meta"] = {{"command", command},
                 {"threads", o.threads},
                 {"seed", s.seed},
                 {"n_per_kind", s.n},
                 {"reorder_sets", s.reorder_sets},
                 {"window_cases", s.window_cases},
                 {"recall_cases", s.recall_cases}};
  try {
    for (const std::string& dir : orbit::cli::split_commas(o.models)) {
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
    if (!o.stories.empty()) {
      const auto model = orbit::runtime::load_model(o.stories);
      out["stories260K"] = bb::run_stories_experiment(*model, s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_binding: %s\n", e.what());
    return 1;
  }
  out["meta"]["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::create_directories(fs::path(o.json_path).parent_path());
  std::ofstream(o.json_path) << out.dump(2) << "\n";
  std::printf("\nwrote %s (%.0f s)\n", o.json_path.c_str(), out["meta"]["seconds"].get<double>());
  return 0;
}
