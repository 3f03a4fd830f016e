// Planning and bookkeeping cost of window operations against window size: a window of N one-token
// instances (live turns) on the bundled stories260K (512 positions, so N <= 500 here), then repeated
// add_turn + evict of the oldest turn, the operation pair whose per-op cost grew quadratically before
// (context compared as vectors per instance). Prints per N: plan time of each, apply time of the evict
// (bookkeeping only: survivors are kept, no forward) and of the add_turn (one 1-token forward over the
// window), and the growth exponent between consecutive N (1 = linear).
//
//   bench_window_scale [--model PATH] [--sizes 10,50,100,250,500] [--reps 20]
#include <chrono>
#include <cmath>
#include <cstdio>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/engine.h"

using namespace orbit;

int main(int argc, char** argv) {
  try {
    const cli::Args a("bench_window_scale", cli::ArgSpec{{"--model", "--sizes", "--reps"},
                                                                   {},
                                                                   "usage: bench_window_scale [--model PATH] [--sizes 10,50,100,250,500] [--reps 20]\n"
                                                                   "  Plan and apply time of add_turn + evict against the window's instance count,\n"
                                                                   "  with the growth exponent between sizes.\n"}, argc, argv, 1);
    const std::string model = a.get("--model").value_or(std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin");
    const std::vector<int64_t> sizes = bench::parse_positive_list(a.get("--sizes").value_or("10,50,100,250,500"), "--sizes");
    const int64_t reps = a.get_int("--reps", 20, 1);
    std::printf("%6s %12s %12s %12s %12s %12s %8s\n", "N", "plan-turn-us", "plan-evict-us", "apply-evict-us",
                "apply-turn-us", "pair-ms", "growth");
    double prev_pair = 0;
    int64_t prev_n = 0;
    for (int64_t n : sizes) {
      EngineOptions o;
      o.model = model;
      o.page_size = 1;
      o.background = BackgroundMode::kDeferred;
      auto engine = Engine::open(o);
      Window w = engine->new_window();
      for (int64_t i = 0; i < n; ++i) w.add_turn({3 + i % 500});
      double plan_turn = 0, plan_evict = 0, apply_evict = 0, apply_turn = 0;
      for (int64_t r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        const Plan pt = w.plan_add_turn({7});
        plan_turn += bench::seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        w.apply(pt).value();
        apply_turn += bench::seconds_since(t0);
        const InstanceId oldest = w.instances()[1].id;
        t0 = std::chrono::steady_clock::now();
        const Plan pe = w.plan_evict(oldest);
        plan_evict += bench::seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        w.apply(pe).value();
        apply_evict += bench::seconds_since(t0);
      }
      const double k = 1e6 / static_cast<double>(reps);
      const double pair = (plan_turn + plan_evict + apply_evict + apply_turn) * 1e3 / static_cast<double>(reps);
      const double growth = prev_n > 0 ? std::log(pair / prev_pair) / std::log(static_cast<double>(n) / static_cast<double>(prev_n)) : 0;
      std::printf("%6lld %12.1f %12.1f %12.1f %12.1f %12.3f %8.2f\n", static_cast<long long>(n), plan_turn * k,
                  plan_evict * k, apply_evict * k, apply_turn * k, pair, growth);
      prev_pair = pair;
      prev_n = n;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_window_scale: %s\n", e.what());
    return 2;
  }
}
