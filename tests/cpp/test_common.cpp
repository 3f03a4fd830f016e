// orbit::common: the error type, Status/Result, SHA-256 and bounded JSON input.
#include "orbit_catch.h"

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "orbit/common/sha256.h"
#include "orbit/common/status.h"
#include "orbit/version.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("sha256 matches the FIPS 180-2 test vectors", "[common][cpu]") {
  CHECK(orbit::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(orbit::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  orbit::Sha256 incremental;
  incremental.update("abcdbcdecdefdefgefghfghighij").update("hijkijkljklmklmnlmnomnopnopq");
  CHECK(incremental.hex_digest() == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK_THROWS_AS(incremental.update("x"), orbit::Error);
  orbit::Sha256 framed;
  framed.update_u64(1);
  CHECK(framed.hex_digest() == orbit::sha256_hex(std::string("\x01\0\0\0\0\0\0\0", 8)));
}

TEST_CASE("sha256 contexts reused from the thread's pool start clean", "[common][cpu]") {
  // More hashes alive at once than the pool keeps, finished out of order, then reused: a context that
  // came back dirty (or shared by two live hashes) would change a digest.
  std::vector<std::unique_ptr<orbit::Sha256>> live;
  for (int i = 0; i < 40; ++i) {
    live.push_back(std::make_unique<orbit::Sha256>());
    live.back()->update(std::to_string(i));
  }
  for (int i = 39; i >= 0; i -= 2) {
    CHECK(live[static_cast<std::size_t>(i)]->hex_digest() == orbit::sha256_hex(std::to_string(i)));
    live[static_cast<std::size_t>(i)].reset();
  }
  for (int round = 0; round < 3; ++round) {
    orbit::Sha256 h;
    h.update("abc");
    CHECK(h.hex_digest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  for (int i = 0; i < 40; i += 2)
    CHECK(live[static_cast<std::size_t>(i)]->hex_digest() == orbit::sha256_hex(std::to_string(i)));
  orbit::Sha256 raw;
  const orbit::Sha256::Digest d = raw.update("abc").digest();
  CHECK(d[0] == 0xba);
  CHECK(d[31] == 0xad);
  CHECK_THROWS_AS(raw.digest(), orbit::Error);
  std::string out = "x";
  orbit::hex_encode(d, out);
  CHECK(out == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("Status and Result carry expected failures as values", "[common][cpu]") {
  orbit::Status ok;
  CHECK(ok.is_ok());
  CHECK(ok.to_string() == "ok");
  orbit::Status full = orbit::Status::out_of_capacity("3 pages asked, 1 free");
  CHECK_FALSE(full);
  CHECK(full.code() == orbit::StatusCode::kOutOfCapacity);
  CHECK(full.to_string() == "out_of_capacity: 3 pages asked, 1 free");

  orbit::Result<int> value(5);
  REQUIRE(value.is_ok());
  CHECK(value.value() == 5);
  orbit::Result<int> missing(orbit::Status::not_found("no patch for this context"));
  CHECK_FALSE(missing);
  CHECK_THROWS_WITH(missing.value(), Contains("not_found: no patch for this context"));
  CHECK_THROWS_AS(orbit::Result<int>(orbit::Status::ok()), orbit::Error);
}

TEST_CASE("orbit::Error keeps the message clean and the source apart", "[common][cpu]") {
  try {
    ORBIT_CHECK(1 + 1 == 3, "file x.bin: field 'dim' must be positive, got " << -1);
    FAIL("no throw");
  } catch (const orbit::Error& e) {
    CHECK(std::string(e.what()) == "file x.bin: field 'dim' must be positive, got -1");
    CHECK_THAT(e.source(), Contains("test_common.cpp:"));
  }
  CHECK(std::string(orbit::version()).find('.') != std::string::npos);
}

namespace {

std::string nested(int levels, const std::string& inside = "1") {
  return std::string(static_cast<std::size_t>(levels), '[') + inside +
         std::string(static_cast<std::size_t>(levels), ']');
}

// {"messages": [{"role": "user", "content": "a"}, ... n times]}: one array of many objects.
std::string many_messages(int n) {
  std::string text = R"({"messages": [)";
  for (int i = 0; i < n; ++i) text += std::string(i ? "," : "") + R"({"role": "user", "content": "a"})";
  return text + "]}";
}

}  // namespace

TEST_CASE("parse_json_input bounds nesting by the brackets outside strings", "[common][cpu]") {
  using orbit::kMaxJsonDepth;
  using orbit::parse_json_input;
  CHECK(parse_json_input(nested(kMaxJsonDepth), "t").is_array());
  CHECK_THROWS_WITH(parse_json_input(nested(kMaxJsonDepth + 1), "t"),
                    Contains("t: JSON nests deeper than 128 levels (arrays and objects)"));
  CHECK_THROWS_WITH(parse_json_input(std::string(100000, '{'), "body"), Contains("body: JSON nests deeper"));
  // Brackets inside strings, after escaped quotes and backslashes, are text, not nesting.
  const std::string text = R"("[[[{{{ \" [[[ \\" )";
  const nlohmann::json inside = parse_json_input(nested(kMaxJsonDepth - 1, "[" + text + "]"), "t");
  const nlohmann::json* value = &inside;
  for (int i = 0; i < kMaxJsonDepth; ++i) value = &(*value)[0];
  CHECK(*value == R"([[[{{{ " [[[ \)");
  CHECK_THROWS_WITH(parse_json_input(nested(kMaxJsonDepth, "[" + text + "]"), "t"), Contains("nests deeper"));
  // Text that is not JSON is still refused by the parse, with its message.
  CHECK_THROWS_WITH(parse_json_input(std::string("[\"]"), "t"), Contains("t: not valid JSON"));
  CHECK_THROWS_WITH(parse_json_input(std::string("]]]]"), "t"), Contains("t: not valid JSON"));
  // The parser's message without nlohmann's "[json.exception.parse_error.101] " tag.
  CHECK_THROWS_WITH(parse_json_input(std::string("{\"a\": tru}"), "t"),
                    StartsWith("t: not valid JSON: parse error at line 1, column") && !Contains("json.exception"));
  // An observer still sees every event and may drop values.
  orbit::JsonInputOptions options;
  options.observer = [](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    return event != nlohmann::json::parse_event_t::value || parsed != 2;
  };
  CHECK(parse_json_input(std::string("[1,2,3]"), "t", options) == nlohmann::json({1, 3}));
  CHECK_THROWS_WITH(parse_json_input(nested(kMaxJsonDepth + 1), "t", options), Contains("nests deeper"));
  // A large array of objects parses whole.
  const nlohmann::json body = parse_json_input(many_messages(20000), "body");
  CHECK(body["messages"].size() == 20000);
  CHECK(body["messages"][19999]["content"] == "a");
}

// nlohmann's callback parser (what parse_json_input used for its depth check) against the scan and the plain
// parse, alternated: `test_common "[.json-input-bench]"`.
TEST_CASE("parse_json_input costs the size of an array of objects, not its square", "[.json-input-bench]") {
  for (const int n : {25000, 50000, 100000}) {
    const std::string text = many_messages(n);
    double old_seconds = 0, new_seconds = 0;
    for (int round = 0; round < 2; ++round) {
      auto start = std::chrono::steady_clock::now();
      const auto old_body =
          nlohmann::json::parse(text, [](int, nlohmann::json::parse_event_t, nlohmann::json&) { return true; });
      old_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      const auto new_body = orbit::parse_json_input(text, "body");
      new_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      REQUIRE(old_body == new_body);
    }
    std::printf("%d messages (%zu bytes): callback parse %.3f s, parse_json_input %.3f s, ratio %.1fx\n", n,
                text.size(), old_seconds / 2, new_seconds / 2, old_seconds / new_seconds);
  }
}

}  // namespace ORBIT_TEST_FILE
