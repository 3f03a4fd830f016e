// MLA's absorbed attention form (MlaForm, model.h; attention_mla.cpp) against its naive form on tiny-mla
// variants (a q low-rank path, a full q_proj, YaRN with a RoPE-part factor and a softmax-scale multiplier of
// its own): decode steps and short queries after a past whose positions have gaps (RoPE on k_pe matters),
// partial recompute (the deficit rows of a patch), key_attention, greedy generation, bfloat16 (each form's
// distance from the float32 logits, absorbed / naive: 0.05 / 0.06 at R = 1, 0.15 / 0.11 at R = 5, logits up to
// 5), kAuto's choice and the refusals of a form that does not run.
//
// Tolerance: the two forms compute the same sums in other orders ((q·W_UK)·c against q·(W_UK·c), W_UV·(Σ p·c)
// against Σ p·(W_UV·c)) in float32, so their logits may differ by float32 rounding only, which
// float32_logit_drift bounds for reductions as long as the longest of the layer's (hidden, intermediate, keys,
// r_kv): measured at most 8.2e-6 against bounds of 5e-5 to 7e-5. Dropping the rotation of k_pe in the absorbed
// keys moved them by 4.7, YaRN's softmax-scale multiplier (1/sqrt(head_dim) alone) by 0.77, the mask of later
// keys (R > 1) by 0.30 (checked by breaking attention_mla.cpp).
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <random>
#include <set>

#include "float_tolerance.h"
#include "orbit/common/error.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "src/attention.h"  // mla_absorbed_cheaper
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::max_abs_diff;

namespace {

std::unique_ptr<Model> generated(const ModelConfig& config) {
  orbit::test::TempDir dir;
  GeneratorOptions options;
  options.config = config;
  options.seed = 5;
  options.init_std = 0.2;
  generate_model(options, dir / "m");
  return load_model(dir / "m");
}

ModelConfig variant(const std::string& which) {
  ModelConfig c = generator_preset("tiny-mla");
  if (which == "no q low-rank") c.mla.q_lora_rank = 0;
  if (which == "yarn") {
    c.rope.scaling = RopeScaling::kYarn;
    c.rope.factor = 4.0;
    c.rope.mscale = 1.0;  // ≠ mscale_all_dim: the RoPE part gets a factor of its own, the scale a multiplier
    c.rope.mscale_all_dim = 0.5;
    c.rope.original_max_position_embeddings = 256;
  }
  return c;
}

std::vector<int64_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  return orbit::test::random_tokens(rng, n, vocab);
}

// Positions from..: 3 apart, so that every key's rotation differs from its index's.
at::Tensor gapped(int64_t from, int64_t n) { return at::arange(0, n, at::kLong).mul(3).add(from); }

ForwardResult forward(const Model& m, const std::vector<int64_t>& tokens, const at::Tensor& positions,
                      const PastKV* past, MlaForm form, ForwardOptions o = {}) {
  ForwardInput in;
  in.tokens = tokens;
  in.positions = positions;
  o.logits = LogitsMode::kAll;
  o.mla_form = form;
  return m.forward(in, past, o);
}

// The float32 drift of `m`'s logits over `keys` keys (header comment), for logits as large as `logits`'.
double bound(const Model& m, int64_t keys, const at::Tensor& logits) {
  const ModelConfig& c = m.config();
  orbit::test::Float32Shape s;
  s.layers = c.num_layers;
  s.reduction = std::max({c.hidden_size, c.intermediate_size, keys, c.mla.kv_lora_rank});
  s.logit_scale = logits.abs().max().item<double>();
  return orbit::test::float32_logit_drift(s);
}

// A past of `n` tokens at positions 5, 8, ... in content form.
PastKV past_of(const Model& m, int64_t n) {
  const at::Tensor positions = gapped(5, n);
  return {forward(m, random_tokens(n, m.config().vocab_size, 11), positions, nullptr, MlaForm::kNaive).content,
          positions};
}

}  // namespace

TEST_CASE("MLA absorbed: equals the naive form at decode and short-query shapes", "[mla][cpu]") {
  for (const std::string which : {"q low-rank", "no q low-rank", "yarn"}) {
    const auto m = generated(variant(which));
    const PastKV past = past_of(*m, 60);
    for (int64_t R : {1, 2, 5, 16}) {
      INFO(which << ", " << R << " queries after 60 keys");
      const std::vector<int64_t> tokens = random_tokens(R, m->config().vocab_size, static_cast<uint32_t>(R));
      const at::Tensor positions = gapped(5 + 3 * 60, R);
      ForwardOptions o;
      o.key_attention = true;
      const ForwardResult naive = forward(*m, tokens, positions, &past, MlaForm::kNaive, o);
      const ForwardResult absorbed = forward(*m, tokens, positions, &past, MlaForm::kAbsorbed, o);
      REQUIRE(absorbed.logits.sizes() == naive.logits.sizes());
      CHECK(naive.logits.abs().max().item<double>() > 0.5);  // not a degenerate model
      const double diff = max_abs_diff(absorbed.logits, naive.logits);
      CHECK(diff <= bound(*m, 60 + R, naive.logits));
      // Content of layers past the first depends on the attention before it.
      for (std::size_t l = 0; l < naive.content.size(); ++l) {
        CHECK(max_abs_diff(absorbed.content[l].v, naive.content[l].v) <= bound(*m, 60 + R, naive.content[l].v));
      }
      // Where the last token looks: probabilities, the same up to rounding.
      REQUIRE(absorbed.key_attention.sizes() == naive.key_attention.sizes());
      CHECK(max_abs_diff(absorbed.key_attention, naive.key_attention) <= bound(*m, 60 + R, naive.key_attention));
      // kAuto takes the absorbed form here (few queries over many keys): its numbers bit for bit.
      CHECK(max_abs_diff(forward(*m, tokens, positions, &past, MlaForm::kAuto, o).logits, absorbed.logits) == 0.0);
    }
  }
}

