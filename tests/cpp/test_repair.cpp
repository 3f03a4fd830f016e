// Repair strategies (repair.h) side by side on stories260K with model-sampled text, the fidelity measures
// (fidelity.h) on hand-made tensors, and `orbit fidelity` end to end.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "float_tolerance.h"
#include "orbit/common/error.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/repair.h"
#include "orbit_catch.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::content_diff;
using orbit::test::float32_kl_margin;
using orbit::test::max_abs_diff;

namespace {

const Model& stories() {
  static const std::unique_ptr<Model> model = load_model(orbit::test::stories_path());
  return *model;
}

// n tokens sampled from the model at temperature 1 starting from BOS = 1 (full re-forward per step: the
// model is tiny). The uniform draw is built from raw 64-bit output, so the text is the same everywhere.
std::vector<int64_t> sample_text(const Model& m, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> tokens{1};
  while (static_cast<int64_t>(tokens.size()) < n) {
    ForwardInput in;
    in.tokens = tokens;
    ForwardOptions o;
    o.return_content = false;
    const at::Tensor p = at::softmax(m.forward(in, nullptr, o).logits[0].to(at::kDouble), -1).contiguous();
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const double* prob = p.data_ptr<double>();
    int64_t next = p.size(0) - 1;
    double acc = 0;
    for (int64_t i = 0; i < p.size(0); ++i) {
      acc += prob[i];
      if (u < acc) {
        next = i;
        break;
      }
    }
    tokens.push_back(next);
  }
  return tokens;
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t start, int64_t n) {
  return {v.begin() + start, v.begin() + start + n};
}

// A window cut from one sampled story: `chunks` context chunks of `chunk_len`, B of n_b, a query of n_q.
Scenario story_scenario(int64_t chunks, int64_t chunk_len, int64_t n_b, int64_t n_q, uint64_t seed) {
  const std::vector<int64_t> text = sample_text(stories(), chunks * chunk_len + n_b + n_q, seed);
  Scenario s;
  int64_t at = 0;
  for (int64_t i = 0; i < chunks; ++i, at += chunk_len) s.context.push_back(ChunkInput{slice(text, at, chunk_len), {}});
  s.chunk.tokens = slice(text, at, n_b);
  s.query = slice(text, at + n_b, n_q);
  return s;
}

// 3 context chunks of 16, B of 24 (< D = 32, so full rank is 24), 12 query tokens.
const PreparedScenario& shared_scenario() {
  static const PreparedScenario p = prepare_scenario(stories(), story_scenario(3, 16, 24, 12, 7));
  return p;
}

ArmResult arm(const PreparedScenario& p, const std::string& spec) { return run_arm(p, *make_strategy(spec)); }

// The sizes that bound float32 drift in an arm's query logits (float_tolerance.h).
orbit::test::Float32Shape shape_of(const ArmResult& r) {
  const auto& c = stories().config();
  const PreparedScenario& p = shared_scenario();
  orbit::test::Float32Shape s;
  s.layers = c.num_layers;
  s.reduction = std::max({c.hidden_size, c.intermediate_size,
                          p.context_length + p.chunk_length + static_cast<int64_t>(p.scenario.query.size())});
  s.logit_scale = std::max(r.query_logits.abs().max().item<double>(), p.exact_logits.abs().max().item<double>());
  return s;
}

double total_kv_error(const Fidelity& f) {
  double sum = 0;
  for (const LayerKvError& e : f.kv_error) sum += e.k + e.v;
  return sum;
}

}  // namespace

// ---- fidelity measures on hand-made tensors ---------------------------------------------------------

