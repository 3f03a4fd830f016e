// The Catch2 main of the gpu-labelled tests: without a usable CUDA device (a CPU-only libtorch, no
// driver, no GPU) the executable prints why and exits with kSkipReturnCode, which CTest reports as
// skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "orbit/runtime/device.h"

namespace {
constexpr int kSkipReturnCode = 77;
}

int main(int argc, char** argv) {
  if (orbit::runtime::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device visible to libtorch in this process\n");
    return kSkipReturnCode;
  }
  return Catch::Session().run(argc, argv);
}
