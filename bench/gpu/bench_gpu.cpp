// bench_gpu: orbit's runtime on a GPU against the ways a user would do the same work today, all arms
// measured side by side in one run (not a test; numbers go to JSON and bench/REPORT-gpu.md).
//
//   bench_gpu [--preset qwen2.5-7b] [--layers N] [--windows 8192,32768] [--chunks 512,2048,8192]
//             [--query 16] [--reps 3] [--device cuda] [--dtype bfloat16] [--device-name NAME]
//             [--sections ttft,slide,prefill,bytes,reloc,recall] [--json PATH]
//
// Random weights of the preset's shape are made directly on the device in the dtype (no file): the
// arms time compute and memory traffic, which do not depend on the values. KV content and patch factors
// are random too. Sections:
//   ttft     (a) time to the first query token after a B-token chunk is placed in the middle of a
//            W-token window: re-prefill of the window + query; a prefix cache broken at the chunk
//            (recompute chunk, suffix and query over the cached prefix); orbit with every chunk's
//            canonical already in pool pages and the chunk's patch stored (the query's forward over
//            the paged past: kernel reads pages in place, relocates and adds patch rows); and orbit
//            over a per-window patched copy (contiguous past, rotated on the fly, PyTorch SDPA).
//   prefill  (c) prefill tokens/s at each W, and decode ms/token over a W-token past: orbit vs a
//            plain PyTorch implementation of the same model (cos/sin-cached RoPE, pre-rotated
//            contiguous KV cache, scaled_dot_product_attention with GQA) in the same process.
//   bytes    (d) device bytes of N = 1, 4, 8 windows (and forks) holding the same K chunks: shared
//            canonical pages + per-window patch factors vs per-window patched copies.
//   slide    (b) a W-token window slides: its first B tokens are evicted and a query follows. The prefix
//            cache recomputes the W - B survivors and the query; orbit keeps the survivors' pages, each
//            2,048-token chunk with its stored patch, relocated to their new positions on the fly.
//   reloc    (e) relocation + patch apply into pool pages (ops::patch_apply_to_pages) and the paged
//            decode attention's K/V reads, as a fraction of device-to-device copy bandwidth.
//   recall   (f) a 2,048-token chunk evicted to host (pinned) memory or to a file is recalled and a query
//            follows, against re-prefilling the chunk: copies and disk reads all done before the query's
//            forward, or streamed layer by layer on a copy stream (ForwardOptions::before_layer makes the
//            compute stream wait for each layer's copy only).
// Each arm's timed runs sit in an NVTX range named after it (Nsight Compute can filter on them).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "args.h"
#include "bench_gpu_recall.h"
#include "bench_gpu_util.h"
#include "ops/cuda_dispatch.h"
#include "ops/paged_attention_op.h"
#include "ops/patch_apply_op.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

#if ORBIT_OPS_HAVE_CUDA
#include <cuda_bf16.h>

#include "kernels/cuda/patch_apply.cuh"
#endif
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
#define BENCH_HAVE_SDPA 1
#else
#define BENCH_HAVE_SDPA 0
#endif

namespace rt = orbit::runtime;
using nlohmann::json;
using namespace orbit::bench_gpu;

namespace {

std::unique_ptr<rt::Model> random_model(rt::ModelConfig c, const rt::ComputeTarget& target) {
  rt::ModelWeights w;
  rt::prepare_weights(w, c);
  const auto opts = at::TensorOptions().device(target.device).dtype(target.dtype);
  for (const rt::WeightSpec& spec : rt::weight_specs(c)) {
    rt::weight_slot(w, c, spec.name) = spec.is_norm ? at::ones(spec.shape, opts) : at::randn(spec.shape, opts) * 0.02;
  }
  return std::make_unique<rt::Model>(std::move(c), std::move(w), "random weights");
}

std::shared_ptr<rt::Patch> random_patch(const rt::Model& m, int64_t n, int64_t rank) {
  const rt::ModelConfig& c = m.config();
  auto p = std::make_shared<rt::Patch>();
  p->model_fingerprint = m.fingerprint();
  p->length = n;
  p->num_kv_heads = c.num_kv_heads;
  p->head_dim = c.head_dim;
  const auto opts = at::TensorOptions().device(m.device()).dtype(at::kFloat);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    p->k.push_back({at::randn({n, rank}, opts) * 0.1, at::randn({rank, c.content_k_shape().width()}, opts) * 0.1});
    p->v.push_back({at::randn({n, rank}, opts) * 0.1, at::randn({rank, c.content_v_shape().width()}, opts) * 0.1});
  }
  return p;
}