TEST_CASE("KL, eta, top-1 and flip-recover on small known cases", "[repair][fidelity][cpu]") {
  const at::Tensor p = at::tensor({0.0, 0.0, 3.0, 0.0, 0.0, 0.0}, at::kDouble).view({2, 3});
  CHECK(mean_kl(p, p) == 0.0);
  CHECK(mean_kl(p, p + 5.0) == Approx(0.0).margin(1e-15));  // logits are shift-invariant

  // p = (1/2, 1/2), q = (3/4, 1/4): KL = ½ln(2/3) + ½ln 2 = ½ln(4/3).
  const at::Tensor exact = at::tensor({0.0f, 0.0f}).view({1, 2});
  const at::Tensor arm = at::tensor({static_cast<float>(std::log(3.0)), 0.0f}).view({1, 2});
  CHECK(mean_kl(exact, arm) == Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-6));
  CHECK(mean_kl(arm, exact) == Approx(0.75 * std::log(1.5) + 0.25 * std::log(0.5)).epsilon(1e-6));  // asymmetric
  const std::vector<double> per = kl_per_position(at::cat({exact, exact}), at::cat({exact, arm}));
  REQUIRE(per.size() == 2);
  CHECK(per[0] == 0.0);
  CHECK(per[1] == Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-6));

  CHECK(eta(0.25, 1.0) == Approx(0.75));
  CHECK(eta(2.0, 1.0) == Approx(-1.0));  // worse than blind
  CHECK(eta(0.0, 0.0) == 1.0);           // no gap and none opened
  CHECK(eta(1e-3, 0.0) == -std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS(eta(-1.0, 1.0), orbit::Error);

  // argmaxes: exact (0, 1, 2, 3), blind (0, 2, 2, 0) flips rows 1 and 3, arm (1, 1, 2, 0) restores row 1.
  const at::Tensor e = at::eye(4) * 5;
  const at::Tensor b = e.index_select(0, at::tensor({0, 2, 2, 0}, at::kLong));
  const at::Tensor a = e.index_select(0, at::tensor({1, 1, 2, 0}, at::kLong));
  CHECK(top1_agreement(e, e) == 1.0);
  CHECK(top1_agreement(e, b) == 0.5);
  CHECK(top1_agreement(e, a) == 0.5);
  const FlipRecover fr = flip_recover(e, b, a);
  CHECK(fr.flips == 2);
  CHECK(fr.recovered == 1);
  CHECK(fr.fraction() == 0.5);
  const FlipRecover none = flip_recover(e, e, a);
  CHECK(none.flips == 0);
  CHECK(std::isnan(none.fraction()));
  CHECK(flip_recover(e, b, e).recovered == 2);

  CHECK_THROWS_WITH(mean_kl(e, e.narrow(0, 0, 3)), Contains("[N, vocab]"));
}

TEST_CASE("relative KV error per layer", "[repair][fidelity][cpu]") {
  const at::Tensor k = at::randn({5, 2, 4}), v = at::randn({5, 2, 4});
  const std::vector<LayerKV> exact{{k, v}, {k, at::zeros_like(v)}};
  const std::vector<LayerKV> arm{{k * 1.1, v}, {k, at::zeros_like(v)}};
  const auto err = relative_kv_error(arm, exact);
  REQUIRE(err.size() == 2);
  CHECK(err[0].k == Approx(0.1).epsilon(1e-5));
  CHECK(err[0].v == 0.0);
  CHECK(err[1].v == 0.0);  // zero reference, equal arm
  const std::vector<LayerKV> off{{k, v}, {k, v}};
  CHECK(std::isinf(relative_kv_error(off, exact)[1].v));
  CHECK_THROWS_WITH(relative_kv_error(off, {exact[0]}), Contains("layers"));
}

// ---- strategies on stories260K ---------------------------------------------------------------------

TEST_CASE("the harness: exact B decodes the query like one prefill of the whole window", "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  REQUIRE(p.context_length == 48);
  REQUIRE(p.chunk_length == 24);
  ForwardInput in;
  for (const ChunkInput& c : p.scenario.context) in.tokens.insert(in.tokens.end(), c.tokens.begin(), c.tokens.end());
  in.tokens.insert(in.tokens.end(), p.scenario.chunk.tokens.begin(), p.scenario.chunk.tokens.end());
  in.tokens.insert(in.tokens.end(), p.scenario.query.begin(), p.scenario.query.end());
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  const at::Tensor whole = stories().forward(in, nullptr, o).logits;
  // The scenario's exact logits come from a prefill in pieces: float32 rounding, worst 1.5e-5 over the CPU
  // kernels, BLAS cores and thread counts tried; blind reuse moves them by > 1e-2 (test_window).
  CHECK(max_abs_diff(p.exact_logits, whole.narrow(0, 72, 12)) < 2e-4);
  CHECK(p.exact_logits.sizes() == at::IntArrayRef({12, 512}));
}

