// DependencyGraph on a Boost adjacency_list (see dependency_graph.h for the model).
//
// Vertices live in a std::list (listS) so descriptors stay valid while other vertices are removed; two
// hash maps index them by the caller's ids. A copy of the adjacency_list gets new descriptors, so the
// copy constructor re-indexes from the vertices' own properties.
//
// In a window every instance is formed on all the instances before it, so an early instance is the
// antecedent of O(n) patches, and removing an edge from its (vector) out-edge list is a scan of O(n).
// Dropping a whole patch of n antecedents is then O(n²), and re-conditioning every instance of a window
// O(n³). set_conditioning() therefore updates an existing patch node in place: only the antecedents that
// left are unlinked and only the new ones linked, so re-forming an instance on its context minus an
// evicted instance (what re-conditioning after a slide does) touches one edge, not n. The patch node keeps
// its antecedents in the caller's order (antecedents() reports that order, whatever the edge lists hold).
#include "orbit/planner/dependency_graph.h"

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>

#include "orbit/common/error.h"

namespace orbit::planner {
// Named, not anonymous: DependencyGraph::Impl (external linkage) holds a Graph, and a member whose type has
// internal linkage is an error when this file is compiled inside a unity batch (-Wsubobject-linkage).
namespace dependency_graph_detail {

struct Node {
  bool is_patch = false;
  InstanceId instance = 0;              // instance nodes: the instance; patch nodes: the conditioned instance
  PatchId patch = 0;                    // patch nodes only
  std::vector<InstanceId> antecedents;  // patch nodes only, in set_conditioning() order
  std::string chunk_key;                // instance nodes only
  bool live = false;                    // instance nodes only
};

using Graph = boost::adjacency_list<boost::vecS, boost::listS, boost::bidirectionalS, Node>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

// The induced subgraph dependents() sorts: vertex i is the i-th reached instance in ascending id order.
using SmallGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

}  // namespace dependency_graph_detail

using namespace dependency_graph_detail;

namespace {

struct CycleFound {
  size_t vertex;
};

// boost::topological_sort is depth_first_search with a visitor that records finish order and throws
// boost::not_a_dag on a back edge; this one does the same and keeps the vertex the back edge reaches.
class TopoVisitor : public boost::default_dfs_visitor {
 public:
  explicit TopoVisitor(std::vector<size_t>* finished) : finished_(finished) {}
  void back_edge(boost::graph_traits<SmallGraph>::edge_descriptor e, const SmallGraph& g) const {
    throw CycleFound{boost::target(e, g)};
  }
  void finish_vertex(size_t v, const SmallGraph&) const { finished_->push_back(v); }

 private:
  std::vector<size_t>* finished_;
};

// A chunk key as a Graphviz string literal body.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

struct DependencyGraph::Impl {
  Graph graph;
  std::unordered_map<InstanceId, Vertex> instances;  // every present instance
  std::unordered_map<InstanceId, Vertex> patch_of;   // conditioned instance -> its patch node
  int64_t live = 0;
  GraphWork work;  // edges_visited is the handle's (DependencyGraph::edges_visited_)

  Impl() = default;
  Impl(const Impl& other) : graph(other.graph), live(other.live), work(other.work) {
    for (auto [it, end] = boost::vertices(graph); it != end; ++it) {
      const Node& node = graph[*it];
      (node.is_patch ? patch_of : instances)[node.instance] = *it;
    }
  }

  Vertex find(InstanceId id, const char* what) const {
    auto it = instances.find(id);
    ORBIT_CHECK(it != instances.end(), "DependencyGraph::" << what << ": unknown instance " << id);
    return it->second;
  }

