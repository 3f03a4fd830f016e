// cuSOLVER truncated SVD (kernels/cuda/svd.cuh) against LAPACK (at::linalg_svd on CPU, float64).
// Singular vectors are unique only up to sign, so the checks are sign-free: singular values, the
// rank-m reconstruction u·vt against LAPACK's, orthonormal rows of vt, uᵀu = diag(σ²), and u = A·vtᵀ
// (which ties each column of u to its row of vt). Wide, tall, square, full-rank and rank-1 shapes;
// rank 0; invalid arguments; a gesvdj that runs out of sweeps; workspace reuse across sizes.
// Then factorize() (reuse.h) on CUDA matrices, which runs this kernel through ops/svd_op.h, against
// factorize() on CPU. Without a CUDA device the binary exits 77 (CTest: skipped).
//
// Tolerances follow float32's backward error: gesvdj works in float32 (unit roundoff u = 2^-24), so
// ‖ΔA‖ ≤ p·u·‖A‖ with p growing with the dimension. The checks use max(1e-5, 8·max(n, D)·u) relative
// to ‖A‖ (to σ₀ for the singular values). Measured on an H100: 1.1e-5 to 3.0e-5 at n, D ≤ 512, under
// that bound; a wrong layout, scaling or sign is an O(1) error.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <cuda_runtime_api.h>

#include "cuda_test_support.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/svd.cuh"
#include "ops/svd_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/reuse.h"

