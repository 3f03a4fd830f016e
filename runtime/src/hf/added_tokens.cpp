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
    if (t.single_word) {
      const bool left_ok = start == 0 || !ends_with_word_.search(text.substr(0, start));
      const bool right_ok = stop == text.size() || !starts_with_word_.search(text.substr(stop));
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      const auto m = trailing_space_.find_all(text.substr(0, start));
      const size_t new_start = m.empty() ? start : m.front().first;
      start = std::max(new_start, start_offset);
    }
    if (t.rstrip) {
      const auto m = leading_space_.find_all(text.substr(stop));
      if (!m.empty()) stop += m.front().second;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
  return out;
}

}  // namespace orbit::runtime::hf
