// orbit::planner: placement (DP against brute force, greedy properties), the cost model fit and decision,
// the offline bounds (against LRU and brute force), the antecedent changes of a reorder (against their
// definition) and the prefix-cache ledger.
// The dependency graph has its own file (test_dependency_graph.cpp).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/planner/antecedents.h"
#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/planner/offline.h"
#include "orbit/planner/placement.h"
#include "orbit/planner/prefix_ledger.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::planner;
using Catch::Matchers::Contains;

// ---- placement ---------------------------------------------------------------------------------------

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Random set-dependent costs: an independent draw for every (item, antecedent set), some +infinity.
PlacementProblem random_problem(int64_t n, std::mt19937_64& rng, double inf_rate) {
  auto table = std::make_shared<std::vector<double>>(static_cast<size_t>(n) << n);
  std::uniform_real_distribution<double> u(0, 10);
  for (double& c : *table) c = u(rng) < 10 * inf_rate ? kInf : std::round(u(rng) * 100) / 100;
  return {n, [table, n](int64_t item, uint64_t mask) { return (*table)[mask * n + item]; }};
}

std::vector<int64_t> random_order(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

bool same_cost(double a, double b) { return (std::isinf(a) && std::isinf(b)) || a == Approx(b).epsilon(1e-12); }

}  // namespace

TEST_CASE("placement: exact DP equals brute force on random set-dependent costs", "[planner][cpu]") {
  std::mt19937_64 rng(11);
  int infinite = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int64_t n = 1 + trial % 7;
    PlacementProblem p = random_problem(n, rng, trial % 3 == 0 ? 0.3 : 0.05);
    Placement dp = place(p);
    Placement bf = place_brute_force(p);
    INFO("trial " << trial << " n " << n);
    CHECK(dp.exact);
    CHECK(same_cost(dp.cost, bf.cost));
    CHECK(same_cost(order_cost(p, dp.order), dp.cost));  // the order really costs what it says
    CHECK(dp.evaluations == n << (n - 1));               // each (item, set) pair once
    infinite += std::isinf(bf.cost);
  }
  CHECK(infinite > 0);  // the +infinity case was exercised
  CHECK(infinite < 100);
}

TEST_CASE("placement: greedy with local search, against DP, itself and random orders", "[planner][cpu]") {
  std::mt19937_64 rng(12);
  PlacementOptions greedy_only;
  greedy_only.exact_up_to = 0;
  greedy_only.local_search = false;
  PlacementOptions greedy_ls;
  greedy_ls.exact_up_to = 0;
  double sum_ls = 0, sum_random = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 2 + trial % 8;
    PlacementProblem p = random_problem(n, rng, 0);
    Placement dp = place(p);
    Placement g = place(p, greedy_only);
    Placement ls = place(p, greedy_ls);
    std::vector<int64_t> r = random_order(n, rng);
    CHECK_FALSE(ls.exact);
    CHECK(g.evaluations == n * (n + 1) / 2);
    CHECK(dp.cost <= ls.cost + 1e-9);
    CHECK(ls.cost <= g.cost + 1e-9);  // local search never makes it worse
    CHECK(same_cost(order_cost(p, ls.order), ls.cost));
    for (size_t k = 0; k + 1 < ls.order.size(); ++k) {  // a local optimum under adjacent swaps
      std::vector<int64_t> swapped = ls.order;
      std::swap(swapped[k], swapped[k + 1]);
      CHECK(order_cost(p, swapped) >= ls.cost - 1e-9);
    }
    PlacementOptions with_incumbent = greedy_ls;
    with_incumbent.incumbent = r;
    CHECK(place(p, with_incumbent).cost <= order_cost(p, r));  // never worse than the order to beat
    sum_ls += ls.cost;
    sum_random += order_cost(p, r);
  }
  CHECK(sum_ls < 0.8 * sum_random);
}

