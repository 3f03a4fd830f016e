// The store's tiers as an Engine reaches them (EngineOptions::eviction, cold_tier, device_tier_bytes,
// embedding_cache): option errors name the option, stats report every tier, cost-aware eviction keeps the
// chunk that saves the most recompute where LRU drops it, the int8 cold tier stays within its quantisation
// bound of the float canonical, and the embedding cache lets another engine register media without its
// embeddings.
#include "orbit_catch.h"

#include <random>

#include "orbit/engine.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/codec.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
namespace rt = orbit::runtime;

namespace {

EngineOptions stories(const std::string& store_dir = "") {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.page_size = 4;
  o.store_dir = store_dir;
  o.background = BackgroundMode::kInline;
  return o;
}

std::vector<int64_t> tokens(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = 3 + static_cast<int64_t>(rng() % 500);
  return t;
}

}  // namespace

TEST_CASE("tier options whose tier is absent are refused, not ignored", "[engine][store][cpu][model]") {
  // A disk budget without a store directory, and remote settings without a remote, used to be dropped.
  EngineOptions o = stories();
  o.disk_budget_bytes = int64_t{5} << 20;
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::disk_budget_bytes = 5242880") && Contains("store_dir"));
  o = stories();
  o.remote_ttl_seconds = 60;
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::remote_ttl_seconds = 60") && Contains("remote is empty"));
  o = stories();
  o.remote_secret = "s3cret";
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::remote_secret is given, but remote is empty") &&
                                         !Contains("s3cret"));  // a secret is never shown
  test::TempDir dir;
  o = stories(dir.path().string());
  o.disk_budget_bytes = int64_t{5} << 20;  // with its tier, as before
  CHECK(Engine::open(o)->stats().store.tiers.at(2).budget_bytes == int64_t{5} << 20);
}

TEST_CASE("store tier options: bad values name the option; stats report every tier", "[engine][store][cpu][model]") {
  EngineOptions o = stories();
  o.eviction = "mru";
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::eviction") && Contains("lru, cost-aware"));
  o = stories();
  o.cold_tier = "fp8";
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::cold_tier") && Contains("exact, int8"));
  o.cold_tier = "int8";  // without a store_dir: no disk tier to encode
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::cold_tier = 'int8'") && Contains("needs a store_dir"));
  o = stories();
  o.device_tier_bytes = int64_t{1} << 20;  // a device tier on a CPU engine
  CHECK_THROWS_WITH(Engine::open(o),
                    Contains("EngineOptions::device_tier_bytes") && Contains("CUDA") && Contains("'cpu'"));
  o.device_tier_bytes = -1;
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::device_tier_bytes must be >= 0"));

  test::TempDir dir;
  o = stories(dir.path().string());
  o.host_budget_bytes = 3 << 20;
  o.disk_budget_bytes = 5 << 20;
  auto plain = Engine::open(o);
  const StoreStats s = plain->stats().store;
  REQUIRE(s.tiers.size() == 3);
  CHECK(s.tiers[0].tier == StoreTier::kDevice);
  CHECK_FALSE(s.tiers[0].enabled);  // no device tier on a CPU engine
  CHECK(s.tiers[1].enabled);
  CHECK(s.tiers[1].budget_bytes == 3 << 20);
  CHECK(s.tiers[2].enabled);
  CHECK(s.tiers[2].budget_bytes == 5 << 20);
  for (const TierStats& t : s.tiers) CHECK(t.policy == "lru");
  CHECK(s.canonical_encoding == BlobEncoding::kExact);
  CHECK_FALSE(s.pinned_host);  // pinned host memory is for CUDA engines only
  plain->close();

  o.eviction = "cost-aware";
  o.cold_tier = "int8";
  auto tuned = Engine::open(o);
  for (const TierStats& t : tuned->stats().store.tiers) CHECK(t.policy == "cost-aware");
  CHECK(tuned->stats().store.canonical_encoding == BlobEncoding::kInt8);
  CHECK(tuned->options().eviction == "cost-aware");
}

