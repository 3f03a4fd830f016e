// orbit::common: the error type, Status/Result and SHA-256.
#include "orbit_catch.h"

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/common/status.h"
#include "orbit/version.h"

using Catch::Matchers::Contains;

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
