// Byte automata (byte_dfa.h): subset construction, products, and the pruning and distance tables every
// finished DFA gets. What a finished DFA's language holds (counts, longest text) is in byte_dfa_texts.cpp.
#include "constrain/byte_dfa.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "constrain/byte_dfa_draft.h"
#include "orbit/common/error.h"

namespace orbit::constrain {

namespace {

constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;

// Reverse breadth-first distances to an accepting state; an edge into a state costs `cost(target)`
// (0 or 1, so a deque keeps the order).
template <typename Cost>
std::vector<int64_t> distances(const DfaDraft& d, const std::vector<std::vector<int32_t>>& into, Cost cost) {
  std::vector<int64_t> dist(d.accepting.size(), kFar);
  std::deque<int32_t> queue;
  for (std::size_t s = 0; s < d.accepting.size(); ++s) {
    if (d.accepting[s]) {
      dist[s] = 0;
      queue.push_back(static_cast<int32_t>(s));
    }
  }
  while (!queue.empty()) {
    const int32_t t = queue.front();
    queue.pop_front();
    const int64_t w = cost(t);
    for (int32_t s : into[static_cast<std::size_t>(t)]) {
      if (dist[static_cast<std::size_t>(s)] <= dist[static_cast<std::size_t>(t)] + w) continue;
      dist[static_cast<std::size_t>(s)] = dist[static_cast<std::size_t>(t)] + w;
      if (w == 0) {
        queue.push_front(s);
      } else {
        queue.push_back(s);
      }
    }
  }
  return dist;
}

// Keeps the states reachable from the start that can reach an accepting state, renumbered in the order a
// breadth-first walk from the start finds them, and fills the distance tables. nullopt when the start reaches
// no accepting state.
std::optional<ByteDfa> prune(const DfaDraft& d) {
  std::vector<std::vector<int32_t>> into(d.accepting.size());
  for (std::size_t s = 0; s < d.edges.size(); ++s) {
    for (const ByteDfa::Edge& e : d.edges[s]) into[static_cast<std::size_t>(e.to)].push_back(static_cast<int32_t>(s));
  }
  const std::vector<int64_t> bytes = distances(d, into, [](int32_t) { return 1; });
  if (d.accepting.empty() || bytes[0] >= kFar) return std::nullopt;
  std::vector<int32_t> id(d.accepting.size(), -1);
  std::vector<int32_t> order{0};
  id[0] = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (const ByteDfa::Edge& e : d.edges[static_cast<std::size_t>(order[i])]) {
      const auto t = static_cast<std::size_t>(e.to);
      if (id[t] >= 0 || bytes[t] >= kFar) continue;
      id[t] = static_cast<int32_t>(order.size());
      order.push_back(e.to);
    }
  }
  const std::vector<int64_t> chars =
      distances(d, into, [&](int32_t t) { return static_cast<int64_t>(d.char_end[static_cast<std::size_t>(t)]); });
  ByteDfa out;
  for (int32_t old : order) {
    const auto o = static_cast<std::size_t>(old);
    std::vector<ByteDfa::Edge> kept;
    for (const ByteDfa::Edge& e : d.edges[o]) {
      const int32_t to = id[static_cast<std::size_t>(e.to)];
      if (to >= 0) append_edge(kept, e.lo, e.hi, to);
    }
    out.edges.push_back(std::move(kept));
    out.accepting.push_back(d.accepting[o]);
    out.char_end.push_back(d.char_end[o]);
    out.min_bytes.push_back(bytes[o]);
    out.min_chars.push_back(chars[o]);
    out.max_min_chars = std::max(out.max_min_chars, chars[o]);
  }
  return out;
}

// prune(), throwing "<what>: admits no value" when nothing is accepted.
ByteDfa finish(const DfaDraft& d, const std::string& what) {
  std::optional<ByteDfa> out = prune(d);
  ORBIT_CHECK(out.has_value(), what << ": admits no value");
  return std::move(*out);
}

// The NFA states reachable from `set` by empty moves (sorted, unique).
std::vector<int32_t> closure(const ByteNfa& nfa, std::vector<int32_t> set) {
  std::vector<uint8_t> seen(nfa.states.size(), 0);
  for (int32_t s : set) seen[static_cast<std::size_t>(s)] = 1;
  for (std::size_t i = 0; i < set.size(); ++i) {
    for (int32_t t : nfa.states[static_cast<std::size_t>(set[i])].empty) {
      if (!seen[static_cast<std::size_t>(t)]) {
        seen[static_cast<std::size_t>(t)] = 1;
        set.push_back(t);
      }
    }
  }
  std::sort(set.begin(), set.end());
  return set;
}

}  // namespace

