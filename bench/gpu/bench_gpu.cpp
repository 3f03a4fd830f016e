// bench_gpu: orbit's runtime on a GPU against the ways a user would do the same work today, all arms
// measured side by side in one run (not a test; numbers go to JSON and bench/REPORT-gpu.md).
//
//   bench_gpu [--preset qwen2.5-7b] [--layers N] [--windows 8192,32768] [--chunks 512,2048,8192]
//             [--query 16] [--reps 10] [--device cuda] [--dtype bfloat16] [--device-name NAME]
//             [--sections ttft,slide,prefill,bytes,reloc,recall] [--json PATH] [--commit SHA]
//
// Random weights of the preset's shape are made directly on the device in the dtype (no file): the
// arms time compute and memory traffic, which do not depend on the values. KV content and patch factors
// are random too. Every arm runs --reps times after a warm-up; the JSON holds each arm's median and its
// spread (fastest and slowest run). The baselines run on the PyTorch peer below where the libtorch has
// SDPA (2.5 and later): flash attention, causal from the end of the keys for a prefix cache's recompute
// (no boolean mask); elsewhere on orbit's own forward. Sections:
//   ttft     (a) time to the first query token after a B-token chunk is placed in the middle of a
//            W-token window: re-prefill of the window + query; a prefix cache broken at the chunk
//            (recompute chunk, suffix and query over the cached prefix); orbit with every chunk's
//            canonical already in pool pages and every chunk's patch stored (2,048-token pieces around
//            the placed chunk: the query's forward over the paged past, kernel reads pages in place,
//            relocates and adds patch rows); the same past gathered and patched into a copy first (the
//            path longer queries take); and orbit over a per-window patched copy made ahead.
//   prefill  (c) prefill tokens/s at each W, and decode ms/token over a W-token past: orbit vs a
//            plain PyTorch implementation of the same model (cos/sin-cached RoPE, pre-rotated
//            contiguous KV cache, scaled_dot_product_attention with GQA) in the same process.
//   bytes    (d) device bytes of N = 1, 4, 8 windows (and forks) holding the same K chunks: shared
//            canonical pages + per-window patch factors vs per-window patched copies.
//   slide    (b) a W-token window slides: its first B tokens are evicted and a query follows. The prefix
//            cache recomputes the W - B survivors and the query (a prefill from position 0: flash
//            attention, causal); orbit keeps the survivors' pages, each
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
#include "bench_gpu_kernels.h"
#include "bench_gpu_recall.h"
#include "bench_gpu_util.h"
#include "ops/cuda_dispatch.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

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
  // Causal attention of T queries (the last T of S keys) in one fused kernel: flash with is_causal from
  // position 0; no mask for one query; for several after a cached prefix, flash attention's own causal
  // mask, which is aligned to the end of the keys (torch.nn.attention.bias.causal_lower_right takes the
  // same path). GQA is passed to the kernel as it is, or, where it refuses it, K and V heads repeated.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start) const {
    if (start == 0) return at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, true, c10::nullopt, true);
    if (q.size(2) == 1) return at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, false, c10::nullopt, true);
    if (gqa_in_kernel || k.size(1) == q.size(1)) {
      try {
        return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, 0.0, true, false));
      } catch (const c10::Error&) {
        if (k.size(1) == q.size(1)) throw;
        gqa_in_kernel = false;
      }
    }
    const int64_t g = q.size(1) / k.size(1);
    return std::get<0>(at::_scaled_dot_product_flash_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                                               0.0, true, false));
  }
  // How attend() ran a prefix cache's recompute (for the report).
  std::string prefix_kernel() const {
    return gqa_in_kernel ? "flash attention, causal aligned to the end of the keys, GQA in the kernel"
                         : "flash attention, causal aligned to the end of the keys, K/V heads repeated for GQA";
  }
  mutable bool gqa_in_kernel = true;

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
      const at::Tensor o = attend(q, Ks, Vs, start);
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
#else
struct Peer;  // no SDPA in this libtorch: the baselines run on orbit's own forward
#endif

// What every section reads: the model, the token counts, the repetitions and the peer (or null).
struct Setup {
  const rt::Model& m;
  c10::Device dev;
  std::string preset;
  std::vector<int64_t> windows, chunks, query;
  int64_t max_w = 0, rank = 16;
  int reps = 10;
  const Peer* peer = nullptr;
};

