// DecodeCache (orbit/runtime/decode_cache.h): sequences whose pasts are slots of one cache, decoded by
// Model::forward_batch step by step (prefills of several lengths, then single tokens; a slot forked midway,
// a slot closed and its rows reused out of slot order, a batch mixing cached and plain pasts), give at every
// step the logits and content a plain forward over the same past gives, within the float32 bound
// (float_tolerance.h), for every attention family, M-RoPE and dynamic-NTK RoPE (keys rotated when read);
// slots opened with keep_content keep exactly the content the forwards returned (a fork's copied, a reused
// slot's dropped), in buffers that shrink as keeping slots close, stay for the next burst that keeps as
// much (written over their stale rows) and go after a smaller one; the main buffers
// shrink when a large batch ends (the slot left decoding bit for bit as before), stay for the next burst
// when the last slot of one that used a quarter of them closes, and go after a burst that used less;
// and misuse is refused by name.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include "forward_batch_cases.h"
#include "orbit/common/error.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/loader.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::case_tokens;
using orbit::test::contiguous_past;

namespace {

// One sequence decoded two ways: a plain past grown by its rows, and a cache slot.
struct Twin {
  PastKV plain;
  int64_t slot = -1;
  int64_t next = 0;  // the next input position
  std::vector<int64_t> input;
  bool keep = false;              // its slot keeps content
  std::vector<LayerKV> returned;  // with keep: the content its cached forwards returned, concatenated
};

void append(std::vector<LayerKV>& to, const std::vector<LayerKV>& rows) {
  if (to.empty()) {
    to = rows;
    return;
  }
  for (std::size_t l = 0; l < to.size(); ++l) to[l] = {at::cat({to[l].k, rows[l].k}), at::cat({to[l].v, rows[l].v})};
}

// A keeping slot's kept rows are, bit for bit, the content its forwards returned.
void check_kept(const DecodeCache& cache, const Twin& t) {
  const int64_t rows = t.returned.front().k.size(0);
  REQUIRE(cache.kept_rows(t.slot) == rows);
  const std::vector<LayerKV> kept = cache.kept(t.slot, 0, rows);
  for (std::size_t l = 0; l < kept.size(); ++l) {
    CHECK(at::equal(kept[l].k, t.returned[l].k));
    CHECK(at::equal(kept[l].v, t.returned[l].v));
  }
  const std::vector<LayerKV> last = cache.kept(t.slot, rows - 1, 1);
  CHECK(at::equal(last.back().v, t.returned.back().v.narrow(0, rows - 1, 1)));
}

void grow(PastKV& past, const ForwardResult& r, const at::Tensor& positions) {
  if (past.length() == 0) {
    past.layers = r.content;
    past.positions = positions;
    return;
  }
  if (past.layers.empty()) {  // paged, nothing after the pages yet
    past.layers = r.content;
  } else {
    for (std::size_t l = 0; l < past.layers.size(); ++l) {
      past.layers[l].k = at::cat({past.layers[l].k, r.content[l].k});
      past.layers[l].v = at::cat({past.layers[l].v, r.content[l].v});
    }
  }
  past.positions = at::cat({past.positions, positions}, -1);
}

// One step: every twin's input through the cache in one forward_batch and alone over its plain past.
double step(const Model& m, DecodeCache& cache, std::vector<Twin>& twins, int64_t keys_bound) {
  std::vector<ForwardInput> inputs(twins.size());
  std::vector<PastKV> cached(twins.size());
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  std::vector<SequenceForward> batch;
  for (std::size_t i = 0; i < twins.size(); ++i) {
    inputs[i].tokens = twins[i].input;
    inputs[i].positions =
        at::arange(twins[i].next, twins[i].next + static_cast<int64_t>(twins[i].input.size()), at::kLong);
    cached[i] = cache.past(twins[i].slot);
    batch.push_back({&inputs[i], &cached[i], &o});
  }
  const std::vector<ForwardResult> got = m.forward_batch(batch);
  const auto bound = orbit::test::float32_bound(m, keys_bound);
  double worst = 0;
  for (std::size_t i = 0; i < twins.size(); ++i) {
    Twin& t = twins[i];
    if (t.keep) append(t.returned, got[i].content);
    const ForwardResult want = m.forward(inputs[i], t.plain.length() > 0 ? &t.plain : nullptr, o);
    const double diff = orbit::test::max_abs_diff(got[i].logits.to(at::kCPU), want.logits.to(at::kCPU));
    CHECK(diff <= bound(orbit::test::largest(want.logits), "logits"));
    worst = std::max(worst, diff);
    for (std::size_t l = 0; l < want.content.size(); ++l) {
      CHECK(orbit::test::max_abs_diff(got[i].content[l].k, want.content[l].k) <=
            bound(orbit::test::largest(want.content[l].k), "content"));
    }
    grow(t.plain, want, inputs[i].positions);
    CHECK(cache.length(t.slot) == t.plain.length());
    t.next += static_cast<int64_t>(t.input.size());
    t.input = {want.logits[-1].argmax().item<int64_t>()};
  }
  return worst;
}

void check_model(const Model& m, const std::string& name) {
  INFO("model " << name);
  DecodeCache cache(m);
  orbit::test::PagedScenario paged = orbit::test::make_paged_scenario(m, 21, 13, 5, 8, 11);
  std::vector<Twin> twins(4);
  twins[0].plain = *contiguous_past(m, case_tokens(m, 9, 1));
  twins[1].plain = *contiguous_past(m, case_tokens(m, 30, 2));
  twins[2].plain = make_paged_past(paged.paged, paged.positions);
  for (std::size_t i = 0; i < twins.size(); ++i) {
    Twin& t = twins[i];
    t.keep = i != 3;  // R = 1's group mixes keeping and other slots
    t.slot = cache.open(t.plain.length() > 0 ? &t.plain : nullptr, t.keep);
    t.next = i == 2 ? paged.query_start : t.plain.length();
    t.input = case_tokens(m, i % 2 == 0 ? 3 : 1, static_cast<int64_t>(10 + i));  // R = 3 and R = 1 groups
  }
  double worst = 0;
  for (int s = 0; s < 6; ++s) worst = std::max(worst, step(m, cache, twins, 64));
  for (const Twin& t : twins) {
    if (t.keep) check_kept(cache, t);
  }
  CHECK(cache.kept_rows(twins[3].slot) == 0);
  // A branch: twin 1's slot forked, decoding other tokens from here.
  Twin branch = twins[1];
  branch.slot = cache.fork(twins[1].slot);
  branch.input = {(twins[1].input[0] + 1) % m.config().vocab_size};
  twins.push_back(branch);
  // Twin 0 leaves; a new sequence takes its slot (below the others: out of slot order).
  cache.close(twins[0].slot);
  twins.erase(twins.begin());
  Twin fresh;
  fresh.plain = *contiguous_past(m, case_tokens(m, 5, 3));
  fresh.slot = cache.open(&fresh.plain);
  fresh.next = 5;
  fresh.input = case_tokens(m, 1, 20);
  twins.push_back(fresh);
  for (int s = 0; s < 6; ++s) worst = std::max(worst, step(m, cache, twins, 64));
  CHECK(cache.open_slots() == 5);
  for (const Twin& t : twins) {
    if (t.keep) check_kept(cache, t);  // twin 1 and its branch (the fork copied the kept rows), twin 2
  }
  CHECK(cache.kept_rows(twins.back().slot) == 0);  // twin 0's slot, reopened without keep_content
  CHECK_THROWS_WITH(cache.kept(twins.back().slot, 0, 1), Contains("opened without keep_content"));
  WARN(name << ": largest logit difference over 12 steps " << worst << ", cache " << cache.bytes() << " bytes");
}

std::unique_ptr<Model> generated(ModelConfig config) {
  static orbit::test::TempDir dir;
  static int n = 0;
  GeneratorOptions o;
  o.config = std::move(config);
  o.seed = 5;
  o.init_std = 0.05;
  const std::string path = (dir.path() / ("m" + std::to_string(n++))).string();
  generate_model(o, path);
  return load_model(path);
}

}  // namespace

