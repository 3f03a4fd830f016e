#include "src/jinja/text_units.h"

#include <unicode/locid.h>
#include <unicode/stringoptions.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstdint>

namespace orbit::runtime::jinja {

namespace {

// The code point at byte `i` of `s` and the byte after it; an ill-formed sequence is its first byte alone
// (returned as U+FFFD, which is neither whitespace nor cased).
std::pair<char32_t, std::size_t> next_code_point(const std::string& s, std::size_t i) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
  int32_t at = static_cast<int32_t>(i);
  UChar32 c = 0;
  U8_NEXT(bytes, at, static_cast<int32_t>(s.size()), c);
  if (c < 0) return {0xFFFD, i + 1};
  return {static_cast<char32_t>(c), static_cast<std::size_t>(at)};
}

std::string utf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

icu::UnicodeString unicode(const std::string& s) { return icu::UnicodeString::fromUTF8(s); }

std::string one_in_title_case(char32_t c) {
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toTitle(nullptr, icu::Locale::getRoot(),
            U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  return utf8(u);
}

std::string one_in_lower_case(char32_t c) {
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toLower(icu::Locale::getRoot());
  return utf8(u);
}

}  // namespace

std::vector<std::size_t> code_point_starts(const std::string& s) {
  std::vector<std::size_t> starts;
  starts.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); i = next_code_point(s, i).second) starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

std::size_t code_point_end(const std::string& s, std::size_t i) { return next_code_point(s, i).second; }

std::size_t count_code_points(const std::string& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i = next_code_point(s, i).second) ++n;
  return n;
}

std::optional<std::pair<std::size_t, std::size_t>> code_point_at(const std::string& s, int64_t k,
                                                                 std::size_t* scanned) {
  *scanned = 0;
  if (k < 0) {
    const std::size_t n = count_code_points(s);
    *scanned = s.size();
    if (static_cast<uint64_t>(-(k + 1)) >= n) return std::nullopt;  // -(k + 1): no overflow at INT64_MIN
    k += static_cast<int64_t>(n);
  }
  std::size_t i = 0;
  for (int64_t j = 0; j < k && i < s.size(); ++j) i = next_code_point(s, i).second;
  *scanned = std::max(*scanned, i);
  if (i >= s.size()) return std::nullopt;
  return std::make_pair(i, next_code_point(s, i).second);
}

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip_code_points(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;  // sorted: each code point of `s` looked up in log |chars|
  if (chars != nullptr) {
    for (std::size_t i = 0; i < chars->size();) {
      const auto [c, next] = next_code_point(*chars, i);
      set.push_back(c);
      i = next;
    }
    std::sort(set.begin(), set.end());
  }
  const auto stripped = [&](char32_t c) {
    return chars == nullptr ? is_space(c) : std::binary_search(set.begin(), set.end(), c);
  };
  std::size_t b = 0;  // bytes: where the kept text begins, then ends (one pass, no list of offsets)
  while (left && b < s.size()) {
    const auto [c, next] = next_code_point(s, b);
    if (!stripped(c)) break;
    b = next;
  }
  std::size_t e = right ? b : s.size();
  for (std::size_t i = b; right && i < s.size();) {
    const auto [c, next] = next_code_point(s, i);
    if (!stripped(c)) e = next;
    i = next;
  }
  return s.substr(b, e - b);
}

std::vector<std::pair<std::size_t, std::size_t>> whitespace_parts(const std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  std::size_t begin = 0;
  bool in_part = false;
  for (std::size_t i = 0; i < s.size();) {
    const auto [c, next] = next_code_point(s, i);
    if (is_space(c) && in_part) parts.emplace_back(begin, i);
    if (!is_space(c) && !in_part) begin = i;
    in_part = !is_space(c);
    i = next;
  }
  if (in_part) parts.emplace_back(begin, s.size());
  return parts;
}

std::string to_upper(const std::string& s) { return utf8(unicode(s).toUpper(icu::Locale::getRoot())); }

std::string to_lower(const std::string& s) { return utf8(unicode(s).toLower(icu::Locale::getRoot())); }

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  const auto [first, next] = next_code_point(s, 0);
  return one_in_title_case(first) + to_lower(s.substr(next));
}

std::string title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (std::size_t i = 0; i < s.size();) {
    const auto [c, next] = next_code_point(s, i);
    out += previous_cased ? one_in_lower_case(c) : one_in_title_case(c);
    previous_cased = u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
    i = next;
  }
  return out;
}

std::string title_words(const std::string& s) {
  std::string out, word;
  for (std::size_t i = 0; i < s.size();) {
    const auto [c, next] = next_code_point(s, i);
    if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c)) {
      out += capitalize(word);
      word.clear();
      out.append(s, i, next - i);
    } else {
      word.append(s, i, next - i);
    }
    i = next;
  }
  return out + capitalize(word);
}

std::size_t find_text(const std::string& hay, const std::string& needle, std::size_t from) {
  constexpr std::size_t kShort = 8;  // a short needle: std::string's find is at most 8 compares a place
  if (needle.size() <= kShort || from >= hay.size()) return hay.find(needle, from);
  // fail[i]: the longest proper border of needle[0, i].
  std::vector<std::size_t> fail(needle.size(), 0);
  for (std::size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (std::size_t i = from, k = 0; i < hay.size(); ++i) {
    while (k > 0 && hay[i] != needle[k]) k = fail[k - 1];
    if (hay[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - needle.size();
  }
  return std::string::npos;
}

}  // namespace orbit::runtime::jinja
