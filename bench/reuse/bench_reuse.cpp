// bench_reuse: time-to-first-token of a reused chunk vs. re-prefill, side by side in one run.
//
// Window: a context of --context tokens (exact, prefilled once), chunk B of each --lengths size, then one
// query token. Per chunk, repair.h's prepare_scenario() does the shared work once (B's canonical, B's
// exact KV in context); each rank-m patch is then formed once from that deficit, as a store would keep it.
// The arms, interleaved within each repetition on the same inputs:
//   re-prefill   B prefilled in context (conditioned(), what the `reprefill` strategy runs), then the
//                query token decoded over [C, B]
//   reuse        apply_patch() of the stored rank-m patch to the stored canonical (relocation happens on
//                the fly inside the decode, as for every past token), then the same query token
// TTFT = the arm's B step + the query decode. The patch's forming (the conditioned forward that also
// serves the first request exactly, plus the SVD) is one-time and reported apart. Also printed: patch
// bytes as a fraction of B's KV bytes, and the first token's KL(re-prefill ‖ reuse).
//
// --device cuda[:i] adds a second table: the reuse operator's own steps on that device against the same
// steps on CPU, on the same chunks and patches (the model's forward, so re-prefill and the decode, stays
// on CPU: it has no device path). Per chunk and rank:
//   serve      ops::patch_apply over every layer: keys patched and relocated to the chunk's positions in
//              the window (RoPE tables once per chunk), values patched; content and factors already on
//              the device, as a device store would hold them; median of --reps after one warm-up
//   SVD        form_patch() of the deficit moved to the device (exact: orbit's cuSOLVER kernel through
//              factorize()), once, after one untimed warm-up on the first chunk
//   KL         first-token KL(exact || reuse) with the device-formed patch (copied back to CPU)
//
// Default: a random-weight model of Qwen2.5-0.5B's shape (generated once into --cache, bf16 on disk),
// float32 compute. Not a test: absolute numbers depend on the machine; the speed-up ratios are measured
// side by side in the same run, arms interleaved within each repetition.
//
//   bench_reuse [--model DIR] [--preset qwen2.5-0.5b] [--cache DIR] [--threads N (default: all cores)]
//               [--lengths 256,512,1024,2048] [--context 1024] [--ranks 16,64] [--reps 3] [--json PATH]
//               [--device cpu|cuda[:i]]
//   smoke run:  bench_reuse --preset tiny-qwen2 --lengths 64,128 --context 128 --reps 1
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../common/bench_util.h"
#include "args.h"
#include "ops/patch_apply_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/repair.h"

namespace fs = std::filesystem;
namespace rt = orbit::runtime;

namespace {

struct Options {
  std::string model;
  std::string preset = "qwen2.5-0.5b";
  std::string cache = "bench-models";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int64_t> lengths{256, 512, 1024, 2048};
  int64_t context = 1024;
  std::vector<int64_t> ranks{16, 64};
  int reps = 3;
  std::string json = "bench_reuse.json";
  std::string device = "cpu";
};

using orbit::bench::parse_positive_list;

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_reuse",
      {{"--model", "--preset", "--cache", "--threads", "--lengths", "--context", "--ranks", "--reps", "--json",
        "--device"},
       {},
       "usage: bench_reuse [--model PATH] [--preset qwen2.5-0.5b] [--cache DIR] [--threads N]\n"
       "                   [--lengths 256,512,1024,2048] [--context 1024] [--ranks 16,64] [--reps 3]\n"
       "                   [--json PATH] [--device cpu|cuda[:i]]\n"
       "  Time to first token of a reused chunk (stored canonical + rank-m patch) vs. re-prefill.\n"
       "  --model PATH     default: a random-weight model of --preset's shape, kept in --cache\n"
       "  --lengths L,..   chunk B sizes in tokens;  --context N   exact context before B\n"
       "  --ranks M,..     patch ranks;  --reps N   repetitions (median)\n"
       "  --threads N      intra-op threads (default: all cores)\n"
       "  --json PATH      where the JSON goes (default bench_reuse.json)\n"
       "  --device D       cuda[:i] adds the reuse operator on that device vs. CPU\n"},
      argc, argv, 1);
  Options o;
  o.model = a.get_or("--model", o.model);
  o.preset = a.get_or("--preset", o.preset);
  o.cache = a.get_or("--cache", o.cache);
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  if (auto v = a.get("--lengths")) o.lengths = parse_positive_list(*v, "--lengths");
  o.context = a.get_int("--context", o.context, 0);
  if (auto v = a.get("--ranks")) o.ranks = parse_positive_list(*v, "--ranks");
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.json = a.get_or("--json", o.json);
  o.device = a.get_or("--device", o.device);
  return o;
}

