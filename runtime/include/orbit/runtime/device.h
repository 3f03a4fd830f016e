// Where and in which precision a model runs: a device ("cpu", "cuda", "cuda:N") and a compute dtype
// (float32, bfloat16, float16). Weights, activations and the KV pool all live there; logits come back
// float32 on the same device.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace orbit::runtime {

struct ComputeTarget {
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;
};

// Parses a device string: "cpu", "cuda" (= cuda:0) or "cuda:N". Throws orbit::Error naming `what` (the
// option or argument) for anything else, and for CUDA when this process has no CUDA device (a CPU-only
// build of libtorch, no driver, no GPU) or N is not below the device count.
c10::Device parse_device(const std::string& device, const std::string& what = "device");

// Parses "float32" ("fp32", "float"), "bfloat16" ("bf16") or "float16" ("fp16", "half"). Throws
// orbit::Error naming `what` otherwise.
c10::ScalarType parse_compute_dtype(const std::string& dtype, const std::string& what = "dtype");

// Both at once; also refuses float16 on CPU (ATen's CPU kernels lack half GEMMs on some builds).
ComputeTarget parse_compute_target(const std::string& device, const std::string& dtype);

// The canonical names: "cpu", "cuda:0"; "float32", "bfloat16", "float16".
std::string device_name(const c10::Device& device);
std::string dtype_name(c10::ScalarType dtype);

// CUDA devices this process can use (0 without a CUDA libtorch or a GPU). Never throws.
int cuda_device_count() noexcept;

}  // namespace orbit::runtime
