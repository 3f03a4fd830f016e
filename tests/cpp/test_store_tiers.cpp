// The chunk store, part 2: round trips on every tier for every attention family, the device tier's
// shared pages, eviction order and budget invariants under random operations, admission refusals (the int8
// cold tier and the embedding cache: test_store_int8.cpp, in the same executable).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <list>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/codec.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir), content_equal(a, b) (test_store_values.h)
namespace rt = orbit::runtime;

namespace {

ValuePtr blob_of(int64_t i, int64_t floats) {
  return make_value(EntryKind::kOther, {{"x", at::full({floats}, static_cast<double>(i), at::kFloat)}});
}

// A store at `dir` without write-through (an entry reaches the disk only when memory lets it go) whose memory
// holds two entries of blob_of(i, 1000).
ChunkStoreOptions demoting_options(const std::string& dir) {
  ChunkStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 2 * 4000;
  o.write_through = false;
  return o;
}

// The disk bytes one entry of blob_of(i, 1000) takes in a store of options `o` (measured in a store of its own).
int64_t one_entry_disk_bytes(const ChunkStoreOptions& o) {
  test::TempDir probe;
  ChunkStoreOptions p = o;
  p.dir = probe.path().string();
  ChunkStore s(p);
  REQUIRE(s.put(key(99), blob_of(99, 1000), PutOptions{StoreTier::kDisk}).is_ok());
  return s.stats().tiers[2].bytes;
}

// A canonical of `model`, placed in the device, host and disk tiers in turn; each must give it back.
void round_trip_every_tier(const rt::Model& model, const std::vector<int64_t>& tokens) {
  test::TempDir dir;
  rt::ChunkInput input;
  input.tokens = tokens;
  const rt::Content canonical = rt::canonical(model, input);
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = model.fingerprint();
  o.device = DeviceTierOptions{device_layout_for(model.config(), 4), 64};
  ChunkStore store(o);
  const std::string k = chunk_key_tokens(model.fingerprint(), tokens);
  for (StoreTier tier : {StoreTier::kDevice, StoreTier::kHost, StoreTier::kDisk}) {
    PutOptions p;
    p.tier = tier;
    p.replace = true;
    REQUIRE(store.put(k, canonical_value(canonical), p).is_ok());
    CHECK(store.residence(k) == tier);
    Result<ValuePtr> v = store.get(k, GetOptions{false});
    REQUIRE(v.is_ok());
    CHECK(content_equal(content_from_value(*v.value()), canonical));
    store.verify_integrity(true);
  }
}

}  // namespace

TEST_CASE("every tier round-trips canonicals of every attention family", "[store][cpu][model]") {
  SECTION("GQA: stories260K") {
    round_trip_every_tier(*rt::load_model(test::stories_path()), {1, 403, 407, 261, 50, 9, 31});
  }
  for (const std::string preset : {"tiny-qwen2", "tiny-mla", "tiny-qwen2-vl"}) {
    SECTION("generated " + preset) {
      test::TempDir model_dir;
      rt::GeneratorOptions g;
      g.config = rt::generator_preset(preset);
      g.seed = 3;
      rt::generate_model(g, model_dir.path().string());
      round_trip_every_tier(*rt::load_model(model_dir.path().string()), {5, 6, 7, 8, 9});
    }
  }
}

