// Whether the ops can dispatch to orbit's CUDA kernels: ORBIT_OPS_HAVE_CUDA is 1 when orbit's kernels are
// built (ORBIT_WITH_CUDA) and the libtorch in use is built with CUDA, and then c10's CUDA stream and device
// guard are included. Header presence alone is not enough: Debian's CPU-only libtorch ships c10/cuda/*.h but
// neither libc10_cuda nor the generated cuda_cmake_macros.h that every CUDA build of libtorch installs.
// Each op includes its kernel header (kernels/cuda/*.cuh, raw pointers, no torch) under #if ORBIT_OPS_HAVE_CUDA.
#pragma once

#if defined(ORBIT_WITH_CUDA) && __has_include(<c10/cuda/CUDAStream.h>) && \
    __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#define ORBIT_OPS_HAVE_CUDA 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define ORBIT_OPS_HAVE_CUDA 0
#endif
