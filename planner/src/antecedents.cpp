#include "orbit/planner/antecedents.h"

#include <algorithm>
#include <limits>

#include "orbit/common/error.h"

namespace orbit::planner {
namespace {

// A Fenwick tree over n slots answering prefix sums and prefix maxima (values only ever grow).
class Fenwick {
 public:
  explicit Fenwick(std::size_t n) : sum_(n + 1, 0), max_(n + 1, kNone) {}
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

  void add(std::size_t slot, int64_t tokens, int64_t end) {
    for (std::size_t k = slot + 1; k < sum_.size(); k += k & (~k + 1)) {
      sum_[k] += tokens;
      max_[k] = std::max(max_[k], end);
    }
  }
  // Over slots [0, count).
  int64_t sum(std::size_t count) const {
    int64_t s = 0;
    for (std::size_t k = count; k > 0; k -= k & (~k + 1)) s += sum_[k];
    return s;
  }
  int64_t max(std::size_t count) const {
    int64_t m = kNone;
    for (std::size_t k = count; k > 0; k -= k & (~k + 1)) m = std::max(m, max_[k]);
    return m;
  }

 private:
  std::vector<int64_t> sum_;
  std::vector<int64_t> max_;
};

}  // namespace

std::vector<AntecedentChange> antecedent_changes(const std::vector<KeptInstance>& kept) {
  const std::size_t n = kept.size();
  std::vector<AntecedentChange> out(n);
  std::vector<char> seen(n, 0);
  bool ascending = true;
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t r = kept[i].old_rank;
    ORBIT_CHECK(r >= 0 && static_cast<std::size_t>(r) < n && !seen[static_cast<std::size_t>(r)],
                "antecedent_changes: kept[" << i << "].old_rank is " << r << "; the ranks must be a permutation of 0.."
                                            << static_cast<int64_t>(n) - 1);
    seen[static_cast<std::size_t>(r)] = 1;
    if (static_cast<std::size_t>(r) != i) ascending = false;
  }
  if (ascending) return out;

  // Inserted: sweep the new order; the instances seen so far precede i now, and those among them with a
  // higher old rank followed it before. Their slots are reversed ranks, so "higher rank" is a prefix.
  {
    Fenwick tree(n);
    for (std::size_t i = 0; i < n; ++i) {
      const KeptInstance& k = kept[i];
      const auto r = static_cast<std::size_t>(k.old_rank);
      const std::size_t higher = n - 1 - r;  // slots [0, higher) hold ranks r+1 .. n-1
      out[i].inserted = tree.sum(higher);
      if (out[i].inserted > 0) out[i].inserted_gap = std::max<int64_t>(0, k.new_position - tree.max(higher));
      tree.add(n - 1 - r, k.tokens, k.new_position + k.extent);
    }
  }
  // Removed: sweep the new order backwards; the instances seen so far follow i now, and those among them
  // with a lower old rank preceded it before.
  {
    Fenwick tree(n);
    for (std::size_t i = n; i-- > 0;) {
      const KeptInstance& k = kept[i];
      const auto r = static_cast<std::size_t>(k.old_rank);
      out[i].removed = tree.sum(r);
      if (out[i].removed > 0) out[i].removed_gap = std::max<int64_t>(0, k.old_position - tree.max(r));
      tree.add(r, k.tokens, k.old_position + k.extent);
    }
  }
  return out;
}

}  // namespace orbit::planner
