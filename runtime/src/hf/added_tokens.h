// Added tokens of a tokenizer.json ("added_tokens"), found in text as the Rust `tokenizers` library (0.22)
// finds them: leftmost-longest matches of their contents, then per token
//   single_word: kept only when no word character (\w) touches it on either side;
//   lstrip / rstrip: the match widens over the whitespace (\s) to its left / right;
// Tokens with normalized = false are matched in the raw text, those with normalized = true in the
// normalized text (their content normalized the same way). Immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/hf/text.h"

namespace orbit::runtime::hf {

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool special = false, normalized = true, lstrip = false, rstrip = false, single_word = false;
};

// One piece of a split text: [begin, end) bytes; `id` >= 0 for an added token, -1 for plain text.
struct TextSplit {
  size_t begin, end;
  int64_t id;
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is what finds `tokens[i]` (its content, or its normalized content). Both outlive nothing:
  // the matcher copies what it needs.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  // `text` cut at the added tokens found in it, covering it in order (no piece is empty).
  std::vector<TextSplit> split(std::string_view text) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  std::vector<Entry> entries_;
  std::vector<std::vector<size_t>> by_first_byte_;  // entry indices, longest pattern first
  Regex ends_with_word_, starts_with_word_, trailing_space_, leading_space_;
};

}  // namespace orbit::runtime::hf
