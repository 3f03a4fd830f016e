// The fidelity curves on a real trained model (stories260K, llama2.c) with model-sampled token
// sequences: one story per item sampled from BOS at temperature 1 (seeded), cut into three 24-token
// context chunks, a 64-token chunk B and an 8-token query. No task answers here: η, flip-recover and
// top-1 agreement over the 8 query rows against full re-prefill.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "binding_common.h"

namespace orbit::bench::binding {

namespace {

std::vector<int64_t> sample_story(const rt::Model& model, int64_t length, std::mt19937_64& rng) {
  std::vector<int64_t> tokens{1};  // BOS
  rt::PastKV past;
  past.layers.resize(static_cast<size_t>(model.config().num_layers));
  for (rt::LayerKV& l : past.layers) {
    const rt::ContentShape ks = model.config().content_k_shape(), vs = model.config().content_v_shape();
    l.k = at::zeros({0, ks.heads, ks.dim});
    l.v = at::zeros({0, vs.heads, vs.dim});
  }
  past.positions = at::zeros({0}, at::kLong);
  while (static_cast<int64_t>(tokens.size()) < length) {
    rt::ForwardInput in;
    in.tokens = {tokens.back()};
    in.positions = at::full({1}, static_cast<int64_t>(tokens.size()) - 1, at::kLong);
    const rt::ForwardResult r = model.forward(in, &past, {});
    for (size_t l = 0; l < past.layers.size(); ++l) {
      past.layers[l].k = at::cat({past.layers[l].k, r.content[l].k}, 0);
      past.layers[l].v = at::cat({past.layers[l].v, r.content[l].v}, 0);
    }
    past.positions = at::cat({past.positions, in.positions}, 0);
    const at::Tensor p = at::softmax(r.logits.to(at::kDouble).view({-1}), 0);
    const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
    const at::Tensor cdf = p.cumsum(0);
    int64_t next = (cdf < u).sum().item<int64_t>();
    next = std::min<int64_t>(next, p.size(0) - 1);
    if (next == 1 || next == 2) next = 3;  // keep one story (no BOS/EOS mid-sequence)
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace

json run_stories_experiment(const rt::Model& model, const Settings& s) {
  std::printf("\n== stories260K: model-sampled sequences (3x24-token context, 64-token chunk, 8-token query) ==\n");
  std::mt19937_64 rng(s.seed + 7);
  const int items = std::max(8, s.n / 2);
  std::vector<rt::PreparedScenario> prepared;
  for (int i = 0; i < items; ++i) {
    const std::vector<int64_t> t = sample_story(model, 3 * 24 + 64 + 8, rng);
    rt::Scenario sc;
    for (int c = 0; c < 3; ++c)
      sc.context.push_back({std::vector<int64_t>(t.begin() + c * 24, t.begin() + (c + 1) * 24), {}});
    sc.chunk.tokens.assign(t.begin() + 72, t.begin() + 136);
    sc.query.assign(t.begin() + 136, t.end());
    prepared.push_back(rt::prepare_scenario(model, sc));
  }
  std::vector<std::string> arms{"blind"};
  const int64_t width = std::min(model.config().content_k_shape().width(), model.config().content_v_shape().width());
  for (int64_t r : s.ranks) {
    if (r <= width) arms.push_back(patch_spec(model, r));
  }
  for (const char* a : {"cacheblend:0.15", "cacheblend:0.5", "firstk:10", "firstk:33"}) arms.push_back(a);
  json rows = json::array();
  std::printf("%-18s %8s %8s %8s %8s %8s\n", "arm", "eta", "KL", "flip", "top1", "bytes%");
  for (const std::string& spec : arms) {
    const auto strategy = rt::make_strategy(spec);
    Pool pool;
    double fraction = 0;
    for (const rt::PreparedScenario& p : prepared) {
      const rt::ArmResult r = rt::run_arm(p, *strategy);
      pool.add(p.exact_logits, p.blind_logits, r.query_logits);
      fraction += r.patch_fraction / prepared.size();
    }
    const json j = pool.to_json();
    rows.push_back({{"arm", strategy->name()}, {"fidelity", j}, {"patch_fraction", fraction}});
    std::printf(
        "%-18s %8.3f %8.4f %8s %8.3f %7.1f%%\n", strategy->name().c_str(),
        j["eta"].is_null() ? NAN : j["eta"].get<double>(), j["kl"].get<double>(),
        j["flip_recover"].is_null() ? "-" : std::to_string(j["flip_recover"].get<double>()).substr(0, 5).c_str(),
        j["top1"].get<double>(), 100 * fraction);
  }
  // Deficit by layer, for the shape comparison.
  std::vector<double> layer_rel(static_cast<size_t>(model.config().num_layers), 0.0);
  for (const rt::PreparedScenario& p : prepared) {
    const std::vector<double> c = rt::layer_contributions(rt::deficit(p.exact, p.canonical), p.exact);
    for (size_t l = 0; l < c.size(); ++l) layer_rel[l] += c[l] / prepared.size();
  }
  return {{"items", items},
          {"arms", rows},
          {"layer_relative_norm", layer_rel},
          {"content_width_k", model.config().content_k_shape().width()},
          {"content_width_v", model.config().content_v_shape().width()}};
}

}  // namespace orbit::bench::binding