TEST_CASE("placement: greedy is exact on additive costs and recovers a stored patch chain", "[planner][cpu]") {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> u(1, 5);
  PlacementOptions greedy;
  greedy.exact_up_to = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 2 + trial % 11;
    std::vector<double> base(n);
    for (double& b : base) b = u(rng);
    PlacementProblem additive{n, [base](int64_t item, uint64_t) { return base[item]; }};
    CHECK(same_cost(place(additive, greedy).cost, place(additive).cost));

    // Patches were formed along a hidden order σ: item σ[k] hits (cost 1) exactly behind {σ[0..k-1]},
    // otherwise it is formed (cost 5 + its size). Greedy finds σ, which is optimal.
    std::vector<int64_t> sigma = random_order(n, rng);
    std::vector<uint64_t> key(n);
    for (int64_t k = 0, mask = 0; k < n; mask |= int64_t{1} << sigma[k], ++k) key[sigma[k]] = mask;
    PlacementProblem chain{
        n, [key, base](int64_t item, uint64_t mask) { return mask == key[item] ? 1.0 : 5 + base[item]; }};
    Placement g = place(chain, greedy);
    CHECK(g.order == sigma);
    CHECK(g.cost == Approx(static_cast<double>(n)));
    CHECK(same_cost(place(chain).cost, g.cost));
  }
  // Beyond the exact limit (n = 40, masks past 32 bits) the result is still a permutation.
  PlacementProblem big{40, [](int64_t item, uint64_t mask) {
                         return static_cast<double>((item * 7 + __builtin_popcountll(mask) * 3) % 11);
                       }};
  Placement b = place(big);
  CHECK_FALSE(b.exact);
  std::vector<int64_t> sorted = b.order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 40; ++i) CHECK(sorted[i] == i);
  PlacementOptions beat_identity;
  beat_identity.incumbent = sorted;
  CHECK(place(big, beat_identity).cost <= order_cost(big, sorted));
}

TEST_CASE("placement: bad input throws", "[planner][cpu]") {
  PlacementProblem p{64, [](int64_t, uint64_t) { return 1.0; }};
  CHECK_THROWS_WITH(place(p), Contains("num_items must be in 0..63"));
  p.num_items = -1;
  CHECK_THROWS_AS(place(p), orbit::Error);
  p.num_items = 10;
  CHECK_THROWS_WITH(place_brute_force(p), Contains("n ≤ 9"));
  p.num_items = 3;
  p.cost = [](int64_t item, uint64_t) { return item == 2 ? std::nan("") : 1.0; };
  CHECK_THROWS_WITH(place(p), Contains("cost(item 2"));
  p.cost = [](int64_t, uint64_t) { return 1.0; };
  PlacementOptions o;
  o.exact_up_to = 0;
  o.incumbent = {0, 0, 1};
  CHECK_THROWS_WITH(place(p, o), Contains("incumbent is not a permutation"));
  Placement empty = place(PlacementProblem{0, nullptr});
  CHECK(empty.order.empty());
  CHECK(empty.cost == 0);
}

// ---- cost model --------------------------------------------------------------------------------------

namespace {

// Samples timed on a machine whose true costs are `c` (noise: relative, deterministic).
std::vector<CostSample> synthetic_samples(const CostCoefficients& c, double noise) {
  std::vector<CostSample> out;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  for (int64_t t : {16, 64, 256, 1024})
    for (int64_t ctx : {0, 128, 1024, 4096}) {
      double s = c.forward_per_token * t + c.forward_per_token_context * t * ctx + c.forward_fixed;
      out.push_back({sample_kind::kForward, t, ctx, 0, s * jitter(rng)});
    }
  auto bandwidth = [&](const char* kind, double bytes_per_s) {
    for (int64_t bytes : {1 << 20, 1 << 24}) out.push_back({kind, 0, 0, bytes, bytes / bytes_per_s * jitter(rng)});
  };
  bandwidth(sample_kind::kRelocate, c.relocate_bytes_per_s);
  bandwidth(sample_kind::kPatchApply, c.patch_apply_bytes_per_s);
  bandwidth(sample_kind::kPatchForm, c.patch_form_bytes_per_s);
  bandwidth(sample_kind::kTransferDevice, c.transfer_bytes_per_s[0]);
  bandwidth(sample_kind::kTransferHost, c.transfer_bytes_per_s[1]);
  bandwidth(sample_kind::kTransferDisk, c.transfer_bytes_per_s[2]);
  return out;
}

CostCoefficients truth() {
  CostCoefficients c;
  c.forward_per_token = 2e-4;
  c.forward_per_token_context = 3e-9;
  c.forward_fixed = 4e-3;
  c.relocate_bytes_per_s = 80e9;
  c.patch_apply_bytes_per_s = 60e9;
  c.patch_form_bytes_per_s = 7e9;
  c.transfer_bytes_per_s = {900e9, 20e9, 2e9};
  return c;
}

}  // namespace