TEST_CASE("MLA absorbed: in bfloat16 on the CPU as near the float32 logits as the naive form", "[mla][cpu]") {
  orbit::test::TempDir dir;
  GeneratorOptions g;
  g.config = variant("q low-rank");
  g.seed = 5;
  g.init_std = 0.2;
  generate_model(g, dir / "m");
  const auto exact = load_model(dir / "m");
  const auto m = load_model(dir / "m", ComputeTarget{c10::Device(c10::kCPU), at::kBFloat16});
  const PastKV past = past_of(*exact, 60);  // float32 content, rounded by each bfloat16 forward
  for (int64_t R : {1, 5}) {
    INFO(R << " queries");
    const std::vector<int64_t> tokens = random_tokens(R, m->config().vocab_size, 41);
    const at::Tensor positions = gapped(5 + 3 * 60, R);
    const at::Tensor want = forward(*exact, tokens, positions, &past, MlaForm::kNaive).logits;
    const double naive = max_abs_diff(forward(*m, tokens, positions, &past, MlaForm::kNaive).logits, want);
    const double absorbed = max_abs_diff(forward(*m, tokens, positions, &past, MlaForm::kAbsorbed).logits, want);
    // Both round every product's inputs to bfloat16 (8 bits): neither form may be much further off than the
    // other, nor further than a few percent of the largest logit.
    CHECK(absorbed <= 2 * naive);
    CHECK(absorbed <= 0.05 * want.abs().max().item<double>());
    WARN("bfloat16, R = " << R << ": naive " << naive << ", absorbed " << absorbed << " from float32 (largest logit "
                          << want.abs().max().item<double>() << ")");
  }
}

TEST_CASE("MLA absorbed: partial recompute (deficit rows) over cached rows equals the naive form", "[mla][cpu]") {
  const auto m = generated(variant("yarn"));
  const PastKV past = past_of(*m, 30);
  const std::vector<int64_t> tokens = random_tokens(8, m->config().vocab_size, 21);
  const at::Tensor positions = gapped(5 + 3 * 30, 8);
  ForwardOptions o;
  // The cached rows: the same tokens' content computed alone at other positions (as a reused chunk's).
  o.cached = forward(*m, tokens, gapped(0, 8), nullptr, MlaForm::kNaive).content;
  o.recompute = at::tensor(std::vector<int64_t>{1, 4, 6}, at::kLong);
  const ForwardResult naive = forward(*m, tokens, positions, &past, MlaForm::kNaive, o);
  const ForwardResult absorbed = forward(*m, tokens, positions, &past, MlaForm::kAbsorbed, o);
  REQUIRE(absorbed.logits.sizes() == at::IntArrayRef({3, m->config().vocab_size}));
  CHECK(max_abs_diff(absorbed.logits, naive.logits) <= bound(*m, 38, naive.logits));
}

TEST_CASE("MLA absorbed: greedy generation picks the same tokens as the naive form", "[mla][cpu]") {
  const auto m = generated(variant("q low-rank"));
  const std::vector<int64_t> prompt = random_tokens(12, m->config().vocab_size, 31);
  std::vector<std::vector<int64_t>> picked;
  for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed, MlaForm::kAuto}) {
    ForwardResult r = forward(*m, prompt, {}, nullptr, form);
    PastKV past{r.content, at::arange(0, 12, at::kLong)};
    std::vector<int64_t> out;
    for (int64_t t = 12; t < 44; ++t) {
      out.push_back(r.logits[-1].argmax().item<int64_t>());
      r = forward(*m, {out.back()}, at::tensor(std::vector<int64_t>{t}, at::kLong), &past, form);
      for (std::size_t l = 0; l < past.layers.size(); ++l) {
        past.layers[l].k = at::cat({past.layers[l].k, r.content[l].k});
        past.layers[l].v = at::cat({past.layers[l].v, r.content[l].v});
      }
      past.positions = at::arange(0, t + 1, at::kLong);
    }
    picked.push_back(out);
  }
  CHECK(picked[1] == picked[0]);
  CHECK(picked[2] == picked[0]);
  // Not one token over and over: the steps see different pasts.
  CHECK(std::set<int64_t>(picked[0].begin(), picked[0].end()).size() > 4);
}

