// bench_shared: N windows holding the same chunks, with shared canonicals (each window's instance reads the
// chunk's canonical pages in place and adds its own patch factors) against private patched copies (a copy
// per placement, EngineOptions::shared_canonicals = false), side by side in one run. Not a test: the bytes
// are the pool's own counters (EngineStats), the times depend on the machine and its load.
//
// Each window is a distinct leading turn (8 tokens) and the --chunks chunks of --chunk-tokens tokens in an
// order of its own, so every placement's context, and so its patch, differs. The windows are built once
// under `patch:<rank>:noreuse` (first sight: prefills, the patches formed in the background), closed, and
// built again from the stored patches: the state measured.
//
//   bytes    pool bytes used (live pages x page bytes) + the patch factors the placements hold (on the
//            engine's device: in --dtype where it is 16-bit, else float32), shared against private; the
//            ratio private / shared
//   decode   every window generates --decode tokens greedily after a --query-token query, one window after
//            another (Window::generate): tokens per second, fastest of --reps, the two engines interleaved
//   logits   the largest difference between the two engines' query logits over every window
//
// Models: a generated one with the KV width of Qwen2.5-7B and Llama-3.2-1B (8 kv heads x 64 = 512 per layer;
// 2 layers, hidden 512, random weights, cached in --cache) and the bundled stories260K (kv width 32, where
// a rank-16 patch is as large as the chunk's KV: the ratio there shows where sharing stops paying).
//
// On --device cuda the shared arm's reads go through the paged kernel, which adds each placement's factors
// to the rows as it reads them.
//
//   bench_shared [--windows 8] [--chunks 4] [--chunk-tokens 256] [--rank 16] [--decode 32] [--reps 3]
//                [--threads 1] [--device cpu] [--dtype float32] [--models DIR] [--cache DIR] [--json PATH]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/policy.h"
#include "orbit/runtime/generator.h"
#include "orbit/window.h"

namespace {

using namespace orbit;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t windows = 8;
  int64_t chunks = 4;
  int64_t chunk_tokens = 256;
  int64_t rank = 16;
  int64_t decode = 32;
  int64_t query = 4;
  int reps = 3;
  int threads = 1;
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string models = ORBIT_MODELS_DIR;
  std::string cache = "bench_models";
  std::string json = "bench_shared.json";
};

Options parse(int argc, char** argv) {
  const orbit::cli::Args a(
      "bench_shared",
      {{"--windows", "--chunks", "--chunk-tokens", "--rank", "--decode", "--reps", "--threads", "--device", "--dtype",
        "--models", "--cache", "--json"},
       {},
       "usage: bench_shared [--windows 8] [--chunks 4] [--chunk-tokens 256] [--rank 16] [--decode 32] [--reps 3]\n"
       "                    [--threads 1] [--device cpu] [--dtype float32] [--models DIR] [--cache DIR]\n"
       "                    [--json PATH]\n"
       "  N windows of the same chunks: shared canonical pages + patch factors against patched copies.\n"
       "  --windows N       windows, each with its own leading turn and chunk order\n"
       "  --chunks N        chunks every window holds\n"
       "  --chunk-tokens N  tokens per chunk\n"
       "  --rank M          patch rank (policy patch:M:noreuse)\n"
       "  --decode N        tokens each window generates in the decode comparison\n"
       "  --reps N          decode runs per engine (the fastest is reported)\n"
       "  --threads N       intra-op threads (default 1)\n"
       "  --device D        where both engines run: cpu, cuda, cuda:N (EngineOptions::device)\n"
       "  --dtype T         float32, bfloat16 or float16 (EngineOptions::dtype)\n"
       "  --models DIR      where stories260K/ is\n"
       "  --cache DIR       where the generated model is kept (made once)\n"
       "  --json PATH       where the JSON goes (default bench_shared.json)\n"},
      argc, argv, 1);
  Options o;
  o.windows = a.get_int("--windows", o.windows, 1);
  o.chunks = a.get_int("--chunks", o.chunks, 1);
  o.chunk_tokens = a.get_int("--chunk-tokens", o.chunk_tokens, 1);
  o.rank = a.get_int("--rank", o.rank, 1);
  o.decode = a.get_int("--decode", o.decode, 1);
  o.reps = static_cast<int>(a.get_int("--reps", o.reps, 1));
  o.threads = static_cast<int>(a.get_int("--threads", o.threads, 1));
  o.device = a.get_or("--device", o.device);
  o.dtype = a.get_or("--dtype", o.dtype);
  o.models = a.get_or("--models", o.models);
  o.cache = a.get_or("--cache", o.cache);
  o.json = a.get_or("--json", o.json);
  return o;
}

