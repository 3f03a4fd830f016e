// JSON string literals and UTF-8 validity (orbit/common/json_string.h, orbit/common/utf8.h), the one writer
// behind the chat templates' tojson, the constraint grammar's quoted names and the server's streamed text:
// valid UTF-8 comes out as nlohmann::json's dump() writes it, for every byte and every code point; text that
// is not UTF-8 is refused (where dump() would throw) or copied as it is, as the caller asks.
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "orbit/common/json_string.h"
#include "orbit/common/utf8.h"
#include "orbit_catch.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

std::string quoted(const std::string& text, orbit::InvalidUtf8 invalid) {
  std::string out;
  REQUIRE(orbit::append_json_string(out, text, invalid));
  return out;
}

// The UTF-8 bytes of code point `cp` (surrogates too, which are then not valid UTF-8).
std::string encode(uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp < 0x800) return {static_cast<char>(0xC0 | cp >> 6), static_cast<char>(0x80 | (cp & 0x3F))};
  if (cp < 0x10000) {
    return {static_cast<char>(0xE0 | cp >> 12), static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
            static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return {static_cast<char>(0xF0 | cp >> 18), static_cast<char>(0x80 | (cp >> 12 & 0x3F)),
          static_cast<char>(0x80 | (cp >> 6 & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// Whether nlohmann::json's dump() takes `text` (it throws on bytes that are not UTF-8).
bool dump_takes(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

TEST_CASE("json string: every byte and code point as dump() writes it", "[common][json]") {
  std::vector<std::string> texts = {"", "a\"b\\c/d", "\x7F", "tab\there\r\n\b\f"};
  for (int c = 0; c < 0x80; ++c) texts.push_back("x" + std::string(1, static_cast<char>(c)) + "y");
  for (uint32_t cp = 0x80; cp <= 0x10FFFF; cp += cp < 0x1000 ? 1 : 97) {
    if (cp < 0xD800 || cp > 0xDFFF) texts.push_back(encode(cp));
  }
  texts.push_back(encode(0x10FFFF) + encode(0x10000) + encode(0xFFFF) + encode(0xE000) + encode(0xD7FF));
  for (const std::string& text : texts) {
    const std::string dumped = nlohmann::json(text).dump();
    CHECK(quoted(text, orbit::InvalidUtf8::kRefuse) == dumped);
    CHECK(quoted(text, orbit::InvalidUtf8::kCopy) == dumped);
    CHECK(orbit::json_string_size(text) == dumped.size());
  }
  CHECK(quoted("\x01\x1F", orbit::InvalidUtf8::kRefuse) == "\"\\u0001\\u001f\"");  // lowercase hex
}

TEST_CASE("json string: text that is not UTF-8 is refused or copied", "[common][json]") {
  for (const std::string bad : {"\xE4\xB8", "\x80", "\xFF", "\xC0\x80", "\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80",
                                "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "a\xC3"}) {
    INFO("bytes: " << bad.size());
    CHECK_FALSE(dump_takes(bad));
    CHECK_FALSE(orbit::is_valid_utf8(bad));
    std::string out = "x";
    CHECK_FALSE(orbit::append_json_string(out, bad, orbit::InvalidUtf8::kRefuse));
    CHECK(out == "x");
    CHECK(quoted(bad + "\n", orbit::InvalidUtf8::kCopy) == "\"" + bad + "\\n\"");
    CHECK(orbit::json_string_size(bad + "\n") == bad.size() + 4);
  }
  CHECK(quoted("\xF4\x8F\xBF\xBF\xE0\xA0\x80\xED\x9F\xBF", orbit::InvalidUtf8::kRefuse) ==
        "\"\xF4\x8F\xBF\xBF\xE0\xA0\x80\xED\x9F\xBF\"");  // the edges that are valid
}

TEST_CASE("utf8: validity as dump() sees it, on random bytes", "[common][utf8]") {
  std::mt19937 random(11);
  const unsigned char edges[] = {0x00, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
  for (int i = 0; i < 20000; ++i) {
    std::string text(random() % 8, ' ');
    for (char& c : text) c = static_cast<char>(i % 2 == 0 ? random() % 256 : edges[random() % sizeof edges]);
    CHECK(orbit::is_valid_utf8(text) == dump_takes(text));
  }
}

TEST_CASE("utf8: a character's length, and the start of one cut short", "[common][utf8]") {
  struct Case {
    std::string bytes;
    std::size_t length, valid_prefix;
  };
  for (const Case& c : std::vector<Case>{{"a", 1, 1},
                                         {"\xC3\xA9", 2, 2},
                                         {"\xE4\xB8\xAD", 3, 3},
                                         {"\xF0\x9F\x98\x80", 4, 4},
                                         {"\xE4\xB8", 0, 2},          // cut short by the end
                                         {"\xF0\x9F\x98z", 0, 3},     // cut short by a byte that is no tail
                                         {"\xED\xA0\x80", 0, 1},      // a surrogate: its first tail is out of range
                                         {"\xF4\x90\x80\x80", 0, 1},  // past U+10FFFF
                                         {"\xE0\x80\x80", 0, 1},      // overlong
                                         {"\x80", 0, 1},              // a stray tail
                                         {"\xC1\xBF", 0, 1}}) {       // a lead no character has
    INFO("bytes: " << c.bytes.size());
    std::size_t prefix = 99;
    CHECK(orbit::utf8_char_at(c.bytes, 0, &prefix) == c.length);
    CHECK(prefix == c.valid_prefix);
    CHECK(orbit::utf8_char_at(c.bytes, 0) == c.length);
  }
}

}  // namespace ORBIT_TEST_FILE
