// The forward pass: incremental decoding over the paged pool equals a full prefill, the content channel
// is position-free, past KV is relocated exactly, and bad input is refused with a clear message.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <numeric>
#include <random>

#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/rope.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::max_abs_diff;

namespace {

// Logits of one input forwarded in other pieces (a prefill then one-token decodes, a chunk at other
// positions) against one forward: the same sums in other orders and blockings, so float32 rounding only.
// Worst 1.6e-5 over the CPU kernels, BLAS cores and thread counts tried (no-AVX, AVX2, AVX-512; 1 to 8
// threads); a key one position off moves them by > 1e-2 (test_model_reference's gapped positions).
constexpr double kSplitLogitTolerance = 2e-4;

const Model& stories() {
  static const std::unique_ptr<Model> model = load_model(orbit::test::stories_path());
  return *model;
}

std::unique_ptr<Model> generated(const std::string& preset) {
  orbit::test::TempDir dir;
  GeneratorOptions options;
  options.config = generator_preset(preset);
  options.seed = 3;
  options.init_std = 0.2;
  generate_model(options, dir / "m");
  return load_model(dir / "m");
}

std::vector<int64_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> out{1};
  while (static_cast<int64_t>(out.size()) < n) out.push_back(dist(rng));
  return out;
}

ForwardResult run(const Model& m, std::vector<int64_t> tokens, LogitsMode mode = LogitsMode::kAll,
                  const PastKV* past = nullptr, at::Tensor positions = {}) {
  ForwardInput in;
  in.tokens = std::move(tokens);
  in.positions = std::move(positions);
  ForwardOptions o;
  o.logits = mode;
  return m.forward(in, past, o);
}

at::Tensor range(int64_t start, int64_t n) { return at::arange(start, start + n, at::kLong); }

}  // namespace

TEST_CASE("incremental decode over the paged pool equals a full prefill", "[model][kv_pool][cpu]") {
  for (const std::string which : {"stories260K", "tiny-qwen2"}) {
    std::unique_ptr<Model> owned = which == "stories260K" ? nullptr : generated(which);
    const Model& m = owned ? *owned : stories();
    const ModelConfig& c = m.config();
    INFO(which);
    const std::vector<int64_t> tokens = random_tokens(45, c.vocab_size, 11);
    const at::Tensor full = run(m, tokens).logits;

    KVPool pool({c.num_layers, /*num_pages=*/16, /*page_size=*/4, {c.kv_dim(), c.kv_dim()}, at::kFloat});
    PagedSequence seq(pool, c.num_kv_heads, c.head_dim);
    // Prefill 13 tokens, then decode one token at a time (odd sizes cross page boundaries).
    const int64_t prefill = 13;
    ForwardResult first = run(m, {tokens.begin(), tokens.begin() + prefill});
    CHECK(max_abs_diff(first.logits, full.narrow(0, 0, prefill)) < kSplitLogitTolerance);
    REQUIRE(seq.append(first.content, range(0, prefill)).is_ok());
    for (int64_t t = prefill; t < static_cast<int64_t>(tokens.size()); ++t) {
      const PastKV past = seq.gather();
      ForwardResult step = run(m, {tokens[static_cast<std::size_t>(t)]}, LogitsMode::kLast, &past);
      INFO("token " << t);
      REQUIRE(max_abs_diff(step.logits, full.narrow(0, t, 1)) < kSplitLogitTolerance);
      REQUIRE(seq.append(step.content, range(t, 1)).is_ok());
      pool.verify_integrity();
    }
    CHECK(seq.length() == static_cast<int64_t>(tokens.size()));

    // A fork decodes its own continuation without disturbing the parent.
    PagedSequence child = seq.fork();
    const PastKV before = seq.gather();
    const std::vector<int64_t> extra{5, 6, 7};
    {
      const PastKV past = child.gather();
      REQUIRE(child.append(run(m, extra, LogitsMode::kNone, &past).content, range(seq.length(), 3)).is_ok());
    }
    const PastKV after = seq.gather();
    for (int64_t l = 0; l < c.num_layers; ++l) CHECK(at::equal(before.layers[l].k, after.layers[l].k));
    std::vector<int64_t> longer = tokens;
    longer.insert(longer.end(), extra.begin(), extra.end());
    const PastKV child_past = child.gather();
    ForwardResult next = run(m, {9}, LogitsMode::kLast, &child_past);
    longer.push_back(9);
    CHECK(max_abs_diff(next.logits, run(m, longer, LogitsMode::kLast).logits) < 1e-4);
    pool.verify_integrity();
  }
}