// 2 layers, hidden 512, 8 heads and 8 kv heads of 64: the KV width per layer (512) of Qwen2.5-7B (4 x 128)
// and Llama-3.2-1B (8 x 64), which is what sets a patch's size against its chunk's.
std::string generated_model(const std::string& cache) {
  const std::string path = (std::filesystem::path(cache) / "llama-kv512-2l").string();
  if (!std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    std::fprintf(stderr, "generating a 2-layer random llama of kv width 512 in %s (once)...\n", path.c_str());
    runtime::GeneratorOptions g;
    g.config = runtime::generator_preset("tiny-llama");
    g.config.hidden_size = 512;
    g.config.intermediate_size = 1024;
    g.config.num_heads = 8;
    g.config.num_kv_heads = 8;
    g.config.head_dim = 64;
    g.config.rope.head_dim = 64;
    g.config.rope.rotary_dim = 64;
    g.config.max_position_embeddings = 4096;
    g.config.rope.max_position_embeddings = 4096;
    g.overwrite = true;
    runtime::generate_model(g, path);
  }
  return path;
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int64_t> d(3, vocab - 1);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(d(rng));
  return out;
}

// What both engines are given.
struct Setup {
  std::vector<std::vector<int64_t>> chunks, turns;
  std::vector<std::vector<int64_t>> orders;
  std::vector<int64_t> query;
};

Setup make_setup(const Options& o, int64_t chunk_tokens, int64_t vocab) {
  std::mt19937_64 rng(5);
  Setup s;
  for (int64_t c = 0; c < o.chunks; ++c) s.chunks.push_back(random_tokens(rng, chunk_tokens, vocab));
  std::vector<int64_t> order(static_cast<std::size_t>(o.chunks));
  for (int64_t c = 0; c < o.chunks; ++c) order[static_cast<std::size_t>(c)] = c;
  for (int64_t w = 0; w < o.windows; ++w) {
    s.turns.push_back(random_tokens(rng, 8, vocab));
    s.orders.push_back(order);
    std::shuffle(order.begin(), order.end(), rng);
  }
  s.query = random_tokens(rng, o.query, vocab);
  return s;
}

struct Arm {
  std::shared_ptr<Engine> engine;
  std::vector<std::unique_ptr<Window>> windows;
  EngineStats stats;
  double decode_seconds = 1e30;
  int64_t bytes() const { return stats.pool_bytes_used + stats.pool_patch_bytes; }
};

Arm build(const std::string& model, bool shared, const Setup& s, const Options& o) {
  EngineOptions eo;
  eo.model = model;
  eo.device = o.device;
  eo.dtype = o.dtype;
  eo.pool_bytes = int64_t{1} << 30;
  eo.background = BackgroundMode::kDeferred;
  eo.shared_canonicals = shared;
  Arm arm;
  arm.engine = Engine::open(eo);
  std::vector<ChunkRef> refs;
  for (const auto& c : s.chunks) refs.push_back(arm.engine->add_tokens(c));
  WindowOptions wo;
  wo.policy = parse_policy("patch:" + std::to_string(o.rank) + ":noreuse");
  auto make = [&](std::size_t w) {
    auto window = std::make_unique<Window>(arm.engine->new_window(wo));
    window->add_turn(s.turns[w]);
    for (int64_t c : s.orders[w]) window->admit(refs[static_cast<std::size_t>(c)]);
    return window;
  };
  for (std::size_t w = 0; w < s.turns.size(); ++w) make(w);  // first sights: the patches are formed
  arm.engine->run_background();
  for (std::size_t w = 0; w < s.turns.size(); ++w) arm.windows.push_back(make(w));
  arm.stats = arm.engine->stats();
  return arm;
}

double decode_once(Arm& arm, const Setup& s, const Options& o) {
  GenerateOptions g;
  g.max_tokens = o.decode;
  g.ignore_eos = true;  // every window decodes o.decode tokens
  const auto t0 = Clock::now();
  for (const auto& w : arm.windows) w->generate(s.query, g);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double max_logit_difference(const Arm& a, const Arm& b, const Setup& s) {
  double worst = 0;
  for (std::size_t w = 0; w < a.windows.size(); ++w) {
    const std::vector<float> x = a.windows[w]->logits(s.query, true).values;
    const std::vector<float> y = b.windows[w]->logits(s.query, true).values;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])));
  }
  return worst;
}

