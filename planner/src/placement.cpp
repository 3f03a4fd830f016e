// Placement: exact DP over subsets, greedy with swap local search, brute force (see placement.h).
#include "orbit/planner/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "orbit/common/error.h"

namespace orbit::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxItems = 63;
constexpr int64_t kMaxExact = 24;

uint64_t bit(int64_t item) { return uint64_t{1} << item; }

// Calls problem.cost, counts the calls and rejects NaN and -infinity.
class Evaluator {
 public:
  explicit Evaluator(const PlacementProblem& problem) : problem_(problem) {
    ORBIT_CHECK(problem.num_items >= 0 && problem.num_items <= kMaxItems,
                "placement: num_items must be in 0.." << kMaxItems << ", got " << problem.num_items);
    ORBIT_CHECK(problem.num_items == 0 || problem.cost, "placement: cost function is empty");
  }
  double operator()(int64_t item, uint64_t mask) {
    ++count_;
    double c = problem_.cost(item, mask);
    ORBIT_CHECK(!std::isnan(c) && c != -kInf,
                "placement: cost(item " << item << ", mask 0x" << std::hex << mask << std::dec << ") is " << c);
    return c;
  }
  int64_t count() const { return count_; }
  int64_t n() const { return problem_.num_items; }

 private:
  const PlacementProblem& problem_;
  int64_t count_ = 0;
};

void check_permutation(const std::vector<int64_t>& order, int64_t n, const char* what) {
  ORBIT_CHECK(static_cast<int64_t>(order.size()) == n,
              "placement: " << what << " has " << order.size() << " items, expected " << n);
  uint64_t seen = 0;
  for (int64_t item : order) {
    ORBIT_CHECK(item >= 0 && item < n && !(seen & bit(item)),
                "placement: " << what << " is not a permutation of 0.." << n - 1 << " (item " << item << ")");
    seen |= bit(item);
  }
}

// `candidate` beats `incumbent` by more than rounding noise (+infinity is beaten by any finite value).
bool improves(double candidate, double incumbent) {
  if (std::isinf(incumbent)) return candidate < incumbent;
  return candidate < incumbent - 1e-12 * std::max(1.0, std::abs(incumbent));
}

Placement exact_dp(Evaluator& eval) {
  const int64_t n = eval.n();
  const uint64_t full = n == 0 ? 0 : (bit(n - 1) << 1) - 1;
  std::vector<double> best(full + 1, kInf);
  std::vector<int8_t> last(full + 1, -1);
  best[0] = 0;
  for (uint64_t set = 1; set <= full; ++set) {
    for (int64_t i = 0; i < n; ++i) {
      if (!(set & bit(i))) continue;
      double c = best[set ^ bit(i)] + eval(i, set ^ bit(i));
      if (last[set] < 0 || c < best[set]) {
        best[set] = c;
        last[set] = static_cast<int8_t>(i);
      }
    }
  }
  Placement result;
  result.order.assign(n, 0);
  for (uint64_t set = full, k = n; k-- > 0; set ^= bit(last[set])) result.order[k] = last[set];
  result.cost = best[full];
  result.exact = true;
  return result;
}

// An order with its per-position costs and the set before each position.
struct Scored {
  std::vector<int64_t> order;
  std::vector<double> costs;
  std::vector<uint64_t> before;
  double total() const { return std::accumulate(costs.begin(), costs.end(), 0.0); }
};

Scored score(Evaluator& eval, std::vector<int64_t> order) {
  Scored s{std::move(order), {}, {}};
  uint64_t mask = 0;
  for (int64_t item : s.order) {
    s.before.push_back(mask);
    s.costs.push_back(eval(item, mask));
    mask |= bit(item);
  }
  return s;
}

