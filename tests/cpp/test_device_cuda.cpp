// The runtime and windows on CUDA against the CPU float32 oracle (exits 77, skipped, without a device):
//   * Model::forward on CUDA (float32, bfloat16) for every family the CPU runs (GQA with and without
//     biases, M-RoPE, MLA): prefill logits and content, and decode over a past;
//   * a paged past on CUDA (pages read in place by the paged kernel, relocated with a patch) against the
//     same past gathered and patched by hand, and the attention path each model takes;
//   * windows on a CUDA engine driven by random operations (admit, turn, evict, slide, recall, reorder,
//     fork), mirrored on a CPU float32 engine whose reference_logits is the oracle; fork isolation.
//
// Tolerances are relative L2 errors of the logits. float32: cuBLAS and CPU BLAS sum in different orders
// (TF32 is off in libtorch by default), a few float32 ulps per op: 1e-4. bfloat16 keeps 8 significant
// bits (unit roundoff u = 2^-9 ≈ 2e-3); each layer rounds its GEMM inputs and outputs and the residual
// stream a handful of times, so two layers give ≈ √(10)·u·(softmax/normalisation gain ≈ 3) ≈ 2e-2:
// 5e-2 leaves room without hiding a wrong rotation or a missing patch (those give errors of order 1).
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "orbit/engine.h"
#include "orbit/runtime/device.h"
#include "orbit/window.h"

