// UTF-8 validity as RFC 3629 defines it: one definition for every place that checks text (the tokenizer,
// the constraint's token masks, the server's streamed text, the store's reports).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace orbit {

// The length (1 to 4) of the valid UTF-8 character that starts at text[at], or 0 where the bytes there are
// not one: a stray continuation byte, a lead byte no character has (0xC0, 0xC1, 0xF5 to 0xFF), an overlong
// form, a surrogate (U+D800 to U+DFFF), a code point past U+10FFFF, or a character cut short by the end of
// `text`. When `valid_prefix` is given, *valid_prefix is the length of the longest start of a valid
// character there: the character's length where there is one, else 1 to 3, the bytes Rust's
// String::from_utf8_lossy replaces by one U+FFFD.
// Requires at < text.size().
inline std::size_t utf8_char_at(std::string_view text, std::size_t at, std::size_t* valid_prefix = nullptr) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[at + k]); };
  const unsigned char lead = byte(0);
  if (valid_prefix != nullptr) *valid_prefix = 1;
  if (lead < 0x80) return 1;
  // The lead byte sets how many bytes follow and the range of the first of them (RFC 3629's table).
  std::size_t follow = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    follow = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    follow = 2;
    if (lead == 0xE0) lo = 0xA0;  // below: overlong
    if (lead == 0xED) hi = 0x9F;  // above: a surrogate
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    follow = 3;
    if (lead == 0xF0) lo = 0x90;  // below: overlong
    if (lead == 0xF4) hi = 0x8F;  // above: past U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= follow; ++k) {
    if (at + k >= text.size()) return 0;
    const unsigned char c = byte(k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    if (valid_prefix != nullptr) *valid_prefix = k + 1;
  }
  return follow + 1;
}

// Whether all of `text` is valid UTF-8 (utf8_char_at finds a character at each place).
inline bool is_valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = utf8_char_at(text, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

// Appends code point `cp` (at most U+10FFFF) in UTF-8 to `out`.
inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace orbit