constexpr int64_t kPiece = 2048;  // tokens per patched chunk around the placed one

// Patches on every chunk of a W-token window: 2,048-token pieces before and after the B-token chunk at
// `offset`, and the chunk itself (a window whose every instance was placed in a changed context).
std::vector<rt::PlacedPatch> window_patches(const rt::Model& m, int64_t W, int64_t offset, int64_t B, int64_t rank) {
  std::vector<rt::PlacedPatch> out;
  auto pieces = [&](int64_t from, int64_t to) {
    for (int64_t first = from; first < to; first += kPiece)
      out.push_back({first, random_patch(m, std::min(kPiece, to - first), rank)});
  };
  pieces(0, offset);
  out.push_back({offset, random_patch(m, B, rank)});
  pieces(offset + B, W);
  return out;
}

// n past tokens read from the pool's slots [first, first + n), at positions 0..n-1, with `patches`.
rt::PastKV paged_past(const FilledPool& pool, int64_t first, int64_t n, std::vector<rt::PlacedPatch> patches) {
  auto paged = std::make_shared<rt::PagedPast>();
  paged->pool = pool.pool.get();
  paged->slots = pool.slots.narrow(0, first, n);
  paged->patches = std::move(patches);
  return rt::make_paged_past(std::move(paged), at::arange(n, at::kLong));
}

rt::ForwardOptions last_logits() {
  rt::ForwardOptions o;
  o.logits = rt::LogitsMode::kLast;
  return o;
}

// Re-prefill of `all` (from position 0) on the peer where there is one, else on orbit's forward.
Timing reprefill_arm(const Setup& s, const std::vector<int64_t>& all) {
#if BENCH_HAVE_SDPA
  if (s.peer != nullptr) {
    auto cache = s.peer->cache(static_cast<int64_t>(all.size()));
    return timed_spread(s.dev, s.reps, [&] { (void)s.peer->forward(all, 0, cache); });
  }
#endif
  return timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(all, 0), nullptr, last_logits()); });
}

// A prefix cache broken at `offset`: the prefix's KV cached, all[offset..] recomputed over it. On the peer
// where there is one; if the peer's kernel fails there, on orbit's forward, and `impl` says why.
Timing prefix_arm(const Setup& s, const std::vector<int64_t>& all, int64_t offset, std::string& impl) {
  const std::vector<int64_t> rest(all.begin() + offset, all.end());
#if BENCH_HAVE_SDPA
  if (s.peer != nullptr) {
    try {
      auto cache = s.peer->cache(static_cast<int64_t>(all.size()));
      const Timing t = timed_spread(s.dev, s.reps, [&] { (void)s.peer->forward(rest, offset, cache); });
      impl = "pytorch_sdpa_peer: " + s.peer->prefix_kernel();
      return t;
    } catch (const std::exception& e) {
      impl = std::string("orbit_forward (the peer failed: ") + e.what() + ")";
      impl = impl.substr(0, 300);
      std::printf("warning: %s\n", impl.c_str());
    }
  }
#endif
  if (impl.empty()) impl = "orbit_forward";
  rt::PastKV prefix{random_content(s.m, offset), at::arange(offset, at::kLong)};
  return timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(rest, offset), &prefix, last_logits()); });
}

std::string baseline_impl([[maybe_unused]] const Setup& s) {
#if BENCH_HAVE_SDPA
  if (s.peer != nullptr) return "pytorch_sdpa_peer: " + s.peer->prefix_kernel();
#endif
  return "orbit_forward";
}

