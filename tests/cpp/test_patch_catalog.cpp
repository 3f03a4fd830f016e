// The patch catalog's bounds (sdk/src/plan/patch_catalog.h): a long-running engine forms patches for chunk
// after chunk, and the catalog must stay within its bytes, each chunk within its records and sensitivities,
// while the chunks in use keep what they know. Links the planning library (orbit_plan) and Catch only.
#include <catch2/catch.hpp>

#include <malloc.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "plan/patch_catalog.h"
#include "plan/window_meta.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::detail;

namespace {

std::string key(const std::string& prefix, int i) { return prefix + std::to_string(i) + std::string(48, 'x'); }

// A patch record formed under a context of three keys (the i-th of each).
PatchRecord record(const std::string& patch, int i) {
  PatchRecord r;
  r.key = patch;
  r.context = {key("ctx-a", i), key("ctx-b", i), key("ctx-c", i)};
  r.variant = "r8";
  return r;
}

void add(PatchCatalog& catalog, const std::string& chunk, const std::string& patch, int i) {
  catalog.add(chunk, record(patch, i), {10, 20, 30});
}

}  // namespace

TEST_CASE("the catalog stays within its bytes, forgetting the least recently used chunks", "[patch_catalog]") {
  const std::size_t max_bytes = 64 << 10;
  PatchCatalog catalog(max_bytes);
  const std::string hot = key("hot-chunk", 0);
  add(catalog, hot, key("hot-patch", 0), 0);
  catalog.set_formed(hot, {key("hot-patch", 0)}, 0.25, 0.5);
  std::size_t most_chunks = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string chunk = key("chunk", i);
    add(catalog, chunk, key("patch", i), i);
    catalog.set_formed(chunk, {key("patch", i)}, 0.1, 0.01 * (i % 7));
    catalog.record_measured_sensitivity(key("turn", i), 0.2);
    if (i % 16 == 0) REQUIRE(catalog.sensitivity(hot) == Approx(0.5));  // in use: kept
    REQUIRE(catalog.bytes() <= max_bytes);
    most_chunks = std::max(most_chunks, catalog.chunks());
  }
  CHECK(most_chunks < 1000);
  CHECK(catalog.records() <= catalog.chunks());

  // The chunk used throughout is known whole; the newest chunks are too; the oldest are forgotten.
  const auto hot_facts = catalog.facts(hot, key("hot-patch", 0));
  REQUIRE(hot_facts.has_value());
  CHECK(hot_facts->residual == Approx(0.25));
  const auto newest = catalog.facts(key("chunk", 19999), key("patch", 19999));
  REQUIRE(newest.has_value());
  CHECK(newest->residual == Approx(0.1));
  CHECK(catalog.sensitivity(key("turn", 19999)) == Approx(0.2));
  CHECK_FALSE(catalog.facts(key("chunk", 0), key("patch", 0)).has_value());
  CHECK(catalog.sensitivity(key("chunk", 0)) == -1);
  CHECK(catalog.sensitivity(key("turn", 0)) == -1);
  CHECK(catalog.closest(key("chunk", 0), PatchShape{"r8"}, {}, 0, 16).empty());

  // A forgotten chunk is learned again as its patches are formed or read.
  add(catalog, key("chunk", 0), key("patch", 0), 0);
  catalog.set_formed(key("chunk", 0), {key("patch", 0)}, 0.3, 0.4);
  CHECK(catalog.sensitivity(key("chunk", 0)) == Approx(0.4));
  catalog.note_read(key("chunk", 1), key("patch", 1), 0.6);
  CHECK(catalog.sensitivity(key("chunk", 1)) == Approx(0.6));
}

