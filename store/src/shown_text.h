// Text read from a store's files (index rows, blob headers) as it is reported: keys, paths, checksums and
// reasons may hold any bytes in a damaged or hand-edited store, and JSON (`orbit store ... --json`) and
// Python's str need valid UTF-8. Internal to orbit::store.
#pragma once

#include <cstddef>
#include <string>

namespace orbit::store {

// The length of the valid UTF-8 character that starts at s[i], or 0 where the bytes there are not one
// (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short).
inline std::size_t utf8_char_at(const std::string& s, std::size_t i) {
  const auto at = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned lead = at(0);
  if (lead < 0x80) return 1;
  const std::size_t n = lead >= 0xC2 && lead <= 0xDF   ? 2
                        : lead >= 0xE0 && lead <= 0xEF ? 3
                        : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                       : 0;
  if (n == 0) return 0;
  const unsigned lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  const unsigned hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  if (at(1) < lo || at(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(k) < 0x80 || at(k) > 0xBF) return 0;
  }
  return n;
}

// `s` with every byte that is not part of valid UTF-8 written as \xNN. Text read from the index (keys,
// blob paths, checksums, the fingerprint) is reported as such: a damaged or hand-edited row can hold any
// bytes, and the JSON of `orbit store ls --json` and Python's str need UTF-8.
inline std::string shown(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_char_at(s, i);
    if (n > 0) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    const auto b = static_cast<unsigned char>(s[i++]);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace orbit::store