// One (W, B) row of the TTFT section; `base` holds the window's re-prefill and query-alone timings.
json ttft_row(const Setup& s, const FilledPool& pool, const std::vector<int64_t>& all, int64_t W, int64_t B,
              const json& base) {
  const int64_t offset = (W - B) / 2;  // the chunk sits in the middle of the window
  const int64_t q = static_cast<int64_t>(s.query.size());
  std::string prefix_impl;
  const Timing prefix = prefix_arm(s, all, offset, prefix_impl);
  const std::vector<rt::PlacedPatch> patches = window_patches(s.m, W, offset, B, s.rank);
  const rt::ForwardOptions last = last_logits();
  BENCH_RANGE_PUSH("orbit_paged");
  const Timing orbit = timed_spread(s.dev, s.reps, [&] {
    const rt::PastKV past = paged_past(pool, 0, W, patches);
    (void)s.m.forward(input_at(s.query, W), &past, last);
  });
  BENCH_RANGE_POP();
  // The path a query longer than the kernel takes: gather and patch the whole past, then attend.
  BENCH_RANGE_PUSH("orbit_gather");
  const Timing gather = timed_spread(s.dev, s.reps, [&] {
    const rt::PastKV copy = rt::materialize_past(s.m.config(), paged_past(pool, 0, W, patches), s.dev, s.m.dtype());
    (void)s.m.forward(input_at(s.query, W), &copy, last);
  });
  BENCH_RANGE_POP();
  const rt::PastKV copy = rt::materialize_past(s.m.config(), paged_past(pool, 0, W, patches), s.dev, s.m.dtype());
  BENCH_RANGE_PUSH("orbit_copy");
  const Timing copied = timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(s.query, W), &copy, last); });
  BENCH_RANGE_POP();
  const double reprefill = base["reprefill_s"].get<double>();
  std::printf(
      "ttft W=%6lld B=%5lld  reprefill %8.2f ms  prefix %s  orbit %s (paged)  %s (gathered)  %s (copy)  "
      "reprefill/orbit %6.1fx  prefix/orbit %6.1fx\n",
      (long long)W, (long long)B, reprefill * 1e3, ms(prefix).c_str(), ms(orbit).c_str(), ms(gather).c_str(),
      ms(copied).c_str(), reprefill / orbit.median, prefix.median / orbit.median);
  json row = base;
  row.update({{"model", s.preset},
              {"chunk_tokens", B},
              {"chunk_offset", offset},
              {"patched_chunks", patches.size()},
              {"prefix_baseline", prefix_impl},
              {"attention_path", s.m.attention_path(q, true)},
              {"gather_attention_path", s.m.attention_path(q, false)}});
  put(row, "prefix", prefix);
  put(row, "orbit", orbit);
  put(row, "orbit_gather", gather);
  put(row, "orbit_patched_copy", copied);
  return row;
}

// (a) TTFT after placing a chunk: see the header.
json ttft_section(const Setup& s) {
  json rows = json::array();
  const int64_t vocab = s.m.config().vocab_size;
  for (int64_t W : s.windows) {
    std::vector<int64_t> all = tokens(W, vocab);
    all.insert(all.end(), s.query.begin(), s.query.end());
    json base = {{"window_tokens", W}, {"baseline", baseline_impl(s)}};
    put(base, "reprefill", reprefill_arm(s, all));
    // The query alone, no past: the floor any reuse arm pays (weights read once, per-op launches).
    BENCH_RANGE_PUSH("query_alone");
    put(base, "query_only",
        timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(s.query, W), nullptr, last_logits()); }));
    BENCH_RANGE_POP();
    FilledPool pool = fill_pool(s.m, W, 16);
    for (int64_t B : s.chunks) {
      if (B < W) rows.push_back(ttft_row(s, pool, all, W, B, base));
    }
  }
  return rows;
}

// (b) A window slides: see the header.
json slide_section(const Setup& s) {
  json rows = json::array();
  const int64_t W = s.max_w;
  const int64_t q = static_cast<int64_t>(s.query.size());
  FilledPool pool = fill_pool(s.m, W, 16);
  for (int64_t B : s.chunks) {
    if (B >= W) continue;
    const int64_t S = W - B;
    std::vector<int64_t> survivors = tokens(W, s.m.config().vocab_size);
    survivors.erase(survivors.begin(), survivors.begin() + B);
    survivors.insert(survivors.end(), s.query.begin(), s.query.end());
    BENCH_RANGE_PUSH("slide_prefix");
    const Timing prefix = reprefill_arm(s, survivors);
    BENCH_RANGE_POP();
    std::vector<rt::PlacedPatch> patches;
    for (int64_t first = 0; first + kPiece <= S; first += kPiece)
      patches.push_back({first, random_patch(s.m, kPiece, s.rank)});
    const size_t patched = patches.size();
    const rt::PastKV past = paged_past(pool, B, S, std::move(patches));
    BENCH_RANGE_PUSH("slide_orbit");
    const Timing orbit =
        timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(s.query, S), &past, last_logits()); });
    BENCH_RANGE_POP();
    std::printf("slide W=%6lld evict %5lld  prefix cache (recompute %lld + query) %s  orbit %s  %6.1fx\n", (long long)W,
                (long long)B, (long long)S, ms(prefix).c_str(), ms(orbit).c_str(), prefix.median / orbit.median);
    json row = {{"window_tokens", W},           {"evicted_tokens", B},
                {"survivor_tokens", S},         {"patched_chunks", patched},
                {"baseline", baseline_impl(s)}, {"attention_path", s.m.attention_path(q, true)}};
    put(row, "prefix", prefix);
    put(row, "orbit", orbit);
    rows.push_back(row);
  }
  return rows;
}

