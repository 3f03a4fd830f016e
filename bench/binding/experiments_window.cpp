// Window operations at scenario level (paper 000 §5), done directly with the runtime's reuse primitives:
//   reorder     orbit patch vs. transfer (the canonical order's patch) vs. exact (this order's own patch)
//   survivors   sliding window: survivors' conditioned KV kept as-is (relocated) vs. exact re-prefill
//   recall      a patch frozen at eviction (stale) vs. one formed on the current earlier context (fresh)
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "binding_common.h"

namespace orbit::bench::binding {

namespace {

constexpr int64_t kRank = 16;  // B has 34 rows: rank 32 would be nearly exact by construction

double eta_of(const json& j) { return j["eta"].is_null() ? NAN : j["eta"].get<double>(); }
std::string frac(const json& j, const char* key) {
  if (j[key].is_null()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", j[key].get<double>());
  return buf;
}

// Mean Δ in float64 over `deltas` except index `skip` (-1 = none).
rt::Content mean_delta(const std::vector<rt::Content>& deltas, int skip) {
  rt::Content out;
  const size_t L = deltas.front().size();
  double count = 0;
  for (size_t i = 0; i < deltas.size(); ++i) count += static_cast<int>(i) != skip;
  for (size_t l = 0; l < L; ++l) {
    at::Tensor k = at::zeros_like(deltas.front()[l].k, at::kDouble),
               v = at::zeros_like(deltas.front()[l].v, at::kDouble);
    for (size_t i = 0; i < deltas.size(); ++i) {
      if (static_cast<int>(i) == skip) continue;
      k += deltas[i][l].k.to(at::kDouble);
      v += deltas[i][l].v.to(at::kDouble);
    }
    out.push_back({(k / count).to(at::kFloat), (v / count).to(at::kFloat)});
  }
  return out;
}

double relative_difference(const rt::Content& a, const rt::Content& b) {
  double num = 0, den = 0;
  for (size_t l = 0; l < a.size(); ++l) {
    num += (a[l].k - b[l].k).pow(2).sum().item<double>() + (a[l].v - b[l].v).pow(2).sum().item<double>();
    den += b[l].k.pow(2).sum().item<double>() + b[l].v.pow(2).sum().item<double>();
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

json reorder(const rt::Model& model, const Settings& s) {
  json out = json::array();
  std::printf("\nreorder (rank %lld, multi-hop where-question, orbit holds the test ordering out):\n",
              static_cast<long long>(kRank));
  std::printf("%3s %6s %9s %9s %9s %9s %9s %9s %8s\n", "K", "tests", "eta-exact", "eta-orbit", "eta-trans", "flip-ex",
              "flip-orb", "flip-tr", "|dpi-did|");
  for (int k : {3, 4, 6}) {
    bd::TaskGenerator gen(s.seed + static_cast<uint64_t>(k), bd::Split::kTest);
    std::mt19937_64 rng(s.seed * 31 + static_cast<uint64_t>(k));
    Pool exact, orbit, transfer;
    double drift = 0;
    int drift_n = 0, tests = 0;
    const int sets = k == 6 ? std::max(2, s.reorder_sets / 2) : s.reorder_sets;
    for (int set = 0; set < sets; ++set) {
      const bd::ReorderSet rs = bd::make_reorder_set(gen, k);
      // Orderings: all k! for k <= 4 (lexicographic, identity first), else the identity plus 23 distinct
      // seeded shuffles; tests: every non-identity ordering (k <= 4) or 6 of them (k = 6).
      std::vector<std::vector<int>> orders;
      std::vector<int> perm(static_cast<size_t>(k));
      std::iota(perm.begin(), perm.end(), 0);
      if (k <= 4) {
        do orders.push_back(perm);
        while (std::next_permutation(perm.begin(), perm.end()));
      } else {
        orders.push_back(perm);
        while (orders.size() < 24) {
          std::shuffle(perm.begin(), perm.end(), rng);
          if (std::find(orders.begin(), orders.end(), perm) == orders.end()) orders.push_back(perm);
        }
      }
      std::vector<rt::PreparedScenario> prepared;
      std::vector<rt::Content> deltas;
      for (const auto& order : orders) {
        std::vector<bd::Chunk> ctx;
        for (int i : order) ctx.push_back(rs.antecedents[static_cast<size_t>(i)]);
        prepared.push_back(rt::prepare_scenario(model, to_scenario(ctx, rs.chunk, rs.question)));
        deltas.push_back(rt::deficit(prepared.back().exact, prepared.back().canonical));
      }
      const rt::PatchOptions po = patch_options(model, kRank, prepared.front().chunk_length);
      const rt::Patch transfer_patch = rt::form_patch(model, deltas.front(), po);
      const int test_count = k <= 4 ? static_cast<int>(orders.size()) - 1 : 6;
      for (int t = 1; t <= test_count; ++t) {
        const rt::PreparedScenario& p = prepared[static_cast<size_t>(t)];
        const at::Tensor e = last_row(p.exact_logits), b = last_row(p.blind_logits);
        const int64_t answer = rs.question.answer;
        exact.add(
            e, b,
            last_row(rt::decode_query(
                p, rt::apply_patch(model, p.canonical, rt::form_patch(model, deltas[static_cast<size_t>(t)], po)))),
            answer);
        orbit.add(e, b,
                  last_row(rt::decode_query(
                      p, rt::apply_patch(model, p.canonical, rt::form_patch(model, mean_delta(deltas, t), po)))),
                  answer);
        transfer.add(e, b, last_row(rt::decode_query(p, rt::apply_patch(model, p.canonical, transfer_patch))), answer);
        drift += relative_difference(deltas[static_cast<size_t>(t)], deltas.front());
        ++drift_n;
        ++tests;
      }
    }
    const json je = exact.to_json(), jo = orbit.to_json(), jt = transfer.to_json();
    out.push_back({{"k", k},
                   {"sets", sets},
                   {"tests", tests},
                   {"exact", je},
                   {"orbit", jo},
                   {"transfer", jt},
                   {"delta_order_drift", drift / std::max(1, drift_n)}});
    std::printf("%3d %6d %9.3f %9.3f %9.3f %9s %9s %9s %8.3f\n", k, tests, eta_of(je), eta_of(jo), eta_of(jt),
                frac(je, "flip_recover").c_str(), frac(jo, "flip_recover").c_str(), frac(jt, "flip_recover").c_str(),
                drift / std::max(1, drift_n));
  }
  return out;
}

// Content of a whole window, one forward, plus per-chunk boundaries.
rt::Content window_content(const rt::Model& model, const std::vector<int64_t>& tokens) {
  rt::ForwardInput in;
  in.tokens = tokens;
  rt::ForwardOptions o;
  o.logits = rt::LogitsMode::kNone;
  return model.forward(in, nullptr, o).content;
}

at::Tensor decode_over(const rt::Model& model, const rt::Content& content, const std::vector<int64_t>& query) {
  rt::PastKV past;
  past.layers = content;
  past.positions = at::arange(content.front().k.size(0), at::kLong);
  rt::ForwardInput in;
  in.tokens = query;
  rt::ForwardOptions o;
  o.return_content = false;
  return model.forward(in, &past, o).logits;  // [1, vocab]: the answer row
}

rt::Content slice(const rt::Content& c, int64_t from) {
  rt::Content out;
  for (const rt::LayerKV& l : c)
    out.push_back({l.k.narrow(0, from, l.k.size(0) - from), l.v.narrow(0, from, l.v.size(0) - from)});
  return out;
}

rt::Content cat_rows(const std::vector<rt::Content>& parts) {
  rt::Content out;
  for (size_t l = 0; l < parts.front().size(); ++l) {
    std::vector<at::Tensor> ks, vs;
    for (const rt::Content& p : parts) {
      ks.push_back(p[l].k);
      vs.push_back(p[l].v);
    }
    out.push_back({at::cat(ks, 0), at::cat(vs, 0)});
  }
  return out;
}

json survivors(const rt::Model& model, const Settings& s) {
  bd::TaskOptions opts;
  opts.min_intros = opts.max_intros = 3;
  opts.min_texts = opts.max_texts = 1;
  bd::TaskGenerator gen(s.seed + 99, bd::Split::kTest, opts);
  Pool keep_single, keep_multi, blind_single, blind_multi;
  int64_t exact_correct = 0, exact_n = 0;
  for (int w = 0; w < s.window_cases; ++w) {
    const bd::Episode e = gen.episode();
    const rt::Content full = window_content(model, e.flat());
    const int64_t evicted = static_cast<int64_t>(e.chunks.front().tokens.size());
    const std::vector<bd::Chunk> rest(e.chunks.begin() + 1, e.chunks.end());
    const rt::Content kept = slice(full, evicted);                      // as-is, relocated by −evicted on the fly
    const rt::Content exact = window_content(model, bd::concat(rest));  // re-prefill of the survivors
    std::vector<rt::Content> canon;
    for (const bd::Chunk& c : rest) canon.push_back(rt::canonical(model, to_input(c)));
    const rt::Content blind = cat_rows(canon);
    for (const bd::Question& q : e.questions) {
      if (q.chunk < 1) continue;  // answer evicted
      if (q.kind == bd::QuestionKind::kWhere && e.chunks[static_cast<size_t>(q.chunk)].referent < 1) continue;
      const at::Tensor le = decode_over(model, exact, q.tokens), lk = decode_over(model, kept, q.tokens),
                       lb = decode_over(model, blind, q.tokens);
      const bool multi = bd::is_multi_hop(q.kind);
      (multi ? keep_multi : keep_single).add(le, lb, lk, q.answer);
      (multi ? blind_multi : blind_single).add(le, lb, lb, q.answer);
      exact_correct += argmax_last(le) == q.answer;
      ++exact_n;
    }
  }
  const json out = {{"windows", s.window_cases},
                    {"keep_single_hop", keep_single.to_json()},
                    {"keep_multi_hop", keep_multi.to_json()},
                    {"blind_single_hop", blind_single.to_json()},
                    {"blind_multi_hop", blind_multi.to_json()},
                    {"exact_accuracy", exact_n ? static_cast<double>(exact_correct) / exact_n : 0.0}};
  std::printf(
      "\nsliding window (3 scenes + 1 text, evict the leading chunk), survivors kept as-is vs exact re-prefill:\n");
  std::printf("  %-10s %10s %10s %8s %8s %8s\n", "questions", "KL-keep", "KL-blind", "eta", "top1", "acc");
  for (const char* kind : {"single_hop", "multi_hop"}) {
    const json& j = out[std::string("keep_") + kind];
    std::printf("  %-10s %10.4f %10.4f %8.3f %8.3f %8.3f\n", kind, j["kl"].get<double>(), j["kl_blind"].get<double>(),
                eta_of(j), j["top1"].get<double>(), j["accuracy"].get<double>());
  }
  std::printf("  exact re-prefill accuracy %.3f\n", out["exact_accuracy"].get<double>());
  return out;
}

json recall(const rt::Model& model, const Settings& s) {
  json out = json::array();
  std::printf(
      "\nrecall (ref frame behind 5 units: 2 distractor scenes, its intro frame, 2 texts; rank %lld): stale patch "
      "(formed before eviction) vs fresh\n",
      static_cast<long long>(kRank));
  std::printf("%8s %9s %9s %9s %9s %8s %8s %8s %8s\n", "turnover", "eta-stale", "eta-fresh", "flip-st", "flip-fr",
              "acc-st", "acc-fr", "acc-bl", "acc-ex");
  for (int step = 0; step <= 5; ++step) {
    const double tau = step * 0.2;
    bd::TaskGenerator gen(s.seed + 500 + static_cast<uint64_t>(step), bd::Split::kTest);
    Pool stale, fresh, blind, rebuild;
    int replaced = 0;
    for (int i = 0; i < s.recall_cases; ++i) {
      const bd::RecallCase rc = bd::make_recall_case(gen, 5, tau);
      replaced += rc.referent_replaced;
      const rt::PreparedScenario p = rt::prepare_scenario(model, to_scenario(rc.new_context, rc.chunk, rc.question));
      const rt::PatchOptions po = patch_options(model, kRank, p.chunk_length);
      const rt::PastKV old_ctx = rt::assemble_context(model, to_inputs(rc.old_context));
      const rt::Content old_delta = rt::deficit(rt::conditioned(model, to_input(rc.chunk), old_ctx), p.canonical);
      const at::Tensor e = last_row(p.exact_logits), b = last_row(p.blind_logits);
      const int64_t a = rc.question.answer;
      stale.add(
          e, b,
          last_row(rt::decode_query(p, rt::apply_patch(model, p.canonical, rt::form_patch(model, old_delta, po)))), a);
      fresh.add(
          e, b,
          last_row(rt::decode_query(
              p, rt::apply_patch(model, p.canonical, rt::form_patch(model, rt::deficit(p.exact, p.canonical), po)))),
          a);
      blind.add(e, b, b, a);
      rebuild.add(e, b, e, a);
    }
    const json js = stale.to_json(), jf = fresh.to_json(), jb = blind.to_json(), jr = rebuild.to_json();
    out.push_back({{"turnover", tau},
                   {"cases", s.recall_cases},
                   {"referent_replaced", replaced},
                   {"stale", js},
                   {"fresh", jf},
                   {"blind", jb},
                   {"rebuild", jr}});
    std::printf("%8.1f %9.3f %9.3f %9s %9s %8.3f %8.3f %8.3f %8.3f\n", tau, eta_of(js), eta_of(jf),
                frac(js, "flip_recover").c_str(), frac(jf, "flip_recover").c_str(), js["accuracy"].get<double>(),
                jf["accuracy"].get<double>(), jb["accuracy"].get<double>(), jr["accuracy"].get<double>());
  }
  return out;
}

}  // namespace

json run_window_experiments(const rt::Model& model, const std::string& name, const Settings& s) {
  std::printf("\n== %s: window experiments ==\n", name.c_str());
  json out;
  out["reorder"] = reorder(model, s);
  out["survivors"] = survivors(model, s);
  out["recall"] = recall(model, s);
  out["rank"] = kRank;
  return out;
}

}  // namespace orbit::bench::binding
