// Text utilities of the tokenizer.json reader: a Unicode regex (PCRE2 in UTF mode with Unicode properties),
// Unicode normalization forms (ICU), and UTF-8 helpers. Internal to the runtime: PCRE2 and ICU stay out of
// its public headers.
//
// All strings are UTF-8. Offsets are byte offsets into the string given; ranges are half-open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orbit/common/utf8.h"

namespace orbit::runtime::hf {

// A compiled regular expression with Hugging Face's (Oniguruma's) meaning of the patterns tokenizer.json
// files use: \p{L}, \p{N}, \s and \w are Unicode classes, (?i:...) and (?!...) work. Immutable once built:
// safe to use from several threads at once.
class Regex {
 public:
  // Throws orbit::Error naming `what` (e.g. "tokenizer.json: pre_tokenizer Split") on a bad pattern.
  Regex(const std::string& pattern, const std::string& what);
  // A pattern that matches `literal` exactly (no metacharacters).
  static Regex literal(const std::string& literal, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every non-overlapping match of the pattern in `text`, leftmost first, as [begin, end) byte ranges.
  // An empty match is skipped (the search resumes one character further on).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // Whether the pattern matches somewhere in `text`.
  bool search(std::string_view text) const;

  struct Impl;  // the compiled PCRE2 pattern (text.cpp)

 private:
  explicit Regex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Unicode normalization forms of the "NFC", "NFD", "NFKC" and "NFKD" normalizers.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_unicode(std::string_view text, NormalForm form);

// The number of bytes of the UTF-8 character that starts with `lead` (1 for a stray byte).
size_t utf8_length(unsigned char lead);
// `text` with every maximal invalid UTF-8 subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy does (so decoded text matches Hugging Face's byte for byte).
std::string utf8_lossy(std::string_view bytes);
using orbit::is_valid_utf8;  // orbit/common/utf8.h
// The UTF-8 encoding of code point `cp`.
std::string utf8_encode(uint32_t cp);
// The code points of valid UTF-8 `text`.
std::vector<uint32_t> utf8_decode(std::string_view text);

}  // namespace orbit::runtime::hf
