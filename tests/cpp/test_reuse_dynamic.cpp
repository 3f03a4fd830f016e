// Dynamic-NTK RoPE and a chunk's content past the anchor (docs/ARCHITECTURE.md §7, "The window position
// limit"). Dynamic NTK's rotary base grows with the window's length n once n passes the anchor L
// (original_max_position_embeddings): base(n) = base · (factor·n/L − factor + 1)^(d/(d−2)). Keys are stored
// unrotated and rotated when read at the reading window's base (test_reuse's "past the anchor" case), but a
// token's content past layer 0 came through attention computed at the base of the window it was forwarded in.
// The SDK forwards an instance behind its window's prefix (a form, a prefill) or alone (a canonical), so its
// content carries the base of that window, max(its end, L), not of the window that reads it.
//
// The window here is C · B · Q: context C, chunk B (n = 16 tokens), query Q (q = 8), N tokens in all, text
// sampled from the unscaled model; the reference is one forward of the whole window (the re-prefill). Arms:
//   formed      B forwarded behind C's re-prefill content (the SDK's form; a full-rank exact patch equals it)
//   formed@N    the same at the reading window's length (ForwardOptions::rope_window_len = N)
//   first       the window B · D · Q: B's canonical at position 0 (the SDK's exact reuse), D formed behind it
//   sdk path    C prefilled alone, B formed behind that, Q read over both: every instance as the SDK forms it
//   blind       B's canonical behind C (blind reuse), at its own length and at N
// Up to the anchor every SDK arm is the re-prefill's within float32 rounding. Past it (N = 2L and 4L) they are
// not: measured (the "[.measure]" case below: stories260K and tinystories-656k, L = 64, factors 2 and 8,
// seeds 1-3) the query's next-token KL is 1.0e-5..7.8e-3 on stories260K (1.0e-5..1.3e-3 at factor 2) and
// 2.5e-6..2.7e-4 on tinystories-656k (heads twice as wide), where the fidelity model predicts 0 for these exact
// actions, and the chunk's deep-layer (>= 1) KV moves by 0.07..2.1 formed behind its context (0.5-8% of its
// largest value) and 0.2..6.9 as a canonical at position 0; blind reuse loses up to 3.3x what it loses with the
// canonical at N's base (9.8e-2 against 3.0e-2). formed@N is exact at every length.
// The second measure case forms B at N − s: the loss grows about as s² (stories260K, factor 2, N = 128: s = 1,
// 4, 8, 32 lose 3.8e-6, 6.5e-5, 2.9e-4, 7.2e-3), and B formed at the anchor and read at 4L 0.23 (means of seeds 1-3).
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "float_tolerance.h"
#include "forward_batch_cases.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using orbit::test::content_diff;
using orbit::test::max_abs_diff;

