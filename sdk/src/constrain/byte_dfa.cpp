// Byte automata (byte_dfa.h): subset construction, products, and the pruning and distance tables every
// finished DFA gets.
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

bool accepts(const ByteDfa& a, std::string_view text) {
  int32_t q = 0;
  for (const char c : text) {
    q = a.next(q, static_cast<uint8_t>(c));
    if (q < 0) return false;
  }
  return a.accepting[static_cast<std::size_t>(q)] != 0;
}

std::vector<int64_t> texts_by_bytes(const ByteDfa& a, int64_t max_chars, int64_t cap) {
  // Paths by length in bytes: per (state, characters so far), how many texts lead there (at most cap). A
  // deterministic automaton has one path per text, so the paths that end accepting count the texts.
  std::map<std::pair<int32_t, int64_t>, int64_t> layer{{{0, 0}, 1}}, next;
  std::vector<int64_t> out;
  int64_t texts = 0;
  // A character has at most 6 bytes (a \u escape), a text two quotes besides: past that, a longer path has
  // more characters than max_chars allows (the bound only guards against an automaton that loops without them).
  const int64_t max_bytes = 6 * max_chars + 2;
  for (int64_t bytes = 0; !layer.empty() && bytes <= max_bytes && texts < cap; ++bytes) {
    next.clear();
    int64_t here = 0;
    for (const auto& [at, paths] : layer) {
      const auto q = static_cast<std::size_t>(at.first);
      if (a.accepting[q] != 0) here = std::min(cap, here + paths);
      for (const ByteDfa::Edge& e : a.edges[q]) {
        const auto to = static_cast<std::size_t>(e.to);
        const int64_t chars = at.second + a.char_end[to];
        if (chars + a.min_chars[to] > max_chars) continue;
        int64_t& n = next[{e.to, chars}];
        n = std::min(cap, n + paths * (int64_t{e.hi} - e.lo + 1));
      }
    }
    out.push_back(here);
    texts = std::min(cap, texts + here);
    std::swap(layer, next);
  }
  if (!layer.empty() && texts < cap) out.push_back(cap);  // past the bound: counted as cap texts one byte longer
  return out;
}

namespace {

// a.loop_chars: a search backwards from the states with a one-character loop, each at its fewest characters
// to an accepting state, an edge into a char_end state costing one character (a 0-1 breadth-first search).
void count_loops(ByteDfa& a) {
  const std::size_t n = a.size();
  std::vector<std::vector<int32_t>> into(n);       // per state: the states with an edge into it
  std::vector<std::vector<std::size_t>> at_chars;  // the states reached at each distance, to settle
  const auto reach = [&](std::size_t q, int64_t d) {
    if (a.loop_chars[q] != ByteDfa::kUnbounded && a.loop_chars[q] <= d) return;
    a.loop_chars[q] = d;
    if (at_chars.size() <= static_cast<std::size_t>(d)) at_chars.resize(static_cast<std::size_t>(d) + 1);
    at_chars[static_cast<std::size_t>(d)].push_back(q);
  };
  a.loop_chars.assign(n, ByteDfa::kUnbounded);
  for (std::size_t q = 0; q < n; ++q) {
    for (const ByteDfa::Edge& e : a.edges[q]) {
      const auto to = static_cast<std::size_t>(e.to);
      into[to].push_back(static_cast<int32_t>(q));
      if (to == q && a.char_end[q] != 0) reach(q, a.min_chars[q]);
    }
  }
  std::vector<uint8_t> settled(n, 0);
  for (std::size_t d = 0; d < at_chars.size(); ++d) {
    for (std::size_t i = 0; i < at_chars[d].size(); ++i) {  // grows as edges of no character reach more states
      const std::size_t v = at_chars[d][i];
      if (settled[v] != 0 || a.loop_chars[v] != static_cast<int64_t>(d)) continue;
      settled[v] = 1;
      for (const int32_t u : into[v]) reach(static_cast<std::size_t>(u), static_cast<int64_t>(d) + a.char_end[v]);
    }
  }
}

}  // namespace

void count_ahead(ByteDfa& a) {
  count_loops(a);
  const std::size_t n = a.size();
  a.texts_ahead.assign(n, 0);
  a.chars_ahead.assign(n, 0);
  std::vector<uint8_t> color(n, 0);                       // 0 not seen, 1 on the search's path, 2 done
  std::vector<std::pair<std::size_t, std::size_t>> path;  // (state, its next edge)
  for (std::size_t root = 0; root < n; ++root) {
    if (color[root] != 0) continue;
    color[root] = 1;
    path.emplace_back(root, 0);
    while (!path.empty()) {
      auto& [q, e] = path.back();
      if (e < a.edges[q].size()) {
        const auto to = static_cast<std::size_t>(a.edges[q][e++].to);
        if (color[to] == 1) a.texts_ahead[q] = ByteDfa::kUnbounded;  // a cycle through q
        if (color[to] == 0) {
          color[to] = 1;
          path.emplace_back(to, 0);
        }
        continue;
      }
      // Every state q reaches is done (or on the path: then q is on a cycle, marked above).
      const std::size_t done = q;
      path.pop_back();
      color[done] = 2;
      int64_t texts = a.accepting[done] != 0 ? 1 : 0, chars = 0;
      bool bounded = a.texts_ahead[done] != ByteDfa::kUnbounded;
      for (const ByteDfa::Edge& edge : a.edges[done]) {
        const auto to = static_cast<std::size_t>(edge.to);
        if (a.texts_ahead[to] == ByteDfa::kUnbounded || color[to] != 2) {
          bounded = false;
          break;
        }
        const int64_t bytes = edge.hi - edge.lo + 1;
        const int64_t more =
            a.texts_ahead[to] > ByteDfa::kTextsCap / bytes ? ByteDfa::kTextsCap : bytes * a.texts_ahead[to];
        texts = std::min(ByteDfa::kTextsCap, texts + more);
        chars = std::max(chars, a.char_end[to] + a.chars_ahead[to]);
      }
      a.texts_ahead[done] = bounded ? texts : ByteDfa::kUnbounded;
      a.chars_ahead[done] = bounded ? chars : ByteDfa::kUnbounded;
    }
  }
}

