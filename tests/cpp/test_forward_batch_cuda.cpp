// Model::forward_batch on CUDA: the ragged batch of forward_batch_cases.h (pasts paged in a device pool
// and read by the paged kernel where it applies, contiguous pasts, prefills, a partial recompute) gives
// every sequence its own forward's logits and content: float32 within the float32 bound, bfloat16 within
// 2 % of the largest value (both sides round the same activations to bfloat16; a batch only changes the
// GEMMs' blocking). Exits 77 (skipped) without a CUDA device (catch_main_gpu.cpp).
#include "orbit_catch.h"

#include "forward_batch_cases.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/loader.h"

using namespace orbit::runtime;

namespace {

ComputeTarget cuda(at::ScalarType dtype) {
  ComputeTarget t;
  t.device = c10::Device(c10::kCUDA, 0);
  t.dtype = dtype;
  return t;
}

}  // namespace

TEST_CASE("forward_batch on CUDA: every sequence gets its own forward's logits and content") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::string& name : orbit::test::device_test_models()) {
      INFO(name << " " << dtype_name(dtype));
      const auto m = load_model(orbit::test::device_test_model_dir(name), cuda(dtype));
      const orbit::test::BatchCase b = orbit::test::make_batch_case(*m);
      std::vector<std::size_t> order(b.inputs.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (dtype == at::kFloat) {
        orbit::test::compare_batch(*m, b, order, orbit::test::float32_bound(*m, 64));
      } else {
        orbit::test::compare_batch(*m, b, order, [](double scale, const char*) { return 0.02 * scale; });
      }
    }
  }
}