using orbit::seconds_since;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int64_t> out(static_cast<std::size_t>(n));
  for (auto& t : out) t = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  return out;
}

// The reuse operator's serve step through the ops layer: per layer, keys patched and rotated to
// `positions` (tables computed once, shared by every layer), values patched. Returns every output.
std::vector<at::Tensor> serve(const rt::ModelConfig& c, const rt::Content& canonical, const rt::Patch& patch,
                              const at::Tensor& positions) {
  namespace ops = rt::ops;
  const at::Tensor& first = canonical.front().k;
  const ops::RopeTables tables = ops::patch_rope_tables(c.rope, positions, first.scalar_type(), first.device());
  std::vector<at::Tensor> out;
  for (std::size_t l = 0; l < canonical.size(); ++l) {
    ops::PatchApplyInputs k;
    k.canonical = canonical[l].k;
    k.u = patch.k[l].u;
    k.vt = patch.k[l].vt;
    k.rotate = true;
    k.rope = c.rope;
    k.tables = tables;
    out.push_back(ops::patch_apply(k));
    ops::PatchApplyInputs v;
    v.canonical = canonical[l].v;
    v.u = patch.v[l].u;
    v.vt = patch.v[l].vt;
    out.push_back(ops::patch_apply(v));
  }
  (void)out.back().sum().item<double>();  // waits for the device's stream (the ops run in order on it)
  return out;
}

rt::Content content_to(const rt::Content& content, at::Device device) {
  rt::Content out;
  for (const rt::LayerKV& layer : content) {
    rt::LayerKV moved = layer;
    moved.k = layer.k.to(device);
    moved.v = layer.v.to(device);
    out.push_back(std::move(moved));
  }
  return out;
}

rt::Patch patch_to(const rt::Patch& patch, at::Device device) {
  rt::Patch out = patch;
  for (auto* factors : {&out.k, &out.v}) {
    for (rt::LowRank& f : *factors) {
      if (f.rank() == 0) continue;
      f.u = f.u.to(device);
      f.vt = f.vt.to(device);
    }
  }
  return out;
}

struct DeviceRow {
  int64_t chunk = 0, rank = 0;
  double serve_cpu_s = 0, serve_dev_s = 0, max_diff = 0;
  double svd_cpu_s = 0, svd_dev_s = 0, kl_dev_patch = 0;
};

struct Arm {
  int64_t rank = 0;          // 0: re-prefill
  rt::Patch patch;           // reuse arms: formed once
  double svd_s = 0;          // one-time factorisation
  std::vector<double> ttft;  // B step + first-token decode, per repetition
  at::Tensor logits;         // the last repetition's first-token logits
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const at::Device device(o.device);
  ORBIT_CHECK(device.is_cpu() || (device.is_cuda() && at::hasCUDA()),
              "--device " << o.device << ": this libtorch has no CUDA (or the device kind is not supported)");
  at::set_num_threads(o.threads);  // Debian's libtorch may start with one thread; use every core unless told
  const std::string path = orbit::bench::model_path_or_generate(o.model, o.cache, o.preset);
  auto start = std::chrono::steady_clock::now();
  const auto model = rt::load_model(path);
  const rt::ModelConfig& c = model->config();
  std::printf(
      "model %s: %s, %lld layers, hidden %lld, %lld/%lld heads, KV width D = %lld, %.0fM parameters; loaded "
      "in %.1f s\n",
      path.c_str(), rt::arch_name(c.arch), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
      (long long)c.num_kv_heads, (long long)c.kv_dim(), model->parameter_count() / 1e6, seconds_since(start));

  std::mt19937_64 rng(1);
  rt::Scenario base;
  if (o.context > 0) base.context.push_back(rt::ChunkInput{random_tokens(rng, o.context, c.vocab_size), {}});
  base.query = random_tokens(rng, 1, c.vocab_size);
  start = std::chrono::steady_clock::now();
  const rt::PastKV context = rt::assemble_context(*model, base.context);
  std::printf("context %lld tokens prefilled once in %.2f s; threads %d, float32, median of %d interleaved runs\n\n",
              (long long)o.context, seconds_since(start), at::get_num_threads(), o.reps);