TEST_CASE("patches and arbitrary named tensors round-trip through host and disk", "[store][cpu][model]") {
  const auto model = rt::load_model(test::stories_path());
  rt::ChunkInput a, b;
  a.tokens = {1, 403, 407, 261, 50};
  b.tokens = {9, 31, 77, 12, 300, 41};
  const rt::Content delta =
      rt::deficit(rt::conditioned(*model, b, rt::assemble_context(*model, {a})), rt::canonical(*model, b));
  rt::PatchOptions po;
  po.rank_k = po.rank_v = 3;
  po.first_layer = 2;  // layers 0 and 1 carry no factor: absent tensors must come back absent
  const rt::Patch patch = rt::form_patch(*model, delta, po);
  test::TempDir dir;
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = model->fingerprint();
  ChunkStore store(o);
  const std::string pk = patch_key({chunk_key_tokens(model->fingerprint(), b.tokens),
                                    exact_signature({chunk_key_tokens(model->fingerprint(), a.tokens)}), "deep", 3, 3});
  REQUIRE(store.put(pk, patch_value(patch), PutOptions{StoreTier::kDisk}).is_ok());
  const rt::Patch back = patch_from_value(*store.get(pk).value());
  CHECK(back.model_fingerprint == patch.model_fingerprint);
  CHECK(back.length == patch.length);
  REQUIRE(patch.residual > 0);  // deep-only at rank 3 leaves part of the deficit out
  CHECK(back.residual == Approx(patch.residual).epsilon(1e-8));
  CHECK(back.sensitivity == -1);  // not measured, not recorded
  rt::Patch measured = patch;
  measured.sensitivity = 0.0123;
  const ValuePtr with_sensitivity = patch_value(measured);
  CHECK(patch_from_value(*with_sensitivity).sensitivity == Approx(0.0123).epsilon(1e-8));
  StoredValue bad = *with_sensitivity;
  bad.attrs["sensitivity"] = "-2";
  CHECK_THROWS_WITH(patch_from_value(bad), Contains("'sensitivity'") && Contains("[0, inf)"));
  bad.attrs["sensitivity"] = "0.5x";
  CHECK_THROWS_WITH(patch_from_value(bad), Contains("'sensitivity' = '0.5x'"));
  REQUIRE(back.k.size() == patch.k.size());
  for (size_t l = 0; l < patch.k.size(); ++l) {
    CHECK(back.k[l].rank() == patch.k[l].rank());
    if (patch.k[l].rank()) {
      CHECK(at::equal(back.k[l].u, patch.k[l].u));
      CHECK(at::equal(back.v[l].vt, patch.v[l].vt));
    }
  }
  // The store is family-agnostic: any names, shapes and dtypes.
  const ValuePtr odd = make_value(EntryKind::kOther, {{"layer.0.ckv", at::randn({5, 1, 24})},
                                                      {"ids", at::arange(5, at::kLong)},
                                                      {"half", at::randn({2, 3}).to(at::kBFloat16)}});
  REQUIRE(store.put(key(5), odd, PutOptions{StoreTier::kDisk}).is_ok());
  CHECK(values_equal(*store.get(key(5)).value(), *odd));
}

TEST_CASE("device tier: page-aligned chunks shared by reference count", "[store][cpu]") {
  DevicePageLayout layout;
  layout.num_layers = 2;
  layout.page_size = 4;
  layout.kinds = {"k", "v"};
  layout.widths = {8, 8};
  ChunkStoreOptions o;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.device = DeviceTierOptions{layout, 6};  // 6 pages of 4 tokens
  ChunkStore store(o);
  auto chunk = [&](int64_t n, double fill) {
    std::vector<NamedTensor> t;
    for (int64_t l = 0; l < 2; ++l) {
      t.push_back({layer_tensor_name(l, "k"), at::arange(n * 8, at::kFloat).add(fill + l).reshape({n, 2, 4})});
      t.push_back({layer_tensor_name(l, "v"), at::full({n, 2, 4}, fill - l)});
    }
    return make_value(EntryKind::kCanonical, t);
  };
  const ValuePtr a = chunk(5, 1), b = chunk(7, 2), c = chunk(8, 3);  // 2 pages each
  PutOptions dev{StoreTier::kDevice};
  REQUIRE(store.put(key(1), a, dev).is_ok());
  REQUIRE(store.put(key(2), b, dev).is_ok());
  CHECK(values_equal(*store.get(key(1)).value(), *a));
  Result<DeviceLease> lease = store.lease_device(key(1));
  REQUIRE(lease.is_ok());
  CHECK(lease.value().pages().size() == 2);
  CHECK(lease.value().ref_counts() == std::vector<int32_t>{2, 2});  // the tier and the lease
  DeviceLease fork = lease.value().share();
  CHECK(fork.ref_counts() == std::vector<int32_t>{3, 3});
  CHECK(at::equal(fork.gather(0).select(0, 1).reshape({5, 2, 4}), a->at("layer.1.k")));
  REQUIRE(store.get(key(2)).is_ok());  // key(1) is now the least recently used

  REQUIRE(store.put(key(3), c, dev).is_ok());  // pool full now (6 pages)
  // Room for a fourth chunk: LRU would pick key(1), but its pages are leased, so key(2) is demoted.
  REQUIRE(store.put(key(4), chunk(3, 4), dev).is_ok());
  CHECK(store.residence(key(1)) == StoreTier::kDevice);
  CHECK(store.residence(key(2)) == StoreTier::kHost);
  CHECK(store.stats().tiers[0].demotions == 1);
  store.verify_integrity();
  // A value that does not match the page layout goes to host instead.
  REQUIRE(store.put(key(6), blob_of(6, 10), dev).is_ok());
  CHECK(store.residence(key(6)) == StoreTier::kHost);
  CHECK(store.lease_device(key(6)).status().code() == StatusCode::kRefused);

  lease.value() = DeviceLease();  // release both leases: the pages are evictable again
  fork = DeviceLease();
  REQUIRE(store.put(key(7), chunk(8, 7), dev).is_ok());
  CHECK(store.residence(key(1)) == StoreTier::kHost);
  // Promotion back into the device tier through a lease.
  Result<DeviceLease> again = store.lease_device(key(2));
  REQUIRE(again.is_ok());
  CHECK(store.residence(key(2)) == StoreTier::kDevice);
  CHECK(values_equal(*store.get(key(2)).value(), *b));
  store.verify_integrity();
}