int32_t ByteNfa::add(bool mid_char) {
  State s;
  s.mid_char = mid_char;
  states.push_back(std::move(s));
  return static_cast<int32_t>(states.size()) - 1;
}

void ByteNfa::edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
  states[static_cast<std::size_t>(from)].edges.push_back({lo, hi, to});
}

void ByteNfa::empty(int32_t from, int32_t to) { states[static_cast<std::size_t>(from)].empty.push_back(to); }

void ByteNfa::asserted(int32_t from, int32_t assertion, int32_t to) {
  states[static_cast<std::size_t>(from)].asserted.push_back({assertion, to});
}

int32_t ByteDfa::next(int32_t state, uint8_t byte) const {
  for (const Edge& e : edges[static_cast<std::size_t>(state)]) {
    if (byte < e.lo) return -1;
    if (byte <= e.hi) return e.to;
  }
  return -1;
}

namespace {

// Subset construction, for an NFA without assertions.
DfaDraft subsets(const ByteNfa& nfa, const std::string& what, std::size_t& spent) {
  DfaDraft d;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  const auto intern = [&](std::vector<int32_t> set) {
    const auto found = ids.find(set);
    if (found != ids.end()) return found->second;
    const bool accepts = std::binary_search(set.begin(), set.end(), nfa.accept);
    const bool ends_char = std::any_of(set.begin(), set.end(),
                                       [&](int32_t s) { return !nfa.states[static_cast<std::size_t>(s)].mid_char; });
    const int32_t id = d.add(accepts, ends_char, what);
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  intern(closure(nfa, {nfa.start}));
  BuildWork work(what, spent);
  const auto spend = [&](std::size_t units) { work.spend(units); };
  for (std::size_t i = 0; i < sets.size(); ++i) {
    // Cut the byte line where any member's edge starts or ends; each piece maps to one target set.
    std::array<int, 257> piece{};  // byte -> the piece it starts (after the cuts are counted)
    std::array<uint8_t, 257> cut{};
    cut[0] = cut[256] = 1;
    std::size_t member_edges = 0;
    for (int32_t s : sets[i]) {
      for (const ByteNfa::Edge& e : nfa.states[static_cast<std::size_t>(s)].edges) {
        cut[e.lo] = cut[e.hi + 1] = 1;
        ++member_edges;
      }
    }
    spend(sets[i].size() + member_edges);
    const std::vector<int> starts = byte_pieces(cut, piece);
    std::vector<std::vector<int32_t>> targets(starts.size() - 1);
    for (int32_t s : sets[i]) {
      for (const ByteNfa::Edge& e : nfa.states[static_cast<std::size_t>(s)].edges) {
        const int from = piece[e.lo];
        const int to = piece[static_cast<std::size_t>(e.hi) + 1];
        spend(static_cast<std::size_t>(to - from));
        for (int k = from; k < to; ++k) targets[static_cast<std::size_t>(k)].push_back(e.to);
      }
    }
    std::vector<ByteDfa::Edge> out;
    for (std::size_t k = 0; k < targets.size(); ++k) {
      std::vector<int32_t>& t = targets[k];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      std::vector<int32_t> closed = closure(nfa, std::move(t));
      spend(closed.size());
      const int32_t to = intern(std::move(closed));
      append_edge(out, static_cast<uint8_t>(starts[k]), static_cast<uint8_t>(starts[k + 1] - 1), to);
    }
    d.edges[i] = std::move(out);
  }
  return d;
}

}  // namespace

ByteDfa determinize(const ByteNfa& nfa, const std::string& what) {
  std::size_t work = 0;
  return finish(nfa.assertions.empty() ? subsets(nfa, what, work) : thread_sets(nfa, what, work), what);
}

std::optional<ByteDfa> determinize_or_empty(const ByteNfa& nfa, const std::string& what, std::size_t* work) {
  std::size_t own = 0;
  std::size_t& spent = work != nullptr ? *work : own;
  return prune(nfa.assertions.empty() ? subsets(nfa, what, spent) : thread_sets(nfa, what, spent));
}

namespace {

// The reachable part of a product of `a` with a tracker of values X: states (a's state q, value x) from
// (0, start), numbered in the order first reached. accepts(q, x) says whether a pair accepts (it ends a
// character where q does); edges(q, x, out, next) appends a pair's edges to `out`, naming each target pair
// through next(q', x').
template <class X, class Accepts, class Edges>
DfaDraft product(const ByteDfa& a, X start, const Accepts& accepts, const Edges& edges, const std::string& what) {
  DfaDraft d;
  std::map<std::pair<int32_t, X>, int32_t> ids;
  std::vector<std::pair<int32_t, X>> pairs;
  const auto next = [&](int32_t q, X x) {
    const auto found = ids.find({q, x});
    if (found != ids.end()) return found->second;
    const int32_t id = d.add(accepts(q, x), a.char_end[static_cast<std::size_t>(q)] != 0, what);
    ids.emplace(std::make_pair(q, x), id);
    pairs.emplace_back(q, x);
    return id;
  };
  next(0, start);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [q, x] = pairs[i];  // a copy: next() may grow `pairs`
    std::vector<ByteDfa::Edge> out;
    edges(q, x, out, next);
    d.edges[i] = std::move(out);
  }
  return d;
}

}  // namespace

