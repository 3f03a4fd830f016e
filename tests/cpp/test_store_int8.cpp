// The chunk store's lossy and side values: the int8 cold tier (its bytes, its measured KV error, the error a
// value read back states, and exact stores refusing an int8 copy) and the embedding cache. Part of the
// test_store_tiers executable.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <memory>
#include <string>

#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/embedding_cache.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), content_equal(a, b) (test_store_values.h)
namespace rt = orbit::runtime;

namespace {

// A canonical of stories260K over `n` tokens (t * a + b) % 512, its chunk key, and store options on `dir` for it.
struct Int8Case {
  std::shared_ptr<const rt::Model> model = rt::load_model(test::stories_path());
  rt::ChunkInput input;
  rt::Content canonical;
  std::string key;

  Int8Case(int64_t n, int64_t a, int64_t b) {
    for (int64_t t = 0; t < n; ++t) input.tokens.push_back((t * a + b) % 512);
    canonical = rt::canonical(*model, input);
    key = chunk_key_tokens(model->fingerprint(), input.tokens);
  }

  ChunkStoreOptions options(const test::TempDir& dir) const {
    ChunkStoreOptions o;
    o.model_fingerprint = model->fingerprint();
    o.dir = dir.path().string();
    return o;
  }
};

}  // namespace

TEST_CASE("int8 cold tier: about a quarter of the bytes at a measured KV error", "[store][cpu][model]") {
  const Int8Case c(64, 37, 5);
  const rt::Content& canonical = c.canonical;
  test::TempDir exact_dir, int8_dir;
  ChunkStoreOptions o = c.options(exact_dir);
  ChunkStore exact(o);
  o.dir = int8_dir.path().string();
  o.int8_cold_tier = true;
  ChunkStore cold(o);
  const std::string& k = c.key;
  REQUIRE(exact.put(k, canonical_value(canonical), PutOptions{StoreTier::kDisk}).is_ok());
  REQUIRE(cold.put(k, canonical_value(canonical), PutOptions{StoreTier::kDisk}).is_ok());
  const double ratio = static_cast<double>(cold.stats().tiers[2].bytes) / exact.stats().tiers[2].bytes;
  const rt::Content back = content_from_value(*cold.get(k).value());
  double worst = 0;
  for (size_t l = 0; l < canonical.size(); ++l) {
    for (const auto& [x, y] : {std::make_pair(canonical[l].k, back[l].k), std::make_pair(canonical[l].v, back[l].v)}) {
      worst = std::max(worst, (x - y).norm().item<double>() / x.norm().item<double>());
    }
  }
  WARN("int8 cold tier: blob bytes " << ratio << " of exact; worst per-layer relative KV error " << worst);
  // int8 values plus one float32 scale per row of head_dim: 1/4 + 1/head_dim of float32 (8 for stories260K,
  // 0.375; 0.26 at head_dim 128), plus the blob header.
  CHECK(ratio < 0.25 + 1.0 / 8 + 0.02);
  CHECK(worst > 0);     // it is lossy, and we say so
  CHECK(worst < 0.01);  // symmetric int8 per row: about 0.3-0.5% on stories260K
  CHECK(content_equal(content_from_value(*exact.get(k).value()), canonical));  // the default stays exact
}

TEST_CASE("int8 cold tier: a value read back says what its rounding lost, and the store prices what it has not read",
          "[store][cpu][model]") {
  const Int8Case c(64, 53, 11);
  const rt::Content& canonical = c.canonical;
  const std::string& k = c.key;
  test::TempDir dir;
  ChunkStoreOptions o = c.options(dir);
  o.int8_cold_tier = true;
  {
    ChunkStore cold(o);
    REQUIRE(cold.put(k, canonical_value(canonical), PutOptions{StoreTier::kHost}).is_ok());
    CHECK(cold.quantization_error(k) == 0);  // the value in memory is the one computed
    CHECK(cold.quantization_error("no-such-key") == 0);
  }
  ChunkStore cold(o);
  // On disk, not read yet: the prior.
  CHECK(cold.quantization_error(k) == ChunkStore::kInt8ErrorPrior);
  const ValuePtr back = cold.get(k).value();
  const rt::Content read = content_from_value(*back);
  double error = 0, signal = 0;
  for (size_t l = 0; l < canonical.size(); ++l) {
    for (const auto& [x, y] : {std::make_pair(canonical[l].k, read[l].k), std::make_pair(canonical[l].v, read[l].v)}) {
      error += (x - y).square().sum().item<double>();
      signal += y.square().sum().item<double>();
    }
  }
  const double stated = quantization_error(*back);
  WARN("int8 rounding: stated " << stated << ", measured " << error / signal);
  // The uniform-rounding estimate against the error measured from the original: within 30%.
  CHECK(stated > 0);
  CHECK(stated == Approx(error / signal).epsilon(0.3));
  // Promoted to the host tier, the value carries it; a store opened after a read prices its other blobs by it.
  CHECK(cold.quantization_error(k) == Approx(stated));
  ChunkStoreOptions exact_options = o;
  exact_options.int8_cold_tier = false;
  exact_options.dir = (dir.path() / "exact").string();
  ChunkStore exact(exact_options);
  REQUIRE(exact.put(k, back, PutOptions{StoreTier::kDisk}).is_ok());  // written again as float32: still lossy
  ChunkStore reopened(exact_options);
  CHECK(quantization_error(*reopened.get(k).value()) == Approx(stated));
}

