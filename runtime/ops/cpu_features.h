// Which CPU kernels this process runs: the AVX2/FMA ones (kernels/cpu/*_avx2.cpp) where this build has them
// (x86-64, GCC or Clang) and the CPU has both instruction sets, unless ORBIT_CPU_KERNELS=portable is set in
// the environment (read once per process), which keeps the portable kernels and ATen's ops everywhere (the
// one-pass RMSNorm of a few rows, attention.cpp, goes with them).
#pragma once

namespace orbit::runtime::ops {

bool avx2_kernels_run();

}  // namespace orbit::runtime::ops
