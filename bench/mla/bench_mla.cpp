// bench_mla: an MLA decode step (and a short query) over a long contiguous past, the naive form (k_nope and v
// expanded from the latent for every key token, ForwardOptions::mla_form = kNaive) against the absorbed form
// (kAbsorbed: W_UK folded into the queries, W_UV applied after the softmax), side by side in one run (ratios;
// not a test: absolute numbers depend on the machine and its load).
//
// The model: DeepSeek-V2-Lite's attention (generator preset "deepseek-v2-lite": hidden 2048, 16 heads,
// r_kv 512, d_nope 128, d_rope 64, d_v 128, no q low-rank, YaRN as released) with its dense MLP
// (intermediate 10944), --layers layers and a vocabulary of --vocab (the real 102400 would make the LM head
// the larger part of a step; it is the same in both forms). Weights N(0, 0.02²), norm gains 1, float32 on
// the CPU, built in memory. The past: S tokens of random content (k_pe, latent N(0, 1)) at positions 0..S-1.
// Each case times Model::forward of R tokens over that past: the two forms alternate, each going first in
// turn, --reps times; reported are the fastest and the median per form, naive / absorbed of the medians, and
// the largest |difference| of their logits. Beside them, the same forward over a decode cache's slot holding
// that past (DecodeCache: on the CPU the latent rows, absorbed; a fork of one opened slot before each timed
// call, not timed): cache / absorbed of the medians, and the cache's bytes per token and layer with the slot
// open (DecodeCache::bytes() / (S · layers), its positions' 8 bytes a token included).
//
//   bench_mla [--keys 1024,4096,16384] [--queries 1,16] [--layers 2] [--vocab 8192] [--reps 5] [--threads 1]
//             [--json PATH]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/weights.h"

namespace {

namespace rt = orbit::runtime;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int64_t> keys{1024, 4096, 16384};
  std::vector<int64_t> queries{1, 16};
  int64_t layers = 2;
  int64_t vocab = 8192;
  int reps = 5;
  int threads = 1;
  std::string json = "bench_mla.json";
};

std::unique_ptr<rt::Model> lite_model(const Options& o) {
  rt::ModelConfig c = rt::generator_preset("deepseek-v2-lite");
  c.num_layers = o.layers;
  c.vocab_size = o.vocab;
  rt::ModelWeights w;
  rt::prepare_weights(w, c);
  at::manual_seed(17);
  for (const rt::WeightSpec& spec : rt::weight_specs(c)) {
    rt::weight_slot(w, c, spec.name) = spec.is_norm ? at::ones(spec.shape) : at::randn(spec.shape).mul_(0.02);
  }
  return std::make_unique<rt::Model>(c, std::move(w), "bench_mla (deepseek-v2-lite attention)");
}

rt::PastKV random_past(const rt::Model& m, int64_t S) {
  const rt::ModelConfig& c = m.config();
  rt::PastKV past;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    past.layers.push_back({at::randn({S, 1, c.mla.qk_rope_head_dim}), at::randn({S, 1, c.mla.kv_lora_rank})});
  }
  past.positions = at::arange(0, S, at::kLong);
  return past;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of one forward of `in` over `past`; the logits into `logits` when given.
double timed(const rt::Model& m, const rt::ForwardInput& in, const rt::PastKV& past, const rt::ForwardOptions& o,
             at::Tensor* logits = nullptr) {
  const auto t0 = Clock::now();
  rt::ForwardResult r = m.forward(in, &past, o);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (logits != nullptr) *logits = r.logits;
  return ms;
}

// One forward over a fork of the cache's slot `base` (its rows expanded when `base` was opened), timed alone.
double timed_cached(const rt::Model& m, const rt::ForwardInput& in, rt::DecodeCache& cache, int64_t base) {
  const int64_t slot = cache.fork(base);
  rt::ForwardOptions o;
  o.return_content = false;
  const double ms = timed(m, in, cache.past(slot), o);
  cache.close(slot);
  return ms;
}

