// ForwardOptions::key_attention: the last computed token's softmax weights over its keys, averaged over heads
// and layers. Layer 0 against the formula computed here from the weights and the forward's own content; all
// layers alike whether the keys come from no past, a contiguous past, a partial recompute or a decode cache's
// slot, for every attention family (GQA, M-RoPE, MLA); and the weights of a batch's sequences are each their own.
// Under dynamic-NTK RoPE a decode cache keeps its keys unrotated and rotates them when read: two slots of one
// cached group (GQA's rows through the ATen path, MLA's latent rows) decoding across the anchor give at every
// step the weights of Model::forward over a contiguous past grown by its own content (they were undefined
// before).
// Checked by breaking the runtime: with the slots' rows read unrotated the weights move by 0.017 to 0.33 (96 of
// 288 assertions fail); with every member reading the group's first slot's read tables, by 2.9e-4 to 0.080
// (32 fail).
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "forward_batch_cases.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/rope.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;

namespace {

ForwardResult run(const Model& m, const std::vector<int64_t>& tokens, const PastKV* past, int64_t layers = 0) {
  ForwardInput in;
  in.tokens = tokens;
  ForwardOptions o;
  o.key_attention = true;
  o.max_layers = layers;
  if (layers > 0) o.logits = LogitsMode::kNone;
  return m.forward(in, past, o);
}

// Layer 0's weights of the last of `tokens` (no past), from the embedding, the first norm, wq and the
// forward's content (keys before rotation).
at::Tensor layer0_by_hand(const Model& m, const std::vector<int64_t>& tokens, const LayerKV& content) {
  const ModelConfig& c = m.config();
  const LayerWeights& w = m.weights().layers[0];
  const auto T = static_cast<int64_t>(tokens.size());
  const at::Tensor x = m.embed({tokens.back()}).to(at::kFloat).view({1, -1});
  const at::Tensor h = x * at::rsqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps) * w.attn_norm.to(at::kFloat);
  const at::Tensor positions = at::arange(T, at::kLong);
  const at::Tensor q = rope_apply(c.rope, at::matmul(h, w.wq.to(at::kFloat).t()).view({1, c.num_heads, c.head_dim}),
                                  positions.narrow(0, T - 1, 1))[0];
  const at::Tensor k = rope_apply(c.rope, content.k.to(at::kFloat), positions);  // [T, H_kv, d]
  const int64_t G = c.num_heads / c.num_kv_heads;
  at::Tensor sum = at::zeros({T}, at::kFloat);
  for (int64_t head = 0; head < c.num_heads; ++head) {
    const at::Tensor scores = at::matmul(k.select(1, head / G), q[head]) / std::sqrt(static_cast<double>(c.head_dim));
    sum += at::softmax(scores, 0);
  }
  return sum / static_cast<double>(c.num_heads);
}

}  // namespace

TEST_CASE("key_attention: layer 0 is the softmax of the last query against the rotated keys") {
  const auto m = load_model(orbit::test::stories_path());
  const std::vector<int64_t> tokens = orbit::test::case_tokens(*m, 24, 7);
  ForwardInput in;
  in.tokens = tokens;
  ForwardOptions o;
  o.key_attention = true;
  o.max_layers = 1;
  o.logits = LogitsMode::kNone;
  const ForwardResult r = m->forward(in, nullptr, o);
  REQUIRE(r.key_attention.defined());
  REQUIRE(r.key_attention.size(0) == 24);
  CHECK(r.key_attention.device().is_cpu());
  CHECK(orbit::test::max_abs_diff(r.key_attention, layer0_by_hand(*m, tokens, r.content[0])) < 1e-5);
  CHECK(std::abs(r.key_attention.sum().item<double>() - 1.0) < 1e-5);
}

TEST_CASE("key_attention: the same weights whether the keys come from no past, a past or a decode cache") {
  std::vector<std::string> paths{orbit::test::stories_path(), std::string(ORBIT_MODELS_DIR) + "/tinystories-656k"};
  for (const std::string& name : orbit::test::device_test_models()) {  // GQA widths, M-RoPE, MLA
    paths.push_back(orbit::test::device_test_model_dir(name));
  }
  for (const std::string& path : paths) {
    INFO(path);
    const auto m = load_model(path);
    const std::vector<int64_t> tokens = orbit::test::case_tokens(*m, 40, 3);
    const std::vector<int64_t> head(tokens.begin(), tokens.end() - 3), tail(tokens.end() - 3, tokens.end());
    const at::Tensor whole = run(*m, tokens, nullptr).key_attention;
    REQUIRE(whole.size(0) == 40);
    CHECK(std::abs(whole.sum().item<double>() - 1.0) < 1e-5);

    const auto past = orbit::test::contiguous_past(*m, head);
    CHECK(orbit::test::max_abs_diff(run(*m, tail, past.get()).key_attention, whole) < 1e-5);

    // A partial recompute that leaves the last input token to its cached KV: the last recomputed token's
    // keys end at itself.
    ForwardInput in;
    in.tokens = tail;
    ForwardOptions partial;
    partial.key_attention = true;
    partial.recompute = at::arange(2, at::kLong);
    partial.cached = run(*m, tail, past.get()).content;
    const at::Tensor before_last = run(*m, {tokens.begin(), tokens.end() - 1}, nullptr).key_attention;
    CHECK(orbit::test::max_abs_diff(m->forward(in, past.get(), partial).key_attention, before_last) < 1e-5);

    DecodeCache cache(*m);
    const int64_t other = cache.open(nullptr);  // an empty slot before it: only the sequence's own rows count
    const int64_t slot = cache.open(past.get());
    const PastKV cached = cache.past(slot);
    const ForwardResult r = run(*m, tail, &cached);
    REQUIRE(r.key_attention.defined());
    CHECK(orbit::test::max_abs_diff(r.key_attention, whole) < 1e-5);
    cache.close(slot);
    cache.close(other);
  }
}