// (c) Prefill and decode against the peer: see the header.
json prefill_section(const Setup& s) {
  json rows = json::array();
  for (int64_t W : s.windows) {
    const std::vector<int64_t> window = tokens(W, s.m.config().vocab_size);
    const rt::ForwardOptions none = last_logits();
    const Timing prefill = timed_spread(s.dev, s.reps, [&] { (void)s.m.forward(input_at(window, 0), nullptr, none); });
    FilledPool pool = fill_pool(s.m, W, 16);
    const rt::PastKV past = paged_past(pool, 0, W, {});
    const std::vector<int64_t> one = {s.query[0]};
    const Timing decode = timed_spread(s.dev, s.reps * 3, [&] { (void)s.m.forward(input_at(one, W), &past, none); });
    const rt::PastKV contiguous = rt::materialize_past(s.m.config(), past, s.dev, s.m.dtype());
    const Timing decode_copy =
        timed_spread(s.dev, s.reps * 3, [&] { (void)s.m.forward(input_at(one, W), &contiguous, none); });
    json row = {{"window_tokens", W}, {"orbit_prefill_tok_s", W / prefill.median}};
    put(row, "orbit_prefill", prefill);
    put(row, "orbit_decode", decode);
    put(row, "orbit_decode_contiguous", decode_copy);
    std::printf("W=%6lld prefill orbit %s  decode orbit %s (paged) %s (contiguous)\n", (long long)W,
                ms(prefill).c_str(), ms(decode).c_str(), ms(decode_copy).c_str());
#if BENCH_HAVE_SDPA
    if (s.peer != nullptr) {
      auto cache = s.peer->cache(W + 1);
      const Timing peer_prefill = timed_spread(s.dev, s.reps, [&] { (void)s.peer->forward(window, 0, cache); });
      const Timing peer_decode = timed_spread(s.dev, s.reps * 3, [&] { (void)s.peer->forward(one, W, cache); });
      put(row, "sdpa_prefill", peer_prefill);
      put(row, "sdpa_decode", peer_decode);
      row["sdpa_prefill_tok_s"] = W / peer_prefill.median;
      std::printf("W=%6lld sdpa peer prefill %s (orbit/peer time %.2fx)  decode %s (orbit/peer %.2fx)\n", (long long)W,
                  ms(peer_prefill).c_str(), prefill.median / peer_prefill.median, ms(peer_decode).c_str(),
                  decode.median / peer_decode.median);
    }
#endif
    rows.push_back(row);
  }
  return rows;
}

