// orbit::planner's dependency graph: cascades, eviction lifetime (garbage collection of evicted
// instances), fork copies, topological order, cycles and misuse.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/planner/dependency_graph.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::planner;
using Catch::Matchers::Contains;

namespace {

int64_t position_of(const std::vector<InstanceId>& order, InstanceId id) {
  auto it = std::find(order.begin(), order.end(), id);
  return it == order.end() ? -1 : it - order.begin();
}

// Ancestors of `id` through current conditioning (every instance its KV was formed on, transitively).
std::set<InstanceId> ancestors(const DependencyGraph& g, InstanceId id) {
  std::set<InstanceId> out;
  std::vector<InstanceId> work{id};
  while (!work.empty()) {
    InstanceId v = work.back();
    work.pop_back();
    for (InstanceId a : g.antecedents(v))
      if (out.insert(a).second) work.push_back(a);
  }
  return out;
}

// a -> b -> c plus d formed on {a, c}: the graph most tests start from.
DependencyGraph chain_graph() {
  DependencyGraph g;
  for (InstanceId id : {1, 2, 3, 4}) g.add_instance(id, "chunk" + std::to_string(id));
  g.set_conditioning(2, 102, {1});
  g.set_conditioning(3, 103, {2});
  g.set_conditioning(4, 104, {1, 3});
  return g;
}

}  // namespace

// ---- dependency graph --------------------------------------------------------------------------------

TEST_CASE("graph: direct and transitive dependents in topological order", "[planner][cpu]") {
  DependencyGraph g = chain_graph();
  CHECK(g.antecedents(4) == std::vector<InstanceId>{1, 3});
  CHECK(g.antecedents(1).empty());
  CHECK(g.dependents(1) == std::vector<InstanceId>{2, 3, 4});  // the only topological order of 2 -> 3 -> 4
  CHECK(g.dependents(3) == std::vector<InstanceId>{4});
  CHECK(g.dependents(4).empty());
  CHECK(g.num_live() == 4);
  CHECK(g.patches().size() == 3);
  CHECK(g.patches()[2].patch == 104);

  // Re-conditioning replaces: 3 formed on nothing now, so 1 reaches 4 only directly.
  g.set_conditioning(3, 203, {});
  std::vector<InstanceId> two = g.dependents(1);  // 2 and 4 are independent: either order is topological
  CHECK(std::set<InstanceId>(two.begin(), two.end()) == std::set<InstanceId>{2, 4});
  CHECK(two == g.dependents(1));  // deterministic
  CHECK(g.dependents(2).empty());
  g.clear_conditioning(4);
  CHECK_FALSE(g.has_conditioning(4));
  CHECK(g.dependents(1) == std::vector<InstanceId>{2});
  CHECK_THAT(g.to_dot(), Contains("p2 -> i2"));
}

TEST_CASE("graph: evicted intermediates stay while referenced and carry the cascade", "[planner][cpu]") {
  DependencyGraph g = chain_graph();
  g.remove_instance(2);  // 3 was formed on 2: 2 stays, evicted
  CHECK(g.contains(2));
  CHECK_FALSE(g.is_live(2));
  CHECK(g.num_live() == 3);
  CHECK(g.num_evicted() == 1);
  CHECK(g.dependents(1) == std::vector<InstanceId>{3, 4});  // through evicted 2
  CHECK(g.dependents(2) == std::vector<InstanceId>{3, 4});

  g.reinstate(2);  // recall: 2 is live again and itself a dependent of 1
  CHECK(g.dependents(1) == std::vector<InstanceId>{2, 3, 4});
  CHECK_THROWS_AS(g.reinstate(2), orbit::Error);

  // Evict 1 and 2: both stay (1 through 2's patch, 2 through 3's). Clearing 3 drops 2, which drops 1's
  // last reference from 2 — but 4 still references 1. Clearing 4 drops 1.
  g.remove_instance(1);
  g.remove_instance(2);
  CHECK(g.num_evicted() == 2);
  g.clear_conditioning(3);
  CHECK_FALSE(g.contains(2));
  CHECK(g.contains(1));
  g.clear_conditioning(4);
  CHECK_FALSE(g.contains(1));
  CHECK(g.num_evicted() == 0);
  CHECK(g.instances() == std::vector<InstanceId>{3, 4});

  // An unreferenced instance goes at once; its id can then be added again.
  g.remove_instance(4);
  CHECK_FALSE(g.contains(4));
  g.add_instance(4, "again");
  CHECK(g.chunk_key(4) == "again");

  // Replacing a conditioning that shares an evicted antecedent with the new one keeps that antecedent.
  g.add_instance(5, "five");
  g.set_conditioning(3, 303, {5});
  g.remove_instance(5);
  g.set_conditioning(3, 304, {5, 4});
  CHECK(g.contains(5));
  CHECK(g.antecedents(3) == std::vector<InstanceId>{5, 4});
}

