// JSON string literals (orbit/common/json_string.h).
#include "orbit/common/json_string.h"

#include "orbit/common/utf8.h"

namespace orbit {

namespace {

// The escape of `c` other than \u00xx ("" where it has none).
const char* short_escape(unsigned char c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return "";
  }
}

}  // namespace

bool append_json_string(std::string& out, std::string_view text, InvalidUtf8 invalid) {
  if (invalid == InvalidUtf8::kRefuse && !is_valid_utf8(text)) return false;
  static const char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + text.size() + 2);
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != '"' && c != '\\') {
      out += ch;
    } else if (const char* escape = short_escape(c); *escape != '\0') {
      out += escape;
    } else {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += '"';
  return true;
}

std::size_t json_string_size(std::string_view text) {
  std::size_t n = 2;  // the quotes
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    n += c >= 0x20 && c != '"' && c != '\\' ? 1 : *short_escape(c) != '\0' ? 2 : 6;
  }
  return n;
}

}  // namespace orbit
