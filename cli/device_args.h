// --device and --dtype, shared by the subcommands that load a model.
#pragma once

#include "args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/device.h"

namespace orbit::cli {

// The model's device and dtype from --device (cpu, cuda, cuda:N; default cpu) and --dtype (float32,
// bfloat16, float16; default float32). Throws orbit::Error naming the argument on a bad value, an empty one
// (the runtime reads "" as the default, which a command line should say by leaving the argument out) or when
// CUDA is asked for where there is none.
inline runtime::ComputeTarget compute_target(const Args& args) {
  ORBIT_CHECK(args.get_or("--device", "cpu") != "", "--device: the value is empty (leave it out for cpu)");
  ORBIT_CHECK(args.get_or("--dtype", "float32") != "", "--dtype: the value is empty (leave it out for float32)");
  runtime::ComputeTarget t;
  t.dtype = runtime::parse_compute_dtype(args.get_or("--dtype", "float32"), "--dtype");
  t.device = runtime::parse_device(args.get_or("--device", "cpu"), "--device");
  // Named as the user wrote it (the runtime's own message names the engine option, `dtype`).
  ORBIT_CHECK(!(t.device.is_cpu() && t.dtype == c10::kHalf),
              "--dtype: float16 runs on CUDA only (--device cuda); on cpu use float32 or bfloat16");
  return t;
}

}  // namespace orbit::cli
