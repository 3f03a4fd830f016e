// Device and dtype options on a machine without a GPU: parsing, the clear refusal of CUDA where there is
// none (Engine, loader, pool), bf16 models on CPU (weights loaded straight into bf16, a fingerprint of
// their own) and windows running on them.
#include "orbit_catch.h"

#include <random>

#include "device_test_support.h"
#include "orbit/engine.h"
#include "orbit/runtime/device.h"
#include "orbit/window.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace rt = orbit::runtime;

TEST_CASE("device and dtype strings parse, and bad ones name the option", "[device]") {
  CHECK(rt::parse_device("cpu").is_cpu());
  CHECK(rt::parse_device("CPU").is_cpu());
  CHECK(rt::parse_compute_dtype("bf16") == at::kBFloat16);
  CHECK(rt::parse_compute_dtype("float16") == at::kHalf);
  CHECK(rt::parse_compute_dtype("float32") == at::kFloat);
  CHECK(rt::dtype_name(at::kBFloat16) == "bfloat16");
  CHECK(rt::device_name(c10::Device(c10::kCUDA, 1)) == "cuda:1");
  CHECK_THROWS_WITH(rt::parse_device("gpu", "EngineOptions::device"),
                    Catch::Contains("EngineOptions::device: 'gpu' is not a device"));
  CHECK_THROWS_WITH(rt::parse_device("cuda:x"), Catch::Contains("is not a device"));
  CHECK_THROWS_WITH(rt::parse_compute_dtype("int8", "--dtype"),
                    Catch::Contains("--dtype: 'int8' is not a compute dtype"));
  CHECK_THROWS_WITH(rt::parse_compute_target("cpu", "float16"), Catch::Contains("float16 runs on CUDA only"));
}

TEST_CASE("CUDA asked for where there is none is a clear error, not a crash", "[device]") {
  if (rt::cuda_device_count() > 0) {
    WARN("this process sees a CUDA device: the no-CUDA refusal is not exercised here");
    CHECK(rt::parse_device("cuda").is_cuda());
    CHECK_THROWS_WITH(rt::parse_device("cuda:" + std::to_string(rt::cuda_device_count())), Catch::Contains("visible"));
    return;
  }
  CHECK_THROWS_WITH(rt::parse_device("cuda"), Catch::Contains("no CUDA device"));
  orbit::EngineOptions o;
  o.model = orbit::test::stories_path();
  o.device = "cuda:0";
  CHECK_THROWS_WITH(orbit::Engine::open(o), Catch::Contains("'cuda:0' asked for, but this process has no CUDA device"));
  rt::ComputeTarget t;
  t.device = c10::Device(c10::kCUDA, 0);
  rt::KVPoolOptions po;
  po.num_layers = 1;
  po.num_pages = 1;
  po.widths = {4};
  po.device = "cuda";
  CHECK_THROWS_WITH(rt::KVPool(po), Catch::Contains("KVPoolOptions::device"));
}

TEST_CASE("a bf16 model on CPU: weights load as bf16, fingerprint differs, windows run", "[device][bf16]") {
  const std::string dir = orbit::test::device_test_model_dir("llama-d64-g4");
  const auto f32 = rt::load_model(dir);
  rt::ComputeTarget t;
  t.dtype = at::kBFloat16;
  const auto bf16 = rt::load_model(dir, t);
  CHECK(bf16->dtype() == at::kBFloat16);
  CHECK(bf16->weights().layers[0].wq.scalar_type() == at::kBFloat16);
  CHECK(bf16->weights().embed.scalar_type() == at::kBFloat16);
  CHECK(bf16->fingerprint() != f32->fingerprint());
  rt::ForwardInput in;
  in.tokens = {5, 9, 11, 3};
  rt::ForwardOptions fo;
  fo.logits = rt::LogitsMode::kAll;
  const rt::ForwardResult a = f32->forward(in, nullptr, fo), b = bf16->forward(in, nullptr, fo);
  CHECK(b.logits.scalar_type() == at::kFloat);
  CHECK(b.content[0].k.scalar_type() == at::kBFloat16);
  // bf16 keeps 8 significant bits (unit roundoff 2^-9); two layers of a few roundings each stay well
  // inside a few percent of the float32 logits.
  CHECK(orbit::test::rel_error(b.logits, a.logits) < 5e-2);

  orbit::EngineOptions o;
  o.model = dir;
  o.dtype = "bfloat16";
  o.page_size = 4;
  auto engine = orbit::Engine::open(o);
  CHECK(engine->model_info().dtype == "bfloat16");
  CHECK(engine->model_info().device == "cpu");
  orbit::WindowOptions wo;
  wo.policy = orbit::parse_policy("reprefill");
  orbit::Window w = engine->new_window(wo);
  w.admit(engine->add_tokens({7, 8, 9, 10, 11}));
  w.add_turn({12, 13});
  const orbit::Logits got = w.logits({14, 15}, true);
  const orbit::Logits want = w.reference_logits({14, 15}, true);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got.values[i] - want.values[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want.values[i])));
  }
  CHECK(worst <= 5e-2 * scale);
}

}  // namespace ORBIT_TEST_FILE