TEST_CASE("graph: an instance released by two patches in one cascade is removed once", "[planner][cpu]") {
  // 2 is formed on 1, 3 on {1, 2}. Evict 1 and 2 (both stay: 3 references them), then 3: its patch
  // releases 1 and 2; dropping 2 releases 1 a second time. 1 must be removed once (a replay of the agent
  // trace crashed here, reading a removed vertex).
  DependencyGraph g;
  for (InstanceId id : {1, 2, 3}) g.add_instance(id, "chunk" + std::to_string(id));
  g.set_conditioning(2, 102, {1});
  g.set_conditioning(3, 103, {1, 2});
  g.remove_instance(1);
  g.remove_instance(2);
  CHECK(g.num_evicted() == 2);
  g.remove_instance(3);
  CHECK(g.instances().empty());
  CHECK(g.num_live() == 0);
  CHECK(g.num_evicted() == 0);
  CHECK(g.patches().empty());

  // The same through set_conditioning's swap: re-forming 3 on nothing releases both evicted antecedents.
  for (InstanceId id : {1, 2, 3}) g.add_instance(id, "again" + std::to_string(id));
  g.set_conditioning(2, 202, {1});
  g.set_conditioning(3, 203, {1, 2});
  g.remove_instance(1);
  g.remove_instance(2);
  g.set_conditioning(3, 204, {});
  CHECK(g.instances() == std::vector<InstanceId>{3});
}

TEST_CASE("graph: a fork's copy is isolated both ways", "[planner][cpu]") {
  DependencyGraph parent = chain_graph();
  const std::string parent_dot = parent.to_dot();
  DependencyGraph child = parent;
  child.remove_instance(2);
  child.add_instance(9, "child only");
  child.set_conditioning(9, 109, {3});
  child.clear_conditioning(4);
  CHECK(parent.to_dot() == parent_dot);
  CHECK(parent.dependents(1) == std::vector<InstanceId>{2, 3, 4});
  CHECK_FALSE(parent.contains(9));
  CHECK(child.dependents(1) == std::vector<InstanceId>{3, 9});

  parent.remove_instance(3);
  CHECK(child.is_live(3));
  DependencyGraph assigned;
  assigned = child;
  child.remove_instance(9);
  CHECK(assigned.is_live(9));
  DependencyGraph moved = std::move(assigned);
  CHECK(moved.dependents(3) == std::vector<InstanceId>{9});
}

TEST_CASE("graph: copies share until one changes, on any thread", "[planner][cpu][thread]") {
  // A window's fork copies its graph, and idle time plans in a throwaway fork per candidate: copies share the
  // graph (copy on write), each change taking its own first, so every copy still reads as a deep copy would.
  DependencyGraph parent = chain_graph();
  parent.remove_instance(2);  // evicted, still referenced by 3's conditioning
  const std::string dot = parent.to_dot();
  DependencyGraph child = parent;
  child.reinstate(2);
  CHECK(child.is_live(2));
  CHECK_FALSE(parent.is_live(2));
  CHECK(parent.to_dot() == dot);
  // Many copies read and changed on several threads at once, each from the same original.
  std::vector<std::thread> threads;
  std::vector<std::vector<InstanceId>> seen(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        DependencyGraph mine = parent;
        seen[t] = mine.dependents(1);
        mine.add_instance(100 + t, "thread's own");
        mine.set_conditioning(100 + t, 200 + t, {1, 3});
        if (mine.dependents(1).size() != seen[t].size() + 1) seen[t].clear();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const auto& s : seen) CHECK(s == parent.dependents(1));
  CHECK(parent.to_dot() == dot);
  CHECK_FALSE(parent.contains(100));
}