namespace {

// The product of `a` and `b` whose texts both accept.
DfaDraft both(const ByteDfa& a, const ByteDfa& b, const std::string& what) {
  const auto accepts = [&](int32_t x, int32_t y) {
    return a.accepting[static_cast<std::size_t>(x)] && b.accepting[static_cast<std::size_t>(y)];
  };
  const auto edges = [&](int32_t x, int32_t y, std::vector<ByteDfa::Edge>& out, auto& next) {
    for (const ByteDfa::Edge& ea : a.edges[static_cast<std::size_t>(x)]) {
      for (const ByteDfa::Edge& eb : b.edges[static_cast<std::size_t>(y)]) {
        const uint8_t lo = std::max(ea.lo, eb.lo);
        const uint8_t hi = std::min(ea.hi, eb.hi);
        if (lo <= hi) append_edge(out, lo, hi, next(ea.to, eb.to));
      }
    }
  };
  return product(a, int32_t{0}, accepts, edges, what);
}

}  // namespace

ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, const std::string& what) {
  return finish(both(a, b, what), what);
}

std::optional<ByteDfa> intersect_or_empty(const ByteDfa& a, const ByteDfa& b, const std::string& what) {
  return prune(both(a, b, what));
}

std::optional<ByteDfa> subtract(const ByteDfa& a, const ByteDfa& b, const std::string& what) {
  // States: (a's state, b's state), b's -1 once the text has left b for good.
  const auto accepts = [&](int32_t x, int32_t y) {
    return a.accepting[static_cast<std::size_t>(x)] && !(y >= 0 && b.accepting[static_cast<std::size_t>(y)]);
  };
  const auto edges = [&](int32_t x, int32_t y, std::vector<ByteDfa::Edge>& out, auto& next) {
    for (const ByteDfa::Edge& ea : a.edges[static_cast<std::size_t>(x)]) {
      int lo = ea.lo;  // the first byte of ea's range not yet written
      if (y >= 0) {
        for (const ByteDfa::Edge& eb : b.edges[static_cast<std::size_t>(y)]) {
          if (eb.hi < lo || eb.lo > ea.hi) continue;
          if (lo < eb.lo) append_edge(out, static_cast<uint8_t>(lo), static_cast<uint8_t>(eb.lo - 1), next(ea.to, -1));
          const uint8_t hi = std::min(ea.hi, eb.hi);
          append_edge(out, std::max(static_cast<uint8_t>(lo), eb.lo), hi, next(ea.to, eb.to));
          lo = hi + 1;
        }
      }
      if (lo <= ea.hi) append_edge(out, static_cast<uint8_t>(lo), ea.hi, next(ea.to, -1));
    }
  };
  return prune(product(a, int32_t{0}, accepts, edges, what));
}

