// bench_attention: a prefill's attention on the CPU, attend_batch (at heads of up to 32 the kernel, one query
// row at a time over the keys it sees; wider heads the blocked products, so both sides are the same there)
// against the blocked products it used before everywhere (attend_batch_blocked: batched products, a mask and
// a softmax over [H_kv, group·block, S]), side by side in one run (ratios; not a test: absolute numbers depend
// on the machine and its load).
//
// For each head shape, R new queries (the last R of S keys, causal), float32, one thread unless --threads:
// microseconds per call, the fastest of --reps batches of calls (the two sides interleaved, each going first
// in turn), and blocked / attend_batch. Shapes: TinyStories-656K (8 heads over 4 kv heads of 16), stories260K
// (8 over 4 of 8), heads of 32 (16 over 4), Qwen2-0.5B's (14 over 2 of 64) and a 7B model's (32 over 8 of
// 128). Also checks the two agree (max |difference|).
//
//   bench_attention [--queries 1,8,32,128,512] [--keys 64,512,2048] [--reps 5] [--threads 1] [--json PATH]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "attention.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace rd = orbit::runtime::detail;

struct Options {
  std::vector<int64_t> queries{1, 8, 32, 128, 512};
  std::vector<int64_t> keys{64, 512, 2048};
  int reps = 5;
  int threads = 1;
  std::string json = "bench_attention.json";
};

struct Shape {
  const char* name;
  int64_t heads, kv_heads, head_dim;
};

struct Inputs {
  at::Tensor q, k, v, query_index;
  double scale;
};

Inputs make_inputs(const Shape& s, int64_t R, int64_t S) {
  at::manual_seed(R * 7919 + S);
  Inputs in;
  in.q = at::randn({1, R, s.heads, s.head_dim});
  in.k = at::randn({1, S, s.kv_heads, s.head_dim});
  in.v = at::randn({1, S, s.kv_heads, s.head_dim});
  in.query_index = at::arange(S - R, S, at::kLong).unsqueeze(0);
  in.scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  return in;
}

// Microseconds per call of `f` over `calls` calls.
double per_call(const std::function<void()>& f, int calls) {
  const auto t0 = Clock::now();
  for (int c = 0; c < calls; ++c) f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

int calls_for(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  return std::max(1, static_cast<int>(20000.0 / std::max(us, 1.0)));
}

nlohmann::json run_case(const Shape& s, int64_t R, int64_t S, int reps) {
  const Inputs in = make_inputs(s, R, S);
  const std::function<void()> kernel = [&] { (void)rd::attend_batch(in.q, in.k, in.v, in.query_index, in.scale); };
  const std::function<void()> blocked = [&] {
    (void)rd::attend_batch_blocked(in.q, in.k, in.v, in.query_index, in.scale);
  };
  const double diff = (rd::attend_batch(in.q, in.k, in.v, in.query_index, in.scale) -
                       rd::attend_batch_blocked(in.q, in.k, in.v, in.query_index, in.scale))
                          .abs()
                          .max()
                          .item<double>();
  const int calls = std::max(calls_for(kernel), calls_for(blocked));
  double best_kernel = 1e300, best_blocked = 1e300;
  for (int r = 0; r < reps; ++r) {
    const bool kernel_first = r % 2 == 0;
    const double a = per_call(kernel_first ? kernel : blocked, calls);
    const double b = per_call(kernel_first ? blocked : kernel, calls);
    best_kernel = std::min(best_kernel, kernel_first ? a : b);
    best_blocked = std::min(best_blocked, kernel_first ? b : a);
  }
  std::printf("%-18s %6lld %6lld %12.1f %12.1f %8.2fx %10.1e\n", s.name, static_cast<long long>(R),
              static_cast<long long>(S), best_kernel, best_blocked, best_blocked / best_kernel, diff);
  return {{"shape", s.name},
          {"queries", R},
          {"keys", S},
          {"attend_batch_us", best_kernel},
          {"blocked_us", best_blocked},
          {"blocked_over_attend_batch", best_blocked / best_kernel},
          {"max_abs_diff", diff}};
}

Options parse(int argc, char** argv) {
  const orbit::cli::Args a("bench_attention",
                           {{"--queries", "--keys", "--reps", "--threads", "--json"},
                            {},
                            "usage: bench_attention [--queries 1,8,32,128,512] [--keys 64,512,2048] [--reps 5]\n"
                            "                       [--threads 1] [--json PATH]\n"
                            "  A prefill's CPU attention: the kernel attend_batch takes against the blocked products.\n"
                            "  --queries R,..  new queries per call (the last R of S keys, causal)\n"
                            "  --keys S,..     keys per call (cases with R > S are skipped)\n"
                            "  --reps N        timed batches per side (the fastest is reported)\n"
                            "  --threads N     intra-op threads (default 1)\n"
                            "  --json PATH     where the JSON goes (default bench_attention.json)\n"},
                           argc, argv, 1);
  Options o;
  if (auto v = a.get("--queries")) o.queries = orbit::bench::parse_positive_list(*v, "--queries");
  if (auto v = a.get("--keys")) o.keys = orbit::bench::parse_positive_list(*v, "--keys");
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  o.json = a.get_or("--json", o.json);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    at::set_num_threads(o.threads);
    const Shape shapes[] = {{"tinystories-656k", 8, 4, 16},
                            {"stories260K", 8, 4, 8},
                            {"heads of 32", 16, 4, 32},
                            {"qwen2-0.5b", 14, 2, 64},
                            {"7b", 32, 8, 128}};
    std::printf("%-18s %6s %6s %12s %12s %9s %10s\n", "shape", "R", "S", "attend us", "blocked us", "blocked/a",
                "max |diff|");
    nlohmann::json rows = nlohmann::json::array();
    for (const Shape& s : shapes) {
      for (const int64_t S : o.keys) {
        for (const int64_t R : o.queries) {
          if (R <= S) rows.push_back(run_case(s, R, S, o.reps));
        }
      }
    }
    std::ofstream f(o.json);
    f << nlohmann::json{{"threads", o.threads}, {"rows", rows}}.dump(2) << "\n";
    ORBIT_CHECK(f.good(), "--json: cannot write '" << o.json << "'");
    std::printf("wrote %s\n", o.json.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
