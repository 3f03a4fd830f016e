// keep_freed_host_memory (host_memory.h): glibc's malloc thresholds, fixed once per process.
#include "host_memory.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace orbit::runtime::detail {

namespace {

#if defined(__GLIBC__)
// glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (4 MiB · sizeof(long)): the highest value its sliding mmap
// threshold reaches by itself, and the highest mallopt accepts.
constexpr int kMmapThreshold = 32 << 20;
// Twice the mmap threshold, as glibc sets the trim threshold whenever it raises the other.
constexpr int kTrimThreshold = 64 << 20;

// Whether the environment already chose malloc's thresholds, which glibc read at start-up.
bool malloc_set_by_environment() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return true;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}
#endif

}  // namespace

bool keep_freed_host_memory() {
#if defined(__GLIBC__)
  // mallopt's M_MMAP_THRESHOLD also ends the sliding threshold: both values then hold for the process.
  static const bool set = !malloc_set_by_environment() && mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
                          mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  return set;
#else
  return false;
#endif
}

}  // namespace orbit::runtime::detail
