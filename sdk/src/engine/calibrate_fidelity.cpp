// EngineCore's fidelity calibration: the deficits each approximate serving action leaves, measured as the
// next-token KL of a probe against a re-prefill of the same window, with the feature the planner predicts
// from (planner/fidelity_model.h). Chunks sampled from the model, a few seeds; the model's forward only.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <random>
#include <utility>

#include "engine/calibrate_fidelity.h"
#include "engine/engine_core.h"
#include "engine/engine_plan_env.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/repair.h"
#include "orbit/store/blob_format.h"
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
      const runtime::ForwardInput in = core_.registry().input_for_tokens({t.back()}, p);
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
      positions.push_back(core_.registry().positions_for(nullptr, x.length, p));
      p += x.length;
    }
    return concat_past(m_.config().num_layers, contents, positions);
  }

  // KV of `t` placed after `pieces` (exact in context), forwarded at ForwardOptions::rope_window_len
  // `rope_window` (0: its own end, as the SDK's forms).
  Piece in_context(const std::vector<int64_t>& t, const std::vector<Piece>& pieces, int64_t rope_window = 0) const {
    int64_t p = 0;
    for (const Piece& x : pieces) p += x.length;
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kNone;
    fo.rope_window_len = rope_window;
    const runtime::ForwardInput in = core_.registry().input_for_tokens(t, p);
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
    return m_.forward(core_.registry().input_for_tokens(query, p), &ctx, fo).logits;
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

// Each sample's feature terms (f·w of one instance, and that instance's sensitivity), scaled once the
// reference sensitivity (their geometric mean) is known.
struct Raw {
  Loss kind;
  std::vector<std::pair<double, double>> terms;
  double kl;
};

// The chunk and query lengths (tokens) of every seed: chunks A, X, Y of a, B and C of b, a prefix P of p.
struct Lengths {
  int64_t a = 0, b = 0, q = 0, p = 0;
};

// The share of `conditioned`'s KV its deficit against `canonical` is: the instance's sensitivity.
double sensitivity(const Piece& conditioned, const Piece& canonical) {
  return runtime::deficit_share(runtime::deficit(conditioned.kv, canonical.kv), conditioned.kv);
}

// One seed's measurements. Chunks A, B, C, X, Y, a prefix P and a query are sampled from the model (in
// that draw order); each arm serves B (or B and C) approximately and appends its samples, measured
// against the exact window, to `out`.
class SeedArms {
 public:
  SeedArms(const EngineCore& core, uint64_t seed, const Lengths& n) : core_(core), bench_(core, seed), n_(n) {
    ta_ = bench_.tokens(n.a);
    tb_ = bench_.tokens(n.b);
    tc_ = bench_.tokens(n.b);
    tx_ = bench_.tokens(n.a);
    ty_ = bench_.tokens(n.a);
    query_ = bench_.tokens(n.q);
    tp_ = bench_.tokens(n.p);
    A_ = bench_.in_context(ta_, {});
    canon_b_ = bench_.in_context(tb_, {});
    B_A_ = bench_.in_context(tb_, {A_});
    // B is the window's last instance in each arm below: its recency weight is 1 (fidelity_model.h).
    share_b_ = planner::recency_weight(n.b, n.b);
    delta_ = runtime::deficit(B_A_.kv, canon_b_.kv);
    s_b_ = runtime::deficit_share(delta_, B_A_.kv);
    full_ = std::min(n.b, core.config().content_k_shape().width());
  }

  // Blind: the canonical behind A. Truncated: patches of the exact deficit at a few ranks; the feature is
  // the share of the deficit's energy each leaves out (runtime::Patch::residual), as the planner reads it
  // from a stored patch.
  void blind_and_truncated(std::vector<Raw>& out) const {
    out.push_back({Loss::kBlind, {{share_b_, s_b_}}, bench_.kl({A_, B_A_}, {A_, canon_b_}, query_)});
    for (const int64_t rank : {1, 2, 4, 8, 16}) {
      runtime::PatchOptions po;
      po.rank_k = po.rank_v = std::min<int64_t>(rank, full_);
      const runtime::Patch patch = runtime::form_patch(bench_.model(), delta_, po);
      Piece p{runtime::apply_patch(bench_.model(), canon_b_.kv, patch), n_.b};
      out.push_back({Loss::kTruncated, {{patch.residual * share_b_, s_b_}}, bench_.kl({A_, B_A_}, {A_, p}, query_)});
    }
  }

  // Quantized: B behind A read back from int8 rows, as an int8 cold tier returns stored KV. The feature is the
  // rounding's expected share of B's energy (store/blob_format.h, the planner's stored_quantization) at B's
  // weight, without a sensitivity factor (the planner prices it without one).
  void quantized(std::vector<Raw>& out) const {
    store::RoundingEnergy energy;
    Piece q{{}, n_.b};
    for (const runtime::LayerKV& l : B_A_.kv) {
      q.kv.push_back({store::int8_round_trip(l.k, &energy), store::int8_round_trip(l.v, &energy)});
    }
    if (!(energy.signal > 0)) return;
    out.push_back(
        {Loss::kQuantized, {{energy.error / energy.signal * share_b_, -1.0}}, bench_.kl({A_, B_A_}, {A_, q}, query_)});
  }

  // First-k and CacheBlend over the canonical.
  void recompute(std::vector<Raw>& out) const {
    const int64_t b = n_.b;
    const runtime::ForwardInput in = core_.registry().input_for_tokens(tb_, n_.a);
    const runtime::PastKV ctx = bench_.past({A_});
    const int64_t k = std::min<int64_t>(8, b);
    Piece p{runtime::recompute_tokens(bench_.model(), in, ctx, canon_b_.kv, at::arange(k, at::kLong)), b};
    out.push_back({Loss::kFirstK,
                   {{(1.0 - static_cast<double>(k) / static_cast<double>(b)) * share_b_, s_b_}},
                   bench_.kl({A_, B_A_}, {A_, p}, query_)});
    const int64_t r = static_cast<int64_t>(std::ceil(0.15 * static_cast<double>(b)));
    const at::Tensor idx = runtime::cacheblend_select(bench_.model(), in, ctx, canon_b_.kv, r);
    Piece cb{runtime::recompute_tokens(bench_.model(), in, ctx, canon_b_.kv, idx), b};
    out.push_back({Loss::kCacheBlend,
                   {{(1.0 - static_cast<double>(r) / static_cast<double>(b)) * share_b_, s_b_}},
                   bench_.kl({A_, B_A_}, {A_, cb}, query_)});
  }

  // Keep after a removal: [P, A, B, C] formed, A evicted; B and C kept as-is. P is what an agent's
  // window starts with and keeps (a system prompt): removing the window's first tokens instead takes
  // the attention sink every later token leans on, a far larger and rarer loss than the removals agents
  // make.
  void keep(std::vector<Raw>& out) const {
    const int64_t a = n_.a, b = n_.b;
    const Piece P = bench_.in_context(tp_, {});
    const Piece A_P = bench_.in_context(ta_, {P});
    const Piece B_PA = bench_.in_context(tb_, {P, A_P});
    const Piece C_PAB = bench_.in_context(tc_, {P, A_P, B_PA});
    const Piece B_P = bench_.in_context(tb_, {P});
    const Piece C_PB = bench_.in_context(tc_, {P, B_P});
    // The planner's features for this window: a tokens removed right before B (gap 0) and b tokens
    // before C.
    const Piece canon_c = bench_.in_context(tc_, {});
    out.push_back({Loss::kKeep,
                   {{planner::keep_change(a, 0) * planner::recency_weight(b, 2 * b), sensitivity(B_PA, canon_b_)},
                    {planner::keep_change(a, b) * planner::recency_weight(b, b), sensitivity(C_PAB, canon_c)}},
                   bench_.kl({P, B_P, C_PB}, {P, B_PA, C_PAB}, query_)});
  }

  // Orbit: the patch formed behind [X, A] applied behind [A, X]. Stale: the patch formed behind [A, X]
  // applied behind [A, Y] (divergence 2a / 3a).
  void orbit_and_stale(std::vector<Raw>& out) const {
    const int64_t b = n_.b;
    const Piece X = bench_.in_context(tx_, {});
    const Piece A_X = bench_.in_context(ta_, {X});
    const Piece B_XA = bench_.in_context(tb_, {X, A_X});
    const Piece X_A = bench_.in_context(tx_, {A_});
    const Piece B_AX = bench_.in_context(tb_, {A_, X_A});
    const double share = planner::recency_weight(b, b);
    const runtime::PatchOptions po = full_rank();
    const runtime::Patch patch = runtime::form_patch(bench_.model(), runtime::deficit(B_XA.kv, canon_b_.kv), po);
    Piece p{runtime::apply_patch(bench_.model(), canon_b_.kv, patch), b};
    out.push_back(
        {Loss::kOrbit, {{share, sensitivity(B_XA, canon_b_)}}, bench_.kl({A_, X_A, B_AX}, {A_, X_A, p}, query_)});
    const Piece Y_A = bench_.in_context(ty_, {A_});
    const Piece B_AY = bench_.in_context(tb_, {A_, Y_A});
    const runtime::Patch stale = runtime::form_patch(bench_.model(), runtime::deficit(B_AX.kv, canon_b_.kv), po);
    Piece s{runtime::apply_patch(bench_.model(), canon_b_.kv, stale), b};
    out.push_back({Loss::kStale,
                   {{(2.0 / 3.0) * share, sensitivity(B_AX, canon_b_)}},
                   bench_.kl({A_, Y_A, B_AY}, {A_, Y_A, s}, query_)});
  }

  // Stale after a recall: B's patch formed behind [P, A], applied where B is recalled at the end of
  // [P, A, X, Y] (the context grew past what it was formed on; divergence 2a / (p + 3a) by tokens).
  void stale_after_recall(std::vector<Raw>& out) const {
    const int64_t a = n_.a, b = n_.b;
    const double share = planner::recency_weight(b, b);
    const Piece P = bench_.in_context(tp_, {});
    const Piece A_P = bench_.in_context(ta_, {P});
    const Piece B_PA = bench_.in_context(tb_, {P, A_P});
    const Piece X_PA = bench_.in_context(tx_, {P, A_P});
    const Piece Y_PAX = bench_.in_context(ty_, {P, A_P, X_PA});
    const Piece B_PAXY = bench_.in_context(tb_, {P, A_P, X_PA, Y_PAX});
    const runtime::Patch recalled =
        runtime::form_patch(bench_.model(), runtime::deficit(B_PA.kv, canon_b_.kv), full_rank());
    Piece r{runtime::apply_patch(bench_.model(), canon_b_.kv, recalled), b};
    const double divergence = 2.0 * static_cast<double>(a) / static_cast<double>(P.length + 3 * a);
    out.push_back({Loss::kStale,
                   {{divergence * share, sensitivity(B_PA, canon_b_)}},
                   bench_.kl({P, A_P, X_PA, Y_PAX, B_PAXY}, {P, A_P, X_PA, Y_PAX, r}, query_)});
  }

 private:
  runtime::PatchOptions full_rank() const {
    runtime::PatchOptions po;
    po.rank_k = po.rank_v = full_;
    return po;
  }

  const EngineCore& core_;
  Bench bench_;
  const Lengths n_;
  std::vector<int64_t> ta_, tb_, tc_, tx_, ty_, query_, tp_;
  Piece A_, canon_b_, B_A_;  // A alone, B alone (its canonical), B behind A
  runtime::Content delta_;   // B's deficit behind A
  double share_b_ = 0, s_b_ = 0;
  int64_t full_ = 0;  // the full rank of B's deficit
};

// The samples with their features scaled by the reference sensitivity: the geometric mean of every
// term's positive sensitivity.
FidelityCalibration scale_features(const std::vector<Raw>& out) {
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

// Dynamic-NTK's shortfall (planner::shortfall_feature): a window C · B · Q of N = 2L tokens (L the anchor; the
// window limit if shorter), one text sampled from the model, C's and B's KV forwarded at N (the re-prefill's: a causal
// forward's rows depend on the window's length only through its base), against B formed behind C at N − s for a
// few s, as a turn formed s tokens ago is read now. Each sample's feature is the planner's: shortfall_feature
// times B's recency weight, without a sensitivity factor (predict_shortfall has none). No samples for a model
// without dynamic scaling or with an anchor above kShortfallMaxAnchor.
void shortfall(const EngineCore& core, const planner::DynamicNtk& rope, uint64_t seed, std::vector<Raw>& out) {
  const int64_t limit = window_position_limit(core.config());
  const int64_t n = std::min(2 * rope.anchor, limit > 0 ? limit : 2 * rope.anchor);
  constexpr int64_t b = 16, q = 8;
  if (!rope.active() || rope.anchor > kShortfallMaxAnchor || n - rope.anchor < 4 || n - b - q < 1) return;
  Bench bench(core, seed);
  // One continuous text, as a conversation's turns continue each other (three separate samples, as the arms
  // above take, read a query unrelated to the chunk before it: measured 10-20x the loss on tinystories-656k).
  const std::vector<int64_t> text = bench.tokens(n);
  const std::vector<int64_t> tc(text.begin(), text.end() - b - q), tb(text.end() - b - q, text.end() - q),
      query(text.end() - q, text.end());
  const Piece C = bench.in_context(tc, {}, n);
  const Piece B = bench.in_context(tb, {C}, n);
  const double weight = planner::recency_weight(b, b + q);
  for (const int64_t s : {int64_t{4}, int64_t{8}, int64_t{16}}) {
    if (n - s < rope.anchor) break;
    const Piece formed = bench.in_context(tb, {C}, n - s);
    out.push_back({Loss::kShortfall,
                   {{planner::shortfall_feature(rope, n - s, n) * weight, -1.0}},
                   bench.kl({C, B}, {C, formed}, query)});
  }
}

}  // namespace

FidelityCalibration measure_fidelity_samples(const EngineCore& core, int seeds,
                                             const std::function<void(int64_t, int64_t)>& progress) {
  c10::InferenceMode guard;
  const runtime::ModelConfig& c = core.config();
  const int64_t limit = window_position_limit(c) > 0 ? window_position_limit(c) : 4096;
  Lengths n;
  n.a = std::min<int64_t>(24, limit / 8);
  n.b = std::min<int64_t>(32, limit / 8);
  n.q = 8;
  n.p = std::min<int64_t>(16, limit / 8);
  std::vector<Raw> out;
  // An interruption point before each arm (orbit/interrupt.h): a caller's scope stops the measurement within
  // one arm's forwards, nothing fitted or stored.
  const auto arm = [](const auto& measure) {
    interruption_point("calibrate_fidelity");
    measure();
  };
  for (int seed = 0; seed < seeds; ++seed) {
    const SeedArms arms(core, 1000 + static_cast<uint64_t>(seed), n);
    arm([&] { arms.blind_and_truncated(out); });
    arm([&] { arms.quantized(out); });
    arm([&] { arms.recompute(out); });
    arm([&] { arms.keep(out); });
    arm([&] { arms.orbit_and_stale(out); });
    arm([&] { arms.stale_after_recall(out); });
    arm([&] { shortfall(core, model_limits(core).dynamic_ntk, 2000 + static_cast<uint64_t>(seed), out); });
    if (progress) progress(seed + 1, seeds);
  }
  return scale_features(out);
}

}  // namespace orbit::detail