TEST_CASE("cost model: the fit recovers known coefficients", "[planner][cpu]") {
  const CostCoefficients c = truth();
  CostCoefficients f = CostModel::fit(synthetic_samples(c, 0)).coefficients();
  CHECK(f.forward_per_token == Approx(c.forward_per_token).epsilon(1e-6));
  CHECK(f.forward_per_token_context == Approx(c.forward_per_token_context).epsilon(1e-6));
  CHECK(f.forward_fixed == Approx(c.forward_fixed).epsilon(1e-6));
  CHECK(f.relocate_bytes_per_s == Approx(c.relocate_bytes_per_s));
  CHECK(f.patch_form_bytes_per_s == Approx(c.patch_form_bytes_per_s));
  for (int t = 0; t < 3; ++t) CHECK(f.transfer_bytes_per_s[t] == Approx(c.transfer_bytes_per_s[t]));

  // With 2% timing noise the predictions stay within a few percent (the attention term is a small share
  // of these forwards, so its own coefficient is the least determined).
  const CostModel exact(c), fitted = CostModel::fit(synthetic_samples(c, 0.02));
  for (int64_t t : {16, 256, 1024})
    for (int64_t ctx : {0, 1024, 4096})
      CHECK(fitted.seconds_forward(t, ctx) == Approx(exact.seconds_forward(t, ctx)).epsilon(0.03));
  CHECK(fitted.coefficients().forward_per_token == Approx(c.forward_per_token).epsilon(0.05));
  CHECK(fitted.coefficients().patch_apply_bytes_per_s == Approx(c.patch_apply_bytes_per_s).epsilon(0.05));

  // Non-negative: a negative true intercept comes out 0, not negative; an unidentifiable attention term
  // (no context anywhere) comes out 0 while the rest is still recovered.
  CostCoefficients negative = c;
  negative.forward_fixed = -1e-3;
  CHECK(CostModel::fit(synthetic_samples(negative, 0)).coefficients().forward_fixed == 0);
  std::vector<CostSample> no_context;
  for (const CostSample& s : synthetic_samples(c, 0))
    if (s.what != sample_kind::kForward || s.context_tokens == 0) no_context.push_back(s);
  CostCoefficients nc = CostModel::fit(no_context).coefficients();
  CHECK(nc.forward_per_token_context == 0);
  CHECK(nc.forward_per_token == Approx(c.forward_per_token).epsilon(1e-6));
  CHECK(nc.forward_fixed == Approx(c.forward_fixed).epsilon(1e-6));
}

TEST_CASE("cost model: missing or unknown samples throw naming the kind", "[planner][cpu]") {
  std::vector<CostSample> samples = synthetic_samples(truth(), 0);
  std::vector<CostSample> no_disk;
  for (const CostSample& s : samples)
    if (s.what != sample_kind::kTransferDisk) no_disk.push_back(s);
  CHECK_THROWS_WITH(CostModel::fit(no_disk), Contains("no 'transfer_disk' samples"));
  samples.push_back({"forwrad", 1, 0, 0, 1.0});
  CHECK_THROWS_WITH(CostModel::fit(samples), Contains("unknown kind 'forwrad'"));
  CostCoefficients bad;
  bad.relocate_bytes_per_s = 0;
  CHECK_THROWS_AS(CostModel(bad), orbit::Error);
}

TEST_CASE("cost model: choose load+patch, load+form or recompute by estimated seconds", "[planner][cpu]") {
  const CostModel m(truth());
  ReuseOption o;
  o.tokens = 512;
  o.context_tokens = 2048;
  o.canonical_bytes = 64 << 20;
  o.canonical_tier = Tier::kHost;
  o.patch_tier = Tier::kHost;
  // No stored patch, no reuse expected: forming costs more than the forward alone, so recompute.
  Decision d = m.choose(o);
  CHECK(d.action == Decision::Action::kRecompute);
  CHECK(std::isinf(d.seconds[0]));
  const double forward = 2e-4 * 512 + 3e-9 * 512 * 2048 + 4e-3;
  CHECK(d.seconds[2] == Approx(forward));
  const double load = (64 << 20) / 20e9 + (64 << 20) / 80e9;
  CHECK(d.seconds[1] == Approx(load + forward + (64 << 20) / 7e9));
  CHECK_THAT(d.describe(), Contains("recompute"));
  // Expected reuse makes forming pay.
  o.expected_reuse = 10;
  CHECK(m.choose(o).action == Decision::Action::kLoadAndForm);
  // A stored patch makes loading it the cheapest.
  o.patch_bytes = 4 << 20;
  d = m.choose(o);
  CHECK(d.action == Decision::Action::kLoadAndPatch);
  CHECK(d.seconds[0] == Approx(11 * (load + (4 << 20) / 20e9 + (64 << 20) / 60e9)));
  // On disk, a short chunk is cheaper to recompute even with the patch stored.
  o.expected_reuse = 0;
  o.tokens = 16;
  o.context_tokens = 0;
  o.canonical_tier = o.patch_tier = Tier::kDisk;
  CHECK(m.choose(o).action == Decision::Action::kRecompute);
  CHECK_THAT(CostModel().describe(), Contains("transfer device"));
}

