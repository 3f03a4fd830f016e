// What the regular-keyword tests of the JSON Schema constraint share (test_constraint_regular.cpp,
// test_constraint_numbers.cpp, test_constraint_lookahead.cpp): the schema builder, random strings and random
// walks over a constraint.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "orbit/constraint.h"

namespace constraint_test {

using namespace orbit;

inline std::shared_ptr<const Constraint> schema(const std::string& text, const ConstraintLimits& limits = {}) {
  return Constraint::json_schema(text, limits);
}

inline std::string quote(const std::string& s) { return nlohmann::json(s).dump(); }

inline std::string random_string(std::mt19937& rng, const std::string& alphabet, int max_len) {
  std::string s;
  const int n = static_cast<int>(rng() % static_cast<unsigned>(max_len + 1));
  for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

// Walks `c` from the start taking random allowed bytes (from `alphabet`), `walks` times: every state reached
// either is complete or can continue, and each walk ends in a whole match within `max_bytes`. Returns the
// texts.
inline std::vector<std::string> random_walks(const std::shared_ptr<const Constraint>& c, const std::string& alphabet,
                                             int walks, std::mt19937& rng, int max_bytes = 200) {
  std::vector<std::string> out;
  for (int w = 0; w < walks; ++w) {
    ConstraintMatcher m(c);
    while (static_cast<int>(m.text().size()) < 2 * max_bytes) {
      if (m.complete() && (rng() % 4 == 0 || !m.can_continue())) break;
      std::vector<char> ok;
      for (char b : alphabet) {
        if (m.can_advance(std::string(1, b))) ok.push_back(b);
      }
      INFO("after " << m.text());
      if (ok.empty()) {
        REQUIRE(m.complete());
        break;
      }
      char next = ok[rng() % ok.size()];
      // Past half the length, head for the end: the byte that leaves the fewest bytes to write, which must
      // be one fewer than before (min_bytes_to_complete is exact along such a path).
      if (static_cast<int>(m.text().size()) >= max_bytes / 2 && !m.complete()) {
        const int64_t before = m.min_bytes_to_complete();
        for (char b : ok) {
          if (m.min_bytes_after(std::string(1, b)) < m.min_bytes_after(std::string(1, next))) next = b;
        }
        if (m.min_bytes_after(std::string(1, next)) == before - 1) {
          REQUIRE(m.advance(std::string(1, next)));
          continue;
        }
      }
      REQUIRE(m.advance(std::string(1, next)));
    }
    INFO("walk " << w << ": " << m.text());
    REQUIRE(m.complete());
    out.push_back(m.text());
  }
  return out;
}

}  // namespace constraint_test