  // Removes `id`'s patch node, if any, and returns its antecedents' ids (GC candidates).
  std::vector<InstanceId> detach_patch(InstanceId id) {
    std::vector<InstanceId> antecedents;
    auto it = patch_of.find(id);
    if (it == patch_of.end()) return antecedents;
    Vertex p = it->second;
    antecedents = std::move(graph[p].antecedents);
    work.edges_removed += static_cast<int64_t>(antecedents.size()) + 1;
    boost::clear_vertex(p, graph);
    boost::remove_vertex(p, graph);
    patch_of.erase(it);
    return antecedents;
  }

  // Drops evicted instances nothing references any more, transitively. The work list holds instance ids,
  // never vertex descriptors: an id can be queued more than once (an instance that was an antecedent of
  // two released patches), and a listS descriptor of a vertex removed earlier in the sweep points at a
  // freed node, which must be neither read nor compared. An id no longer indexed was removed already.
  void collect(std::vector<InstanceId> pending) {
    while (!pending.empty()) {
      const InstanceId id = pending.back();
      pending.pop_back();
      auto it = instances.find(id);
      if (it == instances.end()) continue;
      const Vertex v = it->second;
      if (graph[v].live || boost::out_degree(v, graph) != 0) continue;
      ++work.instances_collected;
      std::vector<InstanceId> released = detach_patch(id);
      pending.insert(pending.end(), released.begin(), released.end());
      boost::remove_vertex(v, graph);  // no edges left: no out-edges (checked), its patch detached
      instances.erase(it);
    }
  }

