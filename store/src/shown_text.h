// Text read from a store's files (index rows, blob headers) as it is reported: keys, paths, checksums and
// reasons may hold any bytes in a damaged or hand-edited store, and JSON (`orbit store ... --json`) and
// Python's str need valid UTF-8. Internal to orbit::store.
#pragma once

#include <cstddef>
#include <string>

#include "orbit/common/utf8.h"

namespace orbit::store {

// `s` with every byte that is not part of valid UTF-8 written as \xNN. Text read from the index (keys,
// blob paths, checksums, the fingerprint) is reported as such: a damaged or hand-edited row can hold any
// bytes, and the JSON of `orbit store ls --json` and Python's str need UTF-8.
inline std::string shown(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = orbit::utf8_char_at(s, i);
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
