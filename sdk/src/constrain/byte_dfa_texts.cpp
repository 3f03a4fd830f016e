// What a finished byte automaton's language holds (byte_dfa.h): whether it accepts a text, how many texts it
// has by length, its longest text, the bytes that hold a number of texts, and the per-state tables
// count_ahead() fills. Reads a pruned ByteDfa; builds none (byte_dfa.cpp does).
#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "constrain/byte_dfa.h"

namespace orbit::constrain {

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
