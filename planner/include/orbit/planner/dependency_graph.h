// The dependency graph of chunk instances and their conditioning (docs/ARCHITECTURE.md §10).
//
// Nodes are chunk instances (one placement of a chunk in a window) and patch nodes (the current
// conditioning of one instance: the stored patch it wears and the instances that were in its context
// when that patch was formed). Edges say "formed with":
//
//     antecedent a ──► patch p ──► conditioned x        (x's KV = canonical(x) + p, p formed with a before x)
//     antecedent b ──┘
//
// Every instance has at most one current conditioning (one incoming patch node); an instance with none
// wears its canonical (or was prefilled: the window manager decides what a missing node means).
//
// Lifetime. An instance is live (in the window) or evicted. remove_instance() marks it evicted; the node
// stays while some conditioning references it (directly, or through other evicted instances it conditions),
// because the KV of those instances was formed on its content and a recall of it must cascade into them.
// Once nothing references it, it is dropped (garbage-collected at once, transitively). reinstate() makes an
// evicted node live again: a recall of the same instance, its old conditioning kept.
//
// Queries. dependents(x) answers "what does a recall or an eviction of x invalidate": the live instances
// whose KV was formed, directly or transitively, with x in context, in topological order (every instance
// after every instance it depends on), ready to be re-conditioned in that order.
//
// Ids are the caller's (the SDK's InstanceId and its patch handles); the graph never invents them. The
// graph is Boost.Graph behind an opaque implementation: the header does not include Boost.
// Value semantics: a copy is a graph of its own (a window fork clones its graph; the copies never affect each
// other), shared with the original until either changes (copy on write). A moved-from graph may only be destroyed
// or assigned to.
// Thread-safety: none for one graph (one window, one thread); copies that share their graph may be used on
// different threads. Misuse (unknown ids, duplicates) throws orbit::Error naming the id.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace orbit::planner {

using InstanceId = uint64_t;
using PatchId = uint64_t;

// Work the graph has done since it was made (a copy starts from its source's counts). Deterministic counts
// of what its operations touched, for tests that check how the graph's costs grow with the window.
struct GraphWork {
  int64_t edges_added = 0;          // by set_conditioning (one per antecedent, one to the conditioned)
  int64_t edges_removed = 0;        // with the patch nodes that were replaced or collected
  int64_t edges_visited = 0;        // followed by dependents() (twice each: the search, then the sort)
  int64_t instances_collected = 0;  // evicted instances dropped once nothing referenced them
};

// One instance's current conditioning, as patches() lists it.
struct Conditioning {
  InstanceId conditioned = 0;
  PatchId patch = 0;
  std::vector<InstanceId> antecedents;  // in the order set_conditioning() was given them
};

class DependencyGraph {
 public:
  DependencyGraph();
  ~DependencyGraph();
  // Copies share the graph until one of them changes it (copy on write): a fork, and each throwaway fork that
  // idle time plans in, costs O(1) here, not a copy of its O(n²) edges (every instance of a window conditioned
  // on those before it). Copies sharing a graph may be read, and changed, on different threads.
  DependencyGraph(const DependencyGraph& other);
  DependencyGraph& operator=(const DependencyGraph& other);
  DependencyGraph(DependencyGraph&& other) noexcept;
  DependencyGraph& operator=(DependencyGraph&& other) noexcept;

  // ---- instances ----------------------------------------------------------------------------------
  // Adds a live instance of the chunk `chunk_key` (the store's content key; informational here).
  // Throws if `id` is present, live or evicted (recall an evicted instance with reinstate()).
  void add_instance(InstanceId id, std::string chunk_key);
  // Marks a live instance evicted; drops it (and whatever only it kept) when nothing references it.
  // Throws if `id` is unknown or already evicted.
  void remove_instance(InstanceId id);
  // Makes an evicted instance live again (its conditioning is kept). Throws unless `id` is evicted.
  void reinstate(InstanceId id);

  bool contains(InstanceId id) const;                 // live or evicted-but-referenced
  bool is_live(InstanceId id) const;                  // false for unknown ids
  const std::string& chunk_key(InstanceId id) const;  // throws on unknown ids
  int64_t num_live() const;
  int64_t num_evicted() const;
  // Every present instance (live and evicted), ascending by id.
  std::vector<InstanceId> instances() const;

  // ---- conditioning -------------------------------------------------------------------------------
  // `conditioned`'s current conditioning is the stored patch `patch`, formed with `antecedents` in
  // context. Replaces any previous conditioning of that instance (its patch node and edges go, and
  // evicted instances only it referenced are dropped). `conditioned` must be live; every antecedent must
  // be present (live or evicted), distinct, and differ from `conditioned`; otherwise throws naming the id.
  // An empty antecedent list is allowed (a patch formed with nothing before the chunk).
  void set_conditioning(InstanceId conditioned, PatchId patch, const std::vector<InstanceId>& antecedents);
  // Removes `id`'s conditioning if it has one (it now wears its canonical). Throws on unknown ids.
  void clear_conditioning(InstanceId id);
  bool has_conditioning(InstanceId id) const;  // throws on unknown ids
  // The instances `id`'s current conditioning was formed on (set_conditioning order); empty when it has
  // none. Throws on unknown ids.
  std::vector<InstanceId> antecedents(InstanceId id) const;
  // Every current conditioning, ascending by conditioned instance.
  std::vector<Conditioning> patches() const;

  // The live instances whose current conditioning was formed, directly or transitively, with `id` in
  // context (traversal passes through evicted instances: their KV was formed with `id`, and later
  // instances were formed with that KV), `id` excluded. Topological order: each listed instance comes
  // after every listed instance it depends on, directly or through evicted ones (a depth-first
  // topological sort of the induced subgraph from `id`, as boost::topological_sort does it; independent
  // instances come out in an order that depends only on the graph's contents, not on call history).
  // Throws on an unknown id, and on a dependency cycle (only reachable by misuse) naming an instance on it.
  // O(k log k) for k instances reachable from `id`.
  std::vector<InstanceId> dependents(InstanceId id) const;

  // Edges now held: each conditioning holds one per antecedent plus one to the conditioned instance.
  int64_t num_edges() const;
  // What the operations so far did (see GraphWork). Replacing or dropping a conditioning with k
  // antecedents costs O(k log n); dependents() visits each reachable edge twice.
  GraphWork work() const;

  // Graphviz text (instances as boxes, evicted dashed; patches as ellipses), for debugging.
  std::string to_dot() const;

 private:
  struct Impl;
  void detach();  // before a change: this graph's own Impl when another copy shares it
  std::shared_ptr<Impl> impl_;
  // dependents()'s visits, counted per copy (the shared Impl is read-only while shared).
  mutable std::atomic<int64_t> edges_visited_{0};
};

}  // namespace orbit::planner