TEST_CASE("key_attention: each sequence of a batch gets its own weights, and none unless asked") {
  const auto m = load_model(orbit::test::stories_path());
  const std::vector<int64_t> a = orbit::test::case_tokens(*m, 12, 1), b = orbit::test::case_tokens(*m, 12, 2);
  ForwardInput ia, ib;
  ia.tokens = a;
  ib.tokens = b;
  ForwardOptions asked, plain;
  asked.key_attention = true;
  const std::vector<ForwardResult> both = m->forward_batch({{&ia, nullptr, &asked}, {&ib, nullptr, &plain}});
  CHECK(orbit::test::max_abs_diff(both[0].key_attention, run(*m, a, nullptr).key_attention) < 1e-5);
  CHECK_FALSE(both[1].key_attention.defined());
  const std::vector<ForwardResult> two = m->forward_batch({{&ia, nullptr, &asked}, {&ib, nullptr, &asked}});
  CHECK(orbit::test::max_abs_diff(two[1].key_attention, run(*m, b, nullptr).key_attention) < 1e-5);
}

namespace {

// A copy of the model at `path` with dynamic-NTK RoPE anchored at 24 tokens (factor 2): a decode past it turns
// its keys at angles that change with every step's window, so a decode cache keeps them unrotated and rotates
// them when read.
std::unique_ptr<Model> dynamic_copy(const std::string& path) {
  const auto m = load_model(path);
  ModelConfig dyn = m->config();
  dyn.rope.scaling = RopeScaling::kDynamicNtk;
  dyn.rope.factor = 2.0;
  dyn.max_position_embeddings = dyn.rope.max_position_embeddings = 24;
  ModelWeights w = m->weights();
  return std::make_unique<Model>(dyn, std::move(w), path + ", dynamic NTK at 24");
}

}  // namespace

TEST_CASE("key_attention: a dynamic-NTK decode cache's slots give the weights of their keys rotated when read") {
  // stories260K (GQA, its rows through the ATen path) and binding-mla (the latent layout: [c_KV ‖ k_pe], k_pe
  // rotated when read).
  for (const std::string& path : {orbit::test::stories_path(), std::string(ORBIT_MODELS_DIR) + "/binding-mla"}) {
    INFO(path);
    const auto m = dynamic_copy(path);
    const auto bound = orbit::test::float32_bound(*m, 40);
    DecodeCache cache(*m);
    // Two slots of one cached group, 16 and 10 tokens long, after a free slot: their windows differ (so do
    // their read tables) and their rows sit at slots 1 and 2 of the group's tables. The reference decodes each
    // over a contiguous past grown by its own content (a decode's earlier rows were computed at their own
    // windows: a whole prefill past the anchor would compute them at the last one).
    const int64_t free_slot = cache.open(nullptr);
    const std::vector<std::vector<int64_t>> tokens{orbit::test::case_tokens(*m, 40, 5),
                                                   orbit::test::case_tokens(*m, 34, 6)};
    std::vector<PastKV> plain{*orbit::test::contiguous_past(*m, {tokens[0].begin(), tokens[0].begin() + 16}),
                              *orbit::test::contiguous_past(*m, {tokens[1].begin(), tokens[1].begin() + 10})};
    const std::vector<int64_t> slots{cache.open(&plain[0]), cache.open(&plain[1])};
    cache.close(free_slot);
    ForwardOptions o;
    o.key_attention = true;
    double worst = 0;
    // Windows 17..40 and 11..34: below the anchor, at it and past it.
    for (int64_t step = 0; step < 24; ++step) {
      INFO("step " << step);
      std::vector<ForwardInput> inputs(2);
      std::vector<PastKV> pasts(2);
      std::vector<SequenceForward> batch;
      for (std::size_t i = 0; i < 2; ++i) {
        inputs[i].tokens = {tokens[i][static_cast<std::size_t>(plain[i].length())]};
        pasts[i] = cache.past(slots[i]);
        batch.push_back({&inputs[i], &pasts[i], &o});
      }
      const std::vector<ForwardResult> got = m->forward_batch(batch);
      for (std::size_t i = 0; i < 2; ++i) {
        const ForwardResult want = m->forward(inputs[i], &plain[i], o);
        REQUIRE(got[i].key_attention.defined());
        REQUIRE(got[i].key_attention.sizes() == want.key_attention.sizes());
        const double diff = orbit::test::max_abs_diff(got[i].key_attention, want.key_attention);
        CHECK(diff <= bound(1.0, "key attention"));
        worst = std::max(worst, diff);
        for (std::size_t l = 0; l < plain[i].layers.size(); ++l) {
          LayerKV& layer = plain[i].layers[l];
          layer = {at::cat({layer.k, want.content[l].k}), at::cat({layer.v, want.content[l].v})};
        }
        plain[i].positions = at::arange(plain[i].length() + 1, at::kLong);
      }
    }
    WARN(path << ": largest key_attention difference " << worst << " over 24 steps of two slots");
  }
}

}  // namespace ORBIT_TEST_FILE