namespace {

constexpr int64_t kAnchor = 64, kChunk = 16, kQuery = 8;

// `base` with dynamic-NTK RoPE anchored at `anchor` tokens, scaled by `factor` past it.
std::unique_ptr<Model> dynamic_copy(const Model& base, int64_t anchor, double factor) {
  ModelConfig dyn = base.config();
  dyn.rope.scaling = RopeScaling::kDynamicNtk;
  dyn.rope.factor = factor;
  dyn.rope.original_max_position_embeddings = anchor;
  ModelWeights weights = base.weights();
  return std::make_unique<Model>(dyn, std::move(weights), base.origin() + ", dynamic NTK");
}

// n tokens sampled from `m` (BOS = 1 first, softmax in float64, a seeded Mersenne twister): model-like text.
std::vector<int64_t> sample_text(const Model& m, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> tokens{1};
  while (static_cast<int64_t>(tokens.size()) < n) {
    ForwardInput in;
    in.tokens = tokens;
    const at::Tensor probs = at::softmax(m.forward(in).logits[0].to(at::kDouble), 0).contiguous();
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const double* p = probs.data_ptr<double>();
    double acc = 0.0;
    int64_t next = probs.size(0) - 1;
    for (int64_t i = 0; i < probs.size(0) && next == probs.size(0) - 1; ++i) {
      acc += p[i];
      if (u < acc) next = i;
    }
    tokens.push_back(next);
  }
  return tokens;
}

// Rows [start, start + n) of every layer.
Content rows(const Content& c, int64_t start, int64_t n) {
  Content out;
  for (const LayerKV& l : c) out.push_back({l.k.narrow(0, start, n), l.v.narrow(0, start, n)});
  return out;
}

Content joined(const Content& a, const Content& b) {
  Content out;
  for (std::size_t l = 0; l < a.size(); ++l) {
    out.push_back({at::cat({a[l].k, b[l].k}, 0), at::cat({a[l].v, b[l].v}, 0)});
  }
  return out;
}

// The content of `tokens` forwarded behind `past` (content at positions 0..P-1; null: alone at 0..), with
// rope_window_len `window_len` (0: past + input, what the SDK's forwards use).
Content encode(const Model& m, const std::vector<int64_t>& tokens, const Content* past, int64_t window_len) {
  ForwardInput in;
  in.tokens = tokens;
  const int64_t start = past != nullptr ? (*past)[0].k.size(0) : 0;
  in.positions = at::arange(start, start + static_cast<int64_t>(tokens.size()), at::kLong);
  ForwardOptions o;
  o.logits = LogitsMode::kNone;
  o.rope_window_len = window_len;
  if (past == nullptr) return m.forward(in, nullptr, o).content;
  PastKV p;
  p.layers = *past;
  p.positions = at::arange(start, at::kLong);
  return m.forward(in, &p, o).content;
}

// Logits of every query token read over `past` (at positions 0..P-1; the window's length is P + q).
at::Tensor query_logits(const Model& m, const Content& past, const std::vector<int64_t>& query) {
  PastKV p;
  p.layers = past;
  const int64_t start = past[0].k.size(0);
  p.positions = at::arange(start, at::kLong);
  ForwardInput in;
  in.tokens = query;
  in.positions = at::arange(start, start + static_cast<int64_t>(query.size()), at::kLong);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  return m.forward(in, &p, o).logits;
}

// The largest |a − b| over layers >= 1 (layer 0's content depends on the token alone), keys and values.
double deep_diff(const Content& a, const Content& b) { return content_diff(a, b, 1); }

double deep_largest(const Content& a) {
  double s = 0;
  for (std::size_t l = 1; l < a.size(); ++l) {
    s = std::max({s, orbit::test::largest(a[l].k), orbit::test::largest(a[l].v)});
  }
  return s;
}

// One window C · B · Q of N tokens and its re-prefill.
struct Window {
  std::vector<int64_t> text, context, chunk, query;
  ForwardResult ref;  // one forward of the whole window: logits of every token, content
  at::Tensor want;    // the query's rows of ref.logits
  Content ref_context, ref_chunk;
};

Window make_window(const Model& base, const Model& m, int64_t N, uint64_t seed) {
  Window w;
  const int64_t c = N - kChunk - kQuery;
  w.text = sample_text(base, N, seed);
  w.context.assign(w.text.begin(), w.text.begin() + c);
  w.chunk.assign(w.text.begin() + c, w.text.begin() + c + kChunk);
  w.query.assign(w.text.begin() + c + kChunk, w.text.end());
  ForwardInput whole;
  whole.tokens = w.text;
  ForwardOptions all;
  all.logits = LogitsMode::kAll;
  w.ref = m.forward(whole, nullptr, all);
  w.want = w.ref.logits.narrow(0, c + kChunk, kQuery);
  w.ref_context = rows(w.ref.content, 0, c);
  w.ref_chunk = rows(w.ref.content, c, kChunk);
  return w;
}

// How far one arm's chunk is from the re-prefill: the query's KL and the chunk's deep-layer KV difference.
struct Gap {
  double kl = 0;
  double deep_kv = 0;
};

Gap gap_behind_context(const Model& m, const Window& w, const Content& context, const Content& chunk) {
  return {mean_kl(w.want, query_logits(m, joined(context, chunk), w.query)), deep_diff(chunk, w.ref_chunk)};
}

// The window B · D · Q (D = the context's tokens after the chunk): B's canonical at position 0, D formed
// behind it, against that window's own re-prefill.
Gap gap_chunk_first(const Model& m, const Window& w) {
  ForwardInput whole;
  whole.tokens = w.chunk;
  whole.tokens.insert(whole.tokens.end(), w.context.begin(), w.context.end());
  whole.tokens.insert(whole.tokens.end(), w.query.begin(), w.query.end());
  ForwardOptions all;
  all.logits = LogitsMode::kAll;
  const ForwardResult ref = m.forward(whole, nullptr, all);
  const int64_t N = static_cast<int64_t>(whole.tokens.size());
  const Content canon = encode(m, w.chunk, nullptr, 0);
  const Content rest = encode(m, w.context, &canon, 0);
  return {mean_kl(ref.logits.narrow(0, N - kQuery, kQuery), query_logits(m, joined(canon, rest), w.query)),
          deep_diff(canon, rows(ref.content, 0, kChunk))};
}

// Within float32 rounding of the re-prefill: the deep KV within the drift bound of its largest value, the
// KL within float32_kl_margin (logits of the query, window-long reductions).
bool exact(const Model& m, const Window& w, const Gap& g) {
  const int64_t N = static_cast<int64_t>(w.text.size());
  const auto bound = orbit::test::float32_bound(m, N);
  orbit::test::Float32Shape s;
  s.layers = m.config().num_layers;
  s.reduction = std::max({m.config().hidden_size, m.config().intermediate_size, N});
  s.logit_scale = orbit::test::largest(w.want);
  return g.deep_kv <= bound(deep_largest(w.ref_chunk), "content") && g.kl <= orbit::test::float32_kl_margin(0, s);
}

std::vector<std::string> model_paths() {
  return {orbit::test::stories_path(), std::string(ORBIT_MODELS_DIR) + "/tinystories-656k"};
}

}  // namespace

