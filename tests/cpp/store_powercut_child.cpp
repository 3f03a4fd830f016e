// The writer of the power-cut test (test_store_powercut.cpp), run on the simulated disk of
// powercut_preload.cpp:
//
//   store_powercut_child DIR FIRST COUNT [READS]
//       puts powercut_value(i) for i in FIRST..FIRST+COUNT-1 and, after each put returned ok, prints
//       "i seq" (flushed), seq being the simulated disk's sync count then (ORBIT_POWERCUT_SHADOW/SEQ):
//       every sync of that put has a number <= seq. Then it reads READS keys back (default 0): half its
//       own puts so far, half any key up to i (another writer's, or an earlier round's: those may be
//       absent). The host tier holds nothing (a 1-byte budget), so every read goes to the disk tier and
//       takes a read lease there: the index sees lease commits, and checkpoints, between the puts.
//
// Exit status 0 when every put returned ok and every read of its own put, or any read that found a value,
// returned the right value; 1 (with the reason on stderr) otherwise. The power cut ends it with SIGKILL.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "orbit/common/error.h"
#include "orbit/store/chunk_store.h"
#include "powercut_values.h"

namespace {

// Reads key i back; false (with the reason on stderr) when the value is wrong, or missing though `own`.
bool read_back(orbit::store::ChunkStore& store, long long i, bool own) {
  orbit::Result<orbit::store::ValuePtr> v = store.get(orbit::test::store_test_key(i));
  if (!v) {
    if (!own) return true;  // another writer's put that may not have happened
    std::fprintf(stderr, "get %lld (put by this writer): %s\n", i, v.status().reason().c_str());
    return false;
  }
  if (!orbit::store::values_equal(*v.value(), *orbit::test::powercut_value(i))) {
    std::fprintf(stderr, "get %lld: the value read back differs from the value put\n", i);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: store_powercut_child DIR FIRST COUNT [READS]\n");
    return 2;
  }
  const char* shadow = std::getenv("ORBIT_POWERCUT_SHADOW");
  const std::string seq_path = std::string(shadow ? shadow : ".") + "/SEQ";
  try {
    orbit::store::ChunkStoreOptions o;
    o.dir = argv[1];
    o.model_fingerprint = orbit::test::kStoreTestFingerprint;
    o.host_budget_bytes = 1;
    orbit::store::ChunkStore store(o);
    const long long first = std::atoll(argv[2]), count = std::atoll(argv[3]);
    const long long reads = argc == 5 ? std::atoll(argv[4]) : 0;
    std::mt19937_64 rng(static_cast<uint64_t>(first) * 7919 + 1);
    for (long long i = first; i < first + count; ++i) {
      const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::powercut_value(i));
      if (!s) {
        std::fprintf(stderr, "put %lld: %s\n", i, s.reason().c_str());
        return 1;
      }
      long long seq = 0;
      std::ifstream(seq_path) >> seq;
      std::printf("%lld %lld\n", i, seq);
      std::fflush(stdout);
      for (long long r = 0; r < reads; ++r) {
        const bool own = r % 2 == 0;
        const long long lo = own ? first : 0;
        const long long key = lo + static_cast<long long>(rng() % static_cast<uint64_t>(i - lo + 1));
        if (!read_back(store, key, own)) return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_powercut_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