// (d) Device bytes of N windows holding the same chunks (computed from the pool layout, not measured).
json bytes_section(const Setup& s) {
  const rt::Model* m = &s.m;
  const int64_t rank = s.rank;
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
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const orbit::cli::Args a(
        "bench_gpu",
        {{"--preset", "--layers", "--windows", "--chunks", "--query", "--reps", "--device", "--dtype", "--device-name",
          "--sections", "--json", "--rank", "--scratch", "--commit"},
         {},
         "usage: bench_gpu [--preset qwen2.5-7b] [--layers N] [--windows 8192,32768] [--chunks 512,2048,8192]\n"
         "                 [--query 16] [--reps 10] [--rank 16] [--device cuda] [--dtype bfloat16]\n"
         "                 [--sections ttft,slide,prefill,bytes,reloc,recall] [--device-name NAME] [--json PATH]\n"
         "                 [--scratch DIR] [--commit SHA]\n"
         "  The GPU runtime side by side with its baselines, random weights of --preset's shape: TTFT after\n"
         "  placing a chunk (orbit vs re-prefill vs a prefix cache), prefill/decode vs PyTorch SDPA, device\n"
         "  bytes of windows and forks sharing chunks, relocation + patch apply vs copy bandwidth, a window's\n"
         "  slide vs a prefix cache, recall of a stored chunk from host or disk vs re-prefill.\n"
         "  --layers N        cut the preset's depth;  --windows / --chunks  token counts W and B\n"
         "  --query N         query tokens after the chunk;  --reps N  timed runs per arm (median and spread)\n"
         "  --rank M          patch rank;  --commit SHA  the commit recorded in the JSON\n"
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
    const int reps = static_cast<int>(a.get_int("--reps", 10, 1));
    const std::string sections = a.get_or("--sections", "ttft,slide,prefill,bytes,reloc,recall");
    const rt::ComputeTarget target =
        rt::parse_compute_target(a.get_or("--device", "cuda"), a.get_or("--dtype", "bfloat16"));
    int64_t max_w = 0;
    for (int64_t w : windows) max_w = std::max(max_w, w);
    config.max_position_embeddings = std::max<int64_t>(config.max_position_embeddings, max_w + 2 * q + 8);
    config.rope.max_position_embeddings = config.max_position_embeddings;

    const auto t0 = std::chrono::steady_clock::now();
    const std::unique_ptr<rt::Model> m = random_model(config, target);
    std::printf("model %s (%lld of %lld layers) %s on %s, %lld parameters, made in %.1f s\n", preset.c_str(),
                (long long)config.num_layers, (long long)full_layers, rt::dtype_name(target.dtype).c_str(),
                rt::device_name(target.device).c_str(), (long long)m->parameter_count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    Setup s{
        *m,  target.device, preset, windows, chunks, tokens(q, config.vocab_size), max_w, a.get_int("--rank", 16, 1),
        reps};
#if BENCH_HAVE_SDPA
    const Peer peer(*m, max_w + 2 * q + 8);
    s.peer = &peer;
#endif
    json report = {{"benchmark", "bench_gpu"},
                   {"device", a.get_or("--device-name", rt::device_name(target.device))},
                   {"commit", a.get_or("--commit", "")},
                   {"dtype", rt::dtype_name(target.dtype)},
                   {"model", preset},
                   {"layers", config.num_layers},
                   {"full_layers", full_layers},
                   {"query_tokens", q},
                   {"patch_rank", s.rank},
                   {"reps", reps},
                   {"baseline", baseline_impl(s)},
                   {"weights", "random (N(0, 0.02^2), norms 1), made on the device"},
                   {"torch", TORCH_VERSION}};
    report["command"] = std::vector<std::string>(argv, argv + argc);
    auto wants = [&](const char* name) { return sections.find(name) != std::string::npos; };
    // The JSON is rewritten after every section: a run stopped part-way keeps what it measured.
    const std::string path = a.get_or("--json", "bench_gpu.json");
    auto save = [&] { std::ofstream(path) << report.dump(2) << "\n"; };
    if (wants("ttft")) {
      report["ttft"] = ttft_section(s);
      save();
    }
    if (wants("reloc")) {
      report["relocation"] = kernels_section({s.m, s.dev, s.reps, s.rank, s.max_w});
      save();
    }
    if (wants("slide")) {
      report["slide"] = slide_section(s);
      save();
    }
    if (wants("prefill")) {
      report["prefill_decode"] = prefill_section(s);
      save();
    }
    if (wants("bytes")) {
      report["device_bytes"] = bytes_section(s);
      report["device_bytes_note"] =
          "computed, not measured: page counts of the pool layout (whole pages of 16 tokens, all layers, K and V) "
          "and float32 patch factors";
    }
#if ORBIT_OPS_HAVE_CUDA
    if (wants("recall") && s.dev.is_cuda())
      report["recall"] = recall_section(*m, s.query, reps, a.get_or("--scratch", "/tmp"));
#endif
    save();
    std::printf("wrote %s\n", path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
}