TEST_CASE("re-prefill and prefix are exact; blind reuse is not", "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  for (const char* spec : {"reprefill", "prefix"}) {
    INFO(spec);
    const ArmResult r = arm(p, spec);
    CHECK(r.fidelity.kl < 1e-10);
    CHECK(r.fidelity.eta == Approx(1.0).margin(1e-6));
    CHECK(r.fidelity.top1 == 1.0);
    CHECK(total_kv_error(r.fidelity) < 1e-5);
    CHECK(r.repair.cost.exact);
    CHECK(r.repair.cost.forward_tokens == 24.0);  // context is not empty: the prefix cache misses
    CHECK(r.repair.cost.patch_bytes == 0);
  }
  const ArmResult blind = arm(p, "blind");
  CHECK(blind.fidelity.kl > 1e-3);
  CHECK(blind.fidelity.eta == 0.0);
  CHECK(blind.fidelity.kl_blind == blind.fidelity.kl);
  CHECK(blind.fidelity.flips.recovered == 0);
  CHECK(blind.repair.cost.forward_tokens == 0.0);
  CHECK_FALSE(blind.repair.cost.exact);
  // The deficit grows past layer 0 (whose KV depends only on each token's own embedding).
  CHECK(blind.fidelity.kv_error[0].k == 0.0);
  CHECK(blind.fidelity.kv_error[0].v == 0.0);
  CHECK(blind.fidelity.kv_error[4].k > 0.01);
}

TEST_CASE("prefix cache and blind reuse hit behind an empty context", "[repair][cpu][model]") {
  Scenario s = story_scenario(0, 0, 20, 6, 11);
  const PreparedScenario p = prepare_scenario(stories(), s);
  const ArmResult prefix = arm(p, "prefix");
  CHECK(prefix.repair.cost.forward_tokens == 0.0);
  CHECK(prefix.repair.cost.exact);
  CHECK(prefix.fidelity.kl == 0.0);
  const ArmResult blind = arm(p, "blind");
  CHECK(blind.repair.cost.exact);
  CHECK(blind.fidelity.kl == 0.0);
  CHECK(blind.fidelity.eta == 1.0);  // KL(blind) = 0 and the arm opened no gap
  CHECK(arm(p, "reprefill").repair.cost.forward_tokens == 20.0);
}

TEST_CASE("patch: full rank reproduces re-prefill; error falls and eta rises with rank", "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  const ArmResult full = arm(p, "patch:24");
  CHECK(full.fidelity.kl < 1e-8);
  CHECK(full.fidelity.eta > 0.9999);
  CHECK(full.fidelity.top1 == 1.0);
  CHECK(content_diff(full.repair.content, p.exact) < 1e-4);
  CHECK(full.repair.cost.forward_tokens == 0.0);
  CHECK(full.repair.cost.forming_tokens == 24.0);
  // Factors per layer and tensor: U [24, 24] + Vᵀ [24, 32] floats; B's KV: 2·5·24·32 floats.
  CHECK(full.repair.cost.patch_bytes == 2 * 5 * (24 * 24 + 24 * 32) * 4);
  CHECK(full.patch_fraction == Approx((24.0 * 24 + 24 * 32) / (24.0 * 32)));

  double last_error = std::numeric_limits<double>::infinity();
  std::map<int, double> etas;
  for (int rank : {1, 2, 4, 8, 16, 24}) {
    const ArmResult r = arm(p, "patch:" + std::to_string(rank));
    INFO("rank " << rank << ": eta " << r.fidelity.eta << ", KL " << r.fidelity.kl);
    // Eckart–Young: each layer's truncation error is non-increasing in rank.
    CHECK(total_kv_error(r.fidelity) <= last_error + 1e-6);
    last_error = total_kv_error(r.fidelity);
    etas[rank] = r.fidelity.eta;
  }
  CHECK(etas[2] > 0.0);
  CHECK(etas[8] > etas[1]);
  CHECK(etas[24] > etas[8]);
  CHECK(etas[24] > etas[2]);

  // Separate ranks: keys at full rank, values at rank 1.
  const ArmResult split = arm(p, "patch:24/1");
  for (std::size_t l = 0; l < 5; ++l) CHECK(split.fidelity.kv_error[l].k < 1e-5);
  CHECK(split.fidelity.kv_error[4].v > 1e-3);
  // Deep-only patches only layers >= l0 (layer 0's deficit is zero, so it is never patched).
  const ArmResult deep = arm(p, "patch:24:deep");
  CHECK(deep.repair.cost.patch_bytes < full.repair.cost.patch_bytes);
  CHECK(deep.fidelity.kv_error[0].k == 0.0);
  const ArmResult randomized = arm(p, "patch:8:rand");
  CHECK(randomized.fidelity.eta == Approx(etas[8]).margin(0.05));
}

