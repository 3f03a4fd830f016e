// bench_layer_check: what the SDK's per-layer interruption check (engine/interruptible.h) costs a prefill
// when no InterruptScope is installed (the common case: every C++ caller, and Python off the main thread).
// The same prefill runs with ForwardOptions::before_layer = layer_interruption() and with none, the two
// alternated round by round (which goes first alternates too), so drift in the machine's speed falls on both.
// A prefill longer than the model's positions is split into forwards of at most that many tokens, each from
// position 0 (a 2,000-token prefill on a 512-position model: four chunk encodes of 500).
// Prints min and median per variant and the median of the per-round ratios. Not a test: numbers depend on the
// machine.
//
//   bench_layer_check --model PATH [--tokens 2000] [--rounds 41] [--threads 1]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "engine/interruptible.h"
#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"

namespace rt = orbit::runtime;

namespace {

struct Options {
  std::string model;
  int64_t tokens = 2000;
  int rounds = 41;
  int threads = 1;
};

Options parse(int argc, char** argv) {
  const orbit::cli::Args a("bench_layer_check",
                           {{"--model", "--tokens", "--rounds", "--threads"},
                            {},
                            "usage: bench_layer_check --model PATH [--tokens 2000] [--rounds 41] [--threads 1]\n"
                            "  A prefill of --tokens tokens (in equal forwards within the model's positions), with\n"
                            "  and without the SDK's per-layer interruption check, no InterruptScope installed,\n"
                            "  alternated --rounds times. Prints min/median of each.\n"},
                           argc, argv, 1);
  Options o;
  o.model = a.get_or("--model", o.model);
  ORBIT_CHECK(!o.model.empty(), "bench_layer_check: give --model PATH");
  o.tokens = a.get_int("--tokens", o.tokens, 1);
  o.rounds = static_cast<int>(a.get_int("--rounds", o.rounds, 1));
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  const auto model = rt::load_model(o.model);
  const rt::ModelConfig& c = model->config();
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> token(0, c.vocab_size - 1);
  const int64_t pieces = (o.tokens + c.max_position_embeddings - 1) / c.max_position_embeddings;
  std::vector<rt::ForwardInput> inputs(static_cast<std::size_t>(pieces));
  for (int64_t i = 0; i < o.tokens; ++i) inputs[static_cast<std::size_t>(i % pieces)].tokens.push_back(token(rng));
  rt::ForwardOptions plain;
  plain.logits = rt::LogitsMode::kLast;
  const rt::ForwardOptions checked = orbit::detail::interruptible(plain);
  const auto prefill = [&](const rt::ForwardOptions& fo) {
    for (const rt::ForwardInput& in : inputs) (void)model->forward(in, nullptr, fo);
  };
  prefill(plain);  // warm-up
  prefill(checked);
  std::vector<double> with, without, ratio;
  for (int r = 0; r < o.rounds; ++r) {
    double t[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const bool check = (r + k) % 2 == 0;  // alternates which variant goes first
      const auto start = std::chrono::steady_clock::now();
      prefill(check ? checked : plain);
      t[check ? 1 : 0] = orbit::seconds_since(start);
    }
    without.push_back(t[0]);
    with.push_back(t[1]);
    ratio.push_back(t[1] / t[0]);
  }
  std::printf("%s: %lld layers, %lld tokens in %lld forwards, %d threads, %d rounds alternated\n", o.model.c_str(),
              (long long)c.num_layers, (long long)o.tokens, (long long)pieces, at::get_num_threads(), o.rounds);
  std::printf("  without the check: min %.3f ms, median %.3f ms\n",
              1e3 * *std::min_element(without.begin(), without.end()), 1e3 * median(without));
  std::printf("  with the check:    min %.3f ms, median %.3f ms\n", 1e3 * *std::min_element(with.begin(), with.end()),
              1e3 * median(with));
  std::printf("  with / without, per round: median %.4f, min %.4f, max %.4f\n", median(ratio),
              *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()));
  // The check alone, called as a forward calls it (through the std::function), many times: its cost per call
  // bounds what a prefill pays (one call per layer per forward).
  const int64_t calls = 10'000'000;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) checked.before_layer(i);
  const double per_call_ns = 1e9 * orbit::seconds_since(start) / static_cast<double>(calls);
  std::printf("  the check alone: %.2f ns per call; this prefill makes %lld calls: %.2f us, %.1e of its median\n",
              per_call_ns, (long long)(pieces * c.num_layers), 1e-3 * per_call_ns * pieces * c.num_layers,
              1e-9 * per_call_ns * pieces * c.num_layers / median(without));
  return 0;
} catch (const orbit::Error& e) {
  std::fprintf(stderr, "bench_layer_check: error: %s\n", e.what());
  return 1;
}