// A KV pool holding `tokens` tokens of content, one sequence written in order; slots [tokens].
struct FilledPool {
  std::unique_ptr<rt::KVPool> pool;
  at::Tensor slots;
};

FilledPool fill_pool(const rt::Model& m, int64_t tokens, int64_t page_size) {
  const rt::ModelConfig& c = m.config();
  rt::KVPoolOptions o;
  o.num_layers = c.num_layers;
  o.page_size = page_size;
  o.widths = c.content_widths();
  o.dtype = m.dtype();
  o.device = rt::device_name(m.device());
  o.num_pages = (tokens + page_size - 1) / page_size + 1;
  FilledPool f;
  f.pool = std::make_unique<rt::KVPool>(o);
  for (int64_t kind = 0; kind < 2; ++kind) f.pool->storage(kind).normal_();
  // Pages in a shuffled order, as a long-lived pool hands them out.
  const at::Tensor pages = at::randperm(o.num_pages - 1, at::kLong);
  const at::Tensor t = at::arange(tokens, at::kLong);
  f.slots = pages.index_select(0, t.div(page_size, "floor")) * page_size + t.remainder(page_size);
  return f;
}

// ---- the PyTorch peer: the same model written plainly, pre-rotated KV cache, SDPA ----------------------
#if BENCH_HAVE_SDPA
struct Peer {
  const rt::Model& m;
  at::Tensor cos, sin;  // [max_pos, d/2] float32 on device

