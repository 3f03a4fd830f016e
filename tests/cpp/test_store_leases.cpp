// The leases that keep a store's entries from another process's eviction while a process reads or pins them:
// one owner's read keeps another's eviction away; reads of one key on several threads share its lease until the
// last; a pin dropped by another process as expired (its owner stalled past the lease) is taken again by the next
// heartbeat; an index the heartbeat cannot use does not end the process.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "orbit/store/disk_tier.h"
#include "test_helpers.h"
#include "test_store_sqlite.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i) (test_store_values.h)
using test::alter_index;
using test::lease_rows;
namespace fs = std::filesystem;

TEST_CASE("a read lease of one owner keeps another owner's eviction away", "[store][cpu]") {
  test::TempDir dir;
  DiskTierOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  DiskTier reader(o), evictor(o);  // two owners, as two processes would be
  REQUIRE(reader.insert(key(1), test::store_test_value(1)).is_ok());
  REQUIRE(evictor.find(key(1)) != nullptr);
  REQUIRE(reader.acquire_read(key(1)));
  Result<bool> held = evictor.evict(key(1));
  REQUIRE(held.is_ok());
  CHECK_FALSE(held.value());
  CHECK(reader.read(key(1)).is_ok());
  reader.release_read(key(1));
  Result<bool> gone = evictor.evict(key(1));
  REQUIRE(gone.is_ok());
  CHECK(gone.value());
  CHECK(reader.refresh(key(1)) == nullptr);
}

TEST_CASE("two reads of one key hold its lease until the second is released", "[store][cpu]") {
  test::TempDir dir;
  DiskTierOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  DiskTier reader(o), evictor(o);
  REQUIRE(reader.insert(key(1), test::store_test_value(1)).is_ok());
  REQUIRE(evictor.find(key(1)) != nullptr);
  REQUIRE(reader.acquire_read(key(1)));  // two threads of one process read the key
  REQUIRE(reader.acquire_read(key(1)));
  reader.release_read(key(1));  // the first is done: the second still reads
  Result<bool> held = evictor.evict(key(1));
  REQUIRE(held.is_ok());
  CHECK_FALSE(held.value());
  reader.release_read(key(1));
  Result<bool> gone = evictor.evict(key(1));
  REQUIRE(gone.is_ok());
  CHECK(gone.value());
}

TEST_CASE("a pin whose lease another process dropped is taken again by the next heartbeat", "[store][cpu]") {
  // A process stalled past its lease (stopped, swapped out, a clock step) finds its pin dropped as expired by
  // another's heartbeat; it used to renew only the leases still there, and the pin was gone for good.
  test::TempDir dir;
  const std::string d = dir.path().string();
  DiskTierOptions o;
  o.dir = d;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.lease_ms = 300;  // a heartbeat every 100 ms
  DiskTier pinner(o), evictor(o);
  REQUIRE(pinner.insert(key(1), test::store_test_value(1)).is_ok());
  REQUIRE(pinner.set_pinned(key(1), true).is_ok());
  REQUIRE(evictor.find(key(1)) != nullptr);
  alter_index(d + "/index.sqlite", "DELETE FROM leases");  // what another heartbeat does to a lapsed lease
  bool leased = false;
  for (int i = 0; i < 100 && !leased; ++i) {  // the next beat, even on a loaded machine (10 s at most)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    leased = lease_rows(d + "/index.sqlite") > 0;
  }
  CHECK(leased);
  Result<bool> held = evictor.evict(key(1));
  REQUIRE(held.is_ok());
  CHECK_FALSE(held.value());
}

TEST_CASE("an index the heartbeat cannot use does not end the process", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  DiskTierOptions o;
  o.dir = d;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.lease_ms = 150;
  {
    DiskTier tier(o);
    REQUIRE(tier.insert(key(1), test::store_test_value(1)).is_ok());
    alter_index(d + "/index.sqlite", "DROP TABLE leases");        // its renewal's statements no longer prepare
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a few beats, each failing
  }                                                               // closed: releasing its leases fails too
  CHECK(fs::exists(d + "/index.sqlite"));
}

}  // namespace ORBIT_TEST_FILE