TEST_CASE("LRU eviction order, demotion to disk, promotion on access", "[store][cpu]") {
  test::TempDir dir;
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 3 * 4000;  // three values of 1000 floats
  ChunkStore store(o);
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(key(i), blob_of(i, 1000)).is_ok());
  REQUIRE(store.get(key(1)).is_ok());  // order now 2, 3, 1
  REQUIRE(store.put(key(4), blob_of(4, 1000)).is_ok());
  CHECK(store.residence(key(2)) == StoreTier::kDisk);
  for (int64_t i : {1, 3, 4}) CHECK(store.residence(key(i)) == StoreTier::kHost);
  REQUIRE(store.get(key(2)).is_ok());  // promoted; evicts 3 (the LRU of 3, 1, 4)
  CHECK(store.residence(key(2)) == StoreTier::kHost);
  CHECK(store.residence(key(3)) == StoreTier::kDisk);
  REQUIRE(store.pin(key(1)).is_ok());
  REQUIRE(store.put(key(5), blob_of(5, 1000)).is_ok());  // 1 is pinned: 4 goes
  CHECK(store.residence(key(4)) == StoreTier::kDisk);
  CHECK(store.residence(key(1)) == StoreTier::kHost);
  const StoreStats s = store.stats();
  CHECK(s.tiers[1].evictions == 3);
  CHECK(s.tiers[1].demotions == 3);
  CHECK(s.tiers[1].promotions == 1);
  store.verify_integrity(true);
}

TEST_CASE("without write-through, disk receives entries on demotion; the disk budget is the last word",
          "[store][cpu]") {
  test::TempDir dir;
  ChunkStoreOptions o = demoting_options(dir.path().string());
  const int64_t blob_bytes = one_entry_disk_bytes(o);
  o.disk_budget_bytes = 2 * blob_bytes;
  {
    ChunkStore store(o);
    REQUIRE(store.put(key(1), blob_of(1, 1000)).is_ok());
    REQUIRE(store.put(key(2), blob_of(2, 1000)).is_ok());
    CHECK(list_store(o.dir).empty());                      // memory only so far
    REQUIRE(store.put(key(3), blob_of(3, 1000)).is_ok());  // 1 is demoted: written to disk now
    CHECK(store.residence(key(1)) == StoreTier::kDisk);
    REQUIRE(store.pin(key(1)).is_ok());
    REQUIRE(store.put(key(4), blob_of(4, 1000)).is_ok());  // 2 demoted to disk
    REQUIRE(store.put(key(5), blob_of(5, 1000)).is_ok());  // 3 demoted; disk full: 2 leaves for good (1 is pinned)
    CHECK(store.residence(key(3)) == StoreTier::kDisk);
    CHECK_FALSE(store.contains(key(2)));
    CHECK(store.residence(key(1)) == StoreTier::kDisk);
    CHECK(store.stats().tiers[2].evictions == 1);
    store.verify_integrity(true);
  }
  ChunkStore reopened(o);  // only what reached the disk survives the process
  CHECK(reopened.contains(key(1)));
  CHECK(reopened.contains(key(3)));
  for (int64_t i : {2, 4, 5}) CHECK_FALSE(reopened.contains(key(i)));
  PutOptions replace;
  replace.replace = true;  // a new value for 3 must not leave the old one behind on disk
  REQUIRE(reopened.put(key(3), blob_of(33, 1000), replace).is_ok());
  CHECK(reopened.residence(key(3)) == StoreTier::kHost);
  CHECK(values_equal(*reopened.get(key(3)).value(), *blob_of(33, 1000)));
  CHECK(list_store(o.dir).size() == 1);
  ChunkStoreOptions memory_only = o;
  memory_only.dir.clear();
  ChunkStore no_disk(memory_only);
  CHECK(no_disk.put(key(1), blob_of(1, 10), PutOptions{StoreTier::kDisk}).code() == StatusCode::kRefused);
}

