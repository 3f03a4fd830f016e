// A canonical is the forward of its chunk behind nothing, so an encode loads the longest leading run of its
// tokens already computed there (another chunk's canonical, or a forward at the front of a window) and
// forwards only the rest (KvStore::canonical). Checked against a whole encode by an engine that has seen
// nothing else, and through the engine's critical and background forward counts.
#include "orbit_catch.h"

#include <random>

#include "orbit/engine.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::max_abs_diff;
using orbit::test::open_stories_small_pages;
using orbit::test::random_tokens;

namespace {

WindowOptions with(const std::string& spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return o;
}

std::vector<int64_t> joined(std::vector<int64_t> head, const std::vector<int64_t>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// `tokens` alone at the front of a fresh engine's window: the canonical encoded whole.
InstanceKV whole_encode(const std::vector<int64_t>& tokens) {
  auto engine = open_stories_small_pages();
  Window w = engine->new_window(with("prefix"));
  const ApplyReport r = w.admit(engine->add_tokens(tokens));
  REQUIRE(r.forward_tokens == Approx(static_cast<double>(tokens.size())));
  return w.kv(r.added.front());
}

// Canonicals grown from a shared head forward their tail after the head's rows, the whole encode forwards
// every token at once: the same sums in other orders (projections of 9 rows against 17), so their float32
// KV agrees to about 1e-5, not to the bit (worst 1.1e-5, with OpenBLAS's SkylakeX kernels, over the CPU
// kernels, BLAS cores and thread counts tried). A tail forwarded without its head's KV is off by far more
// (blind reuse on this model: 3.5).
constexpr double kKvTolerance = 2e-4;

// The largest difference between two instances' KV, over every layer's K and V.
double kv_diff(const InstanceKV& a, const InstanceKV& b) {
  REQUIRE(a.length == b.length);
  REQUIRE(a.k.size() == b.k.size());
  double m = 0;
  for (std::size_t l = 0; l < a.k.size(); ++l) {
    m = std::max({m, max_abs_diff(a.k[l], b.k[l]), max_abs_diff(a.v[l], b.v[l])});
  }
  return m;
}

// Tails that differ from their first token on, so the shared run is exactly the head.
std::pair<std::vector<int64_t>, std::vector<int64_t>> two_tails(std::mt19937_64& rng, int64_t n1, int64_t n2) {
  std::vector<int64_t> a = random_tokens(rng, n1), b = random_tokens(rng, n2);
  while (b.front() == a.front()) b.front() = random_tokens(rng, 1).front();
  return {a, b};
}

}  // namespace

TEST_CASE("a canonical forwards only the tokens after the run an earlier canonical shares", "[reuse][canonical]") {
  std::mt19937_64 rng(41);
  // A shared BOS alone (two text chunks tokenized with BOS), and a longer shared run.
  for (const int64_t shared : {1, 6}) {
    INFO("shared " << shared);
    std::vector<int64_t> head = {1};
    for (int64_t t : random_tokens(rng, shared - 1)) head.push_back(t);
    const auto [tail1, tail2] = two_tails(rng, 5, 7);
    const std::vector<int64_t> first = joined(head, tail1), second = joined(head, tail2);
    auto engine = open_stories_small_pages();
    Window a = engine->new_window(with("prefix"));
    CHECK(a.admit(engine->add_tokens(first)).forward_tokens == Approx(static_cast<double>(first.size())));
    const EngineStats before = engine->stats();
    Window b = engine->new_window(with("prefix"));
    const ChunkRef chunk = engine->add_tokens(second);
    const Plan p = b.plan_admit(chunk);
    INFO(p.describe());
    REQUIRE(p.steps.back().how == ServeActionId::kCanonical);
    const ApplyReport r = b.apply(p).value();
    CHECK(r.forward_tokens == Approx(7));
    CHECK(r.canonicals_encoded == 1);
    const EngineStats after = engine->stats();
    CHECK(after.forward_tokens - before.forward_tokens == Approx(7));
    CHECK(after.critical_forward_tokens - before.critical_forward_tokens == Approx(7));
    CHECK(after.background_forward_tokens - before.background_forward_tokens == Approx(0));
    CHECK(after.canonicals_encoded - before.canonicals_encoded == 1);
    CHECK(kv_diff(b.kv(r.added.front()), whole_encode(second)) < kKvTolerance);
    // Stored, it is read again with no forward.
    Window c = engine->new_window(with("prefix"));
    CHECK(c.admit(chunk).forward_tokens == 0);
  }
}

TEST_CASE("a canonical encoded in the background counts only the tokens it forwarded", "[reuse][canonical]") {
  std::mt19937_64 rng(42);
  std::vector<int64_t> head = {1};
  for (int64_t t : random_tokens(rng, 7)) head.push_back(t);
  const auto [tail1, tail2] = two_tails(rng, 6, 9);
  const std::vector<int64_t> first = joined(head, tail1), second = joined(head, tail2);
  std::vector<int64_t> front = random_tokens(rng, 10);
  if (front.front() == 1) front.front() = 2;
  auto engine = open_stories_small_pages(BackgroundMode::kInline);
  Window a = engine->new_window(with("default"));
  a.admit(engine->add_tokens(first));  // its canonical, behind nothing
  a.admit(engine->add_tokens(front));
  const EngineStats before = engine->stats();
  // Behind `front` the chunk is forwarded in context and its canonical encoded for the patch.
  const ChunkRef chunk = engine->add_tokens(second);
  const Plan p = a.plan_admit(chunk);
  INFO(p.describe());
  REQUIRE(p.steps.back().how == ServeActionId::kForm);
  const ApplyReport r = a.apply(p).value();
  CHECK(r.forward_tokens == Approx(static_cast<double>(second.size())));
  const EngineStats after = engine->stats();
  CHECK(after.critical_forward_tokens - before.critical_forward_tokens == Approx(second.size()));
  CHECK(after.background_forward_tokens - before.background_forward_tokens == Approx(9));
  CHECK(after.canonicals_encoded - before.canonicals_encoded == 1);
  // The canonical it stored is the whole encode's.
  Window b = engine->new_window(with("prefix"));
  const ApplyReport rb = b.admit(chunk);
  CHECK(rb.forward_tokens == 0);
  CHECK(kv_diff(b.kv(rb.added.front()), whole_encode(second)) < kKvTolerance);
}

TEST_CASE("an embeddings chunk is encoded whole: it has no tokens to match", "[reuse][canonical]") {
  std::mt19937_64 rng(43);
  auto engine = open_stories_small_pages();
  const int64_t hidden = engine->model_info().hidden_size;
  std::vector<float> rows(static_cast<std::size_t>(4 * hidden));
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (float& x : rows) x = d(rng);
  EmbeddingChunk e;
  e.embeddings = view_of(rows, {4, hidden});
  Window a = engine->new_window(with("prefix"));
  a.admit(engine->add_tokens(joined({1}, random_tokens(rng, 5))));
  Window b = engine->new_window(with("prefix"));
  CHECK(b.admit(engine->add_embeddings(e)).forward_tokens == Approx(4));
}

}  // namespace ORBIT_TEST_FILE
