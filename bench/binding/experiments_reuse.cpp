// Reuse of one chunk B behind its context: accuracy single-hop vs multi-hop per repair arm, η and
// flip-recover vs rank, patch bytes, the deficit's shape (layer, token, feature), deep-only and
// shared-basis variants, break-even reuses.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "binding_common.h"

namespace orbit::bench::binding {

namespace {

struct Prepared {
  bd::Probe probe;
  rt::PreparedScenario scenario;
  rt::Content delta;
};

std::vector<Prepared> prepare(const rt::Model& model, bd::TaskGenerator& gen, bool multi, int n) {
  std::vector<Prepared> out;
  for (int i = 0; i < n; ++i) {
    Prepared p;
    p.probe = bd::make_probe(gen, multi);
    p.scenario = rt::prepare_scenario(model, to_scenario(p.probe.context, p.probe.chunk, p.probe.question));
    p.delta = rt::deficit(p.scenario.exact, p.scenario.canonical);
    out.push_back(std::move(p));
  }
  return out;
}

void add_arm(Pool& pool, const Prepared& p, const at::Tensor& arm_logits) {
  pool.add(last_row(p.scenario.exact_logits), last_row(p.scenario.blind_logits), last_row(arm_logits),
           p.probe.question.answer);
}

// Rows (tokens) of B ranked by ‖Δ row‖² summed over layers, K and V: descending.
at::Tensor rank_tokens(const rt::Content& delta) {
  at::Tensor energy = at::zeros({delta.front().k.size(0)}, at::kDouble);
  for (const rt::LayerKV& l : delta) {
    energy += l.k.reshape({l.k.size(0), -1}).to(at::kDouble).pow(2).sum(1);
    energy += l.v.reshape({l.v.size(0), -1}).to(at::kDouble).pow(2).sum(1);
  }
  return energy.argsort(0, /*descending=*/true);
}

// Smallest rank holding `share` of the energy of an [n, D] matrix.
int64_t energy_rank(const at::Tensor& m, double share) {
  const at::Tensor s2 = at::linalg_svdvals(m.reshape({m.size(0), -1}).to(at::kDouble)).pow(2);
  const double total = s2.sum().item<double>();
  if (total <= 0) return 0;
  const at::Tensor cum = s2.cumsum(0) / total;
  return (cum < share).sum().item<int64_t>() + 1;
}

}  // namespace

json run_reuse_experiments(const rt::Model& model, const std::string& name, const Settings& s) {
  json out;
  bd::TaskGenerator gen(s.seed, bd::Split::kTest);
  std::printf("\n== %s: preparing %d single-hop and %d multi-hop probes ==\n", name.c_str(), s.n, s.n);
  const std::vector<Prepared> single = prepare(model, gen, false, s.n);
  const std::vector<Prepared> multi = prepare(model, gen, true, s.n);
  const int64_t n_b = single.front().scenario.chunk_length;

  // ---- 1. accuracy and fidelity per arm -------------------------------------------------------------
  std::vector<std::string> arms{"reprefill", "blind"};
  for (int64_t r : s.ranks) arms.push_back(patch_spec(model, r));
  for (const char* a : {"cacheblend:0.15", "cacheblend:0.5", "firstk:10", "firstk:33"}) arms.push_back(a);
  json acc = json::array();
  std::printf("\n%-18s %9s %9s %8s %8s %8s %8s %8s\n", "arm", "acc-1hop", "acc-multi", "eta-1", "eta-mh", "flip-mh",
              "bytes%", "fwd-tok");
  std::map<std::string, std::pair<double, double>> seconds;  // arm -> (per-reuse, forming), multi-hop means
  for (const std::string& spec : arms) {
    const auto strategy = rt::make_strategy(spec);
    Pool ps, pm;
    double fraction = 0, fwd = 0, sec = 0, form = 0;
    for (const Prepared& p : single) add_arm(ps, p, rt::run_arm(p.scenario, *strategy).query_logits);
    for (const Prepared& p : multi) {
      const rt::ArmResult r = rt::run_arm(p.scenario, *strategy);
      add_arm(pm, p, r.query_logits);
      fraction += r.patch_fraction / multi.size();
      fwd += r.repair.cost.forward_tokens / multi.size();
      sec += r.repair.cost.seconds / multi.size();
      form += r.repair.cost.forming_seconds / multi.size();
    }
    seconds[spec] = {sec, form};
    const json js = ps.to_json(), jm = pm.to_json();
    acc.push_back({{"arm", strategy->name()},
                   {"single_hop", js},
                   {"multi_hop", jm},
                   {"patch_fraction", fraction},
                   {"forward_tokens", fwd},
                   {"seconds", sec},
                   {"forming_seconds", form}});
    std::printf(
        "%-18s %9.3f %9.3f %8.3f %8.3f %8s %7.1f%% %8.1f\n", strategy->name().c_str(), js["accuracy"].get<double>(),
        jm["accuracy"].get<double>(), js["eta"].is_null() ? NAN : js["eta"].get<double>(),
        jm["eta"].is_null() ? NAN : jm["eta"].get<double>(),
        jm["flip_recover"].is_null() ? "-" : std::to_string(jm["flip_recover"].get<double>()).substr(0, 5).c_str(),
        100 * fraction, fwd);
  }
  out["accuracy"] = acc;
  out["chunk_tokens"] = n_b;
  out["n_per_kind"] = s.n;

  // ---- 2. deficit shape (multi-hop probes) --------------------------------------------------------------
  const int64_t L = model.config().num_layers;
  std::vector<double> layer_rel(static_cast<size_t>(L), 0.0), layer_rank_k(static_cast<size_t>(L), 0.0),
      layer_rank_v(static_cast<size_t>(L), 0.0);
  for (const Prepared& p : multi) {
    const std::vector<double> c = rt::layer_contributions(p.delta, p.scenario.exact);
    for (int64_t l = 0; l < L; ++l) {
      layer_rel[static_cast<size_t>(l)] += c[static_cast<size_t>(l)] / multi.size();
      layer_rank_k[static_cast<size_t>(l)] +=
          static_cast<double>(energy_rank(p.delta[static_cast<size_t>(l)].k, 0.9)) / multi.size();
      layer_rank_v[static_cast<size_t>(l)] +=
          static_cast<double>(energy_rank(p.delta[static_cast<size_t>(l)].v, 0.9)) / multi.size();
    }
  }
  const std::vector<double> fractions{0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0};
  json token = json::array();
  for (double f : fractions) {
    Pool oracle, first;
    for (const Prepared& p : multi) {
      const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(f * n_b)));
      const at::Tensor top = std::get<0>(rank_tokens(p.delta).narrow(0, 0, k).sort());
      add_arm(oracle, p, rt::decode_query(p.scenario, mix_rows(p.scenario.canonical, p.scenario.exact, top)));
      add_arm(first, p,
              rt::decode_query(p.scenario, mix_rows(p.scenario.canonical, p.scenario.exact, at::arange(k, at::kLong))));
    }
    token.push_back({{"fraction", f}, {"oracle", oracle.to_json()}, {"first", first.to_json()}});
  }
  out["deficit"] = {{"layer_relative_norm", layer_rel},
                    {"layer_energy90_rank_k", layer_rank_k},
                    {"layer_energy90_rank_v", layer_rank_v},
                    {"content_width_k", model.config().content_k_shape().width()},
                    {"content_width_v", model.config().content_v_shape().width()},
                    {"token_oracle", token}};
  std::printf("\ndeficit by layer (‖Δ‖/‖KV(B|C)‖, multi-hop):");
  for (double v : layer_rel) std::printf(" %.3f", v);
  std::printf("\n90%%-energy rank by layer (K / V):");
  for (int64_t l = 0; l < L; ++l)
    std::printf(" %.1f/%.1f", layer_rank_k[static_cast<size_t>(l)], layer_rank_v[static_cast<size_t>(l)]);
  std::printf("\ntoken oracle (exact KV on the top-p tokens by |Δ|) vs first-p tokens: eta\n");
  for (const json& t : token) {
    std::printf("  p=%.2f  oracle %.3f  first %.3f\n", t["fraction"].get<double>(),
                t["oracle"]["eta"].is_null() ? NAN : t["oracle"]["eta"].get<double>(),
                t["first"]["eta"].is_null() ? NAN : t["first"]["eta"].get<double>());
  }

  // ---- 3. deep-only and shared basis (multi-hop) --------------------------------------------------------
  bd::TaskGenerator cal_gen(s.seed, bd::Split::kCalibration);
  std::vector<rt::Content> cal;
  for (int i = 0; i < 40; ++i) {
    const bd::Probe p = bd::make_probe(cal_gen, true);
    const rt::PreparedScenario ps = rt::prepare_scenario(model, to_scenario(p.context, p.chunk, p.question));
    cal.push_back(rt::deficit(ps.exact, ps.canonical));
  }
  json variants = json::array();
  std::printf("\n%-22s %8s %9s %8s %8s\n", "variant (multi-hop)", "eta", "accuracy", "flip", "bytes%");
  for (int64_t r : {8, 16, 32}) {
    for (const std::string& v : {std::string("own"), std::string("deep"), std::string("shared")}) {
      Pool pool;
      double fraction = 0, first_layer = 0;
      rt::SharedBasis basis;
      if (v == "shared") basis = rt::fit_shared_basis(model, cal, patch_options(model, r, n_b));
      for (const Prepared& p : multi) {
        rt::Patch patch;
        int64_t bytes = 0;
        if (v == "shared") {
          patch = rt::project_onto_basis(model, p.delta, basis);
          for (const rt::LowRank& f : patch.k) bytes += f.u.defined() ? f.u.numel() * 4 : 0;  // V is the model's
          for (const rt::LowRank& f : patch.v) bytes += f.u.defined() ? f.u.numel() * 4 : 0;
        } else {
          rt::PatchOptions o = patch_options(model, r, n_b);
          if (v == "deep") o.first_layer = rt::choose_first_layer(p.delta, 0.9);
          first_layer += static_cast<double>(o.first_layer) / multi.size();
          patch = rt::form_patch(model, p.delta, o);
          bytes = patch.bytes();
        }
        fraction += static_cast<double>(bytes) / rt::content_bytes(p.scenario.canonical) / multi.size();
        add_arm(pool, p, rt::decode_query(p.scenario, rt::apply_patch(model, p.scenario.canonical, patch)));
      }
      const json j = pool.to_json();
      variants.push_back({{"variant", v},
                          {"rank", r},
                          {"fidelity", j},
                          {"patch_fraction", fraction},
                          {"mean_first_layer", v == "shared" ? json(nullptr) : json(first_layer)}});
      std::printf(
          "%-22s %8.3f %9.3f %8s %7.1f%%\n", (v + " r" + std::to_string(r)).c_str(),
          j["eta"].is_null() ? NAN : j["eta"].get<double>(), j["accuracy"].get<double>(),
          j["flip_recover"].is_null() ? "-" : std::to_string(j["flip_recover"].get<double>()).substr(0, 5).c_str(),
          100 * fraction);
    }
  }
  out["variants"] = variants;

  // ---- 4. break-even reuses (multi-hop, rank 32) -------------------------------------------------------
  const std::string spec32 = patch_spec(model, 32);
  const double reprefill = seconds["reprefill"].first;
  const double apply = seconds[spec32].first, forming = seconds[spec32].second;
  // Patch path: forming once (its conditioned forward also serves the first request exactly), then an
  // apply per later reuse. Baseline: a re-prefill per reuse. Reuses N at which the patch path is cheaper:
  //   forming + (N − 1)·apply ≤ N·reprefill.
  const double n_star = reprefill > apply ? std::max(1.0, (forming - apply) / (reprefill - apply)) : INFINITY;
  out["break_even"] = {{"arm", spec32},
                       {"reprefill_seconds", reprefill},
                       {"apply_seconds", apply},
                       {"forming_seconds", forming},
                       {"reuses", std::isfinite(n_star) ? json(n_star) : json(nullptr)},
                       {"forward_tokens_reprefill", n_b},
                       {"forward_tokens_patch", 0}};
  std::printf("\nbreak-even (%s): re-prefill %.2f ms/reuse, apply %.2f ms/reuse, forming %.2f ms once -> %.2f reuses\n",
              spec32.c_str(), 1e3 * reprefill, 1e3 * apply, 1e3 * forming, n_star);
  return out;
}

}  // namespace orbit::bench::binding