TEST_CASE("dynamic NTK: a chunk formed as the SDK forms it is a re-prefill's up to the anchor, not past it",
          "[reuse][cpu][model]") {
  // Every arm the SDK treats as exact (formed behind its context, canonical at position 0, the whole window
  // formed instance by instance) within float32 rounding of the re-prefill at N <= L; B formed at the
  // reading window's length at every N. Past the anchor the SDK's arms are checked to differ: their deep KV
  // is off by 0.07..6.9 in the measurement (at least 100x the float32 bound here), so `exact` would fail for a
  // chunk encoded at a wrong base, and the gap is the one docs/ARCHITECTURE.md records.
  for (const std::string& path : model_paths()) {
    const auto base = load_model(path);
    const auto dyn = dynamic_copy(*base, kAnchor, 8.0);
    const Model& m = *dyn;
    for (const int64_t N : {kAnchor / 2, kAnchor, 2 * kAnchor, 4 * kAnchor}) {
      const Window w = make_window(*base, m, N, 1);
      INFO(path << ", window of " << N << " tokens, anchor " << kAnchor);
      const Content formed = encode(m, w.chunk, &w.ref_context, 0);
      const Content sdk_context = encode(m, w.context, nullptr, 0);
      const Gap at_n = gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, N));
      CHECK(exact(m, w, at_n));
      const std::vector<std::pair<const char*, Gap>> sdk_arms = {
          {"formed", gap_behind_context(m, w, w.ref_context, formed)},
          {"sdk path", gap_behind_context(m, w, sdk_context, encode(m, w.chunk, &sdk_context, 0))},
          {"first", gap_chunk_first(m, w)}};
      if (N <= kAnchor) {  // the check tells a wrong base apart here too: B formed at a window past the anchor
        CHECK_FALSE(
            exact(m, w, gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, 4 * kAnchor))));
      }
      for (const auto& [arm, g] : sdk_arms) {
        INFO(arm << ": KL " << g.kl << ", deep KV " << g.deep_kv);
        if (N <= kAnchor) {
          CHECK(exact(m, w, g));
        } else {
          const double drift = orbit::test::float32_bound(m, N)(deep_largest(w.ref_chunk), "content");
          CHECK(g.deep_kv > 100 * drift);
          CHECK_FALSE(exact(m, w, g));
        }
      }
    }
  }
}