  Peer(const rt::Model& model, int64_t max_pos) : m(model) {
    const at::Tensor inv = rt::rope_inv_freq(m.config().rope, 0).to(m.device(), at::kFloat);
    const at::Tensor ang = at::arange(max_pos, inv.options()).unsqueeze(1) * inv.unsqueeze(0);
    cos = ang.cos();
    sin = ang.sin();
  }
  at::Tensor rotate(const at::Tensor& x, int64_t start) const {  // x [1, H, T, d] half-split
    const int64_t T = x.size(2), half = x.size(3) / 2;
    const at::Tensor c = cos.narrow(0, start, T).repeat({1, 2}).to(x.scalar_type());
    const at::Tensor s = sin.narrow(0, start, T).repeat({1, 2}).to(x.scalar_type());
    const at::Tensor rot = at::cat({-x.narrow(3, half, half), x.narrow(3, 0, half)}, 3);
    return x * c + rot * s;
  }
  static at::Tensor norm(const at::Tensor& x, const at::Tensor& g, double eps) {
    const at::Tensor xf = x.to(at::kFloat);
    return g * (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
  }
  // Forward of T tokens at positions start.. over `cache` (per layer pre-rotated K and V [1, H_kv, S, d]
  // holding `start` tokens, with room for T more); writes the new K/V into the cache. Last-token logits.
  at::Tensor forward(const std::vector<int64_t>& toks, int64_t start,
                     std::vector<std::pair<at::Tensor, at::Tensor>>& cache) const {
    const rt::ModelConfig& c = m.config();
    const rt::ModelWeights& w = m.weights();
    const int64_t T = static_cast<int64_t>(toks.size());
    at::Tensor x = w.embed.index_select(0, at::tensor(at::ArrayRef<int64_t>(toks), at::kLong).to(m.device()));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const rt::LayerWeights& lw = w.layers[static_cast<size_t>(l)];
      const at::Tensor h = norm(x, lw.attn_norm, c.rms_norm_eps);
      auto lin = [](const at::Tensor& a, const at::Tensor& W, const at::Tensor& b) {
        return at::linear(a, W, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
      };
      const at::Tensor q =
          rotate(lin(h, lw.wq, lw.bq).view({T, c.num_heads, c.head_dim}).transpose(0, 1).unsqueeze(0), start);
      const at::Tensor k =
          rotate(lin(h, lw.wk, lw.bk).view({T, c.num_kv_heads, c.head_dim}).transpose(0, 1).unsqueeze(0), start);
      const at::Tensor v = lin(h, lw.wv, lw.bv).view({T, c.num_kv_heads, c.head_dim}).transpose(0, 1).unsqueeze(0);
      auto& [K, V] = cache[static_cast<size_t>(l)];
      K.narrow(2, start, T).copy_(k);
      V.narrow(2, start, T).copy_(v);
      const at::Tensor Ks = K.narrow(2, 0, start + T), Vs = V.narrow(2, 0, start + T);
      at::Tensor o;
      if (start == 0) {
        o = at::scaled_dot_product_attention(q, Ks, Vs, c10::nullopt, 0.0, true, c10::nullopt, true);
      } else {
        TORCH_CHECK(T == 1, "peer: decode steps take one token");
        o = at::scaled_dot_product_attention(q, Ks, Vs, c10::nullopt, 0.0, false, c10::nullopt, true);
      }
      x = x + at::linear(o.squeeze(0).transpose(0, 1).reshape({T, c.num_heads * c.head_dim}), lw.wo);
      const at::Tensor g = norm(x, lw.ffn_norm, c.rms_norm_eps);
      x = x + at::linear(at::silu(at::linear(g, lw.w_gate)) * at::linear(g, lw.w_up), lw.w_down);
    }
    return at::linear(norm(x.narrow(0, T - 1, 1), w.final_norm, c.rms_norm_eps), w.lm_head).to(at::kFloat);
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> cache(int64_t tokens) const {
    const rt::ModelConfig& c = m.config();
    std::vector<std::pair<at::Tensor, at::Tensor>> out;
    const auto opts = at::TensorOptions().device(m.device()).dtype(m.dtype());
    for (int64_t l = 0; l < c.num_layers; ++l) {
      out.emplace_back(at::randn({1, c.num_kv_heads, tokens, c.head_dim}, opts),
                       at::randn({1, c.num_kv_heads, tokens, c.head_dim}, opts));
    }
    return out;
  }
};
#endif

}  // namespace

int main(int argc, char** argv) {
  try {
    const orbit::cli::Args a(
        "bench_gpu",
        {{"--preset", "--layers", "--windows", "--chunks", "--query", "--reps", "--device", "--dtype", "--device-name",
          "--sections", "--json", "--rank", "--scratch"},
         {},
         "usage: bench_gpu [--preset qwen2.5-7b] [--layers N] [--windows 8192,32768] [--chunks 512,2048,8192]\n"
         "                 [--query 16] [--reps 3] [--rank 16] [--device cuda] [--dtype bfloat16]\n"
         "                 [--sections ttft,slide,prefill,bytes,reloc,recall] [--device-name NAME] [--json PATH]\n"
         "                 [--scratch DIR]\n"
         "  The GPU runtime side by side with its baselines, random weights of --preset's shape: TTFT after\n"
         "  placing a chunk (orbit vs re-prefill vs a prefix cache), prefill/decode vs PyTorch SDPA, device\n"
         "  bytes of windows and forks sharing chunks, relocation + patch apply vs copy bandwidth, a window's\n"
         "  slide vs a prefix cache, recall of a stored chunk from host or disk vs re-prefill.\n"
         "  --layers N        cut the preset's depth;  --windows / --chunks  token counts W and B\n"
         "  --query N         query tokens after the chunk;  --reps N  repetitions;  --rank M  patch rank\n"
         "  --device-name S   the device name recorded in the JSON;  --json PATH  (default bench_gpu.json)\n"
         "  --scratch DIR     where the recall section writes its chunk file (default /tmp)\n"},
        argc, argv, 1);
    c10::InferenceMode guard;
    const std::string preset = a.get_or("--preset", "qwen2.5-7b");
    rt::ModelConfig config = rt::generator_preset(preset);
    const int64_t full_layers = config.num_layers;
    config.num_layers = a.get_int("--layers", config.num_layers, 1);
    const std::vector<int64_t> windows = orbit::cli::parse_int_list(a.get_or("--windows", "8192,32768"), "--windows");
    const std::vector<int64_t> chunks = orbit::cli::parse_int_list(a.get_or("--chunks", "512,2048,8192"), "--chunks");
    const int64_t q = a.get_int("--query", 16, 1);
    const int reps = static_cast<int>(a.get_int("--reps", 3, 1));
    const int64_t rank = a.get_int("--rank", 16, 1);
    const std::string sections = a.get_or("--sections", "ttft,slide,prefill,bytes,reloc,recall");
    const rt::ComputeTarget target =
        rt::parse_compute_target(a.get_or("--device", "cuda"), a.get_or("--dtype", "bfloat16"));
    const c10::Device dev = target.device;
    int64_t max_w = 0;
    for (int64_t w : windows) max_w = std::max(max_w, w);
    config.max_position_embeddings = std::max<int64_t>(config.max_position_embeddings, max_w + 2 * q + 8);
    config.rope.max_position_embeddings = config.max_position_embeddings;

    const auto t0 = std::chrono::steady_clock::now();
    const std::unique_ptr<rt::Model> m = random_model(config, target);
    std::printf("model %s (%lld of %lld layers) %s on %s, %lld parameters, made in %.1f s\n", preset.c_str(),
                (long long)config.num_layers, (long long)full_layers, rt::dtype_name(target.dtype).c_str(),
                rt::device_name(dev).c_str(), (long long)m->parameter_count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    json report = {{"benchmark", "bench_gpu"},
                   {"device", a.get_or("--device-name", rt::device_name(dev))},
                   {"dtype", rt::dtype_name(target.dtype)},
                   {"model", preset},
                   {"layers", config.num_layers},
                   {"full_layers", full_layers},
                   {"query_tokens", q},
                   {"patch_rank", rank},
                   {"reps", reps},
                   {"weights", "random (N(0, 0.02^2), norms 1), made on the device"},
                   {"torch", TORCH_VERSION}};
    std::vector<std::string> argv_list(argv, argv + argc);
    report["command"] = argv_list;
    const int64_t vocab = config.vocab_size;
    const std::vector<int64_t> query = tokens(q, vocab);

    if (sections.find("ttft") != std::string::npos) {
      json rows = json::array();
      for (int64_t W : windows) {
        const std::vector<int64_t> window = tokens(W, vocab);
        std::vector<int64_t> all = window;
        all.insert(all.end(), query.begin(), query.end());
        rt::ForwardOptions last;
        last.logits = rt::LogitsMode::kLast;
        const double reprefill = timed(dev, reps, [&] { (void)m->forward(input_at(all, 0), nullptr, last); });
        // The query alone, no past: the floor any reuse arm pays (weights read once, per-op launches).
        BENCH_RANGE_PUSH("query_alone");
        const double query_only = timed(dev, reps, [&] { (void)m->forward(input_at(query, W), nullptr, last); });
        BENCH_RANGE_POP();
        FilledPool pool = fill_pool(*m, W, 16);
        for (int64_t B : chunks) {
          if (B >= W) continue;
          const int64_t offset = (W - B) / 2;  // the chunk sits in the middle of the window
          // Prefix cache broken at the chunk: the prefix's KV is cached, chunk + suffix + query recomputed.
          rt::PastKV prefix{random_content(*m, offset), at::arange(offset, at::kLong)};
          const std::vector<int64_t> rest(all.begin() + offset, all.end());
          const double prefix_s = timed(dev, reps, [&] { (void)m->forward(input_at(rest, offset), &prefix, last); });
          prefix = {};
          // orbit: pages in place + the chunk's stored patch, relocated on the fly by the kernel.
          const std::shared_ptr<rt::Patch> patch = random_patch(*m, B, rank);
          BENCH_RANGE_PUSH("orbit_paged");
          const double orbit_s = timed(dev, reps, [&] {
            auto paged = std::make_shared<rt::PagedPast>();
            paged->pool = pool.pool.get();
            paged->slots = pool.slots;
            paged->patches.push_back({offset, patch});
            const rt::PastKV past = rt::make_paged_past(std::move(paged), at::arange(W, at::kLong));
            (void)m->forward(input_at(query, W), &past, last);
          });
          BENCH_RANGE_POP();
          // orbit over a per-window patched copy (contiguous past in content form, SDPA).
          double copy_s = 0;
          {
            auto paged = std::make_shared<rt::PagedPast>();
            paged->pool = pool.pool.get();
            paged->slots = pool.slots;
            paged->patches.push_back({offset, patch});
            const rt::PastKV copy = rt::materialize_past(
                m->config(), rt::make_paged_past(paged, at::arange(W, at::kLong)), dev, m->dtype());
            BENCH_RANGE_PUSH("orbit_copy");
            copy_s = timed(dev, reps, [&] { (void)m->forward(input_at(query, W), &copy, last); });
            BENCH_RANGE_POP();
          }
          std::printf(
              "ttft W=%6lld B=%5lld  reprefill %8.2f ms  prefix %8.2f ms  orbit %7.2f ms (paged past)  "
              "%7.2f ms (patched copy)  query alone %6.2f ms  reprefill/orbit %6.1fx  prefix/orbit %6.1fx\n",
              (long long)W, (long long)B, reprefill * 1e3, prefix_s * 1e3, orbit_s * 1e3, copy_s * 1e3,
              query_only * 1e3, reprefill / orbit_s, prefix_s / orbit_s);
          rows.push_back({{"model", preset},
                          {"window_tokens", W},
                          {"chunk_tokens", B},
                          {"chunk_offset", offset},
                          {"reprefill_s", reprefill},
                          {"prefix_s", prefix_s},
                          {"orbit_s", orbit_s},
                          {"orbit_patched_copy_s", copy_s},
                          {"query_only_s", query_only},
                          {"attention_path", m->attention_path(q, true)}});
        }
      }
      report["ttft"] = rows;
    }

    if (sections.find("slide") != std::string::npos) {
      // (b) The window's first B tokens leave; W - B survivors stay, then the query. Survivor chunks of
      // 2,048 tokens carry stored patches (what a kept instance over a changed context is served with).
      json rows = json::array();
      const int64_t W = max_w, piece = 2048;
      FilledPool pool = fill_pool(*m, W, 16);
      for (int64_t B : chunks) {
        if (B >= W) continue;
        const int64_t S = W - B;
        std::vector<int64_t> survivors = tokens(W, vocab);
        survivors.erase(survivors.begin(), survivors.begin() + B);
        survivors.insert(survivors.end(), query.begin(), query.end());
        rt::ForwardOptions last;
        last.logits = rt::LogitsMode::kLast;
        BENCH_RANGE_PUSH("slide_prefix");
        const double prefix_s = timed(dev, reps, [&] { (void)m->forward(input_at(survivors, 0), nullptr, last); });
        BENCH_RANGE_POP();
        auto paged = std::make_shared<rt::PagedPast>();
        paged->pool = pool.pool.get();
        paged->slots = pool.slots.narrow(0, B, S);
        for (int64_t first = 0; first + piece <= S; first += piece)
          paged->patches.push_back({first, random_patch(*m, piece, rank)});
        const rt::PastKV past = rt::make_paged_past(paged, at::arange(S, at::kLong));
        BENCH_RANGE_PUSH("slide_orbit");
        const double orbit_s = timed(dev, reps, [&] { (void)m->forward(input_at(query, S), &past, last); });
        BENCH_RANGE_POP();
        std::printf(
            "slide W=%6lld evict %5lld  prefix cache (recompute %lld + query) %8.2f ms  orbit %7.2f ms  %6.1fx\n",
            (long long)W, (long long)B, (long long)S, prefix_s * 1e3, orbit_s * 1e3, prefix_s / orbit_s);
        rows.push_back({{"window_tokens", W},
                        {"evicted_tokens", B},
                        {"survivor_tokens", S},
                        {"patched_chunks", paged->patches.size()},
                        {"prefix_s", prefix_s},
                        {"orbit_s", orbit_s},
                        {"attention_path", m->attention_path(q, true)}});
      }
      report["slide"] = rows;
    }

    if (sections.find("prefill") != std::string::npos) {
      json rows = json::array();
#if BENCH_HAVE_SDPA
      const Peer peer(*m, max_w + 2 * q + 8);
#endif
      for (int64_t W : windows) {
        const std::vector<int64_t> window = tokens(W, vocab);
        rt::ForwardOptions none;
        none.logits = rt::LogitsMode::kLast;
        const double orbit_prefill = timed(dev, reps, [&] { (void)m->forward(input_at(window, 0), nullptr, none); });
        FilledPool pool = fill_pool(*m, W, 16);
        auto paged = std::make_shared<rt::PagedPast>();
        paged->pool = pool.pool.get();
        paged->slots = pool.slots;
        const rt::PastKV past = rt::make_paged_past(paged, at::arange(W, at::kLong));
        const std::vector<int64_t> one = {query[0]};
        const double orbit_decode = timed(dev, reps * 3, [&] { (void)m->forward(input_at(one, W), &past, none); });
        const rt::PastKV contiguous = rt::materialize_past(m->config(), past, dev, m->dtype());
        const double orbit_decode_copy =
            timed(dev, reps * 3, [&] { (void)m->forward(input_at(one, W), &contiguous, none); });
        json row = {{"window_tokens", W},
                    {"orbit_prefill_s", orbit_prefill},
                    {"orbit_prefill_tok_s", W / orbit_prefill},
                    {"orbit_decode_s", orbit_decode},
                    {"orbit_decode_contiguous_s", orbit_decode_copy}};
#if BENCH_HAVE_SDPA
        {
          auto cache = peer.cache(W + 1);
          const double peer_prefill = timed(dev, reps, [&] { (void)peer.forward(window, 0, cache); });
          const double peer_decode = timed(dev, reps * 3, [&] { (void)peer.forward(one, W, cache); });
          row["sdpa_prefill_s"] = peer_prefill;
          row["sdpa_prefill_tok_s"] = W / peer_prefill;
          row["sdpa_decode_s"] = peer_decode;
          std::printf(
              "W=%6lld prefill orbit %8.0f tok/s  sdpa peer %8.0f tok/s (orbit/peer time %.2fx)  decode orbit "
              "%.2f ms (paged) %.2f ms (contiguous)  sdpa peer %.2f ms (%.2fx)\n",
              (long long)W, W / orbit_prefill, W / peer_prefill, orbit_prefill / peer_prefill, orbit_decode * 1e3,
              orbit_decode_copy * 1e3, peer_decode * 1e3, orbit_decode / peer_decode);
        }
#endif
        rows.push_back(row);
      }
      report["prefill_decode"] = rows;
    }

    if (sections.find("bytes") != std::string::npos) {
      // K chunks of B tokens plus a private turn per window; patches float32 rank `rank` per layer and tensor.
      const rt::ModelConfig& c = m->config();
      const int64_t K = 4, B = 2048, turn = 256, page = 16;
      const int64_t page_bytes = (c.content_k_shape().width() + c.content_v_shape().width()) * page * c.num_layers *
                                 static_cast<int64_t>(c10::elementSize(m->dtype()));
      const int64_t chunk_pages = (B + page - 1) / page, turn_pages = (turn + page - 1) / page;
      const int64_t patch_bytes =
          rank * (B + c.content_k_shape().width() + B + c.content_v_shape().width()) * 4 * c.num_layers;
      json rows = json::array();
      for (int64_t N : {1, 4, 8}) {
        const int64_t copies = N * (K * chunk_pages + turn_pages) * page_bytes;
        const int64_t shared = K * chunk_pages * page_bytes + N * (K * patch_bytes + turn_pages * page_bytes);
        const int64_t forks = (K * chunk_pages + turn_pages) * page_bytes + (N - 1) * turn_pages * page_bytes;
        std::printf(
            "bytes N=%lld  per-window copies %.3f GB  shared canonical + patches %.3f GB (%.2fx fewer)  forks "
            "sharing pages %.3f GB (%.2fx fewer)\n",
            (long long)N, copies / 1e9, shared / 1e9, double(copies) / shared, forks / 1e9, double(copies) / forks);
        rows.push_back({{"windows", N},
                        {"chunks", K},
                        {"chunk_tokens", B},
                        {"turn_tokens", turn},
                        {"copies_bytes", copies},
                        {"shared_bytes", shared},
                        {"forks_bytes", forks}});
      }
      report["device_bytes"] = rows;
      report["device_bytes_note"] =
          "page counts of the pool layout (whole pages of 16 tokens, all layers, K and V) and float32 patch factors";
    }

    if (sections.find("reloc") != std::string::npos) {
      const rt::ModelConfig& c = m->config();
      const int64_t n = 65536, D = c.content_k_shape().width();
      FilledPool pool = fill_pool(*m, n, 16);
      const auto opts = at::TensorOptions().device(dev).dtype(m->dtype());
      const at::Tensor canonical = at::randn({n, D}, opts);
      const at::Tensor u = at::randn({n, rank}, opts.dtype(at::kFloat)),
                       vt = at::randn({rank, D}, opts.dtype(at::kFloat));
      std::vector<rt::PageId> got;
      (void)pool.pool->allocate(n / 16, got);
      rt::ops::PageTarget target;
      target.kind = 0;
      target.layer = 0;
      target.block_table = got;
      rt::ops::PatchApplyInputs in;
      in.canonical = canonical;
      in.u = u;
      in.vt = vt;
      in.rotate = true;
      in.rope = c.rope;
      in.positions = at::arange(1000, 1000 + n, at::kLong);
      in.tables = rt::ops::patch_rope_tables(c.rope, in.positions, m->dtype(), dev);
      const double apply_s = timed_loop(dev, reps, 20, [&] { rt::ops::patch_apply_to_pages(*pool.pool, target, in); });
      rt::ops::PatchApplyInputs plain = in;
      plain.u = at::Tensor();
      plain.vt = at::Tensor();
      const double relocate_s =
          timed_loop(dev, reps, 20, [&] { rt::ops::patch_apply_to_pages(*pool.pool, target, plain); });
      at::Tensor dst = at::empty_like(canonical);
      const double copy_s = timed_loop(dev, reps, 20, [&] { dst.copy_(canonical); });
      // The kernel alone (the op above also validates the block table and uploads it on every call).
      double kernel_s = 0, kernel_plain_s = 0;
#if ORBIT_OPS_HAVE_CUDA
      if (dev.is_cuda() && m->dtype() == at::kBFloat16) {
        namespace kc = orbit::kernels::cuda;
        const at::Tensor table = at::tensor(at::ArrayRef<int32_t>(got), at::kInt).to(dev);
        const at::Tensor layer0 = pool.pool->storage(0).select(0, 0);
        kc::PatchDims dims;
        dims.tokens = n;
        dims.width = D;
        dims.rank = rank;
        dims.rotate = true;
        dims.head_dim = c.head_dim;
        dims.rotary_dim = c.rope.rotary_dim;
        dims.interleaved = c.rope.layout == rt::RopeLayout::kInterleaved;
        kc::PatchSource<__nv_bfloat16> src;
        src.canonical = reinterpret_cast<const __nv_bfloat16*>(canonical.data_ptr<at::BFloat16>());
        src.u = u.data_ptr<float>();
        src.vt = vt.data_ptr<float>();
        src.cos = in.tables.cos.data_ptr<float>();
        src.sin = in.tables.sin.data_ptr<float>();
        kc::PatchTarget<__nv_bfloat16> tgt;
        tgt.base = reinterpret_cast<__nv_bfloat16*>(layer0.data_ptr<at::BFloat16>());
        tgt.block_table = table.data_ptr<int32_t>();
        tgt.page_size = 16;
        const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
        kernel_s = timed_loop(dev, reps, 50,
                              [&] { (void)kc::patch_apply<__nv_bfloat16, __nv_bfloat16>(src, tgt, dims, stream); });
        dims.rank = 0;
        kernel_plain_s = timed_loop(
            dev, reps, 50, [&] { (void)kc::patch_apply<__nv_bfloat16, __nv_bfloat16>(src, tgt, dims, stream); });
      }
#endif
      std::printf("relocation+patch kernel alone %.3f ms (%.0f%% of copy), relocation alone %.3f ms (%.0f%%)\n",
                  kernel_s * 1e3, kernel_s > 0 ? 100 * copy_s / kernel_s : 0.0, kernel_plain_s * 1e3,
                  kernel_plain_s > 0 ? 100 * copy_s / kernel_plain_s : 0.0);
      const double bytes = 2.0 * static_cast<double>(canonical.numel() * canonical.element_size());
      // The paged decode attention kernel's K/V reads over a W-token past, one layer, one query token.
      const int64_t W = max_w;
      FilledPool big = fill_pool(*m, W, 16);
      rt::ops::PagedAttentionInputs pa;
      pa.q = at::randn({1, c.num_heads, c.head_dim}, opts);
      pa.k_pages = big.pool->storage(0).select(0, 0).view({-1, D});
      pa.v_pages = big.pool->storage(1).select(0, 0).view({-1, D});
      pa.slots = big.slots.to(dev, at::kInt);
      pa.k_tail = at::randn({1, c.num_kv_heads, c.head_dim}, opts);
      pa.v_tail = at::randn({1, c.num_kv_heads, c.head_dim}, opts);
      pa.positions = at::arange(W + 1, at::TensorOptions().device(dev).dtype(at::kLong)).unsqueeze(1).contiguous();
      pa.inv_freq = rt::rope_inv_freq(c.rope, 0).to(dev);
      pa.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
      double attn_s = 0, attn_patched_s = 0, attn_rowwise_s = 0;
      if (rt::ops::paged_attention_available(dev, c.num_heads, c.num_kv_heads, c.head_dim)) {
        attn_s = timed_loop(dev, reps, 20, [&] { (void)rt::ops::paged_attention(pa); });
        pa.rowwise = true;
        attn_rowwise_s = timed_loop(dev, reps, 20, [&] { (void)rt::ops::paged_attention(pa); });
        pa.rowwise = false;
        // The same with every token's rows patched (rank `rank`): the patch's extra cost.
        const at::Tensor uk = at::randn({W, rank}, opts.dtype(at::kFloat)),
                         vtk = at::randn({rank, D}, opts.dtype(at::kFloat));
        orbit::kernels::cpu::PatchSegment seg;
        seg.first = 0;
        seg.length = W;
        seg.rank_k = seg.rank_v = rank;
        seg.u_k = seg.u_v = uk.data_ptr<float>();
        seg.vt_k = seg.vt_v = vtk.data_ptr<float>();
        pa.patch_of = at::zeros({W}, at::TensorOptions().device(dev).dtype(at::kInt));
        pa.segments = rt::ops::make_segment_table({seg}, dev);
        attn_patched_s = timed_loop(dev, reps, 20, [&] { (void)rt::ops::paged_attention(pa); });
      }
      const double attn_bytes = 2.0 * static_cast<double>(W * D * c10::elementSize(m->dtype()));
      std::printf(
          "paged decode attention W=%lld: %.3f ms (%.0f GB/s of K/V read), with patch rows on every token "
          "%.3f ms; row-wise kernel %.3f ms\n",
          (long long)W, attn_s * 1e3, attn_s > 0 ? attn_bytes / attn_s / 1e9 : 0.0, attn_patched_s * 1e3,
          attn_rowwise_s * 1e3);
      std::printf(
          "reloc+patch %lld tokens x %lld: %.3f ms, %.0f GB/s; relocation alone %.3f ms; d2d copy %.3f ms, "
          "%.0f GB/s; ratio %.2f (relocation alone %.2f)\n",
          (long long)n, (long long)D, apply_s * 1e3, bytes / apply_s / 1e9, relocate_s * 1e3, copy_s * 1e3,
          bytes / copy_s / 1e9, copy_s / apply_s, copy_s / relocate_s);
      report["relocation"] = {{"tokens", n},
                              {"width", D},
                              {"rank", rank},
                              {"patch_apply_s", apply_s},
                              {"copy_s", copy_s},
                              {"bytes_read_written", bytes},
                              {"fraction_of_copy_bandwidth", copy_s / apply_s},
                              {"relocate_only_s", relocate_s},
                              {"kernel_patch_apply_s", kernel_s},
                              {"kernel_relocate_only_s", kernel_plain_s},
                              {"relocate_only_fraction_of_copy_bandwidth", copy_s / relocate_s},
                              {"paged_attention_window_tokens", W},
                              {"paged_attention_s", attn_s},
                              {"paged_attention_patched_s", attn_patched_s},
                              {"paged_attention_rowwise_s", attn_rowwise_s},
                              {"paged_attention_kv_bytes", attn_bytes},
                              {"copy_bandwidth_bytes_s", bytes / copy_s}};
    }

#if ORBIT_OPS_HAVE_CUDA
    if (sections.find("recall") != std::string::npos && dev.is_cuda()) {
      report["recall"] = recall_section(*m, query, reps, a.get_or("--scratch", "/tmp"));
    }
#endif

    const std::string path = a.get_or("--json", "bench_gpu.json");
    std::ofstream(path) << report.dump(2) << "\n";
    std::printf("wrote %s\n", path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
}