TEST_CASE("the content channel is pre-RoPE keys and values", "[model][cpu]") {
  const Model& m = stories();
  const ModelConfig& c = m.config();
  const std::vector<int64_t> tokens{1, 42, 17, 300};
  ForwardResult r = run(m, tokens, LogitsMode::kNone);
  REQUIRE(static_cast<int64_t>(r.content.size()) == c.num_layers);
  CHECK(r.content[0].k.sizes() == at::IntArrayRef({4, c.num_kv_heads, c.head_dim}));
  // Layer 0: k = Wk · RMSNorm(embedding), computed here by hand.
  at::Tensor x = m.embed(tokens);
  at::Tensor h = x * at::rsqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps) * m.weights().layers[0].attn_norm;
  at::Tensor k = at::matmul(h, m.weights().layers[0].wk.t()).view({4, c.num_kv_heads, c.head_dim});
  at::Tensor v = at::matmul(h, m.weights().layers[0].wv.t()).view({4, c.num_kv_heads, c.head_dim});
  CHECK(max_abs_diff(r.content[0].k, k) < 1e-4);
  CHECK(max_abs_diff(r.content[0].v, v) < 1e-4);
}

TEST_CASE("a chunk computed alone is position-free: shifting its positions leaves every layer's content unchanged",
          "[model][cpu]") {
  const Model& m = stories();
  const std::vector<int64_t> chunk = random_tokens(20, m.config().vocab_size, 5);
  ForwardResult at0 = run(m, chunk, LogitsMode::kAll, nullptr, range(0, 20));
  // Past layer 0 the content goes through attention over keys rotated to other angles: the same scores up to
  // float32 rounding, which the next layers carry. Worst max|ΔK| over the CPU kernels, BLAS cores and thread
  // counts tried (no-AVX, AVX2, AVX-512; 1 to 8 threads) is 1.9e-5, |ΔV| 1.7e-6. Content stored after its
  // rotation would differ by the rotation itself: the third check shows it is > 0.1 (3.4 at the least).
  constexpr double kContentTolerance = 2e-4;
  for (int64_t shift : {1, 37, 400}) {
    ForwardResult moved = run(m, chunk, LogitsMode::kAll, nullptr, range(shift, 20));
    INFO("shift " << shift);
    for (std::size_t l = 0; l < at0.content.size(); ++l) {
      CHECK(max_abs_diff(at0.content[l].k, moved.content[l].k) < kContentTolerance);
      CHECK(max_abs_diff(at0.content[l].v, moved.content[l].v) < kContentTolerance);
      CHECK(max_abs_diff(rope_apply(m.config().rope, at0.content[l].k, range(0, 20)),
                         rope_apply(m.config().rope, moved.content[l].k, range(shift, 20))) > 1e-1);
    }
    CHECK(max_abs_diff(at0.logits, moved.logits) < kSplitLogitTolerance);
  }
}

TEST_CASE("past content relocated to new positions equals a prefill at those positions", "[model][cpu]") {
  // Prefill A·B at positions 100.., storing A's content computed at positions 0..; the forward rotates
  // the stored content to 100.. on the fly, which must equal a prefill of A·B at 100.. exactly.
  const Model& m = stories();
  const std::vector<int64_t> a = random_tokens(12, 512, 8), b{7, 8, 9, 10};
  std::vector<int64_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const ForwardResult reference = run(m, ab, LogitsMode::kAll, nullptr, range(100, 16));
  const ForwardResult a_at_zero = run(m, a, LogitsMode::kNone, nullptr, range(0, 12));
  PastKV past{a_at_zero.content, range(100, 12)};
  const ForwardResult tail = run(m, b, LogitsMode::kAll, &past, range(112, 4));
  CHECK(max_abs_diff(tail.logits, reference.logits.narrow(0, 12, 4)) < 1e-4);
}

TEST_CASE("before_layer runs before each layer reads the past, so a past can arrive layer by layer", "[model][cpu]") {
  // The past starts as zeros and before_layer(l) writes layer l's real content into it, as a copy
  // stream's wait would; the logits must equal those of a forward over the complete past, which fails
  // if any layer were read before its call.
  const Model& m = stories();
  const std::vector<int64_t> a = random_tokens(10, 512, 9), b{5, 6, 7};
  const ForwardResult a_content = run(m, a, LogitsMode::kNone);
  PastKV full{a_content.content, range(0, 10)};
  const ForwardResult expected = run(m, b, LogitsMode::kAll, &full, range(10, 3));

  PastKV streamed{{}, range(0, 10)};
  for (const LayerKV& kv : a_content.content) streamed.layers.push_back({at::zeros_like(kv.k), at::zeros_like(kv.v)});
  std::vector<int64_t> calls;
  ForwardInput in;
  in.tokens = b;
  in.positions = range(10, 3);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  o.before_layer = [&](int64_t l) {
    calls.push_back(l);
    streamed.layers[static_cast<size_t>(l)].k.copy_(a_content.content[static_cast<size_t>(l)].k);
    streamed.layers[static_cast<size_t>(l)].v.copy_(a_content.content[static_cast<size_t>(l)].v);
  };
  const ForwardResult got = m.forward(in, &streamed, o);
  std::vector<int64_t> order(static_cast<size_t>(m.config().num_layers));
  std::iota(order.begin(), order.end(), 0);
  CHECK(calls == order);
  CHECK(max_abs_diff(got.logits, expected.logits) < 1e-5);
}