// ---- offline bounds ----------------------------------------------------------------------------------

namespace {

std::vector<Demand> unit_trace(const std::string& keys) {
  std::vector<Demand> out;
  for (size_t i = 0; i < keys.size(); ++i) out.push_back({static_cast<int64_t>(i), std::string(1, keys[i]), 1, 1.0});
  return out;
}

// The best any policy can do with unit sizes and costs: at each miss, store the item or not, evicting
// any one resident when full (dynamic programming over (position, resident set)).
int64_t brute_force_misses(const std::vector<Demand>& trace, size_t i, std::set<std::string> cache, size_t capacity,
                           std::map<std::pair<size_t, std::set<std::string>>, int64_t>& memo) {
  if (i == trace.size()) return 0;
  auto found = memo.find({i, cache});
  if (found != memo.end()) return found->second;
  int64_t best;
  if (cache.count(trace[i].key)) {
    best = brute_force_misses(trace, i + 1, cache, capacity, memo);
  } else {
    best = 1 + brute_force_misses(trace, i + 1, cache, capacity, memo);  // not stored
    if (capacity > 0) {
      std::vector<std::set<std::string>> options;
      if (cache.size() < capacity) {
        options.push_back(cache);
      } else {
        for (const std::string& out : cache) {
          options.push_back(cache);
          options.back().erase(out);
        }
      }
      for (std::set<std::string>& next : options) {
        next.insert(trace[i].key);
        best = std::min(best, 1 + brute_force_misses(trace, i + 1, next, capacity, memo));
      }
    }
  }
  memo[{i, cache}] = best;
  return best;
}

}  // namespace

TEST_CASE("offline: a hand example, and oversize items always miss", "[planner][cpu]") {
  std::vector<Demand> t = unit_trace("ABCAB");
  OfflineBound b = optimise_offline(t, 2);
  CHECK(b.compulsory_misses == 3);
  CHECK(b.belady_misses == 3);  // C is never used again: formed, not stored
  CHECK(simulate_lru(t, 2).misses == 5);
  t.push_back({5, "Z", 10, 2.5});
  t.push_back({6, "Z", 10, 2.5});
  b = optimise_offline(t, 5);
  CHECK(b.compulsory_misses == 5);
  CHECK(b.compulsory_cost == 3 + 5.0);
  CHECK(b.belady_misses == 5);
  CHECK(simulate_lru(t, 5).cost == Approx(3 + 5.0));
  t.push_back({4, "A", 1, 1.0});
  CHECK_THROWS_WITH(optimise_offline(t, 5), Contains("demand 7 has step 4"));
  t.back() = {9, "A", 2, 1.0};
  CHECK_THROWS_WITH(simulate_lru(t, 5), Contains("asks 'A' with 2 bytes"));
}

TEST_CASE("offline: compulsory <= Belady <= LRU, and Belady is optimal on unit traces", "[planner][cpu]") {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t length = 1 + rng() % 10;
    const int keys = 1 + static_cast<int>(rng() % 5);
    std::string trace;
    for (size_t i = 0; i < length; ++i) trace += static_cast<char>('A' + rng() % keys);
    const int64_t capacity = static_cast<int64_t>(rng() % 4);
    std::vector<Demand> t = unit_trace(trace);
    OfflineBound b = optimise_offline(t, capacity);
    PolicyCost lru = simulate_lru(t, capacity);
    INFO(trace << " capacity " << capacity);
    CHECK(b.compulsory_misses <= b.belady_misses);
    CHECK(b.belady_misses <= lru.misses);
    CHECK(b.belady_cost == Approx(static_cast<double>(b.belady_misses)));
    std::map<std::pair<size_t, std::set<std::string>>, int64_t> memo;
    CHECK(b.belady_misses == brute_force_misses(t, 0, {}, static_cast<size_t>(capacity), memo));
  }
  // Longer unit traces against LRU; with unequal sizes the compulsory cost still bounds both.
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<Demand> t, sized;
    for (int64_t i = 0; i < 200; ++i) {
      std::string key = "k" + std::to_string(rng() % 12);
      t.push_back({i, key, 1, 1.0});
      sized.push_back({i, key, 1 + static_cast<int64_t>(std::hash<std::string>()(key) % 7), 1.0 + key.size()});
    }
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 10);
    OfflineBound b = optimise_offline(t, capacity);
    CHECK(b.belady_cost <= simulate_lru(t, capacity).cost);
    OfflineBound s = optimise_offline(sized, capacity * 3);
    CHECK(s.compulsory_cost <= s.belady_cost);
    CHECK(s.compulsory_cost <= simulate_lru(sized, capacity * 3).cost);
  }
}