TEST_CASE("cost-aware eviction keeps the often-used canonical that LRU drops", "[engine][store][cpu][model]") {
  // Three 16-token canonicals (equal bytes, equal recompute tokens) in a host tier that holds two and a
  // half, memory only: evicted means gone, and the next use encodes it again. A is used four times, then
  // B once, then C arrives. LRU evicts A (least recent); cost-aware evicts B: its score
  // (expected reuse + hits) x tokens / bytes is (1 + 0) against A's (1 + 3).
  for (const std::string policy : {"lru", "cost-aware"}) {
    EngineOptions o = stories();
    o.eviction = policy;
    const int64_t canonical_bytes = 16 * Engine::open(o)->model_info().kv_bytes_per_token;
    o.host_budget_bytes = canonical_bytes * 5 / 2;
    auto engine = Engine::open(o);
    const ChunkRef a = engine->add_tokens(tokens(1, 16)), b = engine->add_tokens(tokens(2, 16)),
                   c = engine->add_tokens(tokens(3, 16));
    for (int i = 0; i < 4; ++i) engine->precompute(a);  // one encode, three hits
    engine->precompute(b);
    engine->precompute(c);  // needs room: one eviction
    INFO("policy " << policy);
    CHECK(engine->stats().canonicals_encoded == 3);
    CHECK(engine->stats().store.tiers[1].evictions == 1);
    CHECK(engine->stats().store.tiers[1].entries == 2);
    engine->precompute(a);
    engine->precompute(b);
    // LRU: A was gone (encoded again), then B had to go for it and is encoded again too.
    // Cost-aware: A stayed (a hit); B was the one evicted (encoded again).
    CHECK(engine->stats().canonicals_encoded == (policy == "lru" ? 5 : 4));
  }
}

TEST_CASE("int8 cold tier through the engine: every value within max|row|/254 of the float canonical",
          "[engine][store][cpu][model]") {
  // Symmetric int8 per row of head_dim values: scale = max|row| / 127, q = round(x / scale), read back as
  // q x scale, so each value is off by at most scale / 2 = max|row| / 254 (plus float32 rounding of the
  // division and the product, ~1e-7 relative: the bound below allows 1e-6 of max|row|).
  test::TempDir exact_dir, int8_dir;
  const std::vector<int64_t> t = tokens(7, 48);
  std::string fingerprint;
  for (const auto& [dir, cold] :
       {std::make_pair(exact_dir.path().string(), "exact"), std::make_pair(int8_dir.path().string(), "int8")}) {
    EngineOptions o = stories(dir);
    o.cold_tier = cold;
    auto engine = Engine::open(o);
    engine->precompute(engine->add_tokens(t));
    fingerprint = engine->model_info().fingerprint;
    engine->close();
  }
  const std::string key = chunk_key_tokens(fingerprint, t);
  auto blob_of = [&](const std::string& dir) {
    for (const StoreEntryInfo& e : list_store(dir)) {
      if (e.key == key) return e;
    }
    FAIL("no entry " << key << " in " << dir);
    return StoreEntryInfo{};
  };
  const StoreEntryInfo exact = blob_of(exact_dir.path().string()), quantised = blob_of(int8_dir.path().string());
  CHECK(exact.encoding == BlobEncoding::kExact);
  CHECK(quantised.encoding == BlobEncoding::kInt8);
  // int8 values plus a float32 scale per 8-value row (stories260K's head_dim): 1/4 + 1/8 of the bytes.
  CHECK(static_cast<double>(quantised.blob_bytes) / exact.blob_bytes < 0.25 + 1.0 / 8 + 0.02);

  const auto model = rt::load_model(test::stories_path());
  rt::ChunkInput input;
  input.tokens = t;
  const rt::Content reference = rt::canonical(*model, input);
  store::ChunkStoreOptions so;
  so.model_fingerprint = fingerprint;
  so.dir = int8_dir.path().string();
  so.int8_cold_tier = true;  // a store that keeps its entries exact reads an int8 copy as a miss
  store::ChunkStore cold(so);
  const rt::Content back = store::content_from_value(*cold.get(key).value());
  REQUIRE(back.size() == reference.size());
  double worst_ratio = 0;  // largest |error| / (max|row| / 254) seen
  for (std::size_t l = 0; l < reference.size(); ++l) {
    for (const auto& [x, y] : {std::make_pair(reference[l].k, back[l].k), std::make_pair(reference[l].v, back[l].v)}) {
      const at::Tensor rows = x.reshape({-1, x.size(-1)});
      const at::Tensor bound = rows.abs().amax({1}, true) * (1.0 / 254 + 1e-6);
      const at::Tensor err = (y.reshape({-1, x.size(-1)}) - rows).abs();
      CHECK((err <= bound).all().item<bool>());
      worst_ratio = std::max(worst_ratio, (err / bound.clamp_min(1e-30)).max().item<double>());
    }
  }
  CHECK(worst_ratio > 0.5);  // lossy, and the bound is tight: some value is off by more than half of it
  WARN("int8 cold tier via the engine: worst |error| = " << worst_ratio << " x max|row|/254; blob bytes "
                                                         << static_cast<double>(quantised.blob_bytes) / exact.blob_bytes
                                                         << " of exact");
  // The engine reads the int8 canonical back and uses it (no encode).
  EngineOptions o = stories(int8_dir.path().string());
  o.cold_tier = "int8";
  auto engine = Engine::open(o);
  engine->precompute(engine->add_tokens(t));
  CHECK(engine->stats().canonicals_encoded == 0);
  CHECK(engine->stats().store.tiers[2].hits == 1);
}