nlohmann::json run_model(const std::string& name, const std::string& path, const Options& o) {
  EngineOptions probe;
  probe.model = path;
  const ModelInfo info = Engine::open(probe)->model_info();
  // Chunks shortened where the model's positions could not hold them (stories260K: 512).
  const int64_t room = (info.max_positions - 8 - o.query - o.decode) / o.chunks;
  const int64_t chunk_tokens = std::min(o.chunk_tokens, room);
  ORBIT_CHECK(chunk_tokens >= 1, "bench_shared: " << name << " has " << info.max_positions << " positions, too few for "
                                                  << o.chunks << " chunks and --decode " << o.decode);
  const Setup s = make_setup(o, chunk_tokens, info.vocab_size);
  Arm shared = build(path, true, s, o);
  Arm copies = build(path, false, s, o);
  for (int r = 0; r < o.reps; ++r) {  // interleaved, each engine going first in turn
    Arm& first = r % 2 == 0 ? shared : copies;
    Arm& second = r % 2 == 0 ? copies : shared;
    first.decode_seconds = std::min(first.decode_seconds, decode_once(first, s, o));
    second.decode_seconds = std::min(second.decode_seconds, decode_once(second, s, o));
  }
  const double diff = max_logit_difference(shared, copies, s);
  const double tokens = static_cast<double>(o.windows * o.decode);
  const double mib = 1.0 / (1 << 20);
  const EngineStats& a = shared.stats;
  const EngineStats& b = copies.stats;
  std::printf("%s: %lld windows x %lld chunks of %lld tokens, rank %lld\n", name.c_str(),
              static_cast<long long>(o.windows), static_cast<long long>(o.chunks), static_cast<long long>(chunk_tokens),
              static_cast<long long>(o.rank));
  std::printf("  private copies  pool %8.2f MiB (%lld live pages)                        total %8.2f MiB\n",
              b.pool_bytes_used * mib, static_cast<long long>(b.pool_pages - b.pool_free_pages), copies.bytes() * mib);
  std::printf(
      "  shared          pool %8.2f MiB (%lld live pages, %lld canonical in %lld sets) + patches %8.2f MiB "
      "(%lld)  total %8.2f MiB\n",
      a.pool_bytes_used * mib, static_cast<long long>(a.pool_pages - a.pool_free_pages),
      static_cast<long long>(a.pool_canonical_pages), static_cast<long long>(a.pool_canonical_sets),
      a.pool_patch_bytes * mib, static_cast<long long>(a.pool_patches), shared.bytes() * mib);
  std::printf("  bytes: %.2fx fewer with shared canonicals (pool pages alone %.2fx)\n",
              static_cast<double>(copies.bytes()) / static_cast<double>(shared.bytes()),
              static_cast<double>(b.pool_bytes_used) / static_cast<double>(a.pool_bytes_used));
  std::printf(
      "  decode (%lld tokens per window, one window after another): shared %.0f tok/s, private %.0f tok/s "
      "(shared/private %.2fx)\n",
      static_cast<long long>(o.decode), tokens / shared.decode_seconds, tokens / copies.decode_seconds,
      copies.decode_seconds / shared.decode_seconds);
  std::printf("  largest query-logit difference shared vs private: %.3g\n", diff);
  std::fflush(stdout);
  return {{"model", name},
          {"device", shared.engine->model_info().device},
          {"dtype", o.dtype},
          {"windows", o.windows},
          {"chunks", o.chunks},
          {"chunk_tokens", chunk_tokens},
          {"rank", o.rank},
          {"private_pool_bytes", b.pool_bytes_used},
          {"shared_pool_bytes", a.pool_bytes_used},
          {"shared_patch_bytes", a.pool_patch_bytes},
          {"shared_canonical_pages", a.pool_canonical_pages},
          {"shared_canonical_sets", a.pool_canonical_sets},
          {"shared_placements", a.pool_placements},
          {"bytes_ratio", static_cast<double>(copies.bytes()) / static_cast<double>(shared.bytes())},
          {"shared_decode_tokens_per_s", tokens / shared.decode_seconds},
          {"private_decode_tokens_per_s", tokens / copies.decode_seconds},
          {"max_logit_difference", diff}};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  std::printf("bench_shared: %s %s, %d thread(s), decode fastest of %d\n", o.device.c_str(), o.dtype.c_str(), o.threads,
              o.reps);
  nlohmann::json out = nlohmann::json::array();
  out.push_back(run_model("llama-kv512 (generated)", generated_model(o.cache), o));
  out.push_back(run_model("stories260K", o.models + "/stories260K/stories260K.bin", o));
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_shared: %s\n", e.what());
  return 1;
}
