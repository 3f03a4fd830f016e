// The one Catch2 main (and Catch's implementation) shared by every test executable. An executable that
// must not run in some environments links a definition of orbit_test_skip_reason() (catch_main_gpu.cpp:
// the gpu-labelled tests without a CUDA device); when it returns a reason, main prints it and exits with
// kSkipReturnCode, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

// Weak: null in the executables that link no definition.
const char* orbit_test_skip_reason() __attribute__((weak));

namespace {
constexpr int kSkipReturnCode = 77;
}

int main(int argc, char** argv) {
  if (orbit_test_skip_reason != nullptr) {
    if (const char* reason = orbit_test_skip_reason()) {
      std::printf("skipped: %s\n", reason);
      return kSkipReturnCode;
    }
  }
  return Catch::Session().run(argc, argv);
}