  nlohmann::json rows = nlohmann::json::array();
  std::vector<DeviceRow> device_rows;
  bool device_warm = false;
  double max_logit_diff = 0;  // re-prefill arm vs. prepare_scenario's exact logits: a sanity check (0 expected)
  for (int64_t r : o.ranks) {
    if (r > c.kv_dim())
      std::printf("note: rank %lld is above D = %lld and runs as rank min(n, D)\n", (long long)r,
                  (long long)c.kv_dim());
  }
  std::printf("%7s %13s", "chunk", "re-prefill s");
  for (int64_t r : o.ranks)
    std::printf(" %11s %9s %8s %9s", ("r" + std::to_string(r) + " reuse s").c_str(), "speed-up", "bytes/KV", "KL");
  std::printf(" %10s\n", "SVD s");
  for (int64_t n : o.lengths) {
    ORBIT_CHECK(o.context + n + 1 <= c.max_position_embeddings,
                "--lengths: context " << o.context << " + chunk " << n << " + 1 query token is past the model's limit "
                                      << c.max_position_embeddings);
    rt::Scenario s = base;
    s.chunk.tokens = random_tokens(rng, n, c.vocab_size);
    const rt::PreparedScenario prepared = rt::prepare_scenario(*model, s, &context);

    const rt::Content delta = rt::deficit(prepared.exact, prepared.canonical);
    std::vector<Arm> arms(1);  // arms[0]: re-prefill
    for (int64_t r : o.ranks) {
      Arm a;
      a.rank = std::min({r, n, c.kv_dim()});  // a rank above min(n, D) is full rank
      rt::PatchOptions po;
      po.rank_k = po.rank_v = a.rank;
      const auto formed = std::chrono::steady_clock::now();
      a.patch = rt::form_patch(*model, delta, po);
      a.svd_s = seconds_since(formed);
      arms.push_back(std::move(a));
    }
    for (int rep = 0; rep < o.reps; ++rep) {
      for (std::size_t k = 0; k < arms.size(); ++k) {
        Arm& a = arms[(k + static_cast<std::size_t>(rep)) % arms.size()];  // rotate the order per rep
        const auto t0 = std::chrono::steady_clock::now();
        const rt::Content b = a.rank == 0 ? rt::conditioned(*model, prepared.scenario.chunk, prepared.context)
                                          : rt::apply_patch(*model, prepared.canonical, a.patch);
        a.logits = rt::decode_query(prepared, b);
        a.ttft.push_back(seconds_since(t0));
      }
    }
    const double reprefill = median(arms[0].ttft);
    max_logit_diff = std::max(max_logit_diff, (arms[0].logits - prepared.exact_logits).abs().max().item<double>());
    const int64_t kv_bytes = rt::content_bytes(prepared.canonical, 4);
    std::printf("%7lld %13.4f", (long long)n, reprefill);
    nlohmann::json reuse = nlohmann::json::array();
    double svd_s = 0;
    for (std::size_t i = 1; i < arms.size(); ++i) {
      const Arm& a = arms[i];
      const double t = median(a.ttft);
      const double fraction = static_cast<double>(a.patch.bytes(4)) / static_cast<double>(kv_bytes);
      const double kl = rt::mean_kl(prepared.exact_logits, a.logits);
      svd_s = std::max(svd_s, a.svd_s);
      std::printf(" %11.4f %8.1fx %7.1f%% %9.2e", t, reprefill / t, 100.0 * fraction, kl);
      reuse.push_back({{"rank", a.rank},
                       {"ttft_s", t},
                       {"runs_s", a.ttft},
                       {"speedup_vs_reprefill", reprefill / t},
                       {"patch_bytes", a.patch.bytes(4)},
                       {"patch_fraction_of_kv", fraction},
                       {"forming_svd_s", a.svd_s},
                       {"first_token_kl", kl}});
    }
    std::printf(" %10.3f\n", svd_s);
    std::fflush(stdout);
    if (!device.is_cpu()) {
      const at::Tensor positions = at::arange(prepared.context_length, prepared.context_length + n, at::kLong);
      const rt::Content canonical_dev = content_to(prepared.canonical, device);
      const rt::Content delta_dev = content_to(delta, device);
      for (std::size_t i = 1; i < arms.size(); ++i) {
        const Arm& a = arms[i];
        DeviceRow row;
        row.chunk = n;
        row.rank = a.rank;
        row.svd_cpu_s = a.svd_s;
        const rt::Patch patch_dev = patch_to(a.patch, device);
        std::vector<double> cpu_runs, dev_runs;
        std::vector<at::Tensor> cpu_out = serve(c, prepared.canonical, a.patch, positions);
        std::vector<at::Tensor> dev_out = serve(c, canonical_dev, patch_dev, positions);  // warm-up
        for (int rep = 0; rep < o.reps; ++rep) {
          auto t0 = std::chrono::steady_clock::now();
          cpu_out = serve(c, prepared.canonical, a.patch, positions);
          cpu_runs.push_back(seconds_since(t0));
          t0 = std::chrono::steady_clock::now();
          dev_out = serve(c, canonical_dev, patch_dev, positions);
          dev_runs.push_back(seconds_since(t0));
        }
        row.serve_cpu_s = median(cpu_runs);
        row.serve_dev_s = median(dev_runs);
        for (std::size_t j = 0; j < cpu_out.size(); ++j) {
          row.max_diff = std::max(row.max_diff, (dev_out[j].cpu() - cpu_out[j]).abs().max().item<double>());
        }
        rt::PatchOptions po;
        po.rank_k = po.rank_v = a.rank;
        if (!device_warm) {  // the solver's handle and workspace are created once per thread
          (void)rt::form_patch(*model, delta_dev, po);
          device_warm = true;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const rt::Patch formed = rt::form_patch(*model, delta_dev, po);
        row.svd_dev_s = seconds_since(t0);
        const rt::Content b = rt::apply_patch(*model, prepared.canonical, patch_to(formed, at::kCPU));
        row.kl_dev_patch = rt::mean_kl(prepared.exact_logits, rt::decode_query(prepared, b));
        device_rows.push_back(row);
      }
    }
    rows.push_back({{"chunk", n},
                    {"kv_bytes", kv_bytes},
                    {"reprefill_ttft_s", reprefill},
                    {"reprefill_runs_s", arms[0].ttft},
                    {"conditioned_prefill_s", prepared.exact_seconds},
                    {"reuse", reuse}});
  }
  std::printf(
      "\nspeed-up = re-prefill TTFT / reuse TTFT (same run, same inputs); bytes/KV = rank-m factors (float32) "
      "over B's K+V bytes;\nKL = first-token KL(re-prefill || reuse) in nats; SVD s = one-time factorisation "
      "beyond the forming forward.\n"
      "re-prefill arm vs. the prepared exact logits: max |diff| = %.3g\n",
      max_logit_diff);
  nlohmann::json device_json = nlohmann::json::array();
  if (!device.is_cpu()) {
    std::printf("\nreuse operator on %s vs. CPU (same chunks and patches; median of %d after a warm-up):\n",
                o.device.c_str(), o.reps);
    std::printf("%7s %5s %12s %12s %9s %10s %10s %10s %9s %10s\n", "chunk", "rank", "serve CPU s", "serve dev s",
                "speed-up", "max |diff|", "SVD CPU s", "SVD dev s", "speed-up", "KL devSVD");
    for (const DeviceRow& r : device_rows) {
      std::printf("%7lld %5lld %12.5f %12.5f %8.1fx %10.2e %10.4f %10.4f %8.1fx %10.2e\n", (long long)r.chunk,
                  (long long)r.rank, r.serve_cpu_s, r.serve_dev_s, r.serve_cpu_s / r.serve_dev_s, r.max_diff,
                  r.svd_cpu_s, r.svd_dev_s, r.svd_cpu_s / r.svd_dev_s, r.kl_dev_patch);
      device_json.push_back({{"chunk", r.chunk},
                             {"rank", r.rank},
                             {"serve_cpu_s", r.serve_cpu_s},
                             {"serve_device_s", r.serve_dev_s},
                             {"serve_max_abs_diff", r.max_diff},
                             {"svd_cpu_s", r.svd_cpu_s},
                             {"svd_device_s", r.svd_dev_s},
                             {"first_token_kl_device_patch", r.kl_dev_patch}});
    }
    std::printf(
        "serve = ops::patch_apply over every layer (K patched + relocated, V patched), inputs resident on the "
        "device;\nSVD = form_patch (exact): LAPACK float64 on CPU, cuSOLVER gesvdj float32 on the device; KL devSVD "
        "= first-token KL(exact || reuse) with the device-formed patch.\n");
  }
  const nlohmann::json report = {{"benchmark", "reuse_ttft"},
                                 {"model", path},
                                 {"preset", o.model.empty() ? o.preset : ""},
                                 {"parameters", model->parameter_count()},
                                 {"threads", at::get_num_threads()},
                                 {"dtype", "float32"},
                                 {"context_tokens", o.context},
                                 {"query_tokens", 1},
                                 {"reps", o.reps},
                                 {"max_reprefill_logit_diff", max_logit_diff},
                                 {"device", o.device},
                                 {"device_operator", device_json},
                                 {"results", rows}};
  std::ofstream(o.json) << report.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
} catch (const orbit::Error& e) {
  std::fprintf(stderr, "bench_reuse: error: %s\n", e.what());
  return 1;
}
