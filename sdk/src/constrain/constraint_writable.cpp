// orbit::unwritable (constraint.h): whether a vocabulary can write a constraint's shortest answer.
#include <algorithm>
#include <string>

#include "orbit/constraint.h"

namespace orbit {

namespace {

// The shortest whole match of `constraint`, byte by byte: at each step the byte after which the fewest bytes
// remain (ties: the lowest). Bounded by 64 KiB.
std::string shortest_match(const std::shared_ptr<const Constraint>& constraint, std::size_t limit) {
  ConstraintMatcher m(constraint);
  std::string text;
  while (!m.complete() && text.size() < limit) {
    int best = -1;
    int64_t best_left = 0;
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      const int64_t left = m.min_bytes_after(std::string_view(&c, 1));
      if (left < 0) continue;
      if (best < 0 || left < best_left) {
        best = b;
        best_left = left;
      }
    }
    if (best < 0) break;
    const char c = static_cast<char>(best);
    m.advance(std::string_view(&c, 1));
    text += c;
  }
  return text;
}

std::string byte_name(unsigned char b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string hex = std::string("0x") + kHex[b >> 4] + kHex[b & 15];
  return b >= 0x20 && b < 0x7F ? "'" + std::string(1, static_cast<char>(b)) + "' (" + hex + ")" : hex;
}

}  // namespace

std::string unwritable(const std::shared_ptr<const Constraint>& constraint, const TokenVocabulary& vocabulary,
                       int64_t max_answer_bytes) {
  const int64_t shortest = ConstraintMatcher(constraint).min_bytes_to_complete();
  if (shortest > max_answer_bytes) {
    return "its shortest answer is " + std::to_string(shortest) + " bytes, more than this model can write in its " +
           "context (at most " + std::to_string(max_answer_bytes) + ")";
  }
  const std::string text = shortest_match(
      constraint, std::min<std::size_t>(std::size_t{1} << 16, 2 * static_cast<std::size_t>(shortest) + 64));
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t longest = 0;
    for (int64_t id = 0; id < vocabulary.size(); ++id) {
      const std::optional<std::string>& bytes = vocabulary.bytes(id);
      if (bytes && !bytes->empty() && bytes->size() > longest && text.compare(at, bytes->size(), *bytes) == 0)
        longest = bytes->size();
    }
    if (longest == 0) {
      return "the model's vocabulary has no token that writes " + byte_name(static_cast<unsigned char>(text[at])) +
             ", which the answer needs at byte " + std::to_string(at) + " of its shortest form '" + text.substr(0, 80) +
             "': this model cannot write it";
    }
    at += longest;
  }
  return "";
}

}  // namespace orbit