TEST_CASE("embeddings in place of token ids give the same logits", "[model][cpu]") {
  const Model& m = stories();
  const std::vector<int64_t> tokens = random_tokens(9, 512, 4);
  ForwardInput in;
  in.embeddings = m.embed(tokens).to(at::kDouble);  // any floating dtype is accepted
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  CHECK(max_abs_diff(m.forward(in, nullptr, o).logits, run(m, tokens).logits) < 1e-6);
}

TEST_CASE("bad forward input is refused with the argument named", "[model][errors][cpu]") {
  const Model& m = stories();
  CHECK_THROWS_WITH(run(m, {1, 512}), Contains("tokens[1] = 512") && Contains("[0, 512)"));
  CHECK_THROWS_WITH(run(m, {1, -3}), Contains("tokens[1] = -3"));
  CHECK_THROWS_WITH(run(m, {1, 2}, LogitsMode::kAll, nullptr, range(511, 2)),
                    Contains("position 512") && Contains("max_position_embeddings = 512"));
  CHECK_THROWS_WITH(run(m, {1, 2}, LogitsMode::kAll, nullptr, at::tensor({-1, 0}, at::kLong)),
                    Contains("position -1 is negative"));
  CHECK_THROWS_WITH(run(m, {1, 2}, LogitsMode::kAll, nullptr, range(0, 3)), Contains("input.positions"));
  ForwardInput both;
  both.tokens = {1};
  both.embeddings = at::zeros({1, 64});
  CHECK_THROWS_WITH(m.forward(both), Contains("exactly one"));
  ForwardInput wrong_width;
  wrong_width.embeddings = at::zeros({2, 63});
  CHECK_THROWS_WITH(m.forward(wrong_width), Contains("hidden_size=64"));
  PastKV short_past;
  short_past.layers.resize(2);
  CHECK_THROWS_WITH(run(m, {1}, LogitsMode::kLast, &short_past), Contains("past has 2 layers"));
}

TEST_CASE("partial recompute: exact cached KV gives exact results, all-recompute is a plain forward", "[model][cpu]") {
  const Model& m = stories();
  const ModelConfig& c = m.config();
  const std::vector<int64_t> ctx = random_tokens(10, 512, 21), chunk = random_tokens(12, 512, 22);
  const ForwardResult ctx_run = run(m, ctx, LogitsMode::kNone);
  PastKV past{ctx_run.content, range(0, 10)};
  const ForwardResult exact = run(m, chunk, LogitsMode::kAll, &past, range(10, 12));
  const ForwardResult alone = run(m, chunk, LogitsMode::kNone, nullptr, range(0, 12));

  auto partial = [&](std::vector<int64_t> indices, const std::vector<LayerKV>& cached) {
    ForwardInput in;
    in.tokens = chunk;
    in.positions = range(10, 12);
    ForwardOptions o;
    o.logits = LogitsMode::kAll;
    o.recompute = at::tensor(at::ArrayRef<int64_t>(indices), at::kLong);
    o.cached = cached;
    return m.forward(in, &past, o);
  };
  // Recomputing every token ignores the cache: a plain forward.
  std::vector<int64_t> all(12);
  for (int64_t i = 0; i < 12; ++i) all[static_cast<std::size_t>(i)] = i;
  ForwardResult full = partial(all, alone.content);
  CHECK(max_abs_diff(full.logits, exact.logits) < 1e-4);
  for (int64_t l = 0; l < c.num_layers; ++l) CHECK(max_abs_diff(full.content[l].k, exact.content[l].k) < 1e-5);

  // With the exact KV cached, recomputing a subset reproduces the exact rows.
  ForwardResult some = partial({0, 5, 11}, exact.content);
  REQUIRE(some.logits.size(0) == 3);
  CHECK(max_abs_diff(some.logits[1], exact.logits[5]) < 1e-4);
  CHECK(max_abs_diff(some.logits[2], exact.logits[11]) < 1e-4);

  // With the blind (alone) KV cached, untouched rows keep it and recomputed rows move towards exact.
  ForwardResult blindish = partial({0, 1}, alone.content);
  CHECK(at::equal(blindish.content[3].k[7], alone.content[3].k[7]));
  CHECK(max_abs_diff(blindish.content[0].k[1], exact.content[0].k[1]) < 1e-5);  // layer 0 sees the same inputs

  CHECK_THROWS_WITH(partial({3, 2}, alone.content), Contains("strictly ascending"));
  CHECK_THROWS_WITH(partial({12}, alone.content), Contains("outside the input"));

  // max_layers: the first layers' content only, identical to a full run's.
  ForwardOptions two;
  two.logits = LogitsMode::kNone;
  two.max_layers = 2;
  ForwardInput in;
  in.tokens = chunk;
  ForwardResult shallow = m.forward(in, nullptr, two);
  REQUIRE(shallow.content.size() == 2);
  CHECK(at::equal(shallow.content[1].v, alone.content[1].v));
  two.logits = LogitsMode::kLast;
  CHECK_THROWS_WITH(m.forward(in, nullptr, two), Contains("logits need every layer"));
}

}  // namespace ORBIT_TEST_FILE