// Without write-through an entry reaches the disk only when memory lets it go; a disk that cannot take it then (here
// its budget holds one entry, pinned) lost it without a word: only the missing key said so. The store keeps
// memory's budget (a cache of recomputable KV sized by it) and lets the entry go, as a disk eviction would, but now
// counts it (StoreStats::demotions_lost) and warns once a run with the disk's reason.
TEST_CASE("without write-through, an entry the disk cannot take on demotion is counted and warned about",
          "[store][cpu]") {
  test::TempDir dir;
  ChunkStoreOptions o = demoting_options(dir.path().string());
  const int64_t blob_bytes = one_entry_disk_bytes(o);
  o.disk_budget_bytes = blob_bytes;
  std::vector<std::string> warnings;
  const WarningSink previous = set_warning_sink([&](std::string m) { warnings.push_back(std::move(m)); });
  ChunkStore store(o);
  REQUIRE(store.put(key(1), blob_of(1, 1000)).is_ok());
  REQUIRE(store.put(key(2), blob_of(2, 1000)).is_ok());
  REQUIRE(store.put(key(3), blob_of(3, 1000)).is_ok());  // 1 is demoted: the disk takes it
  REQUIRE(store.pin(key(1)).is_ok());
  CHECK(store.stats().demotions_lost == 0);
  REQUIRE(store.put(key(4), blob_of(4, 1000)).is_ok());  // 2 demoted: the disk is full of pinned 1
  REQUIRE(store.put(key(5), blob_of(5, 1000)).is_ok());  // 3 too
  set_warning_sink(previous);
  const StoreStats s = store.stats();
  CHECK(s.demotions_lost == 2);
  CHECK_FALSE(store.contains(key(2)));
  CHECK_FALSE(store.contains(key(3)));
  CHECK(s.tiers[1].bytes <= o.host_budget_bytes);  // memory kept its budget
  for (int64_t i : {1, 4, 5}) CHECK(store.contains(key(i)));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("could not be written to disk") && Contains("pinned") && Contains("demotions_lost"));
  store.verify_integrity(true);
}

TEST_CASE("cost-aware eviction keeps small, reused, expensive entries", "[store][cpu]") {
  ChunkStoreOptions o;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 10000;
  o.host_policy = make_eviction_policy("cost-aware");
  ChunkStore store(o);
  PutOptions cheap_big;
  cheap_big.recompute_cost = 1;
  PutOptions dear_small;
  dear_small.recompute_cost = 50;
  REQUIRE(store.put(key(1), blob_of(1, 500), dear_small).is_ok());  // 2000 bytes, value 50/2000
  REQUIRE(store.put(key(2), blob_of(2, 1500), cheap_big).is_ok());  // 6000 bytes, value 1/6000
  REQUIRE(store.get(key(1)).is_ok());
  REQUIRE(store.put(key(3), blob_of(3, 500), cheap_big).is_ok());    // 2000 bytes, fits
  REQUIRE(store.put(key(4), blob_of(4, 1000), dear_small).is_ok());  // needs 4000: the big cheap one goes
  CHECK_FALSE(store.contains(key(2)));                               // no disk tier: evicted from the store
  CHECK(store.contains(key(1)));
  CHECK(store.contains(key(3)));
  CHECK_THROWS_WITH(make_eviction_policy("mru"), Contains("lru, cost-aware"));
}

