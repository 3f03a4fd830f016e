// EngineCore's fidelity calibration: the deficits each approximate serving action leaves, measured as the
// next-token KL of a probe against a re-prefill of the same window, with the feature the planner predicts
// from (planner/fidelity_model.h). Chunks sampled from the model, a few seeds; the model's forward only.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <random>
#include <utility>

#include "orbit/planner/fidelity_model.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/repair.h"
#include "window/calibrate_fidelity.h"
#include "window/engine_core.h"
#include "window/window_state.h"

namespace orbit::detail {

namespace {

using planner::FidelitySample;
using planner::Loss;

struct Piece {
  runtime::Content kv;
  int64_t length = 0;
};

class Bench {
 public:
  Bench(const EngineCore& core, uint64_t seed) : core_(core), m_(core.model()), rng_(seed) {}

  // n tokens sampled from the model itself at temperature 1 (text-like content, so the deficits are the
  // ones real chunks show; uniform random ids condition far less), after a random first token.
  std::vector<int64_t> tokens(int64_t n) {
    const int64_t vocab = m_.config().vocab_size;
    std::vector<int64_t> t{3 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(std::max<int64_t>(vocab - 3, 1)))};
    std::vector<Piece> past;
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kLast;
    while (static_cast<int64_t>(t.size()) < n) {
      const int64_t p = static_cast<int64_t>(t.size()) - 1;
      const runtime::ForwardInput in = core_.input_for_tokens({t.back()}, p);
      runtime::ForwardResult r;
      if (past.empty()) {
        r = m_.forward(in, nullptr, fo);
      } else {
        const runtime::PastKV ctx = this->past(past);
        r = m_.forward(in, &ctx, fo);
      }
      past.push_back({r.content, 1});
      const at::Tensor probs = at::softmax(r.logits.reshape({-1}).to(at::kDouble), 0);
      const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
      const double* pr = probs.data_ptr<double>();
      double acc = 0;
      int64_t pick = vocab - 1;
      for (int64_t j = 0; j < vocab; ++j) {
        acc += pr[j];
        if (u < acc) {
          pick = j;
          break;
        }
      }
      t.push_back(pick);
    }
    return t;
  }

  runtime::PastKV past(const std::vector<Piece>& pieces) const {
    std::vector<runtime::Content> contents;
    std::vector<at::Tensor> positions;
    int64_t p = 0;
    for (const Piece& x : pieces) {
      contents.push_back(x.kv);
      positions.push_back(core_.positions_for(nullptr, x.length, p));
      p += x.length;
    }
    return concat_past(m_.config().num_layers, contents, positions);
  }

  // KV of `t` placed after `pieces` (exact in context).
  Piece in_context(const std::vector<int64_t>& t, const std::vector<Piece>& pieces) const {
    int64_t p = 0;
    for (const Piece& x : pieces) p += x.length;
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kNone;
    const runtime::ForwardInput in = core_.input_for_tokens(t, p);
    Piece out;
    out.length = static_cast<int64_t>(t.size());
    if (pieces.empty()) {
      out.kv = m_.forward(in, nullptr, fo).content;
    } else {
      const runtime::PastKV ctx = past(pieces);
      out.kv = m_.forward(in, &ctx, fo).content;
    }
    return out;
  }

  at::Tensor probe(const std::vector<Piece>& pieces, const std::vector<int64_t>& query) const {
    int64_t p = 0;
    for (const Piece& x : pieces) p += x.length;
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kAll;
    const runtime::PastKV ctx = past(pieces);
    return m_.forward(core_.input_for_tokens(query, p), &ctx, fo).logits;
  }

  double kl(const std::vector<Piece>& exact, const std::vector<Piece>& approx,
            const std::vector<int64_t>& query) const {
    return runtime::mean_kl(probe(exact, query), probe(approx, query));
  }

  const runtime::Model& model() const { return m_; }

 private:
  const EngineCore& core_;
  const runtime::Model& m_;
  std::mt19937_64 rng_;
};

}  // namespace

