// Subset construction over threads (byte_dfa.h): the determinization of an NFA whose empty moves may carry
// assertions on the rest of the text (lookaheads, '$').
#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "constrain/byte_dfa_draft.h"

namespace orbit::constrain {

namespace {

// A run of an NFA with assertions: its state, then the assertions it has still to meet as pairs (assertion,
// the state its rest automaton has reached), sorted.
using Thread = std::vector<int32_t>;

// The states of `d` from which every continuation is accepted: the greatest set of accepting states whose
// edges cover every byte and stay in the set.
std::vector<uint8_t> universal_states(const ByteDfa& d) {
  std::vector<uint8_t> in(d.size(), 0);
  for (std::size_t s = 0; s < d.size(); ++s) {
    int next = 0;  // the first byte no edge has covered yet
    for (const ByteDfa::Edge& e : d.edges[s]) next = e.lo == next ? e.hi + 1 : next;
    in[s] = d.accepting[s] != 0 && next == 256 ? 1 : 0;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t s = 0; s < d.size(); ++s) {
      if (!in[s]) continue;
      for (const ByteDfa::Edge& e : d.edges[s]) {
        if (in[static_cast<std::size_t>(e.to)]) continue;
        in[s] = 0;
        changed = true;
        break;
      }
    }
  }
  return in;
}

// Subset construction over threads (byte_dfa.h): a DFA state is the set of threads the text so far leaves.
class ThreadSets {
 public:
  ThreadSets(const ByteNfa& nfa, const std::string& what, std::size_t& work)
      : nfa_(nfa), what_(what), work_(what, work) {
    for (const ByteNfa::Assertion& a : nfa.assertions) universal_.push_back(universal_states(*a.rest));
  }

  DfaDraft run() {
    DfaDraft d;
    std::map<std::vector<Thread>, int32_t> ids;
    std::vector<std::vector<Thread>> sets;
    const auto intern = [&](std::vector<Thread> set) {
      const auto found = ids.find(set);
      if (found != ids.end()) return found->second;
      const int32_t id = d.add(accepts(set), ends_char(set), what_);
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      return id;
    };
    intern(closure({Thread{nfa_.start}}));
    for (std::size_t i = 0; i < sets.size(); ++i) {
      std::array<int, 257> piece{};
      const std::vector<int> starts = byte_pieces(cuts(sets[i]), piece);
      std::vector<std::vector<Thread>> targets = step(sets[i], starts, piece);
      std::vector<ByteDfa::Edge> out;
      for (std::size_t k = 0; k < targets.size(); ++k) {
        if (targets[k].empty()) continue;
        const int32_t to = intern(closure(std::move(targets[k])));
        append_edge(out, static_cast<uint8_t>(starts[k]), static_cast<uint8_t>(starts[k + 1] - 1), to);
      }
      d.edges[i] = std::move(out);
    }
    return d;
  }

 private:
  const ByteDfa& rest(int32_t assertion) const { return *nfa_.assertions[static_cast<std::size_t>(assertion)].rest; }

  // Drops the assertions `t` has met for good (a positive one whose rest accepts whatever follows, a negative
  // one whose rest accepts nothing more) and sorts the others; false when one has failed for good.
  bool settle(Thread& t) const {
    std::vector<std::pair<int32_t, int32_t>> kept;
    for (std::size_t k = 1; k + 1 < t.size(); k += 2) {
      const int32_t a = t[k];
      const int32_t s = t[k + 1];
      const bool negative = nfa_.assertions[static_cast<std::size_t>(a)].negative;
      const bool dead = s < 0;
      const bool sure = !dead && universal_[static_cast<std::size_t>(a)][static_cast<std::size_t>(s)] != 0;
      if ((dead && !negative) || (sure && negative)) return false;
      if (!dead && !sure) kept.emplace_back(a, s);
    }
    std::sort(kept.begin(), kept.end());
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    t.resize(1);
    for (const auto& [a, s] : kept) t.insert(t.end(), {a, s});
    return true;
  }

  // The threads reachable from `seeds` by empty moves, an asserted move adding its assertion (sorted, unique).
  std::vector<Thread> closure(std::vector<Thread> seeds) {
    std::set<Thread> seen(seeds.begin(), seeds.end());
    std::vector<Thread> out(seen.begin(), seen.end());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const ByteNfa::State& q = nfa_.states[static_cast<std::size_t>(out[i][0])];
      work_.spend(1 + q.empty.size() + q.asserted.size());
      for (int32_t to : q.empty) {
        Thread t = out[i];
        t[0] = to;
        if (seen.insert(t).second) out.push_back(std::move(t));
      }
      for (const ByteNfa::Asserted& m : q.asserted) {
        Thread t = out[i];
        t[0] = m.to;
        t.insert(t.end(), {m.assertion, 0});
        if (settle(t) && seen.insert(t).second) out.push_back(std::move(t));
      }
    }
    return weakest(std::vector<Thread>(seen.begin(), seen.end()));
  }

