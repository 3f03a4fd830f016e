#include "serve/wire/lone_surrogates.h"

#include <cstddef>

namespace orbit::serve {

namespace {

// The code unit of a \uXXXX escape starting at text[at] (the backslash), or -1 when there is none there.
int escaped_unit(std::string_view text, std::size_t at) {
  if (at + 6 > text.size() || text[at] != '\\' || text[at + 1] != 'u') return -1;
  int unit = 0;
  for (std::size_t i = at + 2; i < at + 6; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

bool high(int unit) { return unit >= 0xD800 && unit <= 0xDBFF; }
bool low(int unit) { return unit >= 0xDC00 && unit <= 0xDFFF; }

}  // namespace

std::optional<std::string> replace_lone_surrogates(std::string_view text) {
  std::optional<std::string> out;
  std::size_t copied = 0;  // text before this is in `out` (once it exists)
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) {
      in_string = c == '"';
      continue;
    }
    if (c == '"') {
      in_string = false;
      continue;
    }
    if (c != '\\') continue;
    const int unit = escaped_unit(text, i);
    if (unit < 0) {
      ++i;  // another escape: its character is no quote or backslash of its own
      continue;
    }
    if (high(unit) && low(escaped_unit(text, i + 6))) {
      i += 11;  // a pair
      continue;
    }
    if (high(unit) || low(unit)) {
      if (!out) out.emplace();
      out->append(text.substr(copied, i - copied)).append("\\uFFFD");
      copied = i + 6;
    }
    i += 5;
  }
  if (out) out->append(text.substr(copied));
  return out;
}

}  // namespace orbit::serve
