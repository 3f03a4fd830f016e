// keep_freed_host_memory (runtime/src/host_memory.h): once a model is made on the CPU, the host memory a
// forward frees stays mapped, so the next forward's tensors reuse pages instead of faulting fresh ones in.
// Counted in minor page faults (getrusage), which the kernel counts exactly; no timing. Skipped where the C
// library is not glibc or the environment already sets malloc's thresholds (then the runtime leaves them).
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "orbit/runtime/loader.h"
#include "src/host_memory.h"
#include "test_helpers.h"

const char* orbit_test_skip_reason() {
#if !defined(__GLIBC__)
  return "the C library is not glibc: the runtime sets no malloc thresholds";
#else
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TOP_PAD_") != nullptr || std::getenv("MALLOC_MMAP_MAX_") != nullptr) {
    return "the environment sets malloc's thresholds, which the runtime then leaves as they are";
  }
  return nullptr;
#endif
}

namespace {

using namespace orbit::runtime;

long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

}  // namespace

TEST_CASE("host memory: a CPU forward over hundreds of rows faults its tensors in once, not every time") {
  const auto m = load_model(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k");
  // 480 rows: the MLP's products are 0.7 MB each, above glibc's starting mmap threshold (128 KiB); a forward
  // allocates and frees about 8 MB per layer.
  ForwardInput in;
  for (int64_t i = 0; i < 480; ++i) in.tokens.push_back(3 + (i * 7) % 2000);
  ForwardOptions o;
  o.logits = LogitsMode::kLast;
  const long before = minor_faults();
  (void)m->forward(in, nullptr, o);
  const long first = minor_faults() - before;
  (void)m->forward(in, nullptr, o);
  const long again = minor_faults();
  (void)m->forward(in, nullptr, o);
  const long third = minor_faults() - again;
  INFO("page faults: first forward " << first << ", third " << third);
  // glibc's own thresholds would give the heap's top back after each forward and fault it in again: about
  // as many faults the third time as the first (1,386 a forward at 500 rows, measured).
  CHECK(third * 4 < first);
  CHECK(orbit::runtime::detail::keep_freed_host_memory());  // set by the model (called after: it would set them)
}