TEST_CASE("graph: random DAGs give exactly the live descendants, each after its ancestors", "[planner][cpu]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    DependencyGraph g;
    const int n = 2 + static_cast<int>(rng() % 14);
    std::vector<InstanceId> ids;  // a hidden causal order with unordered ids
    for (int i = 0; i < n; ++i) {
      ids.push_back(1000 + rng() % 100000);
      if (g.contains(ids.back())) {
        ids.pop_back();
        continue;
      }
      g.add_instance(ids.back(), "c");
      std::vector<InstanceId> ante;
      for (size_t j = 0; j + 1 < ids.size(); ++j)
        if (rng() % 3 == 0) ante.push_back(ids[j]);
      std::shuffle(ante.begin(), ante.end(), rng);
      if (rng() % 4 != 0) g.set_conditioning(ids.back(), rng(), ante);
    }
    for (InstanceId id : ids)
      if (rng() % 4 == 0 && g.is_live(id)) g.remove_instance(id);
    for (InstanceId x : g.instances()) {
      std::vector<InstanceId> deps = g.dependents(x);
      std::set<InstanceId> expected;
      for (InstanceId y : g.instances())
        if (g.is_live(y) && y != x && ancestors(g, y).count(x)) expected.insert(y);
      CHECK(std::set<InstanceId>(deps.begin(), deps.end()) == expected);
      CHECK(deps.size() == expected.size());  // no repeats
      for (InstanceId y : deps)
        for (InstanceId a : ancestors(g, y))
          if (position_of(deps, a) >= 0) CHECK(position_of(deps, a) < position_of(deps, y));
    }
    // Evicted nodes survive only while something references them.
    for (InstanceId id : g.instances()) {
      if (g.is_live(id)) continue;
      bool referenced = false;
      for (const Conditioning& c : g.patches())
        referenced |= std::count(c.antecedents.begin(), c.antecedents.end(), id) > 0;
      CHECK(referenced);
    }
  }
}

TEST_CASE("graph: misuse throws naming the id; a cycle is reported", "[planner][cpu]") {
  DependencyGraph g = chain_graph();
  CHECK_THROWS_WITH(g.add_instance(2, "dup"), Contains("instance 2 already present"));
  CHECK_THROWS_WITH(g.set_conditioning(3, 1, {42}), Contains("unknown instance 42"));
  CHECK_THROWS_WITH(g.set_conditioning(3, 1, {3}), Contains("own antecedent"));
  CHECK_THROWS_WITH(g.set_conditioning(3, 1, {1, 1}), Contains("antecedent 1 listed twice"));
  CHECK_THROWS_WITH(g.dependents(77), Contains("unknown instance 77"));
  g.remove_instance(4);
  CHECK_THROWS_WITH(g.remove_instance(4), Contains("unknown instance 4"));  // 4 was unreferenced: gone
  g.remove_instance(2);
  CHECK_THROWS_WITH(g.set_conditioning(2, 1, {}), Contains("instance 2 is evicted"));

  g.reinstate(2);
  g.set_conditioning(2, 9, {1, 3});  // 2 formed on 3, 3 formed on 2: only misuse gets here
  CHECK_THROWS_WITH(g.dependents(1), Contains("dependency cycle through instance"));
  CHECK_THROWS_WITH(g.dependents(3), Contains("cycle"));
}

