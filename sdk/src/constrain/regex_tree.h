// The parsed form of a regular expression (regex.h): code point sets and a small tree, which regex.cpp
// builds into a byte NFA. Private to orbit_constrain.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace orbit::constrain::rx {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Code points as sorted, disjoint, non-adjacent ranges (after normalize()).
struct CodeSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;

  void add(uint32_t lo, uint32_t hi) { ranges.emplace_back(lo, hi); }
  void add(const CodeSet& other) { ranges.insert(ranges.end(), other.ranges.begin(), other.ranges.end()); }
  void normalize();
  CodeSet complement() const;
};

CodeSet any_char();  // every code point

// kLook is a lookahead, (?=X) or (?!X) (negative): X its one kid; `at` is where it opens in the pattern (a code
// point index), for errors.
struct Rx {
  enum class Kind { kEmpty, kSet, kCat, kAlt, kRepeat, kBegin, kEnd, kLook };
  Kind kind = Kind::kEmpty;
  CodeSet set;
  std::vector<Rx> kids;
  int min = 0;
  int max = 0;  // -1: no bound
  bool negative = false;
  std::size_t at = 0;
};

// `pattern` (UTF-8) parsed; groups nest at most `max_depth` deep. Throws orbit::Error "<what>: <construct>
// at character N of the pattern" for what regex.h lists as refused.
Rx parse(const std::string& pattern, const std::string& what, int max_depth);

}  // namespace orbit::constrain::rx