TEST_CASE("admission refusals are values that name the reason", "[store][cpu]") {
  ChunkStoreOptions o;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 8000;
  ChunkStore store(o);
  Status big = store.put(key(1), blob_of(1, 5000));
  CHECK(big.code() == StatusCode::kOutOfCapacity);
  CHECK_THAT(big.reason(), Contains("no tier can admit 20000 bytes"));
  PutOptions pin;
  pin.pin = true;
  REQUIRE(store.put(key(2), blob_of(2, 1500), pin).is_ok());
  Status full = store.put(key(3), blob_of(3, 1000));
  CHECK(full.code() == StatusCode::kOutOfCapacity);
  CHECK(store.stats().refusals == 2);
  REQUIRE(store.unpin(key(2)).is_ok());
  CHECK(store.put(key(3), blob_of(3, 1000)).is_ok());
  CHECK_FALSE(store.contains(key(2)));
  CHECK_THROWS_WITH(store.put("not-a-key", blob_of(1, 1)), Contains("not a store key"));
}

TEST_CASE("host LRU matches a reference model under random operations", "[store][cpu]") {
  std::mt19937 rng(42);
  const int64_t budget = 20000;
  ChunkStoreOptions o;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = budget;
  ChunkStore store(o);
  // Reference: LRU list (front = oldest), sizes, pins.
  std::list<int64_t> lru;
  std::map<int64_t, int64_t> size;
  std::map<int64_t, bool> pinned;
  auto used = [&] {
    int64_t u = 0;
    for (int64_t k : lru) u += size[k];
    return u;
  };
  auto touch = [&](int64_t k) {
    lru.remove(k);
    lru.push_back(k);
  };
  for (int step = 0; step < 3000; ++step) {
    const int64_t k = std::uniform_int_distribution<int64_t>(0, 24)(rng);
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    const bool present = size.count(k) > 0;
    if (op < 5) {
      const int64_t floats = std::uniform_int_distribution<int64_t>(100, 3000)(rng);
      const Status s = store.put(key(k), blob_of(k, floats));
      if (present) {
        REQUIRE(s.is_ok());
        touch(k);
      } else {
        const int64_t need = floats * 4;
        int64_t evictable = 0;
        for (int64_t x : lru) evictable += pinned[x] ? 0 : size[x];
        const bool admit = need <= budget && budget - used() + evictable >= need;
        REQUIRE(s.is_ok() == admit);
        if (admit) {
          for (auto it = lru.begin(); it != lru.end() && budget - used() < need;) {
            if (pinned[*it]) {
              ++it;
              continue;
            }
            size.erase(*it);
            pinned.erase(*it);
            it = lru.erase(it);
          }
          lru.push_back(k);
          size[k] = need;
        }
      }
    } else if (op < 8) {
      REQUIRE(store.get(key(k)).is_ok() == present);
      if (present) touch(k);
    } else if (op == 8) {
      if (present) {
        const bool pin = !pinned[k];
        REQUIRE((pin ? store.pin(key(k)) : store.unpin(key(k))).is_ok());
        pinned[k] = pin;
      }
    } else {
      REQUIRE(store.erase(key(k)).is_ok() == present);
      lru.remove(k);
      size.erase(k);
      pinned.erase(k);
    }
    for (int64_t x = 0; x <= 24; ++x) REQUIRE(store.contains(key(x)) == (size.count(x) > 0));
    REQUIRE(store.stats().tiers[1].bytes == used());
    store.verify_integrity();
  }
}