TEST_CASE("a chunk keeps its newest records and sensitivities", "[patch_catalog]") {
  PatchCatalog catalog(PatchCatalog::kDefaultMaxBytes, 8);
  const std::string chunk = key("chunk", 0);
  for (int i = 0; i < 1000; ++i) {
    add(catalog, chunk, key("patch", i), i);
    catalog.set_formed(chunk, {key("patch", i)}, 0.1, i < 992 ? 100.0 : 1.0);
  }
  CHECK(catalog.chunks() == 1);
  CHECK(catalog.records() == 8);
  CHECK(catalog.facts(chunk, key("patch", 999)).has_value());
  CHECK(catalog.facts(chunk, key("patch", 992)).has_value());
  CHECK_FALSE(catalog.facts(chunk, key("patch", 991)).has_value());
  // The mean is over the newest 8 sensitivities, each 1.
  CHECK(catalog.sensitivity(chunk) == Approx(1.0));

  // Stale lookups compare the newest records; the one formed under the same context is closest.
  // The context patch 995 was formed under, weighted as add() weighs it.
  const PatchRecord formed = record(key("patch", 995), 995);
  const std::vector<double> lengths = {10, 20, 30};
  std::unordered_map<uint64_t, double> context;
  double total = 0;
  for (std::size_t i = 0; i < formed.context.size(); ++i) {
    context[context_key_hash(formed.context[i])] += lengths[i];
    total += lengths[i];
  }
  const auto candidates = catalog.closest(chunk, PatchShape{"r8"}, context, total, 16);
  REQUIRE(candidates.size() == 8);
  CHECK(candidates.front().key == key("patch", 995));
  CHECK(candidates.front().divergence == Approx(0.0));
}

TEST_CASE("a stale lookup finds only patches at the asked ranks or higher", "[patch_catalog]") {
  PatchCatalog catalog;
  const std::string chunk = key("chunk", 0);
  // The same context, formed at rank 4, 16 and full (32 for this chunk), newest last.
  const std::vector<std::pair<int64_t, int64_t>> ranks = {{4, 4}, {16, 16}, {32, 32}, {16, 4}};
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    PatchRecord r = record(key("patch", static_cast<int>(i)), 0);
    r.rank_k = ranks[i].first;
    r.rank_v = ranks[i].second;
    catalog.add(chunk, r, {10, 20, 30});
  }
  auto found = [&](int64_t rank_k, int64_t rank_v) {
    std::vector<std::string> keys;
    for (const auto& c : catalog.closest(chunk, PatchShape{"r8", rank_k, rank_v}, {}, 0, 16)) keys.push_back(c.key);
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  CHECK(found(4, 4) == std::vector<std::string>{key("patch", 0), key("patch", 1), key("patch", 2), key("patch", 3)});
  CHECK(found(16, 16) == std::vector<std::string>{key("patch", 1), key("patch", 2)});
  CHECK(found(16, 8) == std::vector<std::string>{key("patch", 1), key("patch", 2)});
  CHECK(found(8, 4) == std::vector<std::string>{key("patch", 1), key("patch", 2), key("patch", 3)});
  CHECK(found(32, 32) == std::vector<std::string>{key("patch", 2)});
  CHECK(found(33, 32).empty());
  CHECK(catalog.closest(chunk, PatchShape{"deep@0.9", 4, 4}, {}, 0, 16).empty());  // another variant
  // Each candidate carries the ranks its factors keep (what a stale step reads), not the asked ones.
  const auto all = catalog.closest(chunk, PatchShape{"r8", 4, 4}, {}, 0, 16);
  REQUIRE(all.size() == ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string k = key("patch", static_cast<int>(i));
    const auto c = std::find_if(all.begin(), all.end(), [&](const auto& x) { return x.key == k; });
    REQUIRE(c != all.end());
    CHECK(std::make_pair(c->rank_k, c->rank_v) == ranks[i]);
  }
}

TEST_CASE("the default catalog stays within its bytes over many distinct chunks", "[patch_catalog]") {
  PatchCatalog catalog;
  for (int i = 0; i < 200000; ++i) {
    const std::string chunk = key("chunk", i);
    add(catalog, chunk, key("patch", i), i);
    catalog.set_formed(chunk, {key("patch", i)}, 0.1, 0.5);
  }
  CHECK(catalog.bytes() <= PatchCatalog::kDefaultMaxBytes);
  CHECK(catalog.chunks() < 200000);
  CHECK(catalog.chunks() > 10000);  // some 16 MiB of small records
  CHECK(catalog.facts(key("chunk", 199999), key("patch", 199999)).has_value());
}