nlohmann::json run_case(const rt::Model& m, const rt::PastKV& past, rt::DecodeCache& cache, int64_t base, int64_t R,
                        int reps) {
  const double cache_bytes =
      static_cast<double>(cache.bytes()) / static_cast<double>(cache.length(base) * m.config().num_layers);
  const int64_t S = past.positions.size(0);
  rt::ForwardInput in;
  for (int64_t r = 0; r < R; ++r) in.tokens.push_back(1 + (r * 37) % (m.config().vocab_size - 1));
  in.positions = at::arange(S, S + R, at::kLong);
  rt::ForwardOptions naive, absorbed;
  naive.return_content = absorbed.return_content = false;
  naive.mla_form = rt::MlaForm::kNaive;
  absorbed.mla_form = rt::MlaForm::kAbsorbed;
  at::Tensor a, b;
  timed(m, in, past, naive, &a);  // warm-up, and the logits compared
  timed(m, in, past, absorbed, &b);
  timed_cached(m, in, cache, base);
  const double diff = (a - b).abs().max().item<double>();
  std::vector<double> tn, ta, tc;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      tn.push_back(timed(m, in, past, naive));
      ta.push_back(timed(m, in, past, absorbed));
      tc.push_back(timed_cached(m, in, cache, base));
    } else {
      tc.push_back(timed_cached(m, in, cache, base));
      ta.push_back(timed(m, in, past, absorbed));
      tn.push_back(timed(m, in, past, naive));
    }
  }
  const double mn = median(tn), ma = median(ta), mc = median(tc);
  const double fn = *std::min_element(tn.begin(), tn.end()), fa = *std::min_element(ta.begin(), ta.end());
  std::printf("%6lld %4lld %11.2f %11.2f %11.2f %11.2f %11.2f %8.2fx %8.2fx %8.2fx %10.1e %11.0f\n",
              static_cast<long long>(S), static_cast<long long>(R), fn, mn, fa, ma, mc, mn / ma, fn / fa, mc / ma, diff,
              cache_bytes);
  std::fflush(stdout);
  return {{"keys", S},
          {"queries", R},
          {"naive_ms_fastest", fn},
          {"naive_ms_median", mn},
          {"absorbed_ms_fastest", fa},
          {"absorbed_ms_median", ma},
          {"decode_cache_ms_median", mc},
          {"naive_over_absorbed_median", mn / ma},
          {"naive_over_absorbed_fastest", fn / fa},
          {"decode_cache_over_absorbed_median", mc / ma},
          {"max_abs_logit_diff", diff},
          {"decode_cache_bytes_per_token_layer", cache_bytes}};
}

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_mla",
      {{"--keys", "--queries", "--layers", "--vocab", "--reps", "--threads", "--json"},
       {},
       "usage: bench_mla [--keys 1024,4096,16384] [--queries 1,16] [--layers 2] [--vocab 8192] [--reps 5]\n"
       "                 [--threads 1] [--json PATH]\n"
       "  An MLA decode step over a long past: the naive form against the absorbed form (DeepSeek-V2-Lite's\n"
       "  attention and MLP, few layers, a small vocabulary; float32 CPU).\n"
       "  --keys S,..     past tokens\n"
       "  --queries R,..  new tokens per forward (1: a decode step)\n"
       "  --layers N      layers (default 2)\n"
       "  --vocab N       vocabulary (default 8192)\n"
       "  --reps N        timed forwards per form, alternated (median and fastest reported)\n"
       "  --threads N     intra-op threads (default 1)\n"
       "  --json PATH     where the JSON goes (default bench_mla.json)\n"},
      argc, argv, 1);
  Options o;
  if (auto v = a.get("--keys")) o.keys = orbit::bench::parse_positive_list(*v, "--keys");
  if (auto v = a.get("--queries")) o.queries = orbit::bench::parse_positive_list(*v, "--queries");
  o.layers = a.get_int("--layers", o.layers, 1);
  o.vocab = a.get_int("--vocab", o.vocab, 2);
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
    c10::InferenceMode guard;
    const auto m = lite_model(o);
    std::printf("bench_mla: %lld layers, vocab %lld, %d threads, %d reps (ms per forward)\n",
                static_cast<long long>(o.layers), static_cast<long long>(o.vocab), o.threads, o.reps);
    std::printf("%6s %4s %11s %11s %11s %11s %11s %9s %9s %9s %10s %11s\n", "S", "R", "naive min", "naive med",
                "absorb min", "absorb med", "cache med", "med n/a", "min n/a", "med c/a", "max |diff|", "cache B/t·l");
    nlohmann::json rows = nlohmann::json::array();
    for (const int64_t S : o.keys) {
      const rt::PastKV past = random_past(*m, S);
      rt::DecodeCache cache(*m);
      const int64_t base = cache.open(&past);
      for (const int64_t R : o.queries) rows.push_back(run_case(*m, past, cache, base, R, o.reps));
    }
    std::ofstream f(o.json);
    f << nlohmann::json{{"threads", o.threads}, {"layers", o.layers}, {"rows", rows}}.dump(2) << "\n";
    ORBIT_CHECK(f.good(), "--json: cannot write '" << o.json << "'");
    std::printf("wrote %s\n", o.json.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mla: %s\n", e.what());
    return 1;
  }
}
