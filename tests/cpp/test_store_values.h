// Deterministic store values shared by the store tests and their child process (store_kill_child.cpp):
// value i is a pure function of i, so a parent can check what a killed child committed.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/runtime/reuse.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/value.h"

namespace orbit::test {

inline const std::string kStoreTestFingerprint = "store-test-model-fingerprint";

inline std::string store_test_key(int64_t i) { return chunk_key_tokens(kStoreTestFingerprint, {i, 7, 11}); }

// Whether two canonicals hold the same K and V, bit for bit, layer by layer.
inline bool content_equal(const runtime::Content& a, const runtime::Content& b) {
  if (a.size() != b.size()) return false;
  for (size_t l = 0; l < a.size(); ++l) {
    if (!at::equal(a[l].k, b[l].k) || !at::equal(a[l].v, b[l].v)) return false;
  }
  return true;
}

// Two tensors, 1 to 200 rows of 64 floats; every 5th value is larger (~1 MiB) so that kills often land
// in the middle of a blob write.
inline store::ValuePtr store_test_value(int64_t i) {
  const int64_t rows = i % 5 == 0 ? 4096 : 1 + (i * 7919) % 200;
  const at::Tensor k = at::arange(rows * 64, at::kFloat).mul(0.001).add(static_cast<double>(i)).reshape({rows, 4, 16});
  const at::Tensor v = at::full({rows, 4, 16}, static_cast<double>(-i), at::kFloat);
  return store::make_value(EntryKind::kCanonical, {{"layer.0.k", k}, {"layer.0.v", v}}, {{"index", std::to_string(i)}});
}

// A disk tier on `dir` with a 4 MiB host tier: the disk store of the store tests (test_store.cpp,
// test_store_shared.cpp, test_store_faults.cpp, test_store_crashes.cpp, test_store_index_damage.cpp) and of
// test_store_checks.h. A test that needs another budget sets it on the copy it gets.
inline store::ChunkStoreOptions disk_options(const std::string& dir) {
  store::ChunkStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = kStoreTestFingerprint;
  o.host_budget_bytes = 4 << 20;
  return o;
}

// The short names of the store tests' files, taken with `using namespace test::store_test_names;`: key(i) for
// store_test_key(i), and disk_options(dir).
namespace store_test_names {
inline std::string key(int64_t i) { return store_test_key(i); }
using orbit::test::content_equal;
using orbit::test::disk_options;
}  // namespace store_test_names

// A store with a remote tier at `url` (and a disk tier when `dir` is not empty), with short timeouts and
// parts of 64 KiB, so values of a few hundred KiB span several parts.
inline store::ChunkStoreOptions remote_store_options(const std::string& url, const std::string& dir = "") {
  store::ChunkStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = kStoreTestFingerprint;
  o.remote.url = url;
  o.remote.part_bytes = 64 << 10;
  o.remote.connect_timeout_ms = 200;
  o.remote.command_timeout_ms = 500;
  o.remote.retry_after_ms = 100;
  o.remote.warn = false;
  return o;
}

}  // namespace orbit::test
