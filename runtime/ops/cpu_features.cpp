// avx2_kernels_run (ops/cpu_features.h).
#include "ops/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace orbit::runtime::ops {

bool avx2_kernels_run() {
#if defined(ORBIT_CPU_AVX2_KERNELS)
  static const bool runs = [] {
    const char* choice = std::getenv("ORBIT_CPU_KERNELS");
    if (choice != nullptr && std::strcmp(choice, "portable") == 0) return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return runs;
#else
  return false;
#endif
}

}  // namespace orbit::runtime::ops
