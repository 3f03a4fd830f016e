// ForwardOptions::key_attention: the last computed token's softmax weights over its keys, averaged over heads
// and layers. Layer 0 against the formula computed here from the weights and the forward's own content; all
// layers alike whether the keys come from no past, a contiguous past, a partial recompute or a decode cache's
// slot, for every attention family (GQA, M-RoPE, MLA); and the weights of a batch's sequences are each their own.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <cmath>

#include "forward_batch_cases.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/rope.h"
#include "test_helpers.h"

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