TEST_CASE("decode cache: slots decode as plain pasts do, every family", "[decode_cache]") {
  for (const std::string& name : orbit::test::device_test_models()) {
    check_model(*load_model(orbit::test::device_test_model_dir(name)), name);
  }
  check_model(*load_model(orbit::test::stories_path()), "stories260K");
}

TEST_CASE("decode cache: dynamic-NTK RoPE rotates keys when read", "[decode_cache]") {
  ModelConfig c = generator_preset("tiny-llama");
  c.rope.scaling = RopeScaling::kDynamicNtk;
  c.rope.factor = 2.0;
  c.max_position_embeddings = c.rope.max_position_embeddings = 40;  // decoding passes it: theta grows
  check_model(*generated(c), "tiny-llama dynamic NTK");
}

TEST_CASE("decode cache: misuse is refused by name", "[decode_cache]") {
  const auto m = load_model(orbit::test::stories_path());
  const auto other = load_model(orbit::test::device_test_model_dir("llama-d64-g4"));
  DecodeCache cache(*m);
  const int64_t a = cache.open(nullptr);
  ForwardInput in;
  in.tokens = {5, 6};
  PastKV p = cache.past(a);
  CHECK_THROWS_WITH(m->forward_batch({{&in, &p}, {&in, &p}}), Contains("is the past of two sequences of one batch"));
  ForwardOptions partial;
  partial.recompute = at::tensor(std::vector<int64_t>{1}, at::kLong);
  CHECK_THROWS_WITH(m->forward(in, &p, partial), Contains("partial recompute over a decode cache's past"));
  ForwardOptions few;
  few.logits = LogitsMode::kNone;
  few.max_layers = 1;
  CHECK_THROWS_WITH(m->forward(in, &p, few), Contains("max_layers over a decode cache's past"));
  ForwardInput other_in;
  other_in.tokens = {5};
  CHECK_THROWS_WITH(other->forward(other_in, &p), Contains("another model's decode cache"));
  cache.close(a);
  CHECK_THROWS_WITH(cache.past(a), Contains("slot 0 of the decode cache is not open"));
  CHECK_THROWS_WITH(cache.close(a), Contains("DecodeCache::close: slot 0"));
  // A forward that failed its checks left the slot as it was.
  const int64_t b = cache.open(nullptr);
  CHECK(cache.length(b) == 0);
  PastKV pb = cache.past(b);
  m->forward(in, &pb);
  CHECK(cache.length(b) == 2);
}

