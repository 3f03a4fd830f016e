// Model::forward_batch on CUDA: the ragged batch of forward_batch_cases.h (pasts paged in a device pool
// and read by the paged kernel where it applies, contiguous pasts, prefills, a partial recompute) gives
// every sequence its own forward's logits and content: float32 within the float32 bound, bfloat16 within
// 2 % of the largest value (both sides round the same activations to bfloat16; a batch only changes the
// GEMMs' blocking); sequences over a DecodeCache's slots decode as over plain pasts; and key_attention
// equals the CPU's from a contiguous past and from a slot, and a paged past gives it too (gathered for it
// instead of read in place by the paged kernel). Exits 77 (skipped) without a
// CUDA device (catch_main_gpu.cpp).
#include "orbit_catch.h"

#include "forward_batch_cases.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_past.h"

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

// The decode cache on CUDA attends with ATen's batched product (the CPU kernel is CPU-only): three sequences
// after pasts of 0, 9 and 30 tokens decode 6 steps in one forward_batch each over cache slots, and every step's
// logits equal a forward over the same plain past (float32 bound).
TEST_CASE("decode cache on CUDA: slots decode as plain pasts do") {
  for (const std::string& name : orbit::test::device_test_models()) {
    INFO(name);
    const auto m = load_model(orbit::test::device_test_model_dir(name), cuda(at::kFloat));
    DecodeCache cache(*m);
    std::vector<std::shared_ptr<PastKV>> plain{std::make_shared<PastKV>(),
                                               orbit::test::contiguous_past(*m, orbit::test::case_tokens(*m, 9, 1)),
                                               orbit::test::contiguous_past(*m, orbit::test::case_tokens(*m, 30, 2))};
    std::vector<int64_t> slots, next, token;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      slots.push_back(cache.open(plain[i]->length() > 0 ? plain[i].get() : nullptr));
      next.push_back(plain[i]->length());
      token.push_back(orbit::test::case_tokens(*m, 1, static_cast<int64_t>(3 + i))[0]);
    }
    const auto bound = orbit::test::float32_bound(*m, 64);
    for (int step = 0; step < 6; ++step) {
      std::vector<ForwardInput> in(plain.size());
      std::vector<PastKV> pasts;
      std::vector<SequenceForward> batch;
      for (std::size_t i = 0; i < plain.size(); ++i) {
        in[i].tokens = {token[i]};
        in[i].positions = at::full({1}, next[i], at::kLong);
        pasts.push_back(cache.past(slots[i]));
      }
      for (std::size_t i = 0; i < plain.size(); ++i) batch.push_back({&in[i], &pasts[i], nullptr});
      const std::vector<ForwardResult> got = m->forward_batch(batch);
      for (std::size_t i = 0; i < plain.size(); ++i) {
        const ForwardResult want = m->forward(in[i], plain[i]->length() > 0 ? plain[i].get() : nullptr);
        CHECK(orbit::test::max_abs_diff(got[i].logits.to(at::kCPU), want.logits.to(at::kCPU)) <=
              bound(orbit::test::largest(want.logits), "logits"));
        PastKV& p = *plain[i];
        if (p.length() == 0) {
          p.layers = want.content;
          p.positions = in[i].positions;
        } else {
          for (std::size_t l = 0; l < p.layers.size(); ++l) {
            p.layers[l] = {at::cat({p.layers[l].k, want.content[l].k}), at::cat({p.layers[l].v, want.content[l].v})};
          }
          p.positions = at::cat({p.positions, in[i].positions}, -1);
        }
        ++next[i];
        token[i] = want.logits[-1].argmax().item<int64_t>();
      }
    }
  }
}

TEST_CASE("key_attention on CUDA: the CPU's weights from a past and from a decode cache's slot") {
  for (const std::string& name : orbit::test::device_test_models()) {
    INFO(name);
    const auto cpu = load_model(orbit::test::device_test_model_dir(name));
    const auto gpu = load_model(orbit::test::device_test_model_dir(name), cuda(at::kFloat));
    const std::vector<int64_t> tokens = orbit::test::case_tokens(*cpu, 40, 3);
    const std::vector<int64_t> head(tokens.begin(), tokens.end() - 3);
    ForwardInput tail;
    tail.tokens.assign(tokens.end() - 3, tokens.end());
    ForwardOptions o;
    o.key_attention = true;
    const at::Tensor want = cpu->forward(tail, orbit::test::contiguous_past(*cpu, head).get(), o).key_attention;
    const auto past = orbit::test::contiguous_past(*gpu, head);
    const at::Tensor contiguous = gpu->forward(tail, past.get(), o).key_attention;
    REQUIRE(contiguous.defined());
    CHECK(contiguous.device().is_cpu());
    CHECK(orbit::test::max_abs_diff(contiguous, want) < 1e-4);
    DecodeCache cache(*gpu);
    const int64_t slot = cache.open(past.get());
    const PastKV cached = cache.past(slot);
    const at::Tensor from_cache = gpu->forward(tail, &cached, o).key_attention;
    REQUIRE(from_cache.defined());
    CHECK(orbit::test::max_abs_diff(from_cache, want) < 1e-4);
    cache.close(slot);
  }
}

TEST_CASE("key_attention on CUDA: a paged past is gathered for it, not read in place by the paged kernel") {
  for (const std::string& name : orbit::test::device_test_models()) {
    INFO(name);
    const auto gpu = load_model(orbit::test::device_test_model_dir(name), cuda(at::kFloat));
    orbit::test::PagedScenario paged = orbit::test::make_paged_scenario(*gpu, 21, 13, 5, 8, 11);
    const PastKV past = make_paged_past(paged.paged, paged.positions);
    ForwardInput in;
    in.tokens = paged.query;
    in.positions = at::arange(paged.query_start, paged.query_start + 3, at::kLong);
    ForwardOptions o;
    o.key_attention = true;
    const at::Tensor got = gpu->forward(in, &past, o).key_attention;
    REQUIRE(got.defined());
    REQUIRE(got.size(0) == past.length() + 3);
    // The same past gathered and patched by hand, read as a contiguous past.
    const PastKV gathered = materialize_past(gpu->config(), past, gpu->device(), gpu->dtype());
    CHECK(orbit::test::max_abs_diff(got, gpu->forward(in, &gathered, o).key_attention) < 1e-5);
  }
}