ByteDfa with_min_chars(const ByteDfa& a, int64_t min_chars, const std::string& what) {
  const auto accepts = [&](int32_t q, int64_t k) { return a.accepting[static_cast<std::size_t>(q)] && k == min_chars; };
  const auto edges = [&](int32_t q, int64_t k, std::vector<ByteDfa::Edge>& out, auto& next) {
    for (const ByteDfa::Edge& e : a.edges[static_cast<std::size_t>(q)]) {
      append_edge(out, e.lo, e.hi, next(e.to, std::min(min_chars, k + a.char_end[static_cast<std::size_t>(e.to)])));
    }
  };
  return finish(product(a, int64_t{0}, accepts, edges, what), what);
}

ByteDfa quoted(const ByteDfa& content, const std::string& what) {
  // State 0 opens; state 1 is the content's start entered by the opening quote (a copy, so that entering
  // it does not count a character); content state s is s + 2; the last state is after the closing quote.
  DfaDraft d;
  const auto n = static_cast<int32_t>(content.size());
  d.add(false, false, what);
  d.add(content.accepting[0] != 0, false, what);
  for (int32_t s = 0; s < n; ++s)
    d.add(content.accepting[static_cast<std::size_t>(s)] != 0, content.char_end[static_cast<std::size_t>(s)] != 0,
          what);
  const int32_t closed = d.add(true, false, what);
  d.edges[0].push_back({'"', '"', 1});
  for (int32_t s = -1; s < n; ++s) {
    const auto from = static_cast<std::size_t>(s < 0 ? 0 : s);
    std::vector<ByteDfa::Edge>& out = d.edges[s < 0 ? 1 : static_cast<std::size_t>(s) + 2];
    for (const ByteDfa::Edge& e : content.edges[from]) {
      ORBIT_CHECK(e.lo > '"' || e.hi < '"' || !content.accepting[from], what << ": a raw quote inside the string");
      out.push_back({e.lo, e.hi, e.to + 2});
    }
    if (content.accepting[from]) {
      out.push_back({'"', '"', closed});
      std::sort(out.begin(), out.end(), [](const ByteDfa::Edge& x, const ByteDfa::Edge& y) { return x.lo < y.lo; });
    }
  }
  // The copy of the start and the closing state are not content: only accepting content states close.
  d.accepting.assign(d.accepting.size(), 0);
  d.accepting[static_cast<std::size_t>(closed)] = 1;
  return finish(d, what);
}

std::optional<ByteDfa> without(const ByteDfa& a, const std::vector<std::string>& texts, const std::string& what) {
  // The texts' trie: per node its children by byte (sorted) and whether a text ends there.
  std::vector<std::map<uint8_t, int32_t>> kids(1);
  std::vector<uint8_t> ends(1, 0);
  for (const std::string& t : texts) {
    int32_t at = 0;
    for (const char c : t) {
      const auto b = static_cast<uint8_t>(c);
      const auto found = kids[static_cast<std::size_t>(at)].find(b);
      if (found != kids[static_cast<std::size_t>(at)].end()) {
        at = found->second;
        continue;
      }
      const auto next = static_cast<int32_t>(kids.size());
      kids[static_cast<std::size_t>(at)][b] = next;
      kids.emplace_back();
      ends.push_back(0);
      at = next;
    }
    ends[static_cast<std::size_t>(at)] = 1;
  }
  // States: (a's state, trie node), the node -1 once the text has left the trie.
  const auto accepts = [&](int32_t q, int32_t t) {
    return a.accepting[static_cast<std::size_t>(q)] != 0 && !(t >= 0 && ends[static_cast<std::size_t>(t)] != 0);
  };
  const auto edges = [&](int32_t q, int32_t t, std::vector<ByteDfa::Edge>& out, auto& next) {
    for (const ByteDfa::Edge& e : a.edges[static_cast<std::size_t>(q)]) {
      // The edge's range cut at the bytes that stay in the trie; the pieces between leave it.
      int lo = e.lo;
      if (t >= 0) {
        for (const auto& [b, child] : kids[static_cast<std::size_t>(t)]) {
          if (b < e.lo || b > e.hi) continue;
          if (lo < b) append_edge(out, static_cast<uint8_t>(lo), static_cast<uint8_t>(b - 1), next(e.to, -1));
          append_edge(out, b, b, next(e.to, child));
          lo = b + 1;
        }
      }
      if (lo <= e.hi) append_edge(out, static_cast<uint8_t>(lo), e.hi, next(e.to, -1));
    }
  };
  return prune(product(a, int32_t{0}, accepts, edges, what));
}

}  // namespace orbit::constrain