// One long answer does not keep its memory: closing it shrinks the kept buffers to what the open slots keep
// (their rows intact), closing the last keeping slot releases them, and a slot opened later keeps again.
TEST_CASE("decode cache: kept content shrinks and is released as slots close", "[decode_cache]") {
  const auto m = load_model(orbit::test::stories_path());
  DecodeCache cache(*m);
  auto forward = [&](int64_t slot, int64_t n, int64_t seed) {
    ForwardInput in;
    in.tokens = case_tokens(*m, n, seed);
    PastKV p = cache.past(slot);
    return m->forward(in, &p);
  };
  auto same = [](const std::vector<LayerKV>& a, const std::vector<LayerKV>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t l = 0; l < a.size(); ++l) {
      CHECK(at::equal(a[l].k, b[l].k));
      CHECK(at::equal(a[l].v, b[l].v));
    }
  };
  const int64_t longest = cache.open(nullptr, true);
  const int64_t short_one = cache.open(nullptr, true);
  const int64_t plain = cache.open(nullptr);
  forward(longest, 200, 1);
  const ForwardResult shorter = forward(short_one, 4, 2);
  forward(plain, 4, 3);
  const int64_t all_kept = cache.bytes();
  cache.close(longest);
  const int64_t one_short_kept = cache.bytes();
  CHECK(one_short_kept < all_kept);  // 4 of 200+ rows: shrunk
  REQUIRE(cache.kept_rows(short_one) == 4);
  same(cache.kept(short_one, 0, 4), shorter.content);
  cache.close(short_one);
  // No open slot keeps a row, but a slot of this burst kept 200: the 8 rows stay for the next keeping slot.
  CHECK(cache.bytes() == one_short_kept);
  const int64_t again = cache.open(nullptr, true);
  const ForwardResult kept_again = forward(again, 3, 4);
  REQUIRE(cache.kept_rows(again) == 3);
  same(cache.kept(again, 0, 3), kept_again.content);  // written over the stale rows
  CHECK(cache.bytes() == one_short_kept);             // not grown again
  CHECK(cache.length(plain) == 4);
  cache.close(again);
  cache.close(plain);
  CHECK(cache.bytes() == one_short_kept);  // the burst used them: kept, main and kept buffers
  const int64_t small = cache.open(nullptr, true);
  const ForwardResult small_result = forward(small, 1, 5);
  same(cache.kept(small, 0, 1), small_result.content);
  cache.close(small);
  CHECK(cache.bytes() == 0);  // a burst of 1 row in buffers of 8: both released
}

