// orbit::common: the error type, Status/Result and SHA-256.
#include "orbit_catch.h"

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/common/status.h"
#include "orbit/version.h"

#include <memory>
#include <string>
#include <vector>

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
