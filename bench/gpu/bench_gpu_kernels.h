// bench_gpu's kernel section (e): relocation + patch apply into pool pages and the paged attention kernels
// alone, each against device-to-device copy bandwidth. See bench_gpu.cpp's header.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "orbit/runtime/model.h"

namespace orbit::bench_gpu {

struct KernelBench {
  const orbit::runtime::Model& m;
  c10::Device dev;
  int reps = 10;
  int64_t rank = 16;  // patch rank
  int64_t max_w = 0;  // paged tokens the attention kernels read
};

// Times the kernels and prints a line per measurement; the figures as bench_gpu's "relocation" object.
nlohmann::json kernels_section(const KernelBench& s);

}  // namespace orbit::bench_gpu