  // The instance conditioned by patch node `p` (its single out-edge).
  Vertex conditioned_by(Vertex p) const { return boost::target(*boost::out_edges(p, graph).first, graph); }
};

DependencyGraph::DependencyGraph() : impl_(std::make_shared<Impl>()) {}
DependencyGraph::~DependencyGraph() = default;
DependencyGraph::DependencyGraph(const DependencyGraph& other)
    : impl_(other.impl_), edges_visited_(other.edges_visited_.load()) {}
DependencyGraph& DependencyGraph::operator=(const DependencyGraph& other) {
  if (this != &other) {
    impl_ = other.impl_;
    edges_visited_ = other.edges_visited_.load();
  }
  return *this;
}
DependencyGraph::DependencyGraph(DependencyGraph&& other) noexcept
    : impl_(std::move(other.impl_)), edges_visited_(other.edges_visited_.load()) {}
DependencyGraph& DependencyGraph::operator=(DependencyGraph&& other) noexcept {
  impl_ = std::move(other.impl_);
  edges_visited_ = other.edges_visited_.load();
  return *this;
}

void DependencyGraph::detach() {
  if (impl_.use_count() > 1) impl_ = std::make_shared<Impl>(*impl_);
}

void DependencyGraph::add_instance(InstanceId id, std::string chunk_key) {
  detach();
  auto found = impl_->instances.find(id);
  ORBIT_CHECK(found == impl_->instances.end(), "DependencyGraph::add_instance: instance "
                                                   << id << " already present ("
                                                   << (impl_->graph[found->second].live ? "live" : "evicted") << ")");
  Node node;
  node.instance = id;
  node.chunk_key = std::move(chunk_key);
  node.live = true;
  impl_->instances[id] = boost::add_vertex(std::move(node), impl_->graph);
  ++impl_->live;
}

void DependencyGraph::remove_instance(InstanceId id) {
  detach();
  Vertex v = impl_->find(id, "remove_instance");
  ORBIT_CHECK(impl_->graph[v].live, "DependencyGraph::remove_instance: instance " << id << " is already evicted");
  impl_->graph[v].live = false;
  --impl_->live;
  impl_->collect({id});
}

void DependencyGraph::reinstate(InstanceId id) {
  detach();
  Vertex v = impl_->find(id, "reinstate");
  ORBIT_CHECK(!impl_->graph[v].live, "DependencyGraph::reinstate: instance " << id << " is live, not evicted");
  impl_->graph[v].live = true;
  ++impl_->live;
}

bool DependencyGraph::contains(InstanceId id) const { return impl_->instances.count(id) != 0; }

bool DependencyGraph::is_live(InstanceId id) const {
  auto it = impl_->instances.find(id);
  return it != impl_->instances.end() && impl_->graph[it->second].live;
}

const std::string& DependencyGraph::chunk_key(InstanceId id) const {
  return impl_->graph[impl_->find(id, "chunk_key")].chunk_key;
}

int64_t DependencyGraph::num_live() const { return impl_->live; }
int64_t DependencyGraph::num_evicted() const { return static_cast<int64_t>(impl_->instances.size()) - impl_->live; }

std::vector<InstanceId> DependencyGraph::instances() const {
  std::vector<InstanceId> ids;
  ids.reserve(impl_->instances.size());
  for (const auto& [id, v] : impl_->instances) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void DependencyGraph::set_conditioning(InstanceId conditioned, PatchId patch,
                                       const std::vector<InstanceId>& antecedents) {
  detach();
  Impl& im = *impl_;
  Vertex x = im.find(conditioned, "set_conditioning");
  ORBIT_CHECK(im.graph[x].live, "DependencyGraph::set_conditioning: instance " << conditioned << " is evicted");
  std::vector<Vertex> sources;
  std::unordered_set<InstanceId> seen;
  for (InstanceId a : antecedents) {
    ORBIT_CHECK(a != conditioned,
                "DependencyGraph::set_conditioning: instance " << conditioned << " listed as its own antecedent");
    ORBIT_CHECK(seen.insert(a).second, "DependencyGraph::set_conditioning: antecedent " << a << " listed twice");
    sources.push_back(im.find(a, "set_conditioning (antecedent)"));
  }
  // An existing conditioning is updated in place: antecedents that left are unlinked, new ones linked.
  // Those that left are collected only after the update, so an evicted instance still referenced elsewhere
  // survives it.
  if (auto existing = im.patch_of.find(conditioned); existing != im.patch_of.end()) {
    const Vertex p = existing->second;
    Node& node = im.graph[p];
    std::unordered_set<InstanceId> had(node.antecedents.begin(), node.antecedents.end());
    std::vector<InstanceId> released;
    for (InstanceId a : node.antecedents) {
      if (seen.count(a) != 0) continue;
      boost::remove_edge(im.instances.at(a), p, im.graph);
      ++im.work.edges_removed;
      released.push_back(a);
    }
    for (std::size_t i = 0; i < antecedents.size(); ++i) {
      if (had.count(antecedents[i]) != 0) continue;
      boost::add_edge(sources[i], p, im.graph);
      ++im.work.edges_added;
    }
    node.patch = patch;
    node.antecedents = antecedents;
    im.collect(std::move(released));
    return;
  }
  Node node;
  node.is_patch = true;
  node.instance = conditioned;
  node.patch = patch;
  node.antecedents = antecedents;
  Vertex p = boost::add_vertex(std::move(node), im.graph);
  for (Vertex s : sources) boost::add_edge(s, p, im.graph);
  boost::add_edge(p, x, im.graph);
  im.patch_of[conditioned] = p;
  im.work.edges_added += static_cast<int64_t>(sources.size()) + 1;
}

void DependencyGraph::clear_conditioning(InstanceId id) {
  detach();
  impl_->find(id, "clear_conditioning");
  std::vector<InstanceId> released = impl_->detach_patch(id);
  released.push_back(id);  // an evicted instance that lost its patch may itself be unreferenced (no-op if not)
  impl_->collect(std::move(released));
}

bool DependencyGraph::has_conditioning(InstanceId id) const {
  impl_->find(id, "has_conditioning");
  return impl_->patch_of.count(id) != 0;
}

std::vector<InstanceId> DependencyGraph::antecedents(InstanceId id) const {
  impl_->find(id, "antecedents");
  auto it = impl_->patch_of.find(id);
  if (it == impl_->patch_of.end()) return {};
  return impl_->graph[it->second].antecedents;
}

std::vector<Conditioning> DependencyGraph::patches() const {
  std::map<InstanceId, Conditioning> sorted;
  for (const auto& [id, p] : impl_->patch_of) sorted[id] = Conditioning{id, impl_->graph[p].patch, antecedents(id)};
  std::vector<Conditioning> out;
  for (auto& [id, c] : sorted) out.push_back(std::move(c));
  return out;
}

std::vector<InstanceId> DependencyGraph::dependents(InstanceId id) const {
  const Graph& g = impl_->graph;
  Vertex root = impl_->find(id, "dependents");
  int64_t visited = 0;
  // 1. Everything reachable from the root through "antecedent -> patch -> conditioned" steps.
  std::map<InstanceId, Vertex> reached{{id, root}};
  std::deque<Vertex> queue{root};
  while (!queue.empty()) {
    Vertex u = queue.front();
    queue.pop_front();
    for (auto [e, end] = boost::out_edges(u, g); e != end; ++e) {
      ++visited;
      Vertex w = impl_->conditioned_by(boost::target(*e, g));
      if (reached.emplace(g[w].instance, w).second) queue.push_back(w);
    }
  }
  // 2. The induced subgraph, vertices in ascending id order, each vertex's edges in descending target
  //    order (so that, after the reversal below, independent dependents tend to come out by ascending id).
  std::vector<InstanceId> ids;
  std::unordered_map<InstanceId, size_t> index;
  for (const auto& [instance, v] : reached) {
    index[instance] = ids.size();
    ids.push_back(instance);
  }
  SmallGraph small(ids.size());
  size_t i = 0;
  for (const auto& [instance, u] : reached) {
    std::vector<size_t> targets;
    for (auto [e, end] = boost::out_edges(u, g); e != end; ++e, ++visited)
      targets.push_back(index.at(g[impl_->conditioned_by(boost::target(*e, g))].instance));
    std::sort(targets.rbegin(), targets.rend());
    for (size_t t : targets) boost::add_edge(i, t, small);
    ++i;
  }
  edges_visited_ += visited;
  // 3. Depth-first topological sort; reverse finish order is topological.
  std::vector<size_t> finished;
  try {
    boost::depth_first_search(small, boost::visitor(TopoVisitor(&finished)).root_vertex(index.at(id)));
  } catch (const CycleFound& cycle) {
    ORBIT_FAIL("DependencyGraph::dependents(" << id << "): dependency cycle through instance " << ids[cycle.vertex]);
  }
  std::vector<InstanceId> order;
  for (auto it = finished.rbegin(); it != finished.rend(); ++it) {
    InstanceId instance = ids[*it];
    if (instance != id && g[reached.at(instance)].live) order.push_back(instance);
  }
  return order;
}

int64_t DependencyGraph::num_edges() const { return static_cast<int64_t>(boost::num_edges(impl_->graph)); }

GraphWork DependencyGraph::work() const {
  GraphWork w = impl_->work;
  w.edges_visited = edges_visited_.load();
  return w;
}

std::string DependencyGraph::to_dot() const {
  const Graph& g = impl_->graph;
  auto name = [&](Vertex v) { return (g[v].is_patch ? "p" : "i") + std::to_string(g[v].instance); };
  std::ostringstream out;
  out << "digraph dependencies {\n";
  for (auto [it, end] = boost::vertices(g); it != end; ++it) {
    const Node& node = g[*it];
    if (node.is_patch) {
      out << "  " << name(*it) << " [shape=ellipse,label=\"patch " << node.patch << "\"];\n";
    } else {
      out << "  " << name(*it) << " [shape=box,label=\"" << node.instance << " " << escaped(node.chunk_key) << "\""
          << (node.live ? "" : ",style=dashed") << "];\n";
    }
  }
  for (auto [it, end] = boost::edges(g); it != end; ++it)
    out << "  " << name(boost::source(*it, g)) << " -> " << name(boost::target(*it, g)) << ";\n";
  out << "}\n";
  return out.str();
}

}  // namespace orbit::planner