TEST_CASE("budgets hold and nothing committed is lost under random operations on three tiers", "[store][cpu]") {
  std::mt19937 rng(7);
  test::TempDir dir;
  DevicePageLayout layout;
  layout.num_layers = 1;
  layout.page_size = 8;
  layout.kinds = {"k", "v"};
  layout.widths = {64, 64};
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 300 << 10;
  o.device = DeviceTierOptions{layout, 40};
  o.device_policy = make_eviction_policy("cost-aware");
  auto store = std::make_unique<ChunkStore>(o);
  std::map<int64_t, bool> live;
  int64_t evictions[3] = {0, 0, 0};  // summed over reopenings (counters are per process)
  for (int step = 0; step < 600; ++step) {
    const int64_t i = std::uniform_int_distribution<int64_t>(1, 60)(rng);
    const int op = std::uniform_int_distribution<int>(0, 10)(rng);
    if (op < 4) {
      PutOptions p;
      p.tier = op < 2 ? StoreTier::kDevice : StoreTier::kHost;
      p.pin = op == 0 && i % 7 == 0;
      p.recompute_cost = static_cast<double>(i);
      REQUIRE(store->put(key(i), test::store_test_value(i), p).is_ok());
      live[i] = true;
    } else if (op < 8) {
      Result<ValuePtr> v = store->get(key(i), GetOptions{op < 6});
      REQUIRE(v.is_ok() == (live.count(i) > 0));
      if (v) REQUIRE(values_equal(*v.value(), *test::store_test_value(i)));
    } else if (op < 10) {
      if (live.count(i)) {
        Result<DeviceLease> lease = store->lease_device(key(i));
        if (lease) REQUIRE(lease.value().length() == test::store_test_value(i)->at("layer.0.k").size(0));
      }
    } else {
      REQUIRE(store->erase(key(i)).is_ok() == (live.erase(i) > 0));
    }
    if (step % 100 == 99) {  // reopen: everything committed comes back from disk
      for (int t = 0; t < 3; ++t) evictions[t] += store->stats().tiers[static_cast<size_t>(t)].evictions;
      store.reset();
      store = std::make_unique<ChunkStore>(o);
    }
    store->verify_integrity(step % 25 == 0);
  }
  for (const auto& [i, _] : live) REQUIRE(values_equal(*store->get(key(i)).value(), *test::store_test_value(i)));
  CHECK(evictions[0] > 0);  // the budgets were under pressure: demotions happened on both memory tiers
  CHECK(evictions[1] > 0);
  CHECK(store->stats().corrupt_reads == 0);
}

TEST_CASE("the eviction queue takes candidates in the order a full sort gives", "[store][cpu]") {
  std::mt19937 rng(7);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back("k" + std::to_string(rng() % 1000));  // repeats: ties by key too
  for (const char* name : {"lru", "cost-aware"}) {
    const auto policy = orbit::store::make_eviction_policy(name);
    std::vector<orbit::store::EvictionCandidate> c(keys.size());
    for (std::size_t i = 0; i < c.size(); ++i) {
      c[i].key = keys[i];
      c[i].bytes = 1 + static_cast<int64_t>(rng() % 4);
      c[i].last_access = rng() % 20;  // few values: many ties in score and in last_access
      c[i].hits = static_cast<int64_t>(rng() % 3);
      c[i].recompute_cost = static_cast<double>(rng() % 3);
    }
    std::vector<std::size_t> sorted(c.size());
    std::iota(sorted.begin(), sorted.end(), std::size_t{0});
    std::stable_sort(sorted.begin(), sorted.end(), [&](std::size_t a, std::size_t b) {
      const double sa = policy->keep_score(c[a]), sb = policy->keep_score(c[b]);
      if (sa != sb) return sa < sb;
      if (c[a].last_access != c[b].last_access) return c[a].last_access < c[b].last_access;
      return c[a].key < c[b].key;
    });
    const std::vector<std::size_t> order = orbit::store::eviction_order(*policy, c);
    REQUIRE(order.size() == c.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      const auto& x = c[order[i]];
      const auto& y = c[sorted[i]];  // equal candidates (same key, score and access) may come in either order
      CHECK(policy->keep_score(x) == policy->keep_score(y));
      CHECK(x.last_access == y.last_access);
      CHECK(x.key == y.key);
    }
    orbit::store::EvictionQueue queue(*policy, c);
    CHECK(queue.take() == order[0]);
  }
}

