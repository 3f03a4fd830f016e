// Set-up and checks the disk-store tests share (test_store_shared.cpp, test_store_faults.cpp,
// test_store_crashes.cpp): writing the deterministic entries of test_store_values.h into a store directory,
// and reading them back after a crash or a repair. Apart from test_store_values.h because these use Catch's
// assertions, and that header is also compiled into the store's child processes, which have no Catch.
#pragma once

#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/value.h"
#include "test_store_values.h"

namespace orbit::test {

// Opens a store on `dir` (disk_options), puts entries 1 to `count` (store_test_value(i) under
// store_test_key(i)) with `put`, REQUIREs each put, and closes the store.
inline void write_entries(const std::string& dir, int64_t count, const store::PutOptions& put = {}) {
  store::ChunkStore store(disk_options(dir));
  for (int64_t i = 1; i <= count; ++i) REQUIRE(store.put(store_test_key(i), store_test_value(i), put).is_ok());
}

// What a reopening after a crash or a repair must find: opens a store on `dir` (disk_options), verifies
// its index deeply (verify_integrity throws on a broken invariant), REQUIREs that every entry of `ids`
// reads and CHECKs it equals store_test_value(i); then, with the store still open, runs verify_store on
// `dir` and CHECKs that it is clean. Returns that report for the caller's own checks of its counts.
inline VerifyReport reopen_and_verify(const std::string& dir, const std::vector<int64_t>& ids) {
  store::ChunkStore store(disk_options(dir));
  store.verify_integrity(/*deep=*/true);
  for (int64_t i : ids) {
    INFO("entry " << i);
    Result<store::ValuePtr> v = store.get(store_test_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *store_test_value(i)));
  }
  VerifyReport report = verify_store(dir);
  CHECK(report.clean());
  return report;
}

}  // namespace orbit::test
