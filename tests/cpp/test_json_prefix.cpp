// A JSON text and a tool call read as they grow (sdk/src/text/json_prefix.h, tool_call_open.h): fed byte by
// byte, JsonPrefix must say at every length what json_spans::cut_short says of the text so far, and OpenCall
// read what cut_call_from reads of it (names, arguments, cut, cut_name_whole). The texts are the corners of
// nlohmann's rules (a token that does not fit where it stands, a number past double's range, surrogate pairs
// and UTF-8 ranges, a NUL byte, nesting past the limit, arguments given as JSON text), then calls with random
// pieces inserted, removed or replaced (a fixed seed). Without a model.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "text/json_prefix.h"
#include "text/json_spans.h"
#include "text/tool_call_open.h"
#include "text/tool_call_parts.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace js = orbit::json_spans;
namespace parts = orbit::tool_call_parts;

namespace {

const std::vector<std::string>& corners() {
  static const std::vector<std::string> all = {
      "{\"a\": [1, \"x\", true, null, {\"b\": -0.5e+3}], \"c\": false}",
      "{\"a\" \"b\"}",            // a string where ':' goes: cut short until it closes
      "{\"a\":1 2.5}",            // a number where ',' goes: cut short only while it is not a whole number
      "{\"a\":01.5}",             // "0" then the number "1.5"
      "{\"a\":1e999, \"b\": 2}",  // past double's range: not cut short once whole
      "{\"a\":1" + std::string(400, '0') + "e-400}",  // past the range, then back in it
      "{\"a\":tru}",
      "{\"a\":true1}",
      "{\"a\" tr}",
      "{\"a\":nul}",
      "{\"a\":-}",
      "{\"a\":1.}",
      "{\"a\":1e+}",
      "{\"s\":\"\\ud83d\\ude00\\u00e9\\n\\\"\"}",  // escapes, a surrogate pair
      "{\"s\":\"\\ud83d\\u0041\"}",
      "{\"s\":\"\\ude00\"}",
      "{\"s\":\"\\x\"}",
      "{\"s\":\"\\u00g0\"}",
      "{\"s\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"}",  // UTF-8 at its limits
      "{\"s\":\"\xed\xa0\x80\"}",
      "{\"s\":\"\xe0\x80\x80\"}",
      "{\"s\":\"\xf4\x90\x80\x80\"}",  // not UTF-8
      "{\"s\":\"\xc0\xaf\"}",
      "{\"s\":\"a\x01\"}",
      "{\"s\":\"\x7f\"}",
      std::string("{\"a\":1\0}", 8),
      std::string("{\"a\":1} \0 x", 11),  // NUL: the end of the text to nlohmann
      "{\"a\":1} \"x",
      "{\"a\":1} 2",
      "{\"a\":1}}",
      "{,\"a\":1}",
      "{\"a\":1,}",
      "[1,]",
      "{\"a\":[}",
      std::string(64, '[') + std::string(64, ']'),
      "{\"a\":" + std::string(64, '[') + "1",  // nesting past 64
      "-12.5e3",
      "1e999",
      "\"x\"",
      "true",
      "null 1",  // a value that is not an object or array
  };
  return all;
}

// Calls as a model writes them: whole, with arguments given as JSON text, with members in another order.
const std::vector<std::string>& calls() {
  static const std::vector<std::string> all = {
      "{\"name\": \"search\", \"arguments\": {\"q\": \"cat <3 \\u00e9\\ud83d\\ude00\", \"n\": [1, 2.5e3, true]}}",
      "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\\\u00e9 \\\\ud83d\\\\ude00 y\\\", \\\"z\\\": [1, 2]}\"}",
      "{\"id\": \"call_7\", \"parameters\": {\"a\": 1}, \"name\": \"g\", \"arguments\": {\"b\": \"\xe2\x82\xac\"}}",
      "{\"n\\u0061me\": \"h\", \"parameters\": {\"k\": null}, \"parameters\": {\"k\": 2}}",
      "{\"name\": \"f\" \"arguments\": {}}",  // a member where ',' goes: read as far as the text is cut
      "{\"name\": \"f\", \"arguments\": {\"a\": 1 \"b\": 2}}",
      "{\"name\": \"f\", \"arguments\": 1e999}",
      "{\"name\": \"f\", \"arguments\": {\"a\": 1e400}}",
  };
  return all;
}

