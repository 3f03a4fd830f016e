// Linked into the gpu-labelled tests next to catch_main.cpp: without a usable CUDA device (a CPU-only
// libtorch, no driver, no GPU) the executable says why and exits as skipped.
#include "orbit/runtime/device.h"

const char* orbit_test_skip_reason() {
  return orbit::runtime::cuda_device_count() == 0 ? "no CUDA device visible to libtorch in this process" : nullptr;
}