namespace {

// The graph work of one window-like round on a graph of `n` live instances, each formed on every live
// instance before it (what a window records): a new instance formed on all n, the oldest evicted, the
// newest re-formed on its context without the evicted one (what re-conditioning after an eviction does),
// a cascade query from the oldest live instance, and the newest's conditioning dropped (a patch of n
// antecedents removed). The graph is built first; only the round is counted.
GraphWork round_work(int64_t n) {
  DependencyGraph g;
  std::vector<InstanceId> live;
  auto add = [&](InstanceId id) {
    g.add_instance(id, "c" + std::to_string(id));
    g.set_conditioning(id, id, live);
    live.push_back(id);
  };
  for (InstanceId id = 1; id <= static_cast<InstanceId>(n); ++id) add(id);
  const GraphWork before = g.work();
  add(static_cast<InstanceId>(n) + 1);
  g.remove_instance(live.front());
  live.erase(live.begin());
  g.set_conditioning(live.back(), 999999, std::vector<InstanceId>(live.begin(), live.end() - 1));
  const std::vector<InstanceId> deps = g.dependents(live.front());
  CHECK(deps.size() == live.size() - 1);  // every later instance was formed on it
  CHECK(g.antecedents(live.back()) == std::vector<InstanceId>(live.begin(), live.end() - 1));
  g.clear_conditioning(live.back());
  const GraphWork after = g.work();
  GraphWork d;
  d.edges_added = after.edges_added - before.edges_added;
  d.edges_removed = after.edges_removed - before.edges_removed;
  d.edges_visited = after.edges_visited - before.edges_visited;
  d.instances_collected = after.instances_collected - before.instances_collected;
  return d;
}

}  // namespace

TEST_CASE("graph: work per window operation grows linearly with the window", "[planner][cpu][scale]") {
  const GraphWork small = round_work(100), large = round_work(1000);
  // Exact counts at n = 100: the new instance's n antecedent edges plus its conditioning edge; the re-form
  // updates its patch in place (the one edge from the evicted instance goes, nothing is added); dropping
  // the patch removes its n - 1 antecedent edges and its conditioning edge.
  CHECK(small.edges_added == 100 + 1);
  CHECK(small.edges_removed == 1 + (100 - 1 + 1));
  // A dependents() query reaches every later instance through its patch, O(edges it can reach); the
  // oldest live instance is an antecedent of n - 1 patches, so it reaches O(n) instances and O(n²) edges
  // in this dense graph, which is the size of its answer's support, not a cost of the graph's structure.
  // Everything else a round does is O(n): a regression to per-edge scans of whole incidence lists or of
  // every patch would multiply the ratio below by another factor of 10.
  for (auto [s, l] :
       {std::pair{small.edges_added, large.edges_added}, std::pair{small.edges_removed, large.edges_removed}}) {
    CHECK(static_cast<double>(l) / static_cast<double>(s) < 12.0);
  }
  CHECK(static_cast<double>(large.edges_visited) / static_cast<double>(small.edges_visited) < 120.0);
  CHECK(small.instances_collected == 0);  // the evicted instance is still an antecedent of the other patches
}

TEST_CASE("graph: edges held stay bounded when evicted instances become unreferenced", "[planner][cpu][scale]") {
  // A sliding window of 50 whose instances are re-formed on the live window after each eviction (what
  // re-conditioning survivors does): evicted instances lose their last reference and are dropped, so
  // the edges held stay at the live window's O(n²), not the history's.
  DependencyGraph g;
  std::vector<InstanceId> live;
  auto form = [&](InstanceId id) {
    std::vector<InstanceId> before;
    for (InstanceId x : live) {
      if (x == id) break;
      before.push_back(x);
    }
    g.set_conditioning(id, id, before);
  };
  InstanceId next = 1;
  int64_t held_after_first = 0;
  for (int round = 0; round < 300; ++round) {
    g.add_instance(next, "c");
    live.push_back(next++);
    form(live.back());
    if (live.size() > 50) {
      g.remove_instance(live.front());
      live.erase(live.begin());
      for (InstanceId x : live) form(x);
    }
    if (round == 60) held_after_first = g.num_edges();
  }
  CHECK(g.num_live() == 50);
  CHECK(g.num_evicted() == 0);
  CHECK(g.num_edges() == held_after_first);
  CHECK(g.num_edges() == 50 * 49 / 2 + 50);
  CHECK(g.work().instances_collected == 250);
}

}  // namespace ORBIT_TEST_FILE
