// What the byte automata's constructions share (byte_dfa.cpp, byte_dfa_threads.cpp): a DFA being built, the
// bound on the work, the byte line cut in pieces. Private to orbit_constrain.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "constrain/byte_dfa.h"
#include "orbit/common/error.h"

namespace orbit::constrain {

// A DFA being built: states in the order they were found, state 0 the start.
struct DfaDraft {
  std::vector<std::vector<ByteDfa::Edge>> edges;
  std::vector<uint8_t> accepting;
  std::vector<uint8_t> char_end;

  int32_t add(bool accepts, bool ends_char, const std::string& what) {
    ORBIT_CHECK(accepting.size() < kMaxDfaStates,
                what << ": too complex to constrain (over " << kMaxDfaStates << " automaton states)");
    edges.emplace_back();
    accepting.push_back(accepts ? 1 : 0);
    char_end.push_back(ends_char ? 1 : 0);
    return static_cast<int32_t>(accepting.size()) - 1;
  }
};

// Appends an edge, merging it into the previous one when they are adjacent and go to the same state.
inline void append_edge(std::vector<ByteDfa::Edge>& out, uint8_t lo, uint8_t hi, int32_t to) {
  if (!out.empty() && out.back().to == to && out.back().hi + 1 == lo) {
    out.back().hi = hi;
    return;
  }
  out.push_back({lo, hi, to});
}

// The work a pattern may cost (NFA states and edges visited over all DFA states), so that no request's
// schema holds a thread for long: past it the pattern is refused as too complex. `work` counts it, and may be
// shared by the constructions of one source (determinize_or_empty).
class BuildWork {
 public:
  BuildWork(const std::string& what, std::size_t& work) : what_(what), work_(work) {}
  void spend(std::size_t units) {
    work_ += units;
    ORBIT_CHECK(work_ <= kMaxWork, what_ << ": too complex to constrain (its automaton takes too long to build)");
  }

 private:
  static constexpr std::size_t kMaxWork = 4'000'000;
  const std::string& what_;
  std::size_t& work_;
};

// The byte line cut where `cut` marks (cut[0] and cut[256] set): the first byte of each piece, and per byte
// the piece it falls in.
inline std::vector<int> byte_pieces(const std::array<uint8_t, 257>& cut, std::array<int, 257>& piece) {
  std::vector<int> starts;
  for (int b = 0; b <= 256; ++b) {
    if (cut[static_cast<std::size_t>(b)]) starts.push_back(b);
    piece[static_cast<std::size_t>(b)] = static_cast<int>(starts.size()) - 1;
  }
  return starts;
}

// Subset construction over threads (byte_dfa.h), for an NFA with assertions.
DfaDraft thread_sets(const ByteNfa& nfa, const std::string& what, std::size_t& work);

}  // namespace orbit::constrain