Scored greedy(Evaluator& eval) {
  Scored s;
  uint64_t mask = 0;
  for (int64_t k = 0; k < eval.n(); ++k) {
    int64_t pick = -1;
    double pick_cost = kInf;
    for (int64_t i = 0; i < eval.n(); ++i) {
      if (mask & bit(i)) continue;
      double c = eval(i, mask);
      if (pick < 0 || c < pick_cost) pick = i, pick_cost = c;
    }
    s.order.push_back(pick);
    s.costs.push_back(pick_cost);
    s.before.push_back(mask);
    mask |= bit(pick);
  }
  return s;
}

// Swaps positions j < k if that lowers the cost; only positions j..k see a different set.
bool try_swap(Evaluator& eval, Scored& s, size_t j, size_t k) {
  std::vector<int64_t> items(s.order.begin() + j, s.order.begin() + k + 1);
  std::swap(items.front(), items.back());
  std::vector<double> costs;
  double old_sum = 0, new_sum = 0;
  uint64_t mask = s.before[j];
  for (size_t m = 0; m < items.size(); ++m) {
    costs.push_back(eval(items[m], mask));
    mask |= bit(items[m]);
    new_sum += costs.back();
    old_sum += s.costs[j + m];
  }
  if (!improves(new_sum, old_sum)) return false;
  mask = s.before[j];
  for (size_t m = 0; m < items.size(); ++m) {
    s.order[j + m] = items[m];
    s.costs[j + m] = costs[m];
    s.before[j + m] = mask;
    mask |= bit(items[m]);
  }
  return true;
}

void local_search(Evaluator& eval, Scored& s, int64_t passes) {
  const size_t n = s.order.size();
  for (int64_t pass = 0; pass < passes; ++pass) {
    bool improved = false;
    for (size_t j = 0; j + 1 < n; ++j) improved |= try_swap(eval, s, j, j + 1);
    for (size_t j = 0; j + 2 < n; ++j)
      for (size_t k = j + 2; k < n; ++k) improved |= try_swap(eval, s, j, k);
    if (!improved) break;
  }
}

}  // namespace

double order_cost(const PlacementProblem& problem, const std::vector<int64_t>& order) {
  Evaluator eval(problem);
  check_permutation(order, problem.num_items, "order");
  return score(eval, order).total();
}

Placement place(const PlacementProblem& problem, const PlacementOptions& options) {
  Evaluator eval(problem);
  ORBIT_CHECK(options.exact_up_to >= 0 && options.exact_up_to <= kMaxExact,
              "placement: exact_up_to must be in 0.." << kMaxExact << ", got " << options.exact_up_to);
  if (!options.incumbent.empty()) check_permutation(options.incumbent, problem.num_items, "incumbent");
  Placement result;
  if (problem.num_items <= options.exact_up_to) {
    result = exact_dp(eval);
  } else {
    Scored start = greedy(eval);
    if (!options.incumbent.empty()) {
      Scored incumbent = score(eval, options.incumbent);
      if (incumbent.total() < start.total()) start = std::move(incumbent);
    }
    Scored best = start;
    if (options.local_search) local_search(eval, best, options.local_search_passes);
    if (best.total() > start.total()) best = std::move(start);  // rounding in the total: never worse
    result.order = std::move(best.order);
    result.cost = std::accumulate(best.costs.begin(), best.costs.end(), 0.0);
  }
  result.evaluations = eval.count();
  return result;
}

Placement place_brute_force(const PlacementProblem& problem) {
  Evaluator eval(problem);
  ORBIT_CHECK(problem.num_items <= 9, "place_brute_force: n ≤ 9 only (n! orders), got " << problem.num_items);
  std::vector<int64_t> order(problem.num_items);
  std::iota(order.begin(), order.end(), 0);
  Placement result;
  bool first = true;
  do {
    double c = score(eval, order).total();
    if (first || c < result.cost) result.order = order, result.cost = c, first = false;
  } while (std::next_permutation(order.begin(), order.end()));
  result.exact = true;
  result.evaluations = eval.count();
  return result;
}

}  // namespace orbit::planner
