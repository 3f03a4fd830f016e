// Finding added tokens in text (hf/added_tokens.h).
#include "src/hf/added_tokens.h"

#include <algorithm>

namespace orbit::runtime::hf {

namespace {
// A word character as Hugging Face's tokenizers tell a single_word token's neighbours (Rust regex's Unicode \w:
// Alphabetic, marks, decimal digits, connector punctuation, the joiners ZWNJ and ZWJ). PCRE2's \w under UCP
// is letters, every number and '_': a combining mark or U+203F after the token would not bar it there, and
// '²' would.
constexpr const char* kWordChar = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The code point of `text` that ends at `end` (its bytes), or the one that begins at `begin`.
std::string_view code_point_before(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && continuation(text[begin])) --begin;
  return text.substr(begin, end - begin);
}
std::string_view code_point_at(std::string_view text, size_t begin) {
  size_t end = begin + 1;
  while (end < text.size() && end - begin < 4 && continuation(text[end])) ++end;
  return text.substr(begin, end - begin);
}

// Where the whitespace run that ends at `end` begins, no earlier than `floor` (`trailing`: \s*\z). Read in
// windows doubling from 64 bytes: each added token costs the run it strips, not the text before it.
size_t space_before(const Regex& trailing, std::string_view text, size_t floor, size_t end) {
  for (size_t width = 64;; width *= 2) {
    size_t begin = end - std::min(width, end - floor);
    while (begin > floor && continuation(text[begin])) --begin;
    const auto m = trailing.find_all(text.substr(begin, end - begin));
    if (m.empty()) return end;
    if (m.front().first > 0 || begin == floor) return begin + m.front().first;
  }
}

// Where the whitespace run that begins at `begin` ends (`leading`: \A\s*), read the same way.
size_t space_after(const Regex& leading, std::string_view text, size_t begin) {
  for (size_t width = 64;; width *= 2) {
    size_t end = begin + std::min(width, text.size() - begin);
    while (end < text.size() && continuation(text[end])) ++end;
    const auto m = leading.find_all(text.substr(begin, end - begin));
    if (m.empty()) return begin;
    if (begin + m.front().second < end || end == text.size()) return begin + m.front().second;
  }
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns)
    : by_first_byte_(256),
      ends_with_word_(std::string(kWordChar) + R"(\z)", "added tokens"),
      starts_with_word_(R"(\A)" + std::string(kWordChar), "added tokens"),
      trailing_space_(R"(\s*\z)", "added tokens"),
      leading_space_(R"(\A\s*)", "added tokens") {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (patterns[i].empty()) continue;
    entries_.push_back({patterns[i], tokens[i]});
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(entries_[i].pattern[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return entries_[a].pattern.size() > entries_[b].pattern.size(); });
  }
}

std::vector<TextSplit> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<TextSplit> out;
  size_t start_offset = 0;  // end of what has been emitted
  size_t i = 0;
  while (i < text.size()) {
    const Entry* found = nullptr;
    for (size_t e : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, entries_[e].pattern.size(), entries_[e].pattern) == 0) {
        found = &entries_[e];
        break;
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + found->pattern.size();
    i = stop;  // matches never overlap, whether or not this one is kept
    const AddedToken& t = found->token;
    // The neighbours are read where they are (the code point on each side, the whitespace runs), never the
    // whole text before or after: a text of many such tokens stays linear.
    if (t.single_word) {
      const bool left_ok = start == 0 || !ends_with_word_.search(code_point_before(text, start));
      const bool right_ok = stop == text.size() || !starts_with_word_.search(code_point_at(text, stop));
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) start = space_before(trailing_space_, text, start_offset, start);
    if (t.rstrip) stop = space_after(leading_space_, text, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
  return out;
}

}  // namespace orbit::runtime::hf
