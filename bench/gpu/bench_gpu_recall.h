// bench_gpu's recall section (f): see bench_gpu.cpp's header. Defined where the ops have CUDA
// (ORBIT_OPS_HAVE_CUDA); the model must be on a CUDA device.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/runtime/model.h"

namespace orbit::bench_gpu {

// Times re-prefill of a 2,048-token chunk + `query` against recalling the chunk's K/V from pinned host
// memory and from a file under `scratch` (dropped from the page cache before each run), each sequential
// and streamed; prints one line and returns the figures.
nlohmann::json recall_section(const orbit::runtime::Model& m, const std::vector<int64_t>& query, int reps,
                              const std::string& scratch);

}  // namespace orbit::bench_gpu