TEST_CASE("the worst patch sensitivity is the largest formed or read, forgotten chunks' included, turns' not",
          "[patch_catalog]") {
  PatchCatalog catalog(16 << 10);
  CHECK(catalog.worst_patch_sensitivity() == -1);  // nothing measured: the planner keeps the reference
  add(catalog, key("chunk", 0), key("patch", 0), 0);
  catalog.set_formed(key("chunk", 0), {key("patch", 0)}, 0.1, 0.05);
  catalog.note_read(key("chunk", 1), key("patch", 1), 0.2);
  catalog.record_measured_sensitivity(key("turn", 0), 0.9);  // a turn's: another quantity's prior
  CHECK(catalog.worst_patch_sensitivity() == Approx(0.2));
  // Forgetting chunk 1 (the catalog's bytes spent on others) keeps the worst case it measured.
  for (int i = 2; i < 2000; ++i) {
    add(catalog, key("chunk", i), key("patch", i), i);
    catalog.set_formed(key("chunk", i), {key("patch", i)}, 0.1, 0.01);
  }
  REQUIRE(catalog.sensitivity(key("chunk", 1)) == -1);
  CHECK(catalog.worst_patch_sensitivity() == Approx(0.2));
}

TEST_CASE("the catalog's bytes are what it takes on the heap, within a tenth", "[patch_catalog]") {
  // The bound is only as good as the count: strings and vectors are charged at their heap blocks (capacity and
  // the allocator's header), the hash map's and recency list's nodes at theirs. Measured by glibc's allocator
  // (mallinfo2: its main arena, this thread's, and the blocks it maps on their own, such as the map's buckets),
  // which a sanitizer's replaces.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("not measured: a sanitizer's allocator is not glibc's");
  return;
#endif
  const auto in_use = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const std::size_t before = in_use();
  PatchCatalog catalog(std::size_t{1} << 30);
  for (int i = 0; i < 20000; ++i) {
    const std::string chunk = key("chunk", i);
    add(catalog, chunk, key("patch", i), i);
    catalog.set_formed(chunk, {key("patch", i)}, 0.1, 0.01 * (i % 7));
    catalog.record_measured_sensitivity(key("turn", i), 0.2);
  }
  const double heap = static_cast<double>(in_use() - before);
  const double counted = static_cast<double>(catalog.bytes());
  INFO("counted " << counted << " bytes, the heap grew by " << heap);
  CHECK(counted >= 0.9 * heap);
  CHECK(counted <= 1.1 * heap);
}

TEST_CASE("formed records round-trip through a directory's form, and a chunk's directory is claimed once",
          "[patch_catalog]") {
  PatchCatalog catalog;
  const std::string chunk = key("chunk", 0);
  CHECK(catalog.claim_directory(chunk));
  CHECK_FALSE(catalog.claim_directory(chunk));
  add(catalog, chunk, "p0", 0);
  add(catalog, chunk, "p1", 1);
  CHECK(catalog.formed_records(chunk, 16).empty());  // nothing formed yet
  catalog.set_formed(chunk, {"p0"}, 0.5, 0.2);
  catalog.set_formed(chunk, {"p1"}, 0.25, 0.1);
  const std::vector<PatchRecord> formed = catalog.formed_records(chunk, 1);
  REQUIRE(formed.size() == 1);
  CHECK(formed[0].key == "p1");  // the newest
  // Another catalog (a reopened engine) given the record as a directory holds it (its context as hashes and
  // tokens, no keys) finds it as the first did.
  PatchRecord read = formed[0];
  read.context.clear();
  PatchCatalog later;
  later.add(chunk, read, {});
  std::unordered_map<uint64_t, double> context;
  for (const auto& [hash, tokens] : formed[0].context_tokens) context[hash] = tokens;
  const auto here = catalog.closest(chunk, PatchShape{"r8"}, context, 60, 16);
  const auto there = later.closest(chunk, PatchShape{"r8"}, context, 60, 16);
  REQUIRE(!there.empty());
  CHECK(there[0].key == "p1");
  CHECK(there[0].divergence == here[0].divergence);
  CHECK(later.facts(chunk, "p1")->residual == 0.25);
  CHECK(later.facts(chunk, "p1")->sensitivity == 0.1);
}

}  // namespace ORBIT_TEST_FILE