TEST_CASE("a full host tier of many entries frees a margin beyond a put's need, oldest first", "[store][cpu]") {
  const int64_t n = 2048, floats = 100;  // 2048 entries of 400 bytes: past the 1024 where relief is exact
  ChunkStoreOptions o;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = n * floats * 4;
  ChunkStore store(o);
  for (int64_t i = 0; i < n; ++i) REQUIRE(store.put(key(i), blob_of(i, floats)).is_ok());
  REQUIRE(store.stats().tiers[1].entries == n);
  REQUIRE(store.get(key(0)).is_ok());  // the oldest becomes the most recent
  REQUIRE(store.put(key(n), blob_of(n, floats)).is_ok());
  // One entry's room and 1/64 of the budget (32 entries): the 33 least recently used, keys 1..33.
  const StoreStats s = store.stats();
  CHECK(s.tiers[1].entries == n - 33 + 1);
  CHECK(s.tiers[1].bytes <= o.host_budget_bytes - o.host_budget_bytes / 64);
  CHECK(store.contains(key(0)));
  for (int64_t i = 1; i <= 33; ++i) CHECK_FALSE(store.contains(key(i)));
  for (int64_t i = 34; i <= n; ++i) REQUIRE(store.contains(key(i)));
  // The puts that follow find room without evicting, until the margin is used.
  for (int64_t i = n + 1; i < n + 33; ++i) REQUIRE(store.put(key(i), blob_of(i, floats)).is_ok());
  CHECK(store.stats().tiers[1].entries == n);
  CHECK(store.stats().tiers[1].evictions == 33);
  store.verify_integrity();
}

TEST_CASE("stats' pinned entries equal a walk of every entry after puts, pins, evictions, moves, erases, reopens",
          "[store][cpu]") {
  std::mt19937 rng(11);
  test::TempDir dir;
  ChunkStoreOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 200 << 10;  // demotions to disk
  o.disk_budget_bytes = 1 << 20;    // and evictions from it
  auto store = std::make_unique<ChunkStore>(o);
  std::set<int64_t> pinned;  // what this test pinned and the store still holds (pins end with the process)
  int64_t evictions = 0;     // summed over reopenings (counters are per process)
  const auto tier_stats = [&](StoreTier t) { return store->stats().tiers[static_cast<size_t>(t)]; };
  for (int step = 0; step < 800; ++step) {
    const int64_t i = std::uniform_int_distribution<int64_t>(1, 80)(rng);
    const int op = std::uniform_int_distribution<int>(0, 11)(rng);
    if (op < 4) {
      PutOptions p;
      p.pin = op == 0;
      if (store->put(key(i), blob_of(i, 4096 + 256 * (i % 8)), p).is_ok() && p.pin) pinned.insert(i);
    } else if (op < 7) {
      (void)store->get(key(i), GetOptions{op < 6});  // a promotion from disk to host, or a read in place
    } else if (op < 9) {
      if (store->pin(key(i)).is_ok()) pinned.insert(i);
    } else if (op < 10) {
      if (store->unpin(key(i)).is_ok()) pinned.erase(i);
    } else if (op < 11) {
      if (store->erase(key(i)).is_ok()) pinned.erase(i);
    } else if (step % 7 == 0) {
      for (const TierStats& t : store->stats().tiers) evictions += t.evictions;
      store.reset();
      store = std::make_unique<ChunkStore>(o);
      pinned.clear();
    }
    store->verify_integrity();  // every tier's entries, bytes and pinned entries against a walk of all entries
    // And against this test's own count: a pinned entry is never evicted, so every pin it made is held, on disk
    // (write-through) and in at most one memory tier.
    int64_t in_memory = 0;
    for (int64_t p : pinned) in_memory += store->residence(key(p)) == StoreTier::kHost ? 1 : 0;
    REQUIRE(tier_stats(StoreTier::kDisk).pinned_entries == static_cast<int64_t>(pinned.size()));
    REQUIRE(tier_stats(StoreTier::kHost).pinned_entries == in_memory);
  }
  for (const TierStats& t : store->stats().tiers) evictions += t.evictions;
  CHECK(evictions > 0);
}

}  // namespace ORBIT_TEST_FILE
