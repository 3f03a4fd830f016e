// The writer of the power-cut test (test_store_powercut.cpp), run on the simulated disk of
// powercut_preload.cpp:
//
//   store_powercut_child DIR FIRST COUNT   puts powercut_value(i) for i in FIRST..FIRST+COUNT-1 and, after
//                                          each put returned ok, prints "i seq" (flushed), seq being the
//                                          simulated disk's sync count then (ORBIT_POWERCUT_SHADOW/SEQ):
//                                          every sync of that put has a number <= seq
//
// Exit status 0 when every put returned ok; 1 (with the status on stderr) when one failed. The power cut
// ends it with SIGKILL.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "orbit/common/error.h"
#include "orbit/store/chunk_store.h"
#include "powercut_values.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: store_powercut_child DIR FIRST COUNT\n");
    return 2;
  }
  const char* shadow = std::getenv("ORBIT_POWERCUT_SHADOW");
  const std::string seq_path = std::string(shadow ? shadow : ".") + "/SEQ";
  try {
    orbit::store::ChunkStoreOptions o;
    o.dir = argv[1];
    o.model_fingerprint = orbit::test::kStoreTestFingerprint;
    o.host_budget_bytes = 1 << 20;
    orbit::store::ChunkStore store(o);
    const long long first = std::atoll(argv[2]), count = std::atoll(argv[3]);
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
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_powercut_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