TEST_CASE("fidelity model: least squares per kind, the truncation stand-in, bad samples named", "[planner][cpu]") {
  // Samples on a line through the origin recover its slope; kinds without samples keep the defaults.
  const FidelityModel defaults;
  const FidelityModel m =
      FidelityModel::fit({{Loss::kTruncated, 0.01, 0.002}, {Loss::kTruncated, 0.1, 0.02}, {Loss::kBlind, 0.5, 0.01}});
  CHECK(m.coefficient(Loss::kTruncated) == Approx(0.2));
  CHECK(m.fitted(Loss::kTruncated));
  CHECK(m.coefficient(Loss::kBlind) == Approx(0.02));
  CHECK_FALSE(m.fitted(Loss::kKeep));
  CHECK(m.coefficient(Loss::kKeep) == defaults.coefficient(Loss::kKeep));
  CHECK(m.predict(Loss::kTruncated, 0.05, 0.5) == Approx(0.2 * 0.05 * 0.5));
  CHECK(m.predict(Loss::kTruncated, 3.0, 2.0) == Approx(0.2));  // feature and weight clamped to [0, 1]
  // The stand-in for an unknown residual: 1 at rank 0, 0 at full rank, falling fast between.
  CHECK(truncation_stand_in(0, 32) == 1.0);
  CHECK(truncation_stand_in(32, 32) == 0.0);
  CHECK(truncation_stand_in(16, 32) == Approx(1.0 / 64));
  CHECK(truncation_stand_in(8, 32) > truncation_stand_in(16, 32));
  CHECK(truncation_stand_in(4, 0) == 0.0);
  CHECK_THROWS_WITH(FidelityModel::fit({{Loss::kBlind, 1, 0.1}, {Loss::kStale, -1, 0.1}}),
                    Contains("sample 1 (stale)"));
  // The sensitivity factor: 1 when unknown or at the reference, (s / s_ref)^0.4 below it, s / s_ref above,
  // within [1/8, 64].
  CHECK(m.reference_sensitivity() == defaults.reference_sensitivity());  // no reference given: the default
  CHECK(defaults.reference_sensitivity() > 0);
  const FidelityModel r = FidelityModel::fit({{Loss::kBlind, 0.5, 0.01}}, 0.01);
  CHECK(r.reference_sensitivity() == 0.01);
  CHECK(r.sensitivity_factor(-1) == 1.0);
  CHECK(r.sensitivity_factor(0.01) == Approx(1.0));
  CHECK(r.sensitivity_factor(0.001) == Approx(std::pow(0.1, kSensitivityExponent)));
  CHECK(r.sensitivity_factor(1e-12) == 0.125);
  CHECK(r.sensitivity_factor(0.05) == Approx(5.0));
  CHECK(r.sensitivity_factor(1e6) == kMaxSensitivityFactor);
  CHECK(r.predict(Loss::kBlind, 1.0, 1.0, 0.001) == Approx(0.02 * std::pow(0.1, kSensitivityExponent)));
  CHECK(r.predict(Loss::kBlind, 1.0, 1.0) == Approx(0.02));
  CHECK_THAT(r.describe(), Contains("s_ref 1.00e-02"));
  CHECK_THROWS_WITH(FidelityModel::fit({}, std::nan("")), Contains("reference_sensitivity"));
}