TEST_CASE("measure: dynamic-NTK chunk content formed at a shorter window than it is read in", "[.measure]") {
  // The table docs/ARCHITECTURE.md quotes: build/tests/test_reuse_dynamic "[.measure]".
  for (const std::string& path : model_paths()) {
    const auto base = load_model(path);
    const std::string name = path.substr(path.rfind('/') + 1);
    for (const double factor : {2.0, 8.0}) {
      const auto dyn = dynamic_copy(*base, kAnchor, factor);
      const Model& m = *dyn;
      for (const int64_t N : {kAnchor / 2, kAnchor, 2 * kAnchor, 4 * kAnchor}) {
        for (const uint64_t seed : {1u, 2u, 3u}) {
          const Window w = make_window(*base, m, N, seed);
          const Content sdk_context = encode(m, w.context, nullptr, 0);
          const Content canon = encode(m, w.chunk, nullptr, 0), canon_n = encode(m, w.chunk, nullptr, N);
          const Content formed_n = encode(m, w.chunk, &w.ref_context, N);
          const Gap formed = gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, 0));
          const Gap at_n = gap_behind_context(m, w, w.ref_context, formed_n);
          const Gap path_gap = gap_behind_context(m, w, sdk_context, encode(m, w.chunk, &sdk_context, 0));
          const Gap first = gap_chunk_first(m, w);
          const double blind = gap_behind_context(m, w, w.ref_context, canon).kl;
          const double blind_n = gap_behind_context(m, w, w.ref_context, canon_n).kl;
          // What the fidelity model's defaults predict for blind reuse of B here (exact actions: 0).
          const double s = deficit_share(deficit(formed_n, canon_n), formed_n);
          const double weight = orbit::planner::recency_weight(kChunk, kChunk + kQuery);
          const double predicted = orbit::planner::FidelityModel().predict(orbit::planner::Loss::kBlind, 1, weight, s);
          std::printf(
              "%s factor %.0f N %3ld seed %lu | KL formed %.1e formed@N %.1e first %.1e sdk-path %.1e | deep KV "
              "formed %.2g (of %.2g) first %.2g sdk-path %.2g | blind KL %.1e at N's base %.1e predicted %.1e\n",
              name.c_str(), factor, static_cast<long>(N), static_cast<unsigned long>(seed), formed.kl, at_n.kl,
              first.kl, path_gap.kl, formed.deep_kv, deep_largest(w.ref_chunk), first.deep_kv, path_gap.deep_kv, blind,
              blind_n, predicted);
        }
      }
    }
  }
}

TEST_CASE("measure: the loss by how far short of the reading window a chunk was formed", "[.measure]") {
  // B formed behind C's re-prefill content at rope_window_len N − short (its own end is N − q), read at N:
  // what a pricing of the gap would have to predict. build/tests/test_reuse_dynamic "[.measure]".
  for (const std::string& path : model_paths()) {
    const auto base = load_model(path);
    const std::string name = path.substr(path.rfind('/') + 1);
    for (const double factor : {2.0, 8.0}) {
      const auto dyn = dynamic_copy(*base, kAnchor, factor);
      const Model& m = *dyn;
      for (const int64_t N : {2 * kAnchor, 4 * kAnchor}) {
        for (const int64_t shortfall : {int64_t{1}, int64_t{4}, kQuery, int64_t{32}, N - kAnchor}) {
          double worst_kl = 0, sum_kl = 0, worst_kv = 0;
          for (const uint64_t seed : {1u, 2u, 3u}) {
            const Window w = make_window(*base, m, N, seed);
            const Gap g = gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, N - shortfall));
            worst_kl = std::max(worst_kl, g.kl);
            sum_kl += g.kl / 3;
            worst_kv = std::max(worst_kv, g.deep_kv);
          }
          std::printf("%s factor %.0f N %3ld formed at %3ld | KL mean %.1e max %.1e | deep KV max %.2g\n", name.c_str(),
                      factor, static_cast<long>(N), static_cast<long>(N - shortfall), sum_kl, worst_kl, worst_kv);
        }
      }
    }
  }
}