int64_t count_texts(const ByteDfa& a, int64_t max_chars, int64_t cap) {
  const std::vector<int64_t> by_bytes = texts_by_bytes(a, max_chars, cap);
  int64_t texts = 0;
  for (const int64_t n : by_bytes) texts = std::min(cap, texts + n);
  return texts;
}

namespace {

// The states on some path `a` accepts: reached from the start and reaching an accepting state (all of a
// pruned automaton's; checked here all the same, as the longest text's bound rests on it).
std::vector<uint8_t> useful_states(const ByteDfa& a) {
  const std::size_t n = a.size();
  std::vector<std::vector<int32_t>> into(n);
  std::vector<uint8_t> reached(n, 0), useful(n, 0);
  std::vector<int32_t> todo;
  if (n > 0) {
    reached[0] = 1;
    todo.push_back(0);
  }
  while (!todo.empty()) {
    const auto q = static_cast<std::size_t>(todo.back());
    todo.pop_back();
    for (const ByteDfa::Edge& e : a.edges[q]) {
      into[static_cast<std::size_t>(e.to)].push_back(static_cast<int32_t>(q));
      if (reached[static_cast<std::size_t>(e.to)] == 0) todo.push_back(e.to);
      reached[static_cast<std::size_t>(e.to)] = 1;
    }
  }
  for (std::size_t q = 0; q < n; ++q) {
    if (reached[q] == 0 || a.accepting[q] == 0) continue;
    useful[q] = 1;
    todo.push_back(static_cast<int32_t>(q));
  }
  while (!todo.empty()) {
    const auto q = static_cast<std::size_t>(todo.back());
    todo.pop_back();
    for (const int32_t p : into[q]) {
      if (useful[static_cast<std::size_t>(p)] == 0) todo.push_back(p);
      useful[static_cast<std::size_t>(p)] = 1;
    }
  }
  return useful;
}

}  // namespace

std::optional<int64_t> longest_text_bytes(const ByteDfa& a) {
  const std::vector<uint8_t> useful = useful_states(a);
  const std::size_t n = a.size();
  if (n == 0 || useful[0] == 0) return std::nullopt;
  // Longest paths in topological order (Kahn's), over the useful states only: an edge counts one byte
  // whichever byte of its range it takes. Every useful state but the start has a useful edge into it, so
  // the order reaches each one unless some lies on a cycle (texts of every length), the start's included.
  std::vector<int64_t> ins(n, 0), longest(n, 0);
  std::size_t left = 0;
  for (std::size_t q = 0; q < n; ++q) {
    left += useful[q];
    for (const ByteDfa::Edge& e : a.edges[q])
      ins[static_cast<std::size_t>(e.to)] += useful[q] & useful[static_cast<std::size_t>(e.to)];
  }
  if (ins[0] != 0) return std::nullopt;
  int64_t most = 0;
  std::vector<int32_t> todo{0};
  while (!todo.empty()) {
    const auto q = static_cast<std::size_t>(todo.back());
    todo.pop_back();
    --left;
    if (a.accepting[q] != 0) most = std::max(most, longest[q]);
    for (const ByteDfa::Edge& e : a.edges[q]) {
      const auto to = static_cast<std::size_t>(e.to);
      if (useful[to] == 0) continue;
      longest[to] = std::max(longest[to], longest[q] + 1);
      if (--ins[to] == 0) todo.push_back(e.to);
    }
  }
  if (left != 0) return std::nullopt;
  return most;
}

std::optional<int64_t> bytes_for_texts(const ByteDfa& a, int64_t count, int64_t max_bytes) {
  const std::size_t n = a.size();
  // Per state, over lengths L = 0, 1, ...: the texts of exactly L bytes to an accepting state (`exact`), of
  // at most L (`within`), and the paths of L bytes to any state (`paths`: zero once the state's texts are all
  // shorter; every state reaches acceptance). Counts stop at `count`: an edge's range counts a text per byte.
  std::vector<int64_t> exact(n), within(n), paths(n, 1), next(n);
  std::vector<uint8_t> settled(n, 0);
  for (std::size_t q = 0; q < n; ++q) within[q] = exact[q] = a.accepting[q] != 0 ? 1 : 0;
  const auto step = [&](std::vector<int64_t>& v) {
    for (std::size_t q = 0; q < n; ++q) {
      int64_t sum = 0;
      for (const ByteDfa::Edge& e : a.edges[q])
        sum = std::min(count, sum + (e.hi - e.lo + 1) * v[static_cast<std::size_t>(e.to)]);
      next[q] = sum;
    }
    v.swap(next);
  };
  std::size_t left = n;
  int64_t most = 0;
  for (int64_t len = 0; left > 0; ++len) {
    for (std::size_t q = 0; q < n; ++q) {
      if (settled[q] != 0 || (within[q] < count && paths[q] > 0)) continue;
      settled[q] = 1;
      --left;
      most = std::max(most, within[q] >= count ? len : len - 1);
    }
    if (left == 0 || len == max_bytes) break;
    step(exact);
    step(paths);
    for (std::size_t q = 0; q < n; ++q) within[q] = std::min(count, within[q] + exact[q]);
  }
  if (left > 0) return std::nullopt;
  return most;
}

}  // namespace orbit::constrain