namespace {

namespace kcuda = orbit::kernels::cuda;

using orbit::test::DeviceBuffer;
using orbit::test::Stream;

std::string describe(const kcuda::SvdStatus& s) {
  return std::string(kcuda::svd_code_name(s.code)) + " at '" + s.step + "' (cuda: " + cudaGetErrorString(s.cuda) +
         ", cusolver status " + std::to_string(static_cast<int>(s.cusolver)) + ", info " + std::to_string(s.info) +
         ", sweeps " + std::to_string(s.sweeps) + ")";
}

// A float32 device buffer of `count` values, filled from a CPU tensor or with a sentinel.
class DeviceFloats {
 public:
  explicit DeviceFloats(int64_t count, float fill = -777.0f) : count_(count) {
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), sizeof(float) * static_cast<size_t>(count) + 4));
    const std::vector<float> host(static_cast<size_t>(count), fill);
    if (count > 0) CUDA_REQUIRE(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  explicit DeviceFloats(const at::Tensor& cpu) : DeviceFloats(cpu.numel()) {
    const at::Tensor contiguous = cpu.to(at::kFloat).contiguous();
    if (count_ > 0) CUDA_REQUIRE(cudaMemcpy(ptr_, contiguous.data_ptr<float>(), bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceFloats() { cudaFree(ptr_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return ptr_; }
  // Downloads as a float64 CPU tensor of `shape`.
  at::Tensor download(std::vector<int64_t> shape) const {
    at::Tensor host = at::empty(shape, at::kFloat);
    REQUIRE(host.numel() == count_);
    if (count_ > 0) CUDA_REQUIRE(cudaMemcpy(host.data_ptr<float>(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host.to(at::kDouble);
  }

 private:
  size_t bytes() const { return sizeof(float) * static_cast<size_t>(count_); }
  float* ptr_ = nullptr;
  int64_t count_ = 0;
};

at::Tensor gaussian(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> values(static_cast<size_t>(rows * cols));
  for (double& v : values) v = normal(rng);
  return at::tensor(values, at::kDouble).reshape({rows, cols});
}

// n × D float32 matrix with singular values 10·0.95^j (distinct, gaps everywhere) and random singular
// vectors, as a deficit would look (a decaying spectrum).
at::Tensor test_matrix(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t p = std::min(n, d);
  const at::Tensor left = std::get<0>(at::linalg_qr(gaussian(rng, n, p)));
  const at::Tensor right = std::get<0>(at::linalg_qr(gaussian(rng, d, p)));
  const at::Tensor sigma = 10.0 * at::pow(0.95, at::arange(p, at::kDouble));
  return (left * sigma.unsqueeze(0)).mm(right.t()).to(at::kFloat);
}

double relative(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale) {
  return (a - b).norm().item<double>() / scale.norm().item<double>();
}

}  // namespace

TEST_CASE("cuSOLVER truncated SVD matches LAPACK (sign-free checks)", "[svd][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  kcuda::TruncatedSvd solver;
  struct Shape {
    int64_t n, d, m;
  };
  const Shape shapes[] = {{64, 256, 16}, {300, 128, 32}, {96, 96, 96}, {1, 64, 1},
                          {200, 1, 1},   {130, 512, 64}, {40, 30, 30}, {17, 17, 5}};
  uint32_t seed = 1;
  size_t previous_workspace = 0;
  for (const Shape& shape : shapes) {
    INFO("n=" << shape.n << " D=" << shape.d << " m=" << shape.m);
    const at::Tensor a = test_matrix(shape.n, shape.d, seed++);
    const at::Tensor a64 = a.to(at::kDouble);
    const auto lapack = at::linalg_svd(a64, /*full_matrices=*/false);
    const at::Tensor ref_s = std::get<1>(lapack).narrow(0, 0, shape.m);
    const at::Tensor ref_u = std::get<0>(lapack).narrow(1, 0, shape.m);
    const at::Tensor ref_vt = std::get<2>(lapack).narrow(0, 0, shape.m);
    const at::Tensor ref_product = (ref_u * ref_s.unsqueeze(0)).mm(ref_vt);

    DeviceFloats a_dev(a), u_dev(shape.n * shape.m), vt_dev(shape.m * shape.d), s_dev(shape.m);
    const kcuda::SvdStatus status =
        solver.run(a_dev.get(), {shape.n, shape.d, shape.m}, {u_dev.get(), vt_dev.get(), s_dev.get()}, stream);
    INFO(describe(status));
    REQUIRE(status.ok());
    CHECK(status.info == 0);
    // One row or one column: the matrix is already diagonal after scaling, Jacobi has no pair to rotate.
    if (std::min(shape.n, shape.d) > 1) CHECK(status.sweeps > 0);
    CHECK(solver.workspace_bytes() >= previous_workspace);  // grows, never shrinks
    previous_workspace = solver.workspace_bytes();

    const at::Tensor u = u_dev.download({shape.n, shape.m});
    const at::Tensor vt = vt_dev.download({shape.m, shape.d});
    const at::Tensor s = s_dev.download({shape.m});
    const double sigma0 = ref_s[0].item<double>();
    const double tol = std::max(1e-5, 8.0 * static_cast<double>(std::max(shape.n, shape.d)) * 0x1p-24);  // header
    INFO("singular values: max |gpu - lapack| = " << (s - ref_s).abs().max().item<double>());
    CHECK((s - ref_s).abs().max().item<double>() <= tol * sigma0);
    CHECK((s.narrow(0, 0, shape.m - 1) - s.narrow(0, 1, shape.m - 1) >= 0).all().item<bool>());  // descending

    const double reconstruction = relative(u.mm(vt), ref_product, a64);
    INFO("‖u·vt − LAPACK rank-m‖ / ‖A‖ = " << reconstruction);
    CHECK(reconstruction <= tol);
    if (shape.m == std::min(shape.n, shape.d)) CHECK(relative(u.mm(vt), a64, a64) <= tol);  // full rank: A itself
    CHECK((vt.mm(vt.t()) - at::eye(shape.m, at::kDouble)).abs().max().item<double>() <= 5e-5);
    CHECK((u.t().mm(u) - at::diag(s * s)).abs().max().item<double>() <= 5e-5 * sigma0 * sigma0);
    CHECK(relative(u, a64.mm(vt.t()), a64) <= tol);  // u_j = A·v_j: signs of u and vt agree
    // The input is read only.
    CHECK(at::equal(a_dev.download({shape.n, shape.d}), a64));
  }
  CUDA_REQUIRE(cudaStreamDestroy(stream));
}

TEST_CASE("cuSOLVER truncated SVD: rank 0, invalid arguments, sweep limit", "[svd][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  const at::Tensor a = test_matrix(100, 200, 3);
  DeviceFloats a_dev(a), u_dev(100 * 100), vt_dev(100 * 200);
  kcuda::TruncatedSvd solver;

  // Rank 0: nothing to do, nothing written, no workspace taken.
  kcuda::SvdStatus status = solver.run(a_dev.get(), {100, 200, 0}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  CHECK(status.ok());
  CHECK(solver.workspace_bytes() == 0);
  CHECK((u_dev.download({100, 100}) == -777.0).all().item<bool>());

  status = solver.run(a_dev.get(), {100, 200, 101}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  CHECK(status.code == kcuda::SvdCode::kInvalidValue);
  CHECK(std::string(status.step).find("rank") != std::string::npos);
  status = solver.run(a_dev.get(), {-1, 200, 0}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  CHECK(status.code == kcuda::SvdCode::kInvalidValue);
  status = solver.run(a_dev.get(), {100, 200, 4}, {nullptr, vt_dev.get(), nullptr}, stream);
  CHECK(status.code == kcuda::SvdCode::kInvalidValue);
  status = solver.run(nullptr, {100, 200, 4}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  CHECK(status.code == kcuda::SvdCode::kInvalidValue);
  status = solver.run(a_dev.get(), {1 << 16, 1 << 16, 1}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  CHECK(status.code == kcuda::SvdCode::kInvalidValue);  // 2^32 elements: beyond the 32-bit API

  // s is optional.
  status = solver.run(a_dev.get(), {100, 200, 8}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  INFO(describe(status));
  CHECK(status.ok());

  // One Jacobi sweep cannot diagonalise a dense 200 × 100 matrix to float precision.
  kcuda::SvdOptions one_sweep;
  one_sweep.max_sweeps = 1;
  kcuda::TruncatedSvd limited(one_sweep);
  status = limited.run(a_dev.get(), {100, 200, 8}, {u_dev.get(), vt_dev.get(), nullptr}, stream);
  INFO(describe(status));
  CHECK(status.code == kcuda::SvdCode::kNotConverged);
  CHECK(status.info > 0);
  CHECK(status.sweeps == 1);
  CUDA_REQUIRE(cudaStreamDestroy(stream));
}

// ---- factorize() on CUDA matrices (reuse.h), through ops/svd_op.h ----------------------------------
//
// The exact method runs the kernel above; compared with factorize() on the same matrix on CPU (LAPACK,
// float64) with the same sign-free checks and float32 tolerance. Also rank 0, NaN refusal and the
// randomized method (torch's own device SVD) on CUDA. Needs a libtorch with CUDA as well as a device.

namespace {

namespace rt = orbit::runtime;

// n × D deficit-like matrix: a decaying spectrum (10·0.9^j) plus a little noise, float32.
at::Tensor deficit_like(int64_t n, int64_t d, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t p = std::min(n, d);
  const at::Tensor left = std::get<0>(at::linalg_qr(at::randn({n, p}, at::kDouble)));
  const at::Tensor right = std::get<0>(at::linalg_qr(at::randn({d, p}, at::kDouble)));
  const at::Tensor sigma = 10.0 * at::pow(0.9, at::arange(p, at::kDouble));
  return ((left * sigma.unsqueeze(0)).mm(right.t()) + 1e-3 * at::randn({n, d}, at::kDouble)).to(at::kFloat);
}

bool have_torch_cuda() {
  if (!orbit::test::have_cuda_device()) return false;
  return at::hasCUDA();
}

}  // namespace

TEST_CASE("factorize on CUDA (cuSOLVER) matches factorize on CPU (LAPACK)", "[reuse][svd][gpu]") {
  if (!have_torch_cuda()) {
    WARN("skipped: no CUDA device or this libtorch has no CUDA");
    return;
  }
  CHECK(orbit::runtime::ops::have_cuda_svd());
  const at::Device device(at::kCUDA, 0);
  struct Shape {
    int64_t n, d, m;
  };
  const Shape shapes[] = {{256, 128, 16}, {1024, 128, 64}, {64, 512, 32}, {33, 64, 33}, {2048, 576, 16}};
  uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    INFO("n=" << shape.n << " D=" << shape.d << " m=" << shape.m);
    const at::Tensor a = deficit_like(shape.n, shape.d, seed++);
    const at::Tensor a64 = a.to(at::kDouble);
    rt::PatchOptions options;
    const rt::LowRank cpu = rt::factorize(a, shape.m, options, "cpu");
    const rt::LowRank gpu = rt::factorize(a.to(device), shape.m, options, "gpu");
    REQUIRE(gpu.u.defined());
    CHECK(gpu.u.device() == device);
    CHECK(gpu.vt.device() == device);
    CHECK(gpu.u.scalar_type() == at::kFloat);
    CHECK(gpu.vt.scalar_type() == at::kFloat);
    REQUIRE(gpu.u.sizes() == cpu.u.sizes());
    REQUIRE(gpu.vt.sizes() == cpu.vt.sizes());

    const at::Tensor u = gpu.u.cpu().to(at::kDouble), vt = gpu.vt.cpu().to(at::kDouble);
    const at::Tensor ref = cpu.u.to(at::kDouble).mm(cpu.vt.to(at::kDouble));
    const double tol = std::max(1e-5, 8.0 * static_cast<double>(std::max(shape.n, shape.d)) * 0x1p-24);
    const double product = relative(u.mm(vt), ref, a64);
    INFO("‖u·vt (CUDA) − u·vt (CPU)‖ / ‖A‖ = " << product);
    CHECK(product <= tol);
    // Orthonormality drifts with the dimension as well (2.9e-4 measured on an H100 at n=2048, D=576).
    CHECK((vt.mm(vt.t()) - at::eye(shape.m, at::kDouble)).abs().max().item<double>() <= std::max(5e-5, tol));
    CHECK(relative(u, a64.mm(vt.t()), a64) <= tol);  // u_j = A·v_j: signs of u and vt agree
  }
}

TEST_CASE("factorize on CUDA: rank 0, NaN refusal, randomized method", "[reuse][svd][gpu]") {
  if (!have_torch_cuda()) {
    WARN("skipped: no CUDA device or this libtorch has no CUDA");
    return;
  }
  const at::Device device(at::kCUDA, 0);
  const at::Tensor a = deficit_like(300, 128, 7);
  rt::PatchOptions options;
  CHECK(rt::factorize(a.to(device), 0, options, "rank0").rank() == 0);
  at::Tensor bad = a.clone();
  bad[3][4] = NAN;
  CHECK_THROWS_AS(rt::factorize(bad.to(device), 4, options, "nan"), orbit::Error);
  CHECK_THROWS_AS(rt::factorize(a.to(device), 129, options, "too high"), orbit::Error);

  options.method = rt::SvdMethod::kRandomized;
  const rt::LowRank randomized = rt::factorize(a.to(device), 16, options, "randomized");
  options.method = rt::SvdMethod::kExact;
  const rt::LowRank exact = rt::factorize(a, 16, options, "exact");
  const at::Tensor a64 = a.to(at::kDouble);
  const double best = relative(exact.u.to(at::kDouble).mm(exact.vt.to(at::kDouble)), a64, a64);
  const double got = relative(randomized.u.cpu().to(at::kDouble).mm(randomized.vt.cpu().to(at::kDouble)), a64, a64);
  INFO("rank-16 error: exact " << best << ", randomized on CUDA " << got);
  CHECK(randomized.u.device() == device);
  CHECK(got >= best * (1.0 - 1e-4));  // never better than exact, up to rounding
  CHECK(got <= best * 1.1);
}