TEST_CASE("fidelity model: a blend moves coefficients and reference sensitivity in log space", "[planner][cpu]") {
  const FidelityModel defaults;
  const FidelityModel fit = FidelityModel::fit({{Loss::kKeep, 1.0, 0.04}, {Loss::kBlind, 1.0, 0.0274 / 4}}, 0.08);
  const FidelityModel half = FidelityModel::blend(defaults, fit, 0.5);
  CHECK(half.coefficient(Loss::kKeep) == Approx(std::sqrt(defaults.coefficient(Loss::kKeep) * 0.04)));
  CHECK(half.coefficient(Loss::kBlind) == Approx(0.0274 / 2));
  CHECK(half.reference_sensitivity() == Approx(std::sqrt(defaults.reference_sensitivity() * 0.08)));
  CHECK(half.fitted(Loss::kKeep));
  CHECK_FALSE(half.fitted(Loss::kStale));
  CHECK(half.coefficient(Loss::kStale) == Approx(defaults.coefficient(Loss::kStale)));
  CHECK(half.scale() == 1.0);
  for (const double w : {0.0, 1.0}) {
    const FidelityModel& end = w == 0 ? defaults : fit;
    const FidelityModel b = FidelityModel::blend(defaults, fit, w);
    CHECK(b.coefficient(Loss::kKeep) == Approx(end.coefficient(Loss::kKeep)));
    CHECK(b.reference_sensitivity() == Approx(end.reference_sensitivity()));
  }
  // A kind whose samples measured no loss keeps its default (a coefficient of 0 would make it free to every
  // budget), and a blend with such a side leaves the other.
  const FidelityModel none = FidelityModel::fit({{Loss::kKeep, 1.0, 0.0}, {Loss::kKeep, 0.5, 0.0}}, 0.08);
  CHECK_FALSE(none.fitted(Loss::kKeep));
  CHECK(none.coefficient(Loss::kKeep) == defaults.coefficient(Loss::kKeep));
  CHECK(FidelityModel::blend(defaults, none, 0.5).coefficient(Loss::kKeep) ==
        Approx(defaults.coefficient(Loss::kKeep)));
  CHECK_THROWS_WITH(FidelityModel::blend(defaults, fit, 1.5), Contains("weight must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(FidelityModel::blend(defaults, fit, std::nan("")), Contains("weight"));
}

// ---- antecedent changes under a reorder ---------------------------------------------------------------

namespace {

// The definition, O(n^2): for every instance, the instances that joined or left what precedes it.
std::vector<AntecedentChange> antecedent_changes_brute(const std::vector<KeptInstance>& kept) {
  std::vector<AntecedentChange> out(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    int64_t nearest_in = std::numeric_limits<int64_t>::min(), nearest_out = nearest_in;
    for (std::size_t j = 0; j < kept.size(); ++j) {
      const bool before_now = j < i;
      const bool before_then = kept[j].old_rank < kept[i].old_rank;
      if (before_now && !before_then) {
        out[i].inserted += kept[j].tokens;
        nearest_in = std::max(nearest_in, kept[j].new_position + kept[j].extent);
      } else if (!before_now && before_then) {
        out[i].removed += kept[j].tokens;
        nearest_out = std::max(nearest_out, kept[j].old_position + kept[j].extent);
      }
    }
    if (out[i].inserted > 0) out[i].inserted_gap = kept[i].new_position - nearest_in;
    if (out[i].removed > 0) out[i].removed_gap = kept[i].old_position - nearest_out;
  }
  return out;
}

// Instances of random sizes (extent >= tokens) in old order, then laid out in the order `perm` (new index
// -> old rank).
std::vector<KeptInstance> laid_out(const std::vector<int64_t>& perm, std::mt19937_64& rng) {
  const std::size_t n = perm.size();
  std::uniform_int_distribution<int64_t> len(1, 60);
  std::vector<int64_t> tokens(n), extent(n), old_position(n + 1, 0);
  for (std::size_t r = 0; r < n; ++r) {
    tokens[r] = len(rng);
    extent[r] = tokens[r] + (r % 3 == 0 ? 4 : 0);
    old_position[r + 1] = old_position[r] + extent[r];
  }
  std::vector<KeptInstance> kept;
  int64_t position = 0;
  for (int64_t r : perm) {
    const auto k = static_cast<std::size_t>(r);
    kept.push_back({r, old_position[k], position, tokens[k], extent[k]});
    position += extent[k];
  }
  return kept;
}

}  // namespace

TEST_CASE("read-through: a fresh instance passes its weight to what precedes it, the nearest most", "[planner][cpu]") {
  // A system prompt (10), two kept turns (20 each) and a fresh tail turn (10, weight 1): the tail's starts
  // are 50 tokens after the prompt's, 40 and 20 after the turns', so their shares are 10/50, 20/40, 20/20
  // over their sum (1.7).
  const std::vector<double> w = {0.0, 0.001, 0.01, 1.0};
  const std::vector<int64_t> len = {10, 20, 20, 10};
  const std::vector<double> out = add_read_through(w, len, {false, false, false, true}, 0.5);
  CHECK(out[0] == Approx(0.5 * 0.2 / 1.7));
  CHECK(out[1] == Approx(0.001 + 0.5 * 0.5 / 1.7));
  CHECK(out[2] == Approx(0.01 + 0.5 * 1.0 / 1.7));
  CHECK(out[3] == 1.0);
  CHECK(out[2] > out[1]);
  // Nothing fresh, or a factor of 0: the weights as they were; shares never lift a weight past 1.
  CHECK(add_read_through(w, len, {false, false, false, false}, 0.5) == w);
  CHECK(add_read_through(w, len, {true, true, true, true}, 0) == w);
  const std::vector<double> capped = add_read_through({0.9, 1.0}, {5, 5}, {false, true}, 1.0);
  CHECK(capped[0] == 1.0);
  // Two fresh turns add up; a fresh instance with no weight passes nothing on.
  const std::vector<double> two = add_read_through({0.0, 0.2, 0.3}, {10, 10, 10}, {false, true, true}, 1.0);
  CHECK(two[0] == Approx(0.2 * 1.0 + 0.3 * (10.0 / 20) / (10.0 / 20 + 1.0)));
  CHECK(two[1] == Approx(0.2 + 0.3 * 1.0 / 1.5));
  CHECK(add_read_through({0.0, 0.0}, {10, 10}, {false, true}, 1.0)[0] == 0.0);
  CHECK_THROWS_WITH(add_read_through(w, {1, 2}, {false, false, false, true}), Contains("differ in size"));
}

TEST_CASE("content_shares: the tail's bigrams point at their earlier occurrences, a rare one most",
          "[planner][fidelity]") {
  // Reader: the last 4 positions, all of instance 3 ([7 8 9 5]: bigrams 7-8, 8-9, 9-5).
  const std::vector<int64_t> a = {7, 8, 1, 2, 3, 4};  // 7-8 once before the reader
  const std::vector<int64_t> b = {9, 5, 1, 2, 9, 5};  // 9-5 twice (and 1-2, which the reader lacks)
  const std::vector<int64_t> c = {1, 2, 3, 4};        // nothing the reader reads
  const std::vector<int64_t> tail = {7, 8, 9, 5};
  const std::vector<const std::vector<int64_t>*> tokens = {&a, &b, &c, &tail};
  const std::vector<int64_t> lengths = {6, 6, 4, 4};
  const std::vector<double> s = content_shares(tokens, lengths, 4);
  REQUIRE(s.size() == 4);
  // 3 distinct reader bigrams: 7-8 seen once (a gets 1/3), 9-5 twice (b gets 2 · (1/3) / 2² = 1/6), 8-9 never.
  CHECK(s[0] == Approx(1.0 / 3));
  CHECK(s[1] == Approx(1.0 / 6));
  CHECK(s[2] == 0.0);
  CHECK(s[3] == 0.0);  // the reader is not read by itself
  // A reader of 6 positions takes c's last 2 too: its bigrams 2-3 and 3-4 join the reader, its 1-2 stays before.
  const std::vector<double> wide = content_shares(tokens, lengths, 6);
  CHECK(wide[2] == 0.0);
  CHECK(wide[0] > 0);  // 3-4 occurs in a once before the reader
  // No reader, no token ids, or nothing repeated: no shares; an instance without ids is skipped.
  CHECK(content_shares(tokens, lengths, 0) == std::vector<double>(4, 0.0));
  const std::vector<double> none = content_shares({&a, nullptr, &tail}, {6, 3, 4}, 4);
  CHECK(none[0] == Approx(1.0 / 3));
  CHECK(none[1] == 0.0);
  CHECK_THROWS_WITH(content_shares(tokens, {1, 2}), Contains("differ in size"));
  CHECK_THROWS_WITH(content_shares(tokens, lengths, -1), Contains("reader_tokens must be >= 0"));
}

TEST_CASE("antecedent_changes: moving one instance to the end inserts everything it passed, removes it from them",
          "[planner][antecedents]") {
  // Old order A(10) B(20) C(30) D(40); A moves last: B C D A.
  const std::vector<KeptInstance> kept = {
      {1, 10, 0, 20, 20}, {2, 30, 20, 30, 30}, {3, 60, 50, 40, 40}, {0, 0, 90, 10, 10}};
  const std::vector<AntecedentChange> c = antecedent_changes(kept);
  REQUIRE(c.size() == 4);
  // B lost A right before it; C lost A with B (20 positions) between; D with B and C (50) between.
  CHECK(c[0].removed == 10);
  CHECK(c[0].removed_gap == 0);
  CHECK(c[1].removed == 10);
  CHECK(c[1].removed_gap == 20);
  CHECK(c[2].removed == 10);
  CHECK(c[2].removed_gap == 50);
  for (int i = 0; i < 3; ++i) CHECK(c[static_cast<std::size_t>(i)].inserted == 0);
  // A now sees B, C and D, the nearest (D) right before it.
  CHECK(c[3].inserted == 90);
  CHECK(c[3].inserted_gap == 0);
  CHECK(c[3].removed == 0);
}

TEST_CASE("antecedent_changes: an unchanged order changes nothing; bad ranks are named", "[planner][antecedents]") {
  std::mt19937_64 rng(5);
  const std::vector<KeptInstance> kept = laid_out({0, 1, 2, 3, 4}, rng);
  for (const AntecedentChange& c : antecedent_changes(kept)) {
    CHECK(c.inserted + c.removed + c.inserted_gap + c.removed_gap == 0);
  }
  CHECK(antecedent_changes({}).empty());
  std::vector<KeptInstance> twice = kept;
  twice[3].old_rank = 1;
  CHECK_THROWS_WITH(antecedent_changes(twice), Contains("kept[3].old_rank is 1") && Contains("permutation"));
  std::vector<KeptInstance> out_of_range = kept;
  out_of_range[0].old_rank = 5;
  CHECK_THROWS_WITH(antecedent_changes(out_of_range), Contains("kept[0].old_rank is 5"));
}

TEST_CASE("antecedent_changes agrees with the definition on random permutations", "[planner][antecedents]") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<std::size_t>(1 + trial % 23);
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::vector<KeptInstance> kept = laid_out(perm, rng);
    const std::vector<AntecedentChange> got = antecedent_changes(kept);
    const std::vector<AntecedentChange> want = antecedent_changes_brute(kept);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("trial " << trial << ", instance " << i);
      CHECK(got[i].inserted == want[i].inserted);
      CHECK(got[i].inserted_gap == want[i].inserted_gap);
      CHECK(got[i].removed == want[i].removed);
      CHECK(got[i].removed_gap == want[i].removed_gap);
    }
  }
}

