// Small random-weight models whose shapes the paged CUDA kernel covers (head_dim 64/128, GQA groups up
// to 8, biases, M-RoPE) plus MLA (a fallback), written once per process to a temp directory; and a
// paged-past scenario (chunks in pool pages, placed at new positions with a patch) shared by the CPU
// and CUDA tests.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/generator.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/reuse.h"
#include "test_helpers.h"

namespace orbit::test {

namespace rt = orbit::runtime;

// name -> config: "llama-d64-g4", "llama-d64-g8", "qwen2-d128-g2" (biases), "qwen2vl-d64" (M-RoPE),
// "mla" (tiny DeepSeek-V2, no paged kernel).
inline rt::ModelConfig device_test_config(const std::string& name) {
  auto sized = [](rt::ModelConfig c, int64_t heads, int64_t kv, int64_t d) {
    c.num_heads = heads;
    c.num_kv_heads = kv;
    c.head_dim = d;
    c.hidden_size = heads * d;
    c.intermediate_size = 2 * heads * d;
    c.rope.head_dim = c.rope.rotary_dim = d;
    return c;
  };
  if (name == "llama-d64-g4") return sized(rt::generator_preset("tiny-llama"), 4, 1, 64);
  if (name == "llama-d64-g8") return sized(rt::generator_preset("tiny-llama"), 8, 1, 64);
  if (name == "qwen2-d128-g2") return sized(rt::generator_preset("tiny-qwen2"), 2, 1, 128);
  if (name == "qwen2vl-d64") {
    rt::ModelConfig c = sized(rt::generator_preset("tiny-qwen2-vl"), 4, 2, 64);
    c.rope.mrope_section = {8, 12, 12};
    return c;
  }
  if (name == "mla") return rt::generator_preset("tiny-mla");
  throw std::runtime_error("device_test_config: unknown " + name);
}

inline std::vector<std::string> device_test_models() {
  return {"llama-d64-g4", "llama-d64-g8", "qwen2-d128-g2", "qwen2vl-d64", "mla"};
}

// The directory of model `name` (generated on first use, float32 on disk, seed 7).
inline std::string device_test_model_dir(const std::string& name) {
  static TempDir root;
  static std::map<std::string, std::string> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  rt::GeneratorOptions o;
  o.config = device_test_config(name);
  o.seed = 7;
  o.init_std = 0.05;
  const std::string dir = (root.path() / name).string();
  rt::generate_model(o, dir);
  made[name] = dir;
  return dir;
}

// Two chunks A (n_a tokens) and B (n_b) stored once as canonicals in pool pages; B's patch formed from
// its conditioning on A; the window places B first (at `b_start`) and A after it, both away from the
// positions they were encoded at, and a query follows. Everything on the model's device and dtype.
struct PagedScenario {
  std::unique_ptr<rt::KVPool> pool;
  std::unique_ptr<rt::PagedSequence> a_pages, b_pages;
  rt::Content a_canonical, b_canonical;
  std::shared_ptr<const rt::Patch> b_patch;
  at::Tensor positions;  // past positions [S] (B then A)
  std::shared_ptr<rt::PagedPast> paged;
  rt::PastKV contiguous;  // the same past gathered and patched by hand (apply_patch, cat)
  std::vector<int64_t> query;
  int64_t query_start = 0;
};

inline PagedScenario make_paged_scenario(const rt::Model& m, int64_t n_a, int64_t n_b, int64_t b_start,
                                         int64_t page_size, uint64_t seed) {
  const rt::ModelConfig& c = m.config();
  PagedScenario s;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto tokens = [&](int64_t n) {
    const at::Tensor t = at::randint(3, c.vocab_size, {n}, gen, at::kLong);
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  };
  rt::ChunkInput a{tokens(n_a), {}}, b{tokens(n_b), {}};
  s.a_canonical = rt::canonical(m, a);
  s.b_canonical = rt::canonical(m, b);
  const rt::PastKV ctx = rt::assemble_context(m, {a});
  const rt::Content b_cond = rt::conditioned(m, b, ctx);
  rt::PatchOptions po;
  po.rank_k = po.rank_v = 4;
  s.b_patch = std::make_shared<rt::Patch>(rt::form_patch(m, rt::deficit(b_cond, s.b_canonical), po));

  rt::KVPoolOptions o;
  o.num_layers = c.num_layers;
  o.page_size = page_size;
  o.widths = c.content_widths();
  o.dtype = m.dtype();
  o.device = rt::device_name(m.device());
  o.num_pages = 64 + (n_a + n_b) / page_size * 2;
  s.pool = std::make_unique<rt::KVPool>(o);
  // A first, then a gap page, then B: the window's order (B, A) differs from the pool's.
  s.a_pages = std::make_unique<rt::PagedSequence>(*s.pool, c);
  s.b_pages = std::make_unique<rt::PagedSequence>(*s.pool, c);
  REQUIRE(s.a_pages->append(s.a_canonical, at::arange(n_a, at::kLong)).is_ok());
  std::vector<rt::PageId> hole;
  REQUIRE(s.pool->allocate(1, hole).is_ok());
  REQUIRE(s.b_pages->append(s.b_canonical, at::arange(n_b, at::kLong)).is_ok());
  s.pool->release(hole[0]);

  const int64_t a_start = b_start + n_b + 3;  // a gap in positions too
  s.positions = at::cat({at::arange(b_start, b_start + n_b, at::kLong), at::arange(a_start, a_start + n_a, at::kLong)});
  s.paged = std::make_shared<rt::PagedPast>();
  s.paged->pool = s.pool.get();
  s.paged->slots = at::cat({s.b_pages->slots(), s.a_pages->slots()});
  s.paged->patches.push_back({0, s.b_patch});

  const rt::Content b_patched = rt::apply_patch(m, s.b_canonical, *s.b_patch);
  s.contiguous.positions = s.positions;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const auto i = static_cast<size_t>(l);
    s.contiguous.layers.push_back(
        {at::cat({b_patched[i].k, s.a_canonical[i].k}), at::cat({b_patched[i].v, s.a_canonical[i].v})});
  }
  s.query = tokens(3);
  s.query_start = a_start + n_a;
  return s;
}

inline double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  return (g - w).norm().item<double>() / std::max(w.norm().item<double>(), 1e-30);
}

}  // namespace orbit::test