TEST_CASE("MLA absorbed: kAuto's rule counts multiply-adds", "[mla][cpu]") {
  using orbit::runtime::detail::mla_absorbed_cheaper;
  // DeepSeek-V2-Lite: absorbed while R < 131072·S / (131072 + 768·S) (attention.h).
  const MlaConfig lite{0, 512, 128, 64, 128};
  CHECK(mla_absorbed_cheaper(lite, 1, 2));
  CHECK(!mla_absorbed_cheaper(lite, 1, 1));
  CHECK(mla_absorbed_cheaper(lite, 16, 4096));
  CHECK(mla_absorbed_cheaper(lite, 170, 1 << 20));
  CHECK(!mla_absorbed_cheaper(lite, 171, 1 << 20));
  CHECK(!mla_absorbed_cheaper(lite, 4096, 4096));  // a prefill stays naive
  // tiny-mla: r_kv 32, d_nope 16, d_rope 8, d_v 12: absorbed while R < 896·S / (896 + 36·S).
  const MlaConfig tiny = generator_preset("tiny-mla").mla;
  CHECK(mla_absorbed_cheaper(tiny, 1, 60));
  CHECK(mla_absorbed_cheaper(tiny, 16, 76));
  CHECK(!mla_absorbed_cheaper(tiny, 20, 76));
  CHECK(!mla_absorbed_cheaper(tiny, 60, 60));
}

TEST_CASE("MLA absorbed: the shortest past the rule takes absorbed (Model::attention_path says it)", "[mla][cpu]") {
  using orbit::runtime::detail::mla_absorbed_cheaper;
  using orbit::runtime::detail::mla_absorbed_min_past;
  const MlaConfig lite{0, 512, 128, 64, 128};
  const MlaConfig tiny = generator_preset("tiny-mla").mla;
  CHECK(mla_absorbed_min_past(lite, 1) == 1);
  CHECK(mla_absorbed_min_past(lite, 171) == -1);
  CHECK(mla_absorbed_min_past(tiny, 1) == 1);
  CHECK(mla_absorbed_min_past(tiny, 16) == 29);  // S > 16·896 / (896 − 16·36) = 44.8
  CHECK(mla_absorbed_min_past(tiny, 25) == -1);  // 25·36 ≥ 896
  for (const MlaConfig& mla : {lite, tiny}) {
    for (int64_t r = 1; r <= 200; ++r) {
      const int64_t past = mla_absorbed_min_past(mla, r);
      INFO(mla.kv_lora_rank << " r " << r << " past " << past);
      if (past < 0) {
        CHECK(!mla_absorbed_cheaper(mla, r, r + (int64_t{1} << 40)));
        continue;
      }
      CHECK(mla_absorbed_cheaper(mla, r, r + past));
      CHECK(mla_absorbed_cheaper(mla, r, r + past + 1000));
      if (past > 0) CHECK(!mla_absorbed_cheaper(mla, r, r + past - 1));
    }
  }
}

TEST_CASE("MLA absorbed: a form that does not run is refused naming options.mla_form", "[mla][cpu]") {
  const auto gqa = generated(generator_preset("tiny-llama"));
  for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
    CHECK_THROWS_WITH(forward(*gqa, {1, 2}, {}, nullptr, form), Contains("options.mla_form") && Contains("MLA models"));
  }
  CHECK_NOTHROW(forward(*gqa, {1, 2}, {}, nullptr, MlaForm::kAuto));
  const auto m = generated(variant("q low-rank"));
  DecodeCache cache(*m);
  const PastKV past = cache.past(cache.open(nullptr));
  // On the CPU the cache's slot holds the latent (decode_cache.h): kAuto and kAbsorbed attend over it, kNaive
  // is refused.
  CHECK_THROWS_WITH(forward(*m, {1, 2}, {}, &past, MlaForm::kNaive),
                    Contains("options.mla_form = naive") && Contains("decode cache"));
  CHECK_NOTHROW(forward(*m, {1, 2}, {}, &past, MlaForm::kAuto));
  CHECK_NOTHROW(forward(*m, {3}, {}, &past, MlaForm::kAbsorbed));
  // With dynamic-NTK RoPE its slots hold the latent too (k_pe rotated when read): the same forms.
  ModelConfig dyn = variant("q low-rank");
  dyn.rope.scaling = RopeScaling::kDynamicNtk;
  dyn.rope.factor = 2.0;
  const auto d = generated(dyn);
  DecodeCache rotated_at_read(*d);
  const PastKV slot = rotated_at_read.past(rotated_at_read.open(nullptr));
  CHECK_THROWS_WITH(forward(*d, {1, 2}, {}, &slot, MlaForm::kNaive),
                    Contains("options.mla_form = naive") && Contains("decode cache") && Contains("latent"));
  CHECK_NOTHROW(forward(*d, {1, 2}, {}, &slot, MlaForm::kAbsorbed));
}

}  // namespace ORBIT_TEST_FILE
