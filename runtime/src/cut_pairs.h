// The safe-cut rule's pairs (Tokenizer::encode_rest, orbit/runtime/tokenizer.h): which two characters a token
// may hold side by side. Both tokenizers answer "can a token straddle this cut?" from the character just
// before the cut and the one just after it, looked up in a set of pairs collected from their merges (and, for
// tokenizer.json, from the added tokens' contents). Internal to the runtime.
//
// A "character" here is a UTF-8 character as the strings spell it: the last one of a string is its bytes from
// its last byte that is not a continuation byte (10xxxxxx) to its end, the first one its first byte and the
// continuation bytes after it, at most four bytes either way. In valid UTF-8 these are its last and first
// characters; a string that ends or starts mid-character (a merge of raw bytes) still gives a well-defined
// key, so that the set stays a superset of what the merges can join.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>

namespace orbit::runtime {

inline bool is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The last character of `s` ("" for an empty string).
inline std::string_view last_char(std::string_view s) {
  std::size_t begin = s.size();
  while (begin > 0 && s.size() - begin < 4) {
    --begin;
    if (!is_utf8_continuation(static_cast<unsigned char>(s[begin]))) break;
  }
  return s.substr(begin);
}

// The first character of `s` ("" for an empty string).
inline std::string_view first_char(std::string_view s) {
  std::size_t end = s.empty() ? 0 : 1;
  while (end < s.size() && end < 4 && is_utf8_continuation(static_cast<unsigned char>(s[end]))) ++end;
  return s.substr(0, end);
}

// Two characters side by side, as one key: each its bytes read as a big-endian number. Valid UTF-8
// characters of different lengths fall in disjoint ranges, so two pairs of valid characters never share a
// key; other strings may, which only makes the rule refuse a cut it could have taken.
inline uint64_t char_pair(std::string_view left, std::string_view right) {
  const auto pack = [](std::string_view c) {
    uint32_t v = 0;
    for (unsigned char b : c.substr(0, 4)) v = v << 8 | b;
    return v;
  };
  return uint64_t{pack(left)} << 32 | pack(right);
}

// A set of character pairs.
class CharPairs {
 public:
  // The last character of `left` next to the first of `right`.
  void add(std::string_view left, std::string_view right) {
    pairs_.insert(char_pair(last_char(left), first_char(right)));
  }
  // Every two adjacent characters of `s` (valid UTF-8 or not: split as first_char reads it).
  void add_adjacent(std::string_view s) {
    for (std::string_view c = first_char(s); c.size() < s.size(); c = first_char(s)) {
      s.remove_prefix(c.size());
      pairs_.insert(char_pair(c, first_char(s)));
    }
  }
  // Whether the last character of `left` next to the first of `right` is in the set.
  bool holds(std::string_view left, std::string_view right) const {
    return pairs_.count(char_pair(last_char(left), first_char(right))) > 0;
  }

 private:
  std::unordered_set<uint64_t> pairs_;
};

}  // namespace orbit::runtime
