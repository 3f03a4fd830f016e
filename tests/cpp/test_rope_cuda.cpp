// RoPE CUDA kernel (kernels/cuda/rope.cuh) against the CPU reference (kernels/cpu/rope.h).
// Raw cudaMalloc buffers and an explicit stream, as the kernel tier is used; no torch. Without a CUDA
// device the binary exits 77 and CTest reports it skipped.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include "cuda_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/rope.cuh"

namespace {

using orbit::test::DeviceBuffer;
using orbit::test::Stream;

struct Case {
  int64_t tokens, heads, head_dim, rotary_dim;
  bool interleaved;
};

std::string describe(const Case& c, const char* dtype) {
  return std::string(dtype) + (c.interleaved ? " interleaved" : " half-split") + " T=" + std::to_string(c.tokens) +
         " H=" + std::to_string(c.heads) + " rotary_dim=" + std::to_string(c.rotary_dim) + "/" +
         std::to_string(c.head_dim);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool interleaved : {true, false}) {
    for (int64_t head_dim : {64, 128, 80}) {
      for (int64_t rotary_dim : {head_dim, head_dim / 2, head_dim / 4}) {
        out.push_back({37, 5, head_dim, rotary_dim, interleaved});
      }
    }
  }
  out.push_back({1, 1, 6, 2, false});      // tiny row: fewer items than lanes
  out.push_back({2049, 3, 64, 64, true});  // many rows: several blocks
  return out;
}

// Random x in N(0, 1) and cos/sin of angles up to 2e5 rad, evaluated in double, rounded to float.
struct Inputs {
  std::vector<float> x, cos, sin;
};

Inputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> angle(0.0, 2e5);
  Inputs in;
  in.x.resize(static_cast<size_t>(c.tokens * c.heads * c.head_dim));
  for (float& v : in.x) v = normal(rng);
  const size_t table = static_cast<size_t>(c.tokens * c.rotary_dim / 2);
  in.cos.resize(table);
  in.sin.resize(table);
  for (size_t i = 0; i < table; ++i) {
    const double a = angle(rng);
    in.cos[i] = static_cast<float>(std::cos(a));
    in.sin[i] = static_cast<float>(std::sin(a));
  }
  return in;
}

// One RopeDims serves both kernels (kernels/rope_dims.h).
orbit::kernels::RopeDims dims_of(const Case& c) {
  orbit::kernels::RopeDims d;
  d.tokens = c.tokens;
  d.heads = c.heads;
  d.head_dim = c.head_dim;
  d.rotary_dim = c.rotary_dim;
  d.interleaved = c.interleaved;
  return d;
}

bool is_rotary_dim(const Case& c, size_t index) {
  return static_cast<int64_t>(index % static_cast<size_t>(c.head_dim)) < c.rotary_dim;
}

}  // namespace

TEST_CASE("CUDA RoPE float32 matches the CPU reference", "[rope][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  Stream stream;
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    INFO(describe(c, "float32"));
    const Inputs in = make_inputs(c, seed++);
    std::vector<float> expected(in.x.size());
    orbit::kernels::cpu::rope_rotate<float, float>(in.x.data(), expected.data(), in.cos.data(), in.sin.data(),
                                                   dims_of(c));
    DeviceBuffer<float> x(in.x), cos(in.cos), sin(in.sin), out(std::vector<float>(in.x.size(), NAN));
    CUDA_REQUIRE(
        orbit::kernels::cuda::rope_rotate<float>(x.get(), out.get(), cos.get(), sin.get(), dims_of(c), stream.get()));
    // In place on a second copy of x.
    CUDA_REQUIRE(
        orbit::kernels::cuda::rope_rotate<float>(x.get(), x.get(), cos.get(), sin.get(), dims_of(c), stream.get()));
    CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    const std::vector<float> got = out.download(), got_in_place = x.download();
    double worst = 0.0;
    size_t pass_mismatch = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expected[i])));
      worst = std::max(worst, static_cast<double>(std::fabs(got_in_place[i] - expected[i])));
      if (!is_rotary_dim(c, i) && (got[i] != in.x[i] || got_in_place[i] != in.x[i])) ++pass_mismatch;
    }
    CHECK(worst < 1e-5);  // same float formula; only FMA contraction may differ
    CHECK(pass_mismatch == 0);
  }
}

TEST_CASE("CUDA RoPE bfloat16 matches the CPU reference within bf16 rounding", "[rope][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  Stream stream;
  uint32_t seed = 100;
  for (const Case& c : cases()) {
    INFO(describe(c, "bfloat16"));
    Inputs in = make_inputs(c, seed++);
    std::vector<__nv_bfloat16> x_bf16(in.x.size());
    for (size_t i = 0; i < in.x.size(); ++i) {
      x_bf16[i] = __float2bfloat16(in.x[i]);
      in.x[i] = __bfloat162float(x_bf16[i]);  // the reference sees exactly the bf16 inputs
    }
    std::vector<float> expected(in.x.size());
    orbit::kernels::cpu::rope_rotate<float, float>(in.x.data(), expected.data(), in.cos.data(), in.sin.data(),
                                                   dims_of(c));
    DeviceBuffer<__nv_bfloat16> x(x_bf16), out(std::vector<__nv_bfloat16>(x_bf16.size(), __float2bfloat16(NAN)));
    DeviceBuffer<float> cos(in.cos), sin(in.sin);
    CUDA_REQUIRE(orbit::kernels::cuda::rope_rotate<__nv_bfloat16>(x.get(), out.get(), cos.get(), sin.get(), dims_of(c),
                                                                  stream.get()));
    CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    const std::vector<__nv_bfloat16> got = out.download();
    size_t bad = 0, pass_mismatch = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const float g = __bfloat162float(got[i]);
      // One rounding to bf16 (8 significant bits): at most 2^-8 relative, doubled for FMA-induced ties.
      if (!(std::fabs(g - expected[i]) <= std::fabs(expected[i]) / 128.0f + 1e-6f)) ++bad;
      if (!is_rotary_dim(c, i) && g != in.x[i]) ++pass_mismatch;
    }
    CHECK(bad == 0);
    CHECK(pass_mismatch == 0);
  }
}

TEST_CASE("CUDA RoPE launcher: empty input and invalid dims", "[rope][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  Stream stream;
  DeviceBuffer<float> buffer(std::vector<float>(64, 1.0f));
  Case empty{0, 4, 64, 64, false};
  CHECK(orbit::kernels::cuda::rope_rotate<float>(buffer.get(), buffer.get(), buffer.get(), buffer.get(), dims_of(empty),
                                                 stream.get()) == cudaSuccess);
  Case odd{1, 1, 64, 63, false};
  CHECK(orbit::kernels::cuda::rope_rotate<float>(buffer.get(), buffer.get(), buffer.get(), buffer.get(), dims_of(odd),
                                                 stream.get()) == cudaErrorInvalidValue);
  Case too_wide{1, 1, 32, 64, true};
  CHECK(orbit::kernels::cuda::rope_rotate<float>(buffer.get(), buffer.get(), buffer.get(), buffer.get(),
                                                 dims_of(too_wide), stream.get()) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
  CHECK(buffer.download() == std::vector<float>(64, 1.0f));
}