namespace {

// A window as a prefix cache sees it: instance keys (small ints) and their tokens, chained as the window
// chains its content keys.
std::vector<orbit::planner::PrefixSpan> spans(const std::vector<std::pair<int, int64_t>>& instances) {
  std::vector<orbit::planner::PrefixSpan> out;
  uint64_t h = 1469598103934665603ull;
  for (const auto& [key, tokens] : instances) {
    h = (h ^ static_cast<uint64_t>(key)) * 1099511628211ull;
    out.push_back({h, tokens});
  }
  return out;
}

}  // namespace

TEST_CASE("prefix ledger: a prefix cache recomputes from the first instance it has not held", "[planner][cpu]") {
  using orbit::planner::PrefixLedger;
  PrefixLedger cache;
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}})) == 60);          // first sight: everything
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}})) == 0);           // read again: nothing
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}, {4, 5}})) == 5);   // appended: the new instance
  CHECK(cache.read(spans({{1, 10}, {3, 30}, {4, 5}})) == 35);           // 2 evicted: all that follows it
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}, {4, 5}})) == 0);   // back to a sequence it holds
  CHECK(cache.read(spans({{1, 10}, {3, 30}, {2, 20}, {4, 5}})) == 25);  // reordered: 1 3 was held, so from 2
  CHECK(cache.read(spans({{2, 20}, {1, 10}})) == 30);                   // same keys, another prefix
  CHECK(cache.read({}) == 0);
  CHECK(cache.size() == 10);  // the distinct prefixes read: 1 12 123 1234 13 134 132 1324 2 21
}

TEST_CASE("prefix ledger: bounded, it forgets the deepest prefixes read longest ago first", "[planner][cpu]") {
  using orbit::planner::PrefixLedger;
  PrefixLedger cache(3);
  CHECK(cache.capacity() == 3);
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}})) == 60);
  CHECK(cache.read(spans({{7, 1}})) == 1);  // forgets 123, the leaf of the older read
  CHECK(cache.size() == 3);
  CHECK(cache.read(spans({{1, 10}, {2, 20}})) == 0);            // its shorter prefixes are still held
  CHECK(cache.read(spans({{1, 10}, {2, 20}, {3, 30}})) == 30);  // the leaf was recomputed
  CHECK_THROWS_WITH(PrefixLedger(0), Catch::Contains("capacity"));
}

}  // namespace ORBIT_TEST_FILE