// Bursts of the same size reuse the kept buffers: a burst of keeping slots that ends leaves them (and the
// main buffers) for the next, whose slots keep, over the stale rows, exactly what their forwards returned,
// without growing them; a smaller burst after them releases both.
TEST_CASE("decode cache: kept content stays for the next burst of the same size", "[decode_cache]") {
  const auto m = load_model(orbit::test::stories_path());
  DecodeCache cache(*m);
  int64_t held = 0;
  for (int64_t burst = 0; burst < 3; ++burst) {
    INFO("burst " << burst);
    std::vector<int64_t> slots;
    std::vector<std::vector<LayerKV>> returned(4);
    for (int64_t i = 0; i < 4; ++i) slots.push_back(cache.open(nullptr, true));
    for (int64_t step = 0; step < 3; ++step) {  // a 20-token query, then two single tokens
      for (std::size_t i = 0; i < slots.size(); ++i) {
        ForwardInput in;
        in.tokens = case_tokens(*m, step == 0 ? 20 : 1, 100 * burst + 10 * step + static_cast<int64_t>(i));
        PastKV p = cache.past(slots[i]);
        append(returned[i], m->forward(in, &p).content);
      }
    }
    if (burst > 0) CHECK(cache.bytes() == held);  // not grown again
    for (std::size_t i = 0; i < slots.size(); ++i) {
      REQUIRE(cache.kept_rows(slots[i]) == 22);
      const std::vector<LayerKV> kept = cache.kept(slots[i], 0, 22);
      for (std::size_t l = 0; l < kept.size(); ++l) {
        CHECK(at::equal(kept[l].k, returned[i][l].k));
        CHECK(at::equal(kept[l].v, returned[i][l].v));
      }
    }
    if (burst == 0) held = cache.bytes();
    for (int64_t slot : slots) cache.close(slot);
    CHECK(cache.bytes() == held);  // kept whole for the next burst
  }
  const int64_t one = cache.open(nullptr, true);
  ForwardInput in;
  in.tokens = case_tokens(*m, 3, 7);
  PastKV p = cache.past(one);
  const ForwardResult r = m->forward(in, &p);
  const std::vector<LayerKV> kept = cache.kept(one, 0, 3);
  CHECK(at::equal(kept.back().v, r.content.back().v));
  cache.close(one);
  CHECK(cache.bytes() == 0);  // 3 rows of one slot in buffers of 22 rows of 4: released
  // A burst of 8 slots, then one of a single slot keeping as many rows: the main buffers' 8 slots are too
  // many for it, and the kept buffers, whose slots are theirs, go with them.
  auto burst = [&](int64_t count, int64_t seed) {
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < count; ++i) slots.push_back(cache.open(nullptr, i == 0));
    std::vector<LayerKV> first;
    for (int64_t i = 0; i < count; ++i) {
      ForwardInput input;
      input.tokens = case_tokens(*m, 5, seed + i);
      PastKV past = cache.past(slots[static_cast<std::size_t>(i)]);
      const ForwardResult result = m->forward(input, &past);
      if (i == 0) first = result.content;
    }
    const std::vector<LayerKV> got = cache.kept(slots.front(), 0, 5);
    for (std::size_t l = 0; l < got.size(); ++l) CHECK(at::equal(got[l].k, first[l].k));
    for (int64_t slot : slots) cache.close(slot);
  };
  burst(8, 200);
  CHECK(cache.bytes() > 0);
  burst(1, 300);
  CHECK(cache.bytes() == 0);
  burst(1, 400);  // grown again from nothing
}