TEST_CASE("dynamic NTK: the fidelity model's shortfall prediction on seeds and a model it was not fitted on",
          "[reuse][cpu][model]") {
  // planner::kShortfallCoefficient was fitted on stories260K, seeds 1-3 (the measure case above). Here B is
  // formed behind C's re-prefill content at N − s and read at N = 2L by the 8-token query, on seeds 4 and 5.
  // Measured when it was fitted: stories260K lost 0.03-0.22 of the prediction (factors 2 and 8), tinystories-
  // 656k (heads twice as wide, not fitted) 0.002-0.03. The prediction may err high (a budget then buys forwards)
  // but not low by more than kLow: measured <= kLow · predicted everywhere; on stories260K it also stays above
  // predicted / kHigh. Each feature is the planner's (shortfall_feature) and the weight B's recency weight, as
  // a plan computes them.
  constexpr double kLow = 2.0, kHigh = 100.0;
  for (const std::string& path : model_paths()) {
    const auto base = load_model(path);
    const bool fitted_model = path == orbit::test::stories_path();
    for (const double factor : {2.0, 8.0}) {
      const auto dyn = dynamic_copy(*base, kAnchor, factor);
      const Model& m = *dyn;
      const orbit::planner::DynamicNtk rope{kAnchor, factor};
      const int64_t N = 2 * kAnchor;
      const double weight = orbit::planner::recency_weight(kChunk, kChunk + kQuery);
      for (const uint64_t seed : {4u, 5u}) {
        const Window w = make_window(*base, m, N, seed);
        for (const int64_t shortfall : {int64_t{4}, kQuery, int64_t{32}}) {
          const double kl =
              gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, N - shortfall)).kl;
          const double predicted = orbit::planner::FidelityModel().predict_shortfall(
              orbit::planner::shortfall_feature(rope, N - shortfall, N), weight);
          std::printf("%s factor %.0f seed %lu formed at %ld: measured %.2e predicted %.2e (ratio %.2f)\n",
                      path.c_str(), factor, static_cast<unsigned long>(seed), static_cast<long>(N - shortfall), kl,
                      predicted, kl / predicted);
          INFO(path << ", factor " << factor << ", seed " << seed << ", formed at " << N - shortfall << ": measured "
                    << kl << ", predicted " << predicted);
          CHECK(kl <= kLow * predicted);
          if (fitted_model) CHECK(kl >= predicted / kHigh);
        }
      }
    }
  }
}

TEST_CASE("measure: a shortfall coefficient fitted as the calibration fits it, on seeds it was not fitted on",
          "[.measure]") {
  // Engine::calibrate_fidelity's shortfall arm (calibrate_fidelity.cpp) on this file's windows: the coefficient
  // fitted by least squares through the origin on seeds 1-3 (N = 2L, B formed at N − 4, N − 8, N − 16), then
  // measured / predicted on seeds 4 and 5 (s = 4, 8, 32) with the default coefficient and with the fit.
  // build/tests/test_reuse_dynamic "measure: a shortfall coefficient fitted as the calibration fits it, on seeds
  // it was not fitted on".
  for (const std::string& path : model_paths()) {
    const auto base = load_model(path);
    const std::string name = path.substr(path.rfind('/') + 1);
    for (const double factor : {2.0, 8.0}) {
      const auto dyn = dynamic_copy(*base, kAnchor, factor);
      const Model& m = *dyn;
      const orbit::planner::DynamicNtk rope{kAnchor, factor};
      const int64_t N = 2 * kAnchor;
      const double weight = orbit::planner::recency_weight(kChunk, kChunk + kQuery);
      const auto measure = [&](const Window& w, int64_t s) {
        return gap_behind_context(m, w, w.ref_context, encode(m, w.chunk, &w.ref_context, N - s)).kl;
      };
      double fx = 0, xx = 0;
      for (const uint64_t seed : {1u, 2u, 3u}) {
        const Window w = make_window(*base, m, N, seed);
        for (const int64_t s : {int64_t{4}, int64_t{8}, int64_t{16}}) {
          const double x = orbit::planner::shortfall_feature(rope, N - s, N) * weight;
          fx += x * measure(w, s);
          xx += x * x;
        }
      }
      const double fitted = fx / xx;
      for (const uint64_t seed : {4u, 5u}) {
        const Window w = make_window(*base, m, N, seed);
        for (const int64_t s : {int64_t{4}, kQuery, int64_t{32}}) {
          const double x = orbit::planner::shortfall_feature(rope, N - s, N) * weight, kl = measure(w, s);
          std::printf(
              "%s factor %.0f fitted %.2e | seed %lu formed at %3ld: measured %.2e, measured/predicted "
              "default %.3f fitted %.2f\n",
              name.c_str(), factor, fitted, static_cast<unsigned long>(seed), static_cast<long>(N - s), kl,
              kl / (orbit::planner::kShortfallCoefficient * x), kl / (fitted * x));
        }
      }
    }
  }
}

}  // namespace ORBIT_TEST_FILE
