#include "orbit/runtime/device.h"

#include <torch/cuda.h>

#include <cctype>
#include <string>

#include "orbit/common/error.h"

namespace orbit::runtime {

namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

int cuda_device_count() noexcept {
  try {
    return static_cast<int>(torch::cuda::device_count());
  } catch (...) {
    return 0;
  }
}

c10::Device parse_device(const std::string& device, const std::string& what) {
  const std::string d = lower(device);
  if (d.empty() || d == "cpu") return c10::Device(c10::kCPU);
  int index = -1;
  if (d == "cuda") {
    index = 0;
  } else if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 8) {
    index = 0;
    for (std::size_t i = 5; i < d.size(); ++i) {
      ORBIT_CHECK(std::isdigit(static_cast<unsigned char>(d[i])),
                  what << ": '" << device << "' is not a device (expected cpu, cuda or cuda:N)");
      index = index * 10 + (d[i] - '0');
    }
  } else {
    ORBIT_FAIL(what << ": '" << device << "' is not a device (expected cpu, cuda or cuda:N)");
  }
  const int count = cuda_device_count();
  ORBIT_CHECK(count > 0, what << ": '" << device
                              << "' asked for, but this process has no CUDA device (the libtorch in use has no "
                                 "CUDA support, or no GPU and driver are visible); use device 'cpu'");
  ORBIT_CHECK(index < count, what << ": '" << device << "' asked for, but only " << count << " CUDA device"
                                  << (count == 1 ? " is" : "s are") << " visible (cuda:0"
                                  << (count > 1 ? " .. cuda:" + std::to_string(count - 1) : std::string()) << ")");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

c10::ScalarType parse_compute_dtype(const std::string& dtype, const std::string& what) {
  const std::string d = lower(dtype);
  if (d.empty() || d == "float32" || d == "fp32" || d == "float") return c10::kFloat;
  if (d == "bfloat16" || d == "bf16") return c10::kBFloat16;
  if (d == "float16" || d == "fp16" || d == "half") return c10::kHalf;
  ORBIT_FAIL(what << ": '" << dtype << "' is not a compute dtype (expected float32, bfloat16 or float16)");
}

ComputeTarget parse_compute_target(const std::string& device, const std::string& dtype) {
  ComputeTarget t;
  t.dtype = parse_compute_dtype(dtype);
  t.device = parse_device(device);
  ORBIT_CHECK(!(t.device.is_cpu() && t.dtype == c10::kHalf),
              "dtype: float16 runs on CUDA only; on cpu use float32 or bfloat16");
  return t;
}

std::string device_name(const c10::Device& device) {
  if (device.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(device.has_index() ? device.index() : 0);
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return "float32";
    case c10::kBFloat16: return "bfloat16";
    case c10::kHalf: return "float16";
    default: return c10::toString(dtype);
  }
}

}  // namespace orbit::runtime