// The texts above, and calls with random pieces inserted, removed or replaced.
std::vector<std::string> texts() {
  static const std::vector<std::string> pieces = {"\"",
                                                  "\\",
                                                  ",",
                                                  ":",
                                                  "{",
                                                  "}",
                                                  "[",
                                                  "]",
                                                  " ",
                                                  "1",
                                                  "-",
                                                  ".",
                                                  "e",
                                                  "tr",
                                                  "\\ud83d",
                                                  "\\u00",
                                                  "\xc3",
                                                  "\xed\xa0",
                                                  std::string(1, '\0'),
                                                  "\"name\": \"x\"",
                                                  "\"arguments\": ",
                                                  "\"id\": \"i\"",
                                                  "1e999"};
  std::vector<std::string> out = corners();
  out.insert(out.end(), calls().begin(), calls().end());
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string t = calls()[rng() % calls().size()];
    for (int m = 1 + static_cast<int>(rng() % 3); m > 0; --m) {
      const std::size_t at = rng() % (t.size() + 1);
      const std::string& piece = pieces[rng() % pieces.size()];
      if (rng() % 3 == 0 && at < t.size()) {
        t.erase(at, 1 + rng() % 3);
      } else {
        t.insert(at, piece);
      }
    }
    out.push_back(t);
  }
  return out;
}

std::string shown(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += c < 0x20 || c >= 0x7f ? "\\x" + std::to_string(c) : std::string(1, c);
  return out;
}

}  // namespace

TEST_CASE("json prefix: fed byte by byte, is cut short where cut_short says, at every length", "[tool_calls]") {
  for (const std::string& text : texts()) {
    js::JsonPrefix prefix;
    for (std::size_t n = 1; n <= text.size(); ++n) {
      prefix.feed(text.substr(n - 1, 1));
      const std::string_view so_far(text.data(), n);
      INFO(shown(std::string(so_far)));
      REQUIRE(prefix.cut_short() == js::cut_short(so_far));
      if (prefix.broken()) REQUIRE(js::parse_json(so_far).is_discarded());
    }
  }
}

TEST_CASE("json prefix: the corners are cut short, or not, as nlohmann's parser has them", "[tool_calls]") {
  auto cut = [](const std::string& text) {
    js::JsonPrefix prefix;
    prefix.feed(text);
    return prefix.cut_short();
  };
  CHECK(cut("{\"a\" \"b"));
  CHECK_FALSE(cut("{\"a\" 12"));
  CHECK(cut("{\"a\" 12."));
  CHECK_FALSE(cut("{\"a\": 1e999"));
  CHECK(cut("{\"a\": 1e99"));
  CHECK(cut("{\"s\": \"\\ud83d\\ude0"));
  CHECK_FALSE(cut("{\"s\": \"\\ud83d\\u0041"));
  CHECK_FALSE(cut("{\"a\": tx"));
  js::JsonPrefix whole;
  whole.feed("{\"a\": [1]} ");
  CHECK(whole.whole());
  CHECK_FALSE(whole.cut_short());
}

TEST_CASE("open call: fed byte by byte, reads what cut_call_from reads of the call so far", "[tool_calls]") {
  for (const std::string& text : texts()) {
    parts::OpenCall open;
    for (std::size_t n = 1; n <= text.size(); ++n) {
      // The call's text as a reader has it: trimmed (a prefix's trimmed text only grows).
      const std::string raw = js::trim(std::string_view(text).substr(0, n));
      if (raw.size() < open.fed()) continue;
      open.extend(raw);
      orbit::ChatToolCall read_call, whole_call;
      orbit::ToolCallParse read_parse, whole_parse;
      const bool read = open.read(raw, &read_call, &read_parse);
      const bool whole = parts::cut_call_from(raw, &whole_call, &whole_parse);
      INFO(shown(raw));
      REQUIRE(read == whole);
      if (!read) continue;
      CHECK(read_call.name == whole_call.name);
      CHECK(read_call.arguments == whole_call.arguments);
      CHECK(read_parse.cut == whole_parse.cut);
      CHECK(read_parse.cut_name_whole == whole_parse.cut_name_whole);
    }
  }
}

}  // namespace ORBIT_TEST_FILE