TEST_CASE("a store that keeps entries exact does not read another's int8 copy as exact", "[store][cpu][model]") {
  const Int8Case c(32, 37, 5);
  const rt::Content& canonical = c.canonical;
  const std::string& k = c.key;
  test::TempDir dir;
  ChunkStoreOptions o = c.options(dir);
  o.host_budget_bytes = 0;  // every read goes to the disk
  o.warn_disk_errors = false;
  {
    ChunkStoreOptions cold_options = o;
    cold_options.int8_cold_tier = true;
    ChunkStore cold(cold_options);
    REQUIRE(cold.put(k, canonical_value(canonical), PutOptions{StoreTier::kDisk}).is_ok());
  }
  {
    ChunkStore exact(o);
    const Result<ValuePtr> read = exact.get(k);
    REQUIRE_FALSE(read.is_ok());  // a miss: the caller recomputes the canonical
    CHECK_THAT(read.status().reason(), Contains("int8") && Contains("exact"));
    CHECK(exact.contains(k));  // kept, for the stores that wrote it so
    // A miss, not a file-system fault: the unreadable count (orbit serve's fault metric) stays 0.
    CHECK(exact.stats().unreadable_reads == 0);
    CHECK(exact.stats().corrupt_reads == 0);
  }
  ChunkStoreOptions cold_options = o;
  cold_options.int8_cold_tier = true;
  ChunkStore cold(cold_options);
  REQUIRE(cold.get(k).is_ok());  // the int8 store reads it, as it chose to
  CHECK(list_store(o.dir).size() == 1);
}

TEST_CASE("embedding cache: embeddings and grid round-trip under their own key", "[store][cpu][model]") {
  const auto model = rt::load_model(test::stories_path());
  const std::vector<int64_t> tokens{1, 403, 407, 261, 50, 9};
  // Stand-in for a vision chunk: the input embeddings of these tokens, with an M-RoPE-style grid.
  const at::Tensor embeddings = model->embed(tokens);
  const at::Tensor grid = at::arange(6 * 3, at::kLong).reshape({6, 3});
  test::TempDir dir;
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = model->fingerprint();
  ChunkStore store(o);
  EmbeddingCache cache(store);
  const std::string k =
      chunk_key_media(model->fingerprint(), "pixels-digest",
                      std::vector<int64_t>(grid.data_ptr<int64_t>(), grid.data_ptr<int64_t>() + 18), 3);
  CHECK(cache.get(k).status().code() == StatusCode::kNotFound);
  CHECK_FALSE(cache.contains(k));
  REQUIRE(cache.put(k, embeddings, grid).is_ok());
  CHECK(cache.contains(k));
  CHECK_FALSE(store.contains(k));  // the chunk's own key (its canonical) is untouched
  Result<CachedEmbeddings> back = cache.get(k);
  REQUIRE(back.is_ok());
  CHECK(at::equal(back.value().embeddings, embeddings));
  CHECK(at::equal(back.value().grid, grid));
  REQUIRE(cache.put(chunk_key_tokens(model->fingerprint(), tokens), embeddings).is_ok());
  CHECK_FALSE(cache.get(chunk_key_tokens(model->fingerprint(), tokens)).value().grid.defined());
  rt::ChunkInput input;
  input.tokens = tokens;
  const int64_t kv = canonical_value(rt::canonical(*model, input))->bytes();
  WARN("embedding bytes / canonical KV bytes = " << static_cast<double>(embeddings.nbytes()) / kv << " (stories260K)");
  // Another kind of value under the embedding key is a broken contract, not a miss.
  REQUIRE(store.put(embedding_key(k), test::store_test_value(1), PutOptions{StoreTier::kHost, false, true}).is_ok());
  CHECK_THROWS_WITH(cache.get(k), Contains("is a canonical"));
}

}  // namespace ORBIT_TEST_FILE