FidelityCalibration measure_fidelity_samples(const EngineCore& core, int seeds) {
  c10::InferenceMode guard;
  const runtime::ModelConfig& c = core.config();
  const int64_t limit = c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096;
  const int64_t a = std::min<int64_t>(24, limit / 8), b = std::min<int64_t>(32, limit / 8), q = 8,
                p = std::min<int64_t>(16, limit / 8);
  // Each sample's feature terms (f·w of one instance, and that instance's sensitivity), scaled once the
  // reference sensitivity (their geometric mean) is known.
  struct Raw {
    Loss kind;
    std::vector<std::pair<double, double>> terms;
    double kl;
  };
  std::vector<Raw> out;
  const auto sens = [](const Piece& conditioned, const Piece& canonical) {
    return runtime::deficit_share(runtime::deficit(conditioned.kv, canonical.kv), conditioned.kv);
  };
  for (int seed = 0; seed < seeds; ++seed) {
    Bench bench(core, 1000 + static_cast<uint64_t>(seed));
    const auto ta = bench.tokens(a), tb = bench.tokens(b), tc = bench.tokens(b), tx = bench.tokens(a),
               ty = bench.tokens(a);
    const auto query = bench.tokens(q);
    const auto tp = bench.tokens(p);
    const Piece A = bench.in_context(ta, {});
    const Piece canon_b = bench.in_context(tb, {});
    const Piece B_A = bench.in_context(tb, {A});
    // B is the window's last instance in each arm below: its recency weight is 1 (fidelity_model.h).
    const double share_b = planner::recency_weight(b, b);
    const runtime::Content delta = runtime::deficit(B_A.kv, canon_b.kv);
    const double s_b = runtime::deficit_share(delta, B_A.kv);
    const int64_t full = std::min(b, c.content_k_shape().width());

    // Blind: the canonical behind A.
    out.push_back({Loss::kBlind, {{share_b, s_b}}, bench.kl({A, B_A}, {A, canon_b}, query)});
    // Truncated: patches of the exact deficit at a few ranks; the feature is the share of the deficit's
    // energy each leaves out (runtime::Patch::residual), as the planner reads it from a stored patch.
    for (const int64_t rank : {1, 2, 4, 8, 16}) {
      runtime::PatchOptions po;
      po.rank_k = po.rank_v = std::min<int64_t>(rank, full);
      const runtime::Patch patch = runtime::form_patch(bench.model(), delta, po);
      Piece p{runtime::apply_patch(bench.model(), canon_b.kv, patch), b};
      out.push_back({Loss::kTruncated, {{patch.residual * share_b, s_b}}, bench.kl({A, B_A}, {A, p}, query)});
    }
    // First-k and CacheBlend over the canonical.
    {
      const runtime::ForwardInput in = core.input_for_tokens(tb, a);
      const runtime::PastKV ctx = bench.past({A});
      const int64_t k = std::min<int64_t>(8, b);
      Piece p{runtime::recompute_tokens(bench.model(), in, ctx, canon_b.kv, at::arange(k, at::kLong)), b};
      out.push_back({Loss::kFirstK,
                     {{(1.0 - static_cast<double>(k) / static_cast<double>(b)) * share_b, s_b}},
                     bench.kl({A, B_A}, {A, p}, query)});
      const int64_t r = static_cast<int64_t>(std::ceil(0.15 * static_cast<double>(b)));
      const at::Tensor idx = runtime::cacheblend_select(bench.model(), in, ctx, canon_b.kv, r);
      Piece cb{runtime::recompute_tokens(bench.model(), in, ctx, canon_b.kv, idx), b};
      out.push_back({Loss::kCacheBlend,
                     {{(1.0 - static_cast<double>(r) / static_cast<double>(b)) * share_b, s_b}},
                     bench.kl({A, B_A}, {A, cb}, query)});
    }
    // Keep after a removal: [P, A, B, C] formed, A evicted; B and C kept as-is. P is what an agent's
    // window starts with and keeps (a system prompt): removing the window's first tokens instead takes
    // the attention sink every later token leans on, a far larger and rarer loss than the removals agents
    // make.
    {
      const Piece P = bench.in_context(tp, {});
      const Piece A_P = bench.in_context(ta, {P});
      const Piece B_PA = bench.in_context(tb, {P, A_P});
      const Piece C_PAB = bench.in_context(tc, {P, A_P, B_PA});
      const Piece B_P = bench.in_context(tb, {P});
      const Piece C_PB = bench.in_context(tc, {P, B_P});
      // The planner's features for this window: a tokens removed right before B (gap 0) and b tokens
      // before C.
      const Piece canon_c = bench.in_context(tc, {});
      out.push_back({Loss::kKeep,
                     {{planner::keep_change(a, 0) * planner::recency_weight(b, 2 * b), sens(B_PA, canon_b)},
                      {planner::keep_change(a, b) * planner::recency_weight(b, b), sens(C_PAB, canon_c)}},
                     bench.kl({P, B_P, C_PB}, {P, B_PA, C_PAB}, query)});
    }
    // Orbit: the patch formed behind [X, A] applied behind [A, X].
    {
      const Piece X = bench.in_context(tx, {});
      const Piece A_X = bench.in_context(ta, {X});
      const Piece B_XA = bench.in_context(tb, {X, A_X});
      const Piece X_A = bench.in_context(tx, {A});
      const Piece B_AX = bench.in_context(tb, {A, X_A});
      const double share = planner::recency_weight(b, b);
      runtime::PatchOptions po;
      po.rank_k = po.rank_v = full;
      const runtime::Patch patch = runtime::form_patch(bench.model(), runtime::deficit(B_XA.kv, canon_b.kv), po);
      Piece p{runtime::apply_patch(bench.model(), canon_b.kv, patch), b};
      out.push_back({Loss::kOrbit, {{share, sens(B_XA, canon_b)}}, bench.kl({A, X_A, B_AX}, {A, X_A, p}, query)});
      // Stale: the patch formed behind [A, X] applied behind [A, Y] (divergence 2a / 3a).
      const Piece Y_A = bench.in_context(ty, {A});
      const Piece B_AY = bench.in_context(tb, {A, Y_A});
      const runtime::Patch stale = runtime::form_patch(bench.model(), runtime::deficit(B_AX.kv, canon_b.kv), po);
      Piece s{runtime::apply_patch(bench.model(), canon_b.kv, stale), b};
      out.push_back(
          {Loss::kStale, {{(2.0 / 3.0) * share, sens(B_AX, canon_b)}}, bench.kl({A, Y_A, B_AY}, {A, Y_A, s}, query)});
      // Stale after a recall: B's patch formed behind [P, A], applied where B is recalled at the end of
      // [P, A, X, Y] (the context grew past what it was formed on; divergence 2a / (p + 3a) by tokens).
      const Piece P = bench.in_context(tp, {});
      const Piece A_P = bench.in_context(ta, {P});
      const Piece B_PA = bench.in_context(tb, {P, A_P});
      const Piece X_PA = bench.in_context(tx, {P, A_P});
      const Piece Y_PAX = bench.in_context(ty, {P, A_P, X_PA});
      const Piece B_PAXY = bench.in_context(tb, {P, A_P, X_PA, Y_PAX});
      const runtime::Patch recalled = runtime::form_patch(bench.model(), runtime::deficit(B_PA.kv, canon_b.kv), po);
      Piece r{runtime::apply_patch(bench.model(), canon_b.kv, recalled), b};
      const double divergence = 2.0 * static_cast<double>(a) / static_cast<double>(P.length + 3 * a);
      out.push_back({Loss::kStale,
                     {{divergence * share, sens(B_PA, canon_b)}},
                     bench.kl({P, A_P, X_PA, Y_PAX, B_PAXY}, {P, A_P, X_PA, Y_PAX, r}, query)});
    }
  }
  double log_sum = 0;
  int n = 0;
  for (const Raw& r : out) {
    for (const auto& [f, s] : r.terms) {
      if (s > 0) {
        log_sum += std::log(s);
        ++n;
      }
    }
  }
  FidelityCalibration result;
  result.reference_sensitivity = n > 0 ? std::exp(log_sum / n) : 0.0;
  const planner::FidelityModel scale = planner::FidelityModel::fit({}, result.reference_sensitivity);
  for (const Raw& r : out) {
    double feature = 0;
    for (const auto& [f, s] : r.terms) feature += f * scale.sensitivity_factor(s);
    result.samples.push_back({r.kind, feature, r.kl});
  }
  return result;
}

}  // namespace orbit::detail
