// planner::search_budget without a model: hand-made windows of candidates (KL, seconds) with known answers,
// and the lazy enumeration of kept instances checked against enumerating every slot up front.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "orbit/planner/budget_search.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::planner;

namespace {

BudgetSlot slot(std::vector<BudgetCandidate> candidates, std::size_t chosen = 0) {
  BudgetSlot s;
  s.candidates = std::move(candidates);
  s.chosen = chosen;
  return s;
}

const EnumerateSlots kNoEnumerate = [](const std::vector<std::size_t>&, std::vector<BudgetSlot>&) {
  FAIL("nothing was pending");
};

std::vector<std::size_t> choices(const std::vector<BudgetSlot>& slots) {
  std::vector<std::size_t> out;
  for (const BudgetSlot& s : slots) out.push_back(s.chosen);
  return out;
}

}  // namespace

TEST_CASE("budget search: upgrades by KL removed per second until the budget fits", "[planner][budget]") {
  // Slot 0: 0.010 KL at 1 ms, or exact at 3 ms (rate 5/s). Slot 1: 0.004 at 1 ms, or 0.001 at 2 ms (3/s).
  std::vector<BudgetSlot> slots{slot({{0.010, 1e-3}, {0.0, 3e-3}}), slot({{0.004, 1e-3}, {0.001, 2e-3}})};
  BudgetSearchOptions o;
  o.kl_budget = 0.005;
  o.free_rate = 1e9;  // nothing is free
  CHECK(search_budget(slots, o, kNoEnumerate) == Approx(0.004));
  CHECK(choices(slots) == std::vector<std::size_t>{1, 0});  // slot 0's upgrade alone fits the budget

  // A tighter budget takes slot 1's upgrade too; a looser one takes none.
  for (BudgetSlot& s : slots) s.chosen = 0;
  o.kl_budget = 0.002;
  CHECK(search_budget(slots, o, kNoEnumerate) == Approx(0.001));
  CHECK(choices(slots) == std::vector<std::size_t>{1, 1});
  for (BudgetSlot& s : slots) s.chosen = 0;
  o.kl_budget = 0.1;
  CHECK(search_budget(slots, o, kNoEnumerate) == Approx(0.014));
  CHECK(choices(slots) == std::vector<std::size_t>{0, 0});
}

TEST_CASE("budget search: under budget, only upgrades faster than the free rate", "[planner][budget]") {
  std::vector<BudgetSlot> slots{slot({{0.002, 1e-3}, {0.0, 1e-3 + 1e-7}}),  // 2e-3 KL for 0.1 us: 2e4/s
                                slot({{0.002, 1e-3}, {0.0, 2e-3}})};        // the same KL for 1 ms: 2/s
  BudgetSearchOptions o;
  o.kl_budget = 0.01;
  o.free_rate = 100;
  CHECK(search_budget(slots, o, kNoEnumerate) == Approx(0.002));
  CHECK(choices(slots) == std::vector<std::size_t>{1, 0});
}

TEST_CASE("budget search: a tie goes to the earliest slot, then to the first candidate", "[planner][budget]") {
  std::vector<BudgetSlot> slots{slot({{0.004, 1e-3}, {0.002, 2e-3}, {0.002, 2e-3}}),
                                slot({{0.004, 1e-3}, {0.002, 2e-3}})};
  BudgetSearchOptions o;
  o.kl_budget = 0.006;
  o.free_rate = 1e9;
  search_budget(slots, o, kNoEnumerate);
  CHECK(choices(slots) == std::vector<std::size_t>{1, 0});
}

TEST_CASE("budget search: an upgrade that adds no time counts as 1 ns", "[planner][budget]") {
  CHECK(upgrade_gain(0.01, 1.0, 0.0, 1.0) == Approx(0.01 / 1e-9));
  CHECK(upgrade_gain(0.01, 1.0, 0.0, 0.5) == Approx(0.01 / 1e-9));  // cheaper and better: the largest rate
  CHECK(upgrade_gain(0.01, 1.0, 0.005, 2.0) == Approx(0.005));
}

// A window of random slots; each kept slot with a loss is either given whole or left pending (its kept
// candidate and a bound at or above its alternatives' best rate), and enumerated when the search asks.
TEST_CASE("budget search: lazy enumeration of kept instances chooses what full enumeration chooses",
          "[planner][budget]") {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const std::size_t n = 1 + rng() % 24;
    std::vector<BudgetSlot> full(n);
    std::vector<bool> kept(n);
    for (std::size_t i = 0; i < n; ++i) {
      kept[i] = u(rng) < 0.6;
      const std::size_t k = 1 + rng() % 4;
      for (std::size_t c = 0; c < k; ++c)
        full[i].candidates.push_back({u(rng) < 0.2 ? 0.0 : 0.01 * u(rng), 1e-3 * u(rng)});
      // The start: kept instances their kept candidate (index 0 here), the others their cheapest.
      full[i].chosen = kept[i]
                           ? 0
                           : static_cast<std::size_t>(
                                 std::min_element(full[i].candidates.begin(), full[i].candidates.end(),
                                                  [](const auto& a, const auto& b) { return a.seconds < b.seconds; }) -
                                 full[i].candidates.begin());
    }
    std::vector<BudgetSlot> lazy = full;
    for (std::size_t i = 0; i < n; ++i) {
      const BudgetCandidate keep = full[i].candidates[0];
      if (!kept[i] || keep.kl <= 0 || full[i].candidates.size() == 1) continue;
      double best = 0;
      for (const BudgetCandidate& c : full[i].candidates) {
        if (c.kl < keep.kl) best = std::max(best, upgrade_gain(keep.kl, keep.seconds, c.kl, c.seconds));
      }
      if (best <= 0) continue;
      lazy[i].candidates = {keep};
      lazy[i].chosen = 0;
      lazy[i].pending_bound = best * (1 + 3 * u(rng));  // a bound, not the exact rate
    }
    std::size_t enumerated = 0;
    const EnumerateSlots enumerate = [&](const std::vector<std::size_t>& batch, std::vector<BudgetSlot>& slots) {
      REQUIRE(std::is_sorted(batch.begin(), batch.end()));
      for (const std::size_t i : batch) {
        REQUIRE(slots[i].pending_bound > 0);
        slots[i].candidates = full[i].candidates;
        slots[i].chosen = 0;
        ++enumerated;
      }
    };
    BudgetSearchOptions o;
    o.kl_budget = 0.02 * u(rng);
    o.free_rate = u(rng) < 0.5 ? 1e9 : 10 * u(rng);
    std::vector<BudgetSlot> eager = full;
    const double kl_eager = search_budget(eager, o, kNoEnumerate);
    const double kl_lazy = search_budget(lazy, o, enumerate);
    INFO("seed " << seed);
    CHECK(choices(lazy) == choices(eager));
    CHECK(kl_lazy == Approx(kl_eager).margin(1e-15));
  }
}

}  // namespace ORBIT_TEST_FILE