TEST_CASE("CacheBlend: r = 1 is re-prefill, r = 0 is blind, between recomputes ceil(r*n) tokens",
          "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  const ArmResult all = arm(p, "cacheblend:1");
  CHECK(content_diff(all.repair.content, p.exact) < 1e-4);
  CHECK(all.fidelity.kl < 1e-8);
  CHECK(all.repair.cost.forward_tokens == 24.0);
  CHECK(all.repair.cost.exact);

  const ArmResult none = arm(p, "cacheblend:0");
  CHECK(content_diff(none.repair.content, p.canonical) == 0.0);
  CHECK(none.fidelity.kl == arm(p, "blind").fidelity.kl);
  CHECK(none.repair.cost.forward_tokens == 0.0);

  const ArmResult some = arm(p, "cacheblend:0.25");  // ⌈0.25·24⌉ = 6 tokens, selection over 2 of 5 layers
  CHECK(some.repair.cost.forward_tokens == Approx(2.0 * 24 / 5 + 6));
  CHECK_FALSE(some.repair.cost.exact);
  // Exactly the 6 recomputed rows leave the canonical (checked at the last layer).
  const at::Tensor moved = (some.repair.content[4].k - p.canonical[4].k).abs().amax({1, 2}) > 0;
  CHECK(moved.sum().item<int64_t>() == 6);
  // ... and they are the 6 with the largest layer-1 KV deviation in context.
  ForwardInput in;
  in.tokens = p.scenario.chunk.tokens;
  ForwardOptions o;
  o.logits = LogitsMode::kNone;
  o.max_layers = 2;
  const Content probe = stories().forward(in, &p.context, o).content;
  const at::Tensor deviation =
      (probe[1].k - p.canonical[1].k).pow(2).sum({1, 2}) + (probe[1].v - p.canonical[1].v).pow(2).sum({1, 2});
  const at::Tensor top = std::get<1>(deviation.topk(6));
  CHECK(moved.index_select(0, top).all().item<bool>());
  CHECK(some.fidelity.kl < none.fidelity.kl);
  CHECK(make_strategy("cacheblend:0.15")->name() == "cacheblend:0.15");
}

TEST_CASE("first-k: k = n_B is re-prefill; smaller k recomputes exactly the first k rows", "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  const ArmResult all = arm(p, "firstk:24");
  CHECK(content_diff(all.repair.content, p.exact) < 1e-4);
  CHECK(all.fidelity.kl < 1e-8);
  CHECK(all.repair.cost.exact);
  CHECK(arm(p, "firstk:100").repair.cost.forward_tokens == 24.0);  // clamped to n_B

  const ArmResult four = arm(p, "firstk:4");
  CHECK(four.repair.cost.forward_tokens == 4.0);
  for (std::size_t l = 0; l < 5; ++l) {
    // The first tokens only see the context and each other: their recompute is exact, up to float32 rounding
    // (a forward over 4 rows sums in another order than one over the whole prompt: 1.05e-5 seen on one CPU),
    // far below what recomputing moves them by (their canonical rows, checked below layer 0, which has no
    // context to absorb).
    const double recomputed = max_abs_diff(four.repair.content[l].k.narrow(0, 0, 4), p.exact[l].k.narrow(0, 0, 4));
    CHECK(recomputed < 1e-4);
    if (l > 0) CHECK(max_abs_diff(p.canonical[l].k.narrow(0, 0, 4), p.exact[l].k.narrow(0, 0, 4)) > 100 * recomputed);
    CHECK(max_abs_diff(four.repair.content[l].v.narrow(0, 4, 20), p.canonical[l].v.narrow(0, 4, 20)) == 0.0);
  }
  CHECK(arm(p, "firstk:0").fidelity.kl == arm(p, "blind").fidelity.kl);
}

