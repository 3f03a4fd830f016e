// Small helpers shared by the benchmarks: list parsing, wall time, and the cached generated model.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"

namespace orbit::bench {

// "256,512" -> {256, 512}; every item a positive integer, else orbit::Error naming `what`.
inline std::vector<int64_t> parse_positive_list(const std::string& text, const char* what) {
  std::vector<int64_t> out;
  for (const std::string& item : orbit::cli::split_commas(text)) {
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    ORBIT_CHECK(!item.empty() && *end == '\0' && value > 0, what << ": '" << item << "' is not a positive integer");
    out.push_back(value);
  }
  return out;
}

// `model` when given; otherwise <cache>/<preset>, generated once (random weights, bf16 on disk).
inline std::string model_path_or_generate(const std::string& model, const std::string& cache,
                                          const std::string& preset) {
  if (!model.empty()) return model;
  const std::string path = (std::filesystem::path(cache) / preset).string();
  if (!std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    std::fprintf(stderr, "generating a random %s model in %s (bf16 on disk, once)...\n", preset.c_str(), path.c_str());
    runtime::GeneratorOptions g;
    g.config = runtime::generator_preset(preset);
    g.dtype = "bfloat16";
    g.overwrite = true;
    runtime::generate_model(g, path);
  }
  return path;
}

}  // namespace orbit::bench
