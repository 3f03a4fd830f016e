// Putting into a full memory tier: what one put costs as the tier holds more entries.
//
//   bench_evict [--entries 1000,4000,16000,64000] [--puts 4000] [--floats 256] [--policy lru|cost-aware]
//
// For each size N: a host tier with room for exactly N values of --floats float32 is filled, then --puts new
// values go in, each evicting the least worth keeping (a server's store once its --host-budget-mb is
// reached: every new chunk's KV relieves the tier). Prints microseconds per put at each N and the ratio of the
// largest N's to the smallest's: at most 1 when a put's eviction does not grow with what the tier holds.
//
// Measured on the shared 2-core CPU, `OMP_NUM_THREADS=1 bench_evict --entries 1000,4000,16000 --puts 2000`
// (lru), microseconds per put:
//
//   entries                                                    1000    4000    16000
//   every put sorted every entry (before)                       153     997     5642   (36.8x at 16x)
//   a heap, charges kept per entry, exact relief                 91     367     1936   (21.4x)
//   and a margin of 1/64 of the budget from 1024 entries on      69       6        8   (0.12x)
//
// The last row is the store as built (chunk_store.h); 1000 entries are below the margin's threshold.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/store/chunk_store.h"

namespace {

std::string key_of(int64_t i) {
  char b[65];
  std::snprintf(b, sizeof b, "%064llx", static_cast<unsigned long long>(i) * 2654435761ull);
  return b;
}

double micros_per_put(int64_t entries, int64_t puts, int64_t floats, const std::string& policy) {
  orbit::store::ChunkStoreOptions o;
  o.model_fingerprint = std::string(64, 'a');
  o.host_budget_bytes = entries * floats * 4;
  o.host_policy = orbit::store::make_eviction_policy(policy);
  orbit::store::ChunkStore store(o);
  const orbit::store::ValuePtr v =
      orbit::store::make_value(orbit::EntryKind::kOther, {{"x", at::zeros({floats}, at::kFloat)}});
  for (int64_t i = 0; i < entries; ++i) ORBIT_CHECK(store.put(key_of(i), v).is_ok(), "bench_evict: fill failed");
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = entries; i < entries + puts; ++i) {
    ORBIT_CHECK(store.put(key_of(i), v).is_ok(), "bench_evict: put failed");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // At the budget, less what a relief frees beyond a put's need (1/64 of it, chunk_store.h).
  const int64_t held = store.stats().tiers[1].entries;
  ORBIT_CHECK(held <= entries && held >= entries - entries / 64 - 1,
              "bench_evict: the tier holds " << held << " of " << entries << " entries");
  return seconds / static_cast<double>(puts) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const orbit::cli::Args a("bench_evict",
                           {{"--entries", "--puts", "--floats", "--policy"},
                            {},
                            "usage: bench_evict [--entries 1000,4000,16000,64000] [--puts 4000] [--floats 256]\n"
                            "                   [--policy lru|cost-aware]\n"
                            "  Microseconds per put into a full host tier as it holds more entries.\n"},
                           argc, argv, 1);
  const std::vector<int64_t> sizes =
      orbit::cli::parse_int_list(a.get_or("--entries", "1000,4000,16000,64000"), "--entries");
  const int64_t puts = a.get_int("--puts", 4000, 1);
  const int64_t floats = a.get_int("--floats", 256, 1);
  const std::string policy = a.get_or("--policy", "lru");
  std::vector<double> us;
  for (int64_t n : sizes) {
    us.push_back(micros_per_put(n, puts, floats, policy));
    std::printf("entries %7lld: %8.2f us per put into a full host tier (%s)\n", static_cast<long long>(n), us.back(),
                policy.c_str());
  }
  std::printf("largest / smallest: %.2fx the cost per put at %.0fx the entries\n", us.back() / us.front(),
              static_cast<double>(sizes.back()) / static_cast<double>(sizes.front()));
  return 0;
}