namespace {

// A large batch that ends does not keep its memory (keys, values, positions, the kept buffers' slots): with
// one short slot left the buffers shrink, that slot (and what it keeps) decodes on bit for bit as in a cache
// that never held the others, and a slot opened later grows them again. Closing every slot keeps them (the
// burst used more than a quarter of them), a slot opened then decodes over their stale rows bit for bit
// without growing them, and closing it, a burst that used less than a quarter of their rows, releases them.
void check_shrink(const Model& m, const std::string& name) {
  INFO("model " << name);
  DecodeCache cache(m), alone(m);
  auto forward = [&](DecodeCache& c, int64_t slot, int64_t n, int64_t seed) {
    ForwardInput in;
    in.tokens = case_tokens(m, n, seed);
    PastKV p = c.past(slot);
    return m.forward(in, &p);
  };
  auto same = [](const ForwardResult& a, const ForwardResult& b) {
    CHECK(at::equal(a.logits, b.logits));
    REQUIRE(a.content.size() == b.content.size());
    for (std::size_t l = 0; l < a.content.size(); ++l) CHECK(at::equal(a.content[l].v, b.content[l].v));
  };
  const int64_t kept = cache.open(nullptr, true), kept_alone = alone.open(nullptr, true);
  same(forward(cache, kept, 4, 1), forward(alone, kept_alone, 4, 1));
  std::vector<int64_t> others;
  for (int i = 0; i < 15; ++i) {
    others.push_back(cache.open(nullptr, i % 2 == 0));
    forward(cache, others.back(), 60, 2 + i);
  }
  const int64_t large = cache.bytes();
  for (int64_t slot : others) cache.close(slot);
  const int64_t small = cache.bytes();
  CHECK(small * 16 < large);  // 1 of 16 slots, about 8 of 64 rows
  for (int64_t t = 0; t < 3; ++t) same(forward(cache, kept, 1, 30 + t), forward(alone, kept_alone, 1, 30 + t));
  REQUIRE(cache.kept_rows(kept) == 7);
  const std::vector<LayerKV> got = cache.kept(kept, 0, 7), want = alone.kept(kept_alone, 0, 7);
  for (std::size_t l = 0; l < got.size(); ++l) CHECK(at::equal(got[l].k, want[l].k));
  const int64_t later = cache.open(nullptr), later_alone = alone.open(nullptr);
  same(forward(cache, later, 50, 40), forward(alone, later_alone, 50, 40));
  same(forward(cache, kept, 1, 41), forward(alone, kept_alone, 1, 41));
  CHECK(cache.open_slots() == 2);
  cache.close(kept);  // the last slot keeping content: the kept buffers stay (the burst kept 60 rows)
  const int64_t last = cache.bytes();
  cache.close(later);
  CHECK(cache.bytes() == last);  // the burst used 16 slots of 60 rows: kept whole for the next one
  const int64_t reopened = cache.open(nullptr);
  alone.close(kept_alone);
  same(forward(cache, reopened, 5, 50), forward(alone, alone.open(nullptr), 5, 50));  // over stale rows
  CHECK(cache.bytes() == last);                                                       // not grown again
  cache.close(reopened);
  CHECK(cache.bytes() == 0);  // a burst of 5 rows in buffers of 50: released, the kept buffers with them
}

}  // namespace

TEST_CASE("decode cache: the buffers shrink when a large batch ends, stay for the next burst, go after a small one",
          "[decode_cache]") {
  check_shrink(*load_model(orbit::test::stories_path()), "stories260K");
  ModelConfig c = generator_preset("tiny-llama");
  c.rope.scaling = RopeScaling::kDynamicNtk;  // the ATen path, which reads every row up to the longest
  c.rope.factor = 2.0;
  c.max_position_embeddings = c.rope.max_position_embeddings = 40;
  check_shrink(*generated(c), "tiny-llama dynamic NTK");
}

}  // namespace ORBIT_TEST_FILE