TEST_CASE("embedding cache: another engine registers the media from the store, without its embeddings",
          "[engine][store][cpu][model]") {
  test::TempDir dir;
  const auto model = rt::load_model(test::stories_path());
  const at::Tensor emb = model->embed(tokens(11, 12)).contiguous();  // stand-in for a vision tower's output
  std::vector<float> values(emb.data_ptr<float>(), emb.data_ptr<float>() + emb.numel());
  const std::vector<int64_t> grid_values = [] {
    std::vector<int64_t> g(12);
    for (int64_t i = 0; i < 12; ++i) g[static_cast<std::size_t>(i)] = 5 + i;
    return g;
  }();
  EmbeddingChunk media;
  media.embeddings = view_of(values, {12, emb.size(1)});
  media.grid = view_of(grid_values, {12});
  media.media_digest = "frame-0001";
  MediaLookup lookup;
  lookup.media_digest = "frame-0001";
  lookup.grid = view_of(grid_values, {12});

  ChunkRef first_ref;
  std::vector<float> first_logits;
  {
    auto first = Engine::open(stories(dir.path().string()));
    CHECK_FALSE(first->find_media(lookup).has_value());  // nothing stored yet: the caller encodes
    first_ref = first->add_embeddings(media);
    Window w = first->new_window();
    w.admit(first_ref);
    first_logits = w.logits({1, 2}).values;
    CHECK(first->stats().media_missed == 1);
  }
  auto second = Engine::open(stories(dir.path().string()));
  ChunkOptions labelled;
  labelled.label = "frame 1";
  const std::optional<ChunkRef> found = second->find_media(lookup, labelled);
  REQUIRE(found.has_value());
  CHECK(found->key == first_ref.key);
  CHECK(found->length == 12);
  CHECK(found->extent == first_ref.extent);
  CHECK(found->label == "frame 1");
  CHECK(second->stats().media_found == 1);
  Window w = second->new_window();
  w.admit(*found);
  const std::vector<float> second_logits = w.logits({1, 2}).values;
  CHECK(second->stats().canonicals_encoded == 0);  // its canonical was stored too
  REQUIRE(second_logits.size() == first_logits.size());
  double worst = 0;  // the same canonical at the same positions: equal up to float noise
  for (std::size_t i = 0; i < first_logits.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(second_logits[i] - first_logits[i])));
  }
  CHECK(worst < 1e-4);
  // Grids are relative: 5..16 on this 1-D model is 0..11, what rows = 12 without a grid means. Another
  // grid shape is other media: a miss. No grid and no rows: an error naming what is missing.
  MediaLookup other = lookup;
  other.grid = TensorView{};
  other.rows = 12;
  REQUIRE(second->find_media(other).has_value());
  CHECK(second->find_media(other)->key == first_ref.key);
  std::vector<int64_t> spread(12);
  for (int64_t i = 0; i < 12; ++i) spread[static_cast<std::size_t>(i)] = 2 * i;
  other.grid = view_of(spread, {12});
  CHECK_FALSE(second->find_media(other).has_value());
  other.grid = TensorView{};
  other.rows = 0;
  CHECK_THROWS_WITH(second->find_media(other), Contains("rows"));
  second->close();

  // embedding_cache = false: the embeddings are not stored, so a third engine finds nothing.
  test::TempDir off_dir;
  EngineOptions off = stories(off_dir.path().string());
  off.embedding_cache = false;
  Engine::open(off)->add_embeddings(media);
  CHECK_FALSE(Engine::open(stories(off_dir.path().string()))->find_media(lookup).has_value());
}

}  // namespace ORBIT_TEST_FILE