TEST_CASE("orbit patch over the context's orderings, own order held out", "[repair][cpu][model]") {
  const PreparedScenario& p = shared_scenario();
  const ArmResult held = arm(p, "orbit:24");
  CHECK(held.repair.cost.forming_tokens == 5.0 * (48 + 24));  // 3! − 1 orderings
  CHECK(held.repair.cost.forward_tokens == 0.0);
  CHECK(held.fidelity.eta > 0.0);
  CHECK(held.fidelity.eta < 0.9999);  // the mean over other orders is not this order's deficit
  const ArmResult all = arm(p, "orbit:24:all");
  CHECK(all.repair.cost.forming_tokens == 6.0 * (48 + 24));
  CHECK(total_kv_error(all.fidelity) < total_kv_error(held.fidelity));

  // One antecedent: the orbit is the scenario's order, so the orbit patch is the exact-signature patch.
  const PreparedScenario one = prepare_scenario(stories(), story_scenario(1, 20, 16, 4, 5));
  CHECK(content_diff(arm(one, "orbit:8").repair.content, arm(one, "patch:8").repair.content) < 1e-5);
}

TEST_CASE("strategy specs: canonical names, clear refusals", "[repair][cpu][model][errors]") {
  CHECK(make_strategy("patch:8/32:deep:rand")->name() == "patch:8/32:deep:rand");
  CHECK(make_strategy("patch:16/16")->name() == "patch:16");
  CHECK(make_strategy("orbit:4:all")->name() == "orbit:4:all");
  CHECK(make_strategy("firstk:16")->name() == "firstk:16");
  for (const char* bad : {"nope", "patch", "patch:0", "patch:x", "patch:8:deeper", "patch:8:deep:deep", "orbit:8:deep",
                          "cacheblend:1.5", "cacheblend", "firstk:-1", "blind:3", "patch:1/2/3", ""}) {
    INFO(bad);
    CHECK_THROWS_WITH(make_strategy(bad), Contains("repair strategy '" + std::string(bad) + "'") &&
                                              Contains("valid specs") && Contains("cacheblend:R"));
  }
  const PreparedScenario& p = shared_scenario();
  CHECK_THROWS_WITH(make_strategy("patch:25")->check(p),
                    Contains("strategy 'patch:25'") && Contains("min(n_B = 24, D = 32) = 24"));
  CHECK_THROWS_WITH(make_strategy("orbit:8/33")->repair(p), Contains("value rank 33"));

  Scenario bad = story_scenario(1, 4, 4, 2, 3);
  bad.context[0].tokens[2] = 512;
  CHECK_THROWS_WITH(prepare_scenario(stories(), bad), Contains("context chunk 1") && Contains("512"));
  bad = story_scenario(1, 4, 4, 2, 3);
  bad.query.clear();
  CHECK_THROWS_WITH(prepare_scenario(stories(), bad), Contains("query is empty"));
  bad = story_scenario(1, 4, 4, 2, 3);
  bad.chunk.tokens.assign(600, 5);
  CHECK_THROWS_WITH(prepare_scenario(stories(), bad), Contains("longer than the model's limit"));
}

// ---- the CLI -----------------------------------------------------------------------------------------

