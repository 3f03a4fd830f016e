// Shared support for the gpu-labelled tests: device detection with a clean skip, a REQUIRE for CUDA
// calls, and RAII device buffers and streams for driving raw-pointer kernels (kernels/cuda/*.cuh).
// Include after "orbit_catch.h".
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace orbit::test {

// True when a CUDA device is usable; clears the sticky error a missing driver or device leaves.
inline bool have_cuda_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

// Exit status that tells CTest the test was skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipReturnCode = 77;

}  // namespace orbit::test

// Without a device, ends the whole test binary with kSkipReturnCode, so CTest reports it skipped, never
// passed (every case in a gpu binary needs the device).
#define ORBIT_SKIP_WITHOUT_CUDA()                        \
  do {                                                   \
    if (!::orbit::test::have_cuda_device()) {            \
      std::fprintf(stderr, "skipped: no CUDA device\n"); \
      std::exit(::orbit::test::kSkipReturnCode);         \
    }                                                    \
  } while (false)

#define CUDA_REQUIRE(call)                    \
  do {                                        \
    const cudaError_t orbit_status_ = (call); \
    INFO(cudaGetErrorString(orbit_status_));  \
    REQUIRE(orbit_status_ == cudaSuccess);    \
  } while (false)

namespace orbit::test {

// A device copy of a host vector; download() copies it back.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes() + 1));  // +1: valid even when empty
    if (size_ > 0) CUDA_REQUIRE(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_ > 0) CUDA_REQUIRE(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

class Stream {
 public:
  Stream() { CUDA_REQUIRE(cudaStreamCreate(&stream_)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace orbit::test