namespace {

namespace rt = orbit::runtime;
using orbit::test::rel_error;

double tolerance(at::ScalarType dtype) { return dtype == at::kFloat ? 1e-4 : 5e-2; }

rt::ComputeTarget cuda(at::ScalarType dtype) {
  rt::ComputeTarget t;
  t.device = c10::Device(c10::kCUDA, 0);
  t.dtype = dtype;
  return t;
}

double rel_error(const orbit::Logits& got, const orbit::Logits& want) {
  REQUIRE(got.values.size() == want.values.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    const double d = static_cast<double>(got.values[i]) - want.values[i];
    num += d * d;
    den += static_cast<double>(want.values[i]) * want.values[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST_CASE("forward on CUDA matches the CPU float32 oracle for every family", "[cuda][model]") {
  for (const std::string& name : orbit::test::device_test_models()) {
    const std::string dir = orbit::test::device_test_model_dir(name);
    const auto oracle = rt::load_model(dir);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const auto m = rt::load_model(dir, cuda(dtype));
      REQUIRE(m->device().is_cuda());
      REQUIRE(m->weights().layers[0].w_up.scalar_type() == dtype);
      rt::ForwardInput in;
      for (int64_t i = 0; i < 40; ++i) in.tokens.push_back(3 + (i * 37) % 500);
      rt::ForwardOptions fo;
      fo.logits = rt::LogitsMode::kAll;
      const rt::ForwardResult want = oracle->forward(in, nullptr, fo);
      const rt::ForwardResult got = m->forward(in, nullptr, fo);
      REQUIRE(got.logits.is_cuda());
      const double e_prefill = rel_error(got.logits, want.logits);
      const double e_content = rel_error(got.content.back().v, want.content.back().v);
      // Decode over the prefilled past (content moved back to the oracle's form for the CPU side).
      rt::PastKV past_gpu{got.content, at::arange(40, at::kLong)}, past_cpu{want.content, at::arange(40, at::kLong)};
      rt::ForwardInput step;
      step.tokens = {17};
      const double e_decode = rel_error(m->forward(step, &past_gpu).logits, oracle->forward(step, &past_cpu).logits);
      INFO(name << " " << c10::toString(dtype) << ": prefill " << e_prefill << ", content " << e_content << ", decode "
                << e_decode);
      WARN(name << " " << c10::toString(dtype) << " rel errors: prefill " << e_prefill << ", content " << e_content
                << ", decode " << e_decode);
      CHECK(e_prefill < tolerance(dtype));
      CHECK(e_content < tolerance(dtype));
      CHECK(e_decode < tolerance(dtype));
    }
  }
}

TEST_CASE("a paged past on CUDA: kernel reads pages in place, relocates and patches on the fly", "[cuda][paged]") {
  for (const std::string& name : orbit::test::device_test_models()) {
    const std::string dir = orbit::test::device_test_model_dir(name);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const auto m = rt::load_model(dir, cuda(dtype));
      orbit::test::PagedScenario s = orbit::test::make_paged_scenario(*m, 150, 70, 9, 16, 21);
      const rt::PastKV paged = rt::make_paged_past(s.paged, s.positions);
      // A decode-sized query, a question-sized one and the longest the kernel takes.
      for (const int64_t R : {int64_t{3}, int64_t{24}, rt::kPagedMaxQueries}) {
        rt::ForwardInput in;
        const int64_t vocab = m->config().vocab_size;
        for (int64_t i = 0; i < R; ++i)
          in.tokens.push_back(3 + (s.query[static_cast<size_t>(i % 3)] + i) % (vocab - 3));
        in.positions = at::arange(s.query_start, s.query_start + R, at::kLong);
        rt::ForwardOptions fo;
        fo.logits = rt::LogitsMode::kAll;
        const at::Tensor got = m->forward(in, &paged, fo).logits;
        const at::Tensor want = m->forward(in, &s.contiguous, fo).logits;
        const std::string path = m->attention_path(R, true);
        const double err = rel_error(got, want);
        INFO(name << " " << c10::toString(dtype) << " R=" << R << ": " << path << ", rel error " << err);
        WARN(name << " " << c10::toString(dtype) << " R=" << R << " paged vs gathered rel error " << err << " via "
                  << path);
        // bf16: the kernel adds patch rows in float32 before rounding, the gathered path rounds the patched
        // content to bf16 first: differences of order u.
        CHECK(err < (dtype == at::kFloat ? 2e-5 : 2e-2));
        if (name == "mla") {
          CHECK(path.find("fallback: MLA has no paged kernel") != std::string::npos);
        } else {
          CHECK(path.rfind("paged CUDA kernel", 0) == 0);
        }
      }
      if (name != "mla") {
        CHECK(m->attention_path(rt::kPagedMaxQueries + 1, true).find("fallback: prefill-sized input") !=
              std::string::npos);
      }
    }
  }
}

namespace {

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n) {
  std::uniform_int_distribution<int64_t> d(3, 511);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

std::shared_ptr<orbit::Engine> open(const std::string& dir, const std::string& device, const std::string& dtype) {
  orbit::EngineOptions o;
  o.model = dir;
  o.device = device;
  o.dtype = dtype;
  o.page_size = 4;
  o.pool_bytes = int64_t{64} << 20;
  return orbit::Engine::open(o);
}

// The same random operations on a CUDA window (policy `policy`) and a CPU float32 window (reprefill);
// instances are chosen by index, so both windows hold the same contents. Returns the worst error.
double mirrored_walk(const std::string& dir, const std::string& dtype, const std::string& policy, uint64_t seed,
                     int steps) {
  auto gpu = open(dir, "cuda", dtype);
  auto cpu = open(dir, "cpu", "float32");
  std::mt19937_64 rng(seed);
  std::vector<orbit::ChunkRef> gc, cc;
  for (int i = 0; i < 5; ++i) {
    const std::vector<int64_t> t = random_tokens(rng, 5 + static_cast<int64_t>(rng() % 20));
    gc.push_back(gpu->add_tokens(t));
    cc.push_back(cpu->add_tokens(t));
  }
  orbit::WindowOptions go, co;
  go.policy = orbit::parse_policy(policy);
  co.policy = orbit::parse_policy("reprefill");
  orbit::Window g = gpu->new_window(go), c = cpu->new_window(co);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    const auto gi = g.instances();
    const auto ci = c.instances();
    REQUIRE(gi.size() == ci.size());
    std::set<std::string> present;
    for (const auto& i : ci) present.insert(i.chunk.key);
    std::vector<std::size_t> absent;
    for (std::size_t k = 0; k < cc.size(); ++k) {
      if (present.count(cc[k].key) == 0) absent.push_back(k);
    }
    const int op = static_cast<int>(rng() % 7);
    std::string what;
    if (op == 0 && !absent.empty()) {
      const std::size_t k = absent[rng() % absent.size()];
      g.admit(gc[k]);
      c.admit(cc[k]);
      what = "admit";
    } else if (op == 1) {
      const std::vector<int64_t> t = random_tokens(rng, 2 + static_cast<int64_t>(rng() % 3));
      g.add_turn(t);
      c.add_turn(t);
      what = "turn";
    } else if (op == 2 && gi.size() > 1) {
      const std::size_t k = rng() % gi.size();
      g.evict(gi[k].id);
      c.evict(ci[k].id);
      what = "evict";
    } else if (op == 3 && c.stats().chunk_instances > 1) {
      g.slide(1);
      c.slide(1);
      what = "slide";
    } else if (op == 4 && !c.evicted().empty()) {
      const std::size_t k = rng() % c.evicted().size();
      g.recall(g.evicted()[k]);
      c.recall(c.evicted()[k]);
      what = "recall";
    } else if (op == 5 && gi.size() > 1) {
      std::vector<std::size_t> perm(gi.size());
      for (std::size_t k = 0; k < perm.size(); ++k) perm[k] = k;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<orbit::InstanceId> go_order, co_order;
      for (std::size_t k : perm) {
        go_order.push_back(gi[k].id);
        co_order.push_back(ci[k].id);
      }
      g.reorder(go_order);
      c.reorder(co_order);
      what = "reorder";
    } else if (op == 6 && !gi.empty()) {
      // Fork isolation: the child takes the walk on, the parent must not change.
      const orbit::Logits before = g.logits(query, true);
      orbit::Window gchild = g.fork();
      orbit::Window cchild = c.fork();
      gchild.add_turn({5, 6});
      cchild.add_turn({5, 6});
      CHECK(rel_error(g.logits(query, true), before) == 0.0);
      g = std::move(gchild);
      c = std::move(cchild);
      what = "fork";
    } else {
      continue;
    }
    if (c.instances().empty()) continue;
    const double err = rel_error(g.logits(query, true), c.reference_logits(query, true));
    worst = std::max(worst, err);
    INFO("seed " << seed << " step " << step << " (" << what << ") " << dtype << " " << policy << ": rel error "
                 << err);
    CHECK(err < tolerance(rt::parse_compute_dtype(dtype)));
  }
  return worst;
}

}  // namespace

TEST_CASE("CUDA windows follow random operations like the CPU float32 oracle", "[cuda][window][oracle]") {
  for (const std::string name : {"llama-d64-g4", "qwen2vl-d64", "mla"}) {
    const std::string dir = orbit::test::device_test_model_dir(name);
    for (const std::string dtype : {"float32", "bfloat16"}) {
      for (const std::string policy : {"reprefill", "patch:full:exact"}) {
        const double worst = mirrored_walk(dir, dtype, policy, 3, 14);
        WARN(name << " " << dtype << " " << policy << ": worst window rel error " << worst);
      }
    }
  }
}

TEST_CASE("generate on a CUDA engine runs the paged kernel and agrees with the CPU oracle",
          "[cuda][window][generate]") {
  const std::string dir = orbit::test::device_test_model_dir("llama-d64-g4");
  auto gpu = open(dir, "cuda", "float32");
  auto cpu = open(dir, "cpu", "float32");
  std::mt19937_64 rng(9);
  const std::vector<int64_t> a = random_tokens(rng, 30), b = random_tokens(rng, 25), q = random_tokens(rng, 2);
  orbit::Window g = gpu->new_window(), c = cpu->new_window();
  for (auto* w : {&g, &c}) {
    orbit::Engine& e = w == &g ? *gpu : *cpu;
    w->admit(e.add_tokens(a));
    w->admit(e.add_tokens(b));
    w->add_turn({7, 8, 9});
  }
  orbit::GenerateOptions go;
  go.max_tokens = 8;
  CHECK(g.generate(q, go).tokens == c.generate(q, go).tokens);
  CHECK(gpu->model_info().device == "cuda:0");
}

TEST_CASE("loss by instance on CUDA measures what the CPU engine measures", "[cuda][window][fidelity]") {
  // Blind admissions leave approximate instances; each one's own KL (a forward with it alone served as
  // held) must not depend on the device. float32: the KLs are differences of nearly equal log-probs, so
  // they agree to a relative 1e-2 where the logits agree to 1e-4, with an absolute floor for tiny ones.
  const std::string dir = orbit::test::device_test_model_dir("llama-d64-g4");
  auto gpu = open(dir, "cuda", "float32");
  auto cpu = open(dir, "cpu", "float32");
  std::mt19937_64 rng(21);
  std::vector<std::vector<int64_t>> chunks;
  for (int i = 0; i < 3; ++i) chunks.push_back(random_tokens(rng, 12 + 5 * i));
  const std::vector<int64_t> q = random_tokens(rng, 3);
  std::vector<std::vector<orbit::InstanceLoss>> losses;
  for (orbit::Engine* e : {gpu.get(), cpu.get()}) {
    orbit::WindowOptions o;
    o.policy = orbit::parse_policy("blind");
    orbit::Window w = e->new_window(o);
    for (const auto& c : chunks) w.admit(e->add_tokens(c));
    losses.push_back(w.loss_by_instance(q));
  }
  REQUIRE(losses[0].size() == 2);  // the first chunk sits at position 0: exact
  REQUIRE(losses[1].size() == losses[0].size());
  for (std::size_t i = 0; i < losses[0].size(); ++i) {
    const orbit::InstanceLoss &g = losses[0][i], &c = losses[1][i];
    INFO("instance " << i << ": CUDA KL " << g.measured_kl << ", CPU KL " << c.measured_kl);
    CHECK(g.position == c.position);
    CHECK(g.measured_kl > 0);
    CHECK(std::fabs(g.measured_kl - c.measured_kl) <= 1e-2 * c.measured_kl + 1e-7);
    CHECK(std::fabs(g.kv_change - c.kv_change) <= 1e-3 * c.kv_change + 1e-7);
    CHECK(g.predicted_kl == Approx(c.predicted_kl).epsilon(1e-2));
  }
}

TEST_CASE("a patch formed on CUDA leaves out the residual the CPU measures", "[cuda][reuse]") {
  // The deficit of a chunk in a context (conditioned − canonical), formed into a rank-4 patch on each
  // device: Patch::residual, residual_share and deficit_share are what the planner reads, and must not
  // depend on where they were computed. CUDA factors in float32 (cuSOLVER), the CPU in float64: residual
  // shares agree to 1e-4.
  const std::string dir = orbit::test::device_test_model_dir("llama-d64-g4");
  const auto cpu = rt::load_model(dir);
  const auto gpu = rt::load_model(dir, cuda(at::kFloat));
  std::vector<int64_t> context, chunk;
  for (int64_t i = 0; i < 20; ++i) context.push_back(3 + (i * 41) % 500);
  for (int64_t i = 0; i < 24; ++i) chunk.push_back(5 + (i * 53) % 500);
  std::vector<int64_t> both = context;
  both.insert(both.end(), chunk.begin(), chunk.end());
  const rt::Content whole = cpu->forward(rt::ForwardInput{both, {}}, nullptr, rt::ForwardOptions{}).content;
  const rt::Content alone = cpu->forward(rt::ForwardInput{chunk, {}}, nullptr, rt::ForwardOptions{}).content;
  rt::Content delta_cpu, conditioned_cpu, delta_gpu, conditioned_gpu;
  for (std::size_t l = 0; l < whole.size(); ++l) {
    const rt::LayerKV cond{whole[l].k.narrow(0, 20, 24).contiguous(), whole[l].v.narrow(0, 20, 24).contiguous()};
    const rt::LayerKV d{cond.k - alone[l].k, cond.v - alone[l].v};
    conditioned_cpu.push_back(cond);
    delta_cpu.push_back(d);
    conditioned_gpu.push_back({cond.k.to(at::kCUDA), cond.v.to(at::kCUDA)});
    delta_gpu.push_back({d.k.to(at::kCUDA), d.v.to(at::kCUDA)});
  }
  rt::PatchOptions o;
  o.rank_k = o.rank_v = 4;
  const rt::Patch p_cpu = rt::form_patch(*cpu, delta_cpu, o);
  const rt::Patch p_gpu = rt::form_patch(*gpu, delta_gpu, o);
  REQUIRE(p_gpu.k[0].u.is_cuda());
  INFO("residual CPU " << p_cpu.residual << ", CUDA " << p_gpu.residual);
  CHECK(p_cpu.residual > 0.01);  // rank 4 of 24 leaves something out
  CHECK(p_gpu.residual == Approx(p_cpu.residual).margin(1e-4));
  CHECK(rt::residual_share(delta_gpu, p_gpu) == Approx(p_gpu.residual).margin(1e-4));
  CHECK(rt::deficit_share(delta_gpu, conditioned_gpu) ==
        Approx(rt::deficit_share(delta_cpu, conditioned_cpu)).epsilon(1e-5));
}

TEST_CASE("CUDA windows read patched placements from one canonical page set, as their private copies",
          "[cuda][window][shared]") {
  // 4 windows of the same 3 chunks, each with its own leading turn and chunk order, so every placement's
  // stored patch differs. On the shared engine the paged kernel adds each placement's factors as it reads
  // the chunk's one set of pages; on the other every placement is a patched copy. Same logits within the
  // dtype's tolerance, same greedy answer in float32, and the pool holds each chunk's pages once.
  const std::string dir = orbit::test::device_test_model_dir("llama-d64-g4");
  for (const std::string dtype : {"float32", "bfloat16"}) {
    std::vector<std::shared_ptr<orbit::Engine>> engines;
    for (bool shared : {true, false}) {
      orbit::EngineOptions o;
      o.model = dir;
      o.device = "cuda";
      o.dtype = dtype;
      o.page_size = 4;
      o.pool_bytes = int64_t{64} << 20;
      o.background = orbit::BackgroundMode::kDeferred;
      o.shared_canonicals = shared;
      engines.push_back(orbit::Engine::open(o));
    }
    std::mt19937_64 rng(31);
    std::vector<std::vector<int64_t>> chunks, turns;
    for (int64_t n : {24, 13, 19}) chunks.push_back(random_tokens(rng, n));
    for (int w = 0; w < 4; ++w) turns.push_back(random_tokens(rng, 3));
    const std::vector<int64_t> q = random_tokens(rng, 3);
    std::vector<std::vector<orbit::Window>> windows(2);
    for (std::size_t e = 0; e < 2; ++e) {
      orbit::Engine& engine = *engines[e];
      std::vector<orbit::ChunkRef> refs;
      for (const auto& c : chunks) refs.push_back(engine.add_tokens(c));
      for (int pass = 0; pass < 2; ++pass) {  // the first forms the patches, the second serves them
        windows[e].clear();
        for (int w = 0; w < 4; ++w) {
          orbit::WindowOptions wo;
          wo.policy = orbit::parse_policy("patch:full:noreuse");
          windows[e].push_back(engine.new_window(wo));
          windows[e].back().add_turn(turns[static_cast<std::size_t>(w)]);
          for (int k = 0; k < 3; ++k) windows[e].back().admit(refs[static_cast<std::size_t>((w + k) % 3)]);
        }
        engine.run_background();
      }
    }
    const orbit::EngineStats s = engines[0]->stats(), p = engines[1]->stats();
    CHECK(s.patch_hits == 12);
    CHECK(s.pool_canonical_sets == 3);
    CHECK(s.pool_placements == 12);
    CHECK(s.pool_patches == 12);
    CHECK(p.pool_placements == 0);
    CHECK(p.pool_pages - p.pool_free_pages ==
          4 * s.pool_canonical_pages + (s.pool_pages - s.pool_free_pages) - s.pool_canonical_pages);
    for (std::size_t w = 0; w < 4; ++w) {
      const double err = rel_error(windows[0][w].logits(q, true), windows[1][w].logits(q, true));
      INFO(dtype << " window " << w << ": shared against copies, rel error " << err);
      CHECK(err < tolerance(rt::parse_compute_dtype(dtype)));
      if (dtype != "float32") continue;
      orbit::GenerateOptions g;
      g.max_tokens = 6;
      CHECK(windows[0][w].generate(q, g).tokens == windows[1][w].generate(q, g).tokens);
    }
  }
}
