// The store's device tier in real device memory and its pinned host tier, on CUDA (exits 77, skipped,
// without a device): values put into the device tier live on the GPU and read back bit-exact there;
// demoted ones land in pinned host memory; a CUDA engine with a device tier serves canonicals from it
// and answers as one without.
#include "orbit_catch.h"

#include "orbit/engine.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/codec.h"
#include "test_helpers.h"

using namespace orbit;
namespace rt = orbit::runtime;

namespace {

rt::Content canonical_of(const rt::Model& model, int64_t first, int64_t n) {
  rt::ChunkInput input;
  for (int64_t t = 0; t < n; ++t) input.tokens.push_back(3 + (first + t * 37) % 500);
  return rt::canonical(model, input);
}

}  // namespace

TEST_CASE("device tier pages on the GPU; demotion into pinned host memory", "[store][gpu]") {
  const auto model = rt::load_model(test::stories_path());
  store::ChunkStoreOptions o;
  o.model_fingerprint = model->fingerprint();
  o.device = store::DeviceTierOptions{store::device_layout_for(model->config(), 4), 8};  // 8 pages of 4 tokens
  o.device->layout.device = "cuda:0";
  o.pinned_host = true;
  store::ChunkStore s(o);
  const store::ValuePtr a = store::canonical_value(canonical_of(*model, 1, 16));  // 4 pages
  const store::ValuePtr b = store::canonical_value(canonical_of(*model, 2, 20));  // 5 pages: A must go
  store::PutOptions po;
  po.tier = StoreTier::kDevice;
  REQUIRE(s.put("a" + std::string(63, '0'), a, po).is_ok());
  CHECK(s.residence("a" + std::string(63, '0')) == StoreTier::kDevice);
  const store::ValuePtr got = s.get("a" + std::string(63, '0')).value();
  for (const store::NamedTensor& t : got->tensors) CHECK(t.tensor.is_cuda());
  CHECK(store::values_equal(*store::host_copy(got), *a));
  REQUIRE(s.put("b" + std::string(63, '0'), b, po).is_ok());
  CHECK(s.residence("a" + std::string(63, '0')) == StoreTier::kHost);  // demoted, not lost
  const store::ValuePtr demoted = s.get("a" + std::string(63, '0')).value();
  for (const store::NamedTensor& t : demoted->tensors) {
    CHECK(t.tensor.device().is_cpu());
    CHECK(t.tensor.is_pinned());
  }
  CHECK(store::values_equal(*demoted, *a));
  CHECK(s.stats().pinned_host);
  s.verify_integrity();
}

TEST_CASE("a CUDA engine with a device tier serves canonicals from it and answers as one without",
          "[engine][store][gpu]") {
  std::vector<float> logits[2];
  for (int with_tier = 0; with_tier < 2; ++with_tier) {
    EngineOptions o;
    o.model = test::stories_path();
    o.device = "cuda";
    o.page_size = 4;
    o.pool_bytes = int64_t{8} << 20;
    o.device_tier_bytes = with_tier ? int64_t{4} << 20 : 0;
    auto engine = Engine::open(o);
    const StoreStats s = engine->stats().store;
    CHECK(s.tiers[0].enabled == (with_tier == 1));
    CHECK(s.pinned_host);
    const ChunkRef a = engine->add_tokens({1, 400, 401, 402, 403, 404, 405, 406, 407});
    const ChunkRef b = engine->add_tokens({300, 301, 302, 303, 304});
    engine->precompute(a);
    engine->precompute(b);
    if (with_tier) CHECK(engine->stats().store.tiers[0].entries == 2);
    Window w = engine->new_window();
    w.admit(b);
    w.admit(a);
    w.add_turn({5, 6, 7});
    logits[with_tier] = w.logits({8, 9}).values;
  }
  REQUIRE(logits[0].size() == logits[1].size());
  double worst = 0;
  for (std::size_t i = 0; i < logits[0].size(); ++i)
    worst = std::max(worst, double(std::abs(logits[0][i] - logits[1][i])));
  CHECK(worst < 1e-4);  // the same float32 canonical, read from device pages instead of host memory
}