namespace {

using orbit::test::cli;
using orbit::test::CliRun;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

TEST_CASE("orbit fidelity --json reports every strategy; re-prefill is exact", "[repair][cli][cpu][model]") {
  const Scenario& s = shared_scenario().scenario;
  const std::string window = " --model " + orbit::test::stories_path() + " --context '" + join(s.context[0].tokens) +
                             ";" + join(s.context[1].tokens) + ";" + join(s.context[2].tokens) + "' --chunk " +
                             join(s.chunk.tokens) + " --query " + join(s.query);
  const std::vector<std::string> specs{"reprefill", "blind",   "prefix",   "cacheblend:0.15",
                                       "firstk:16", "patch:8", "patch:24", "orbit:8"};
  std::string list;
  for (const auto& spec : specs) list += (list.empty() ? "" : ",") + spec;
  // The CLI runs with another thread count than this process (its own OMP_NUM_THREADS, whatever the
  // environment gives this one), so the comparison below crosses thread counts on every machine.
  const int threads = at::get_num_threads() == 1 ? 2 : 1;
  const CliRun r =
      orbit::test::run_command("OMP_NUM_THREADS=" + std::to_string(threads) + " " + std::string(ORBIT_CLI_PATH) +
                               " fidelity --json" + window + " --strategies " + list);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["chunk_length"] == 24);
  CHECK(j["context_length"] == 48);
  REQUIRE(j["strategies"].size() == specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) CHECK(j["strategies"][i]["strategy"] == specs[i]);
  const auto& reprefill = j["strategies"][0];
  CHECK(reprefill["kl"].get<double>() < 1e-10);
  CHECK(reprefill["eta"].get<double>() == Approx(1.0));
  CHECK(reprefill["top1"].get<double>() == 1.0);
  CHECK(j["strategies"][1]["kl"].get<double>() == Approx(j["kl_blind"].get<double>()));
  CHECK(j["strategies"][1]["kl"].get<double>() > 1e-3);
  CHECK(j["strategies"][6]["eta"].get<double>() > 0.9999);  // patch:24 is full rank
  CHECK(j["strategies"][6]["kv_error"].size() == 5);
  // The same numbers as the library, in process, to float32 rounding: the CLI's process runs another thread
  // count, and BLAS may block the products differently (float_tolerance.h derives the margin).
  const ArmResult in_process = arm(shared_scenario(), "blind");
  const double kl = in_process.fidelity.kl;
  CHECK(j["strategies"][1]["kl"].get<double>() ==
        Approx(kl).epsilon(0).margin(float32_kl_margin(kl, shape_of(in_process))));

  const CliRun table = cli("fidelity" + window + " --strategies reprefill,blind");
  REQUIRE(table.status == 0);
  CHECK_THAT(table.out, Contains("reprefill") && Contains("blind") && Contains("flip-rec"));
  const CliRun defaults = cli("fidelity --json --model " + orbit::test::stories_path() + " --chunk 1,403,407,261");
  REQUIRE(defaults.status == 0);  // empty context, default query and strategies (patch ranks capped at n_B = 4)
  CHECK(nlohmann::json::parse(defaults.out)["strategies"].size() == 6);
}

TEST_CASE("orbit fidelity: bad input exits non-zero naming the argument", "[repair][cli][cpu][model][errors]") {
  const std::string model = " --model " + orbit::test::stories_path();
  CliRun r = cli("fidelity" + model + " --chunk 1,2,3 --strategies blind,bogus:3");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--strategies") && Contains("bogus:3") && Contains("valid specs"));
  r = cli("fidelity" + model + " --chunk 1,2,3 --strategies blind,reprefill,blind");  // printed two rows alike
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("argument '--strategies' lists 'blind' twice"));
  r = cli("fidelity" + model + " --chunk 1,2,3 --strategies patch:4");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--strategies") && Contains("rank 4") && Contains("min(n_B = 3"));
  r = cli("fidelity" + model + " --chunk 1,2,512");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--chunk") && Contains("512"));
  r = cli("fidelity" + model + " --chunk 1,2 --context '1,2;;3'");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--context: chunk 2 is empty"));
  r = cli("fidelity" + model + " --chunk 1,2 --query 1,-4");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--query") && Contains("-4"));
  r = cli("fidelity" + model + " --chunk ''");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("--chunk is empty"));
  r = cli("fidelity" + model);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("missing required argument '--chunk'"));
}

}  // namespace ORBIT_TEST_FILE
