// bench_rope: the CPU cost of RoPE (runtime/rope.h) against a copy of the same bytes, side by side in one run.
//
// Per layout (half-split, interleaved), on x = [tokens, heads, dim] float32 at positions 0..tokens-1:
//   rope_angles    the angle table for the positions
//   rope_rotate    x rotated (float32, and bfloat16 rotated in float32 and rounded on store)
//   tables         the cos/sin tables alone (what rotate computes before it turns the pairs)
//   copy           x.clone(): the floor any pass over x pays
// Each is the mean of --reps calls after one warm-up; rotate / copy is the ratio that does not depend on the
// machine's speed. Not a test: absolute numbers depend on the machine and its load.
//
//   bench_rope [--tokens 2048] [--heads 14] [--dim 64] [--reps 50] [--threads N (default: ATen's own)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"

namespace {

using orbit::runtime::RopeConfig;
using orbit::runtime::RopeLayout;

template <typename Fn>
double time_ms(int64_t reps, Fn&& fn) {
  fn();  // warm up
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(reps);
}

void run(int64_t tokens, int64_t heads, int64_t dim, int64_t reps) {
  RopeConfig c;
  c.head_dim = c.rotary_dim = dim;
  c.theta = 1e4;
  const at::Tensor positions = at::arange(tokens, at::kLong);
  const at::Tensor x = at::randn({tokens, heads, dim});
  const at::Tensor xb = x.to(at::kBFloat16);
  std::printf("%lld tokens x %lld heads x %lld dims, %d threads, mean of %lld calls\n", static_cast<long long>(tokens),
              static_cast<long long>(heads), static_cast<long long>(dim), at::get_num_threads(),
              static_cast<long long>(reps));
  std::printf("%-12s %12s %12s %12s %12s %12s %10s\n", "layout", "angles ms", "rotate ms", "bf16 ms", "tables ms",
              "copy ms", "rotate/copy");
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
    c.layout = layout;
    const at::Tensor angles = orbit::runtime::rope_angles(c, positions);
    const double angles_ms = time_ms(reps, [&] { (void)orbit::runtime::rope_angles(c, positions); });
    const double rotate_ms = time_ms(reps, [&] { (void)orbit::runtime::rope_rotate(c, x, angles); });
    const double bf16_ms = time_ms(reps, [&] { (void)orbit::runtime::rope_rotate(c, xb, angles); });
    const double tables_ms = time_ms(reps, [&] {
      (void)at::cos(angles).to(at::kFloat);
      (void)at::sin(angles).to(at::kFloat);
    });
    const double copy_ms = time_ms(reps, [&] { (void)x.clone(); });
    std::printf("%-12s %12.3f %12.3f %12.3f %12.3f %12.3f %10.2f\n", orbit::runtime::rope_layout_name(layout),
                angles_ms, rotate_ms, bf16_ms, tables_ms, copy_ms, rotate_ms / copy_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  orbit::cli::ArgSpec spec;
  spec.options = {"--tokens", "--heads", "--dim", "--reps", "--threads"};
  spec.usage =
      "bench_rope [--tokens 2048] [--heads 14] [--dim 64] [--reps 50] [--threads N]\n"
      "  RoPE angles and rotation on CPU against a copy of the same bytes, per layout";
  try {
    const orbit::cli::Args args("bench_rope", spec, argc, argv, 1);
    const int64_t threads = args.get_int("--threads", 0, 0);
    if (threads > 0) at::set_num_threads(static_cast<int>(threads));
    const int64_t dim = args.get_int("--dim", 64, 2);
    ORBIT_CHECK(dim % 2 == 0, "bench_rope: --dim = " << dim << " must be even (RoPE turns pairs)");
    run(args.get_int("--tokens", 2048, 1), args.get_int("--heads", 14, 1), dim, args.get_int("--reps", 50, 1));
  } catch (const orbit::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