  // Whether thread `a`'s assertions are among `b`'s (both sorted; the same NFA state): then `b` accepts no
  // text `a` does not.
  static bool among(const Thread& a, const Thread& b) {
    std::size_t j = 1;
    for (std::size_t i = 1; i + 1 < a.size(); i += 2) {
      while (j + 1 < b.size() && (b[j] < a[i] || (b[j] == a[i] && b[j + 1] < a[i + 1]))) j += 2;
      if (j + 1 >= b.size() || b[j] != a[i] || b[j + 1] != a[i + 1]) return false;
    }
    return true;
  }

  // `set` (sorted) without the threads another thread at the same NFA state holds with fewer assertions: they
  // add no text, and dropping them keeps sets that mean the same text the same set.
  std::vector<Thread> weakest(std::vector<Thread> set) {
    std::vector<Thread> out;
    for (std::size_t i = 0, next = 0; i < set.size(); i = next) {
      for (next = i; next < set.size() && set[next][0] == set[i][0];) ++next;
      work_.spend((next - i) * (next - i));
      for (std::size_t k = i; k < next; ++k) {
        bool covered = false;
        for (std::size_t m = i; m < next && !covered; ++m) {
          covered = m != k && set[m].size() < set[k].size() && among(set[m], set[k]);
        }
        if (!covered) out.push_back(set[k]);  // a copy: set[k] may cover a later one
      }
    }
    return out;
  }

  // Where the threads' NFA edges and their assertions' edges start and end.
  std::array<uint8_t, 257> cuts(const std::vector<Thread>& set) {
    std::array<uint8_t, 257> cut{};
    cut[0] = cut[256] = 1;
    const auto mark = [&](const auto& edges) {
      work_.spend(1 + edges.size());
      for (const auto& e : edges) cut[e.lo] = cut[static_cast<std::size_t>(e.hi) + 1] = 1;
    };
    for (const Thread& t : set) {
      mark(nfa_.states[static_cast<std::size_t>(t[0])].edges);
      for (std::size_t k = 1; k + 1 < t.size(); k += 2) mark(rest(t[k]).edges[static_cast<std::size_t>(t[k + 1])]);
    }
    return cut;
  }

  // Per piece of the byte line (byte_pieces()), the threads after its bytes (before their empty moves).
  std::vector<std::vector<Thread>> step(const std::vector<Thread>& set, const std::vector<int>& starts,
                                        const std::array<int, 257>& piece) {
    std::vector<std::vector<Thread>> out(starts.size() - 1);
    for (const Thread& t : set) {
      for (const ByteNfa::Edge& e : nfa_.states[static_cast<std::size_t>(t[0])].edges) {
        const int from = piece[e.lo];
        const int to = piece[static_cast<std::size_t>(e.hi) + 1];
        work_.spend(static_cast<std::size_t>(to - from) * t.size());
        for (int k = from; k < to; ++k) {
          Thread u = t;
          u[0] = e.to;
          const auto byte = static_cast<uint8_t>(starts[static_cast<std::size_t>(k)]);
          for (std::size_t j = 1; j + 1 < u.size(); j += 2) u[j + 1] = rest(u[j]).next(u[j + 1], byte);
          if (settle(u)) out[static_cast<std::size_t>(k)].push_back(std::move(u));
        }
      }
    }
    return out;
  }

  // Whether a thread ends here: at the NFA's accepting state, each assertion it has still to meet holding on
  // the empty rest.
  bool accepts(const std::vector<Thread>& set) const {
    return std::any_of(set.begin(), set.end(), [&](const Thread& t) {
      if (t[0] != nfa_.accept) return false;
      for (std::size_t k = 1; k + 1 < t.size(); k += 2) {
        const bool accepted = rest(t[k]).accepting[static_cast<std::size_t>(t[k + 1])] != 0;
        if (accepted == nfa_.assertions[static_cast<std::size_t>(t[k])].negative) return false;
      }
      return true;
    });
  }

  bool ends_char(const std::vector<Thread>& set) const {
    return std::any_of(set.begin(), set.end(),
                       [&](const Thread& t) { return !nfa_.states[static_cast<std::size_t>(t[0])].mid_char; });
  }

  const ByteNfa& nfa_;
  const std::string& what_;
  BuildWork work_;
  std::vector<std::vector<uint8_t>> universal_;  // per assertion, universal_states() of its rest
};

}  // namespace

DfaDraft thread_sets(const ByteNfa& nfa, const std::string& what, std::size_t& work) {
  return ThreadSets(nfa, what, work).run();
}

}  // namespace orbit::constrain
