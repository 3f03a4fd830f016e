// Decoding several sequences together (orbit/decode_batch.h): generate_many, a DecodeBatch that sequences
// join and leave between steps, and Window::generate_n over forks give every sequence what Window::generate
// gives it alone (the same tokens, log probabilities within the float32 bound, the same stop reasons), keep
// each answer for exact reuse, cancel one sequence without the others, and refuse bad requests by name.
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "orbit/decode_batch.h"
#include "orbit/engine.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Matchers::Contains;
using orbit::test::open_stories_small_pages;
using orbit::test::random_tokens;

namespace {

// A window of a system turn, a chunk of its own and a user turn.
Window story_window(Engine& engine, std::mt19937_64& rng, int64_t chunk_tokens) {
  Window w = engine.new_window();
  w.add_turn(random_tokens(rng, 5));
  w.admit(engine.add_tokens(random_tokens(rng, chunk_tokens)));
  w.add_turn(random_tokens(rng, 7));
  return w;
}

// Options of every kind a request may carry: greedy, sampled with top_p, penalties and a bias, logprobs.
std::vector<GenerateOptions> option_kinds() {
  std::vector<GenerateOptions> out(4);
  out[0].max_tokens = 12;
  out[1].max_tokens = 20;
  out[1].temperature = 0.9;
  out[1].top_p = 0.9;
  out[1].seed = 5;
  out[2].max_tokens = 7;
  out[2].presence_penalty = 1.5;
  out[2].frequency_penalty = 0.5;
  out[2].logit_bias = {{13, 3.0}, {40, -100.0}};
  out[3].max_tokens = 16;
  out[3].logprobs = true;
  out[3].top_logprobs = 3;
  out[3].stop_tokens = {1, 2};
  return out;
}

void check_same(const Generation& batched, const Generation& alone) {
  CHECK(batched.tokens == alone.tokens);
  CHECK(batched.stop_reason == alone.stop_reason);
  CHECK(batched.text == alone.text);
  REQUIRE(batched.logprobs.size() == alone.logprobs.size());
  for (std::size_t i = 0; i < alone.logprobs.size(); ++i) {
    CHECK(batched.logprobs[i].chosen.token == alone.logprobs[i].chosen.token);
    // float32 drift of stories260K's logits (float_tolerance.h: 5 layers, reductions up to 512) is ~1e-5.
    CHECK(std::abs(batched.logprobs[i].chosen.logprob - alone.logprobs[i].chosen.logprob) < 1e-4);
  }
}

}  // namespace

TEST_CASE("generate_many gives every window what generate gives it alone", "[decode][batch]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(41);
  std::vector<Window> windows;
  for (int64_t n : {8, 24, 40, 3, 16, 30}) windows.push_back(story_window(*engine, rng, n));
  const std::vector<GenerateOptions> kinds = option_kinds();
  std::vector<GenerateRequest> requests;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    requests.push_back({&windows[i], random_tokens(rng, 1 + static_cast<int64_t>(i % 3)), kinds[i % kinds.size()]});
  }
  // Alone first (each window's deferred work done, its reuse stored), then again alone for the reference of
  // the batched call: a second read of a window reads what the first stored, as the batched one will.
  for (const GenerateRequest& r : requests) r.window->generate(r.query, r.options);
  std::vector<Generation> alone;
  for (const GenerateRequest& r : requests) alone.push_back(r.window->generate(r.query, r.options));
  const std::vector<Generation> batched = generate_many(requests);
  REQUIRE(batched.size() == requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i);
    check_same(batched[i], alone[i]);
    CHECK(batched[i].prompt_forward_tokens == alone[i].prompt_forward_tokens);
  }
}

TEST_CASE("generate_many on fresh windows decodes what generate decodes", "[decode][batch]") {
  // Two engines with the same windows: one decodes them one by one, the other all at once.
  std::vector<std::vector<Generation>> results;
  for (bool together : {false, true}) {
    auto engine = open_stories_small_pages();
    std::mt19937_64 rng(42);
    std::vector<Window> windows;
    for (int64_t n : {12, 20, 5, 33}) windows.push_back(story_window(*engine, rng, n));
    const std::vector<GenerateOptions> kinds = option_kinds();
    std::vector<GenerateRequest> requests;
    for (std::size_t i = 0; i < windows.size(); ++i) requests.push_back({&windows[i], random_tokens(rng, 3), kinds[i]});
    if (together) {
      results.push_back(generate_many(requests));
    } else {
      results.emplace_back();
      for (const GenerateRequest& r : requests) results.back().push_back(r.window->generate(r.query, r.options));
    }
  }
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    INFO("request " << i);
    check_same(results[1][i], results[0][i]);
    CHECK(results[1][i].prompt_forward_tokens == results[0][i].prompt_forward_tokens);
  }
}

TEST_CASE("sequences join and leave a DecodeBatch between steps", "[decode][batch]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(43);
  std::vector<Window> windows;
  for (int64_t n : {10, 20, 30, 6, 14}) windows.push_back(story_window(*engine, rng, n));
  std::vector<std::vector<int64_t>> queries;
  for (std::size_t i = 0; i < windows.size(); ++i) queries.push_back(random_tokens(rng, 2));
  GenerateOptions o;
  std::vector<Generation> alone;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    o.max_tokens = 4 + 3 * static_cast<int64_t>(i);
    alone.push_back(windows[i].generate(queries[i], o));
  }
  DecodeBatch batch;
  std::map<uint64_t, std::size_t> which;
  std::map<std::size_t, Generation> got;
  std::vector<int64_t> sizes;
  std::size_t next = 0;
  for (int step = 0; next < windows.size() || !batch.empty(); ++step) {
    if (next < windows.size() && step % 2 == 0) {  // one joins every other step
      o.max_tokens = 4 + 3 * static_cast<int64_t>(next);
      which[batch.add({&windows[next], queries[next], o})] = next;
      ++next;
    }
    const DecodeStep s = batch.step();
    sizes.push_back(s.sequences);
    for (const auto& [id, g] : s.finished) got[which.at(id)] = g;
  }
  REQUIRE(got.size() == windows.size());
  for (std::size_t i = 0; i < windows.size(); ++i) {
    INFO("sequence " << i);
    check_same(got[i], alone[i]);
  }
  CHECK(*std::max_element(sizes.begin(), sizes.end()) >= 3);  // they overlapped
}

TEST_CASE("a sequence that joins with a longer past leaves the running ones' new rows in place", "[decode][batch]") {
  // The joining sequence's first forward (a query of 3 tokens) needs more rows than its slot was opened with,
  // so the cache grows during that step, after the running sequence's group (one token) placed its new row.
  // Two engines with the same windows: one decodes them one by one, the other with the join.
  std::vector<std::vector<Generation>> results;
  for (bool together : {false, true}) {
    auto engine = open_stories_small_pages();
    std::mt19937_64 rng(48);
    Window a = story_window(*engine, rng, 8), b = story_window(*engine, rng, 200);
    const std::vector<int64_t> qa = random_tokens(rng, 2), qb = random_tokens(rng, 3);
    GenerateOptions o;
    o.max_tokens = 10;
    o.logprobs = true;
    if (!together) {
      results.push_back({a.generate(qa, o), b.generate(qb, o)});
      continue;
    }
    DecodeBatch batch;
    const uint64_t ia = batch.add({&a, qa, o});
    std::map<uint64_t, Generation> got;
    for (int step = 0; !batch.empty(); ++step) {
      if (step == 2) batch.add({&b, qb, o});
      for (auto& [id, g] : batch.step().finished) got[id == ia ? 0 : 1] = g;
    }
    REQUIRE(got.size() == 2);
    results.push_back({got[0], got[1]});
  }
  for (std::size_t i = 0; i < 2; ++i) {
    INFO("sequence " << i);
    check_same(results[1][i], results[0][i]);
  }
}

TEST_CASE("generate_n decodes forks together: one query forward, each branch its seed", "[decode][batch][fork]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(44);
  Window w = story_window(*engine, rng, 20);
  const std::vector<int64_t> query = random_tokens(rng, 4);
  GenerateOptions o;
  o.max_tokens = 10;
  o.temperature = 1.0;
  o.seed = 100;
  Window reference = w.fork();  // the same KV, read alone
  const std::vector<Generation> together = w.generate_n(query, 5, o);
  REQUIRE(together.size() == 5);
  CHECK(together[0].prompt_forward_tokens == 4);
  std::set<std::vector<int64_t>> distinct;
  for (std::size_t i = 0; i < together.size(); ++i) {
    INFO("branch " << i);
    if (i > 0) CHECK(together[i].prompt_forward_tokens == 0);  // the first branch's forward, shared
    GenerateOptions branch = o;
    branch.seed = o.seed + (uint64_t{i} << 32);
    Window alone_window = reference.fork();
    const Generation alone = alone_window.generate(query, branch);
    CHECK(together[i].tokens == alone.tokens);
    distinct.insert(together[i].tokens);
  }
  CHECK(distinct.size() > 1);        // the seeds differ
  CHECK(w.instances().size() == 3);  // the window itself is unchanged
  o.temperature = 0;
  const std::vector<Generation> greedy = w.generate_n(query, 3, o);
  for (const Generation& g : greedy) CHECK(g.tokens == w.generate(query, o).tokens);
  CHECK_THROWS_WITH(w.generate_n(query, 0, o), Contains("generate_n: n = 0 must be >= 1"));
  // Refused before any fork is made: a million forks of a window once took over 20 GB of host memory.
  CHECK_THROWS_WITH(w.generate_n(query, Window::kMaxGenerateN + 1, o),
                    Contains("generate_n: n = 1025 must be <= 1024"));
  CHECK_THROWS_WITH(w.generate_n(query, int64_t{1} << 40, o), Contains("must be <= 1024"));
  CHECK(w.instances().size() == 3);
}

TEST_CASE("a batched answer is kept for exact reuse like a single one", "[decode][batch][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(45);
  Window a = story_window(*engine, rng, 18), b = story_window(*engine, rng, 26);
  const std::vector<int64_t> qa = random_tokens(rng, 4), qb = random_tokens(rng, 2);
  GenerateOptions o;
  o.max_tokens = 6;
  const std::vector<Generation> g = generate_many({{&a, qa, o}, {&b, qb, o}});
  for (auto [w, q, answer] : {std::make_tuple(&a, qa, g[0]), std::make_tuple(&b, qb, g[1])}) {
    std::vector<int64_t> turn = q;
    turn.insert(turn.end(), answer.tokens.begin(), answer.tokens.end());
    const Plan p = w->plan_add_turn(turn);
    INFO(p.describe());
    CHECK(p.forward_tokens == 0);
    CHECK(p.steps.back().how == ServeActionId::kReuse);
  }
}

TEST_CASE("one sequence of a batch cancels, ends or stops without the others", "[decode][batch]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(46);
  Window a = story_window(*engine, rng, 10), b = story_window(*engine, rng, 12), c = story_window(*engine, rng, 14);
  GenerateOptions cancel, none, full;
  cancel.max_tokens = 20;
  cancel.on_token = [](int64_t, int64_t index) { return index < 2; };
  none.max_tokens = 0;
  full.max_tokens = 9;
  for (GenerateOptions* each : {&cancel, &none, &full}) each->ignore_eos = true;  // lengths set by the options alone
  const std::vector<int64_t> q = random_tokens(rng, 2);
  const std::vector<Generation> g = generate_many({{&a, q, cancel}, {&b, q, none}, {&c, q, full}});
  CHECK(g[0].stop_reason == "cancelled");
  CHECK(g[0].tokens.size() == 3);
  CHECK(g[1].tokens.empty());
  CHECK(g[1].prompt_forward_tokens == 0);
  CHECK(g[2].tokens.size() == 9);
  CHECK(g[2].tokens == c.generate(q, full).tokens);
}

TEST_CASE("a held sequence takes no step until released, then decodes what it would have", "[decode][batch]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(47);
  Window a = story_window(*engine, rng, 10), b = story_window(*engine, rng, 12), fork_of_a = a.fork();
  const std::vector<int64_t> q = random_tokens(rng, 2);
  GenerateOptions o;
  o.max_tokens = 10;
  o.ignore_eos = true;  // every sequence runs its 10 steps (random content may end a story at once)
  o.logprobs = true;
  o.top_logprobs = 2;
  const Generation alone_a = a.generate(q, o), alone_b = b.generate(q, o);
  int64_t tokens_a = 0;
  GenerateOptions counted = o;
  counted.on_token = [&tokens_a](int64_t, int64_t) {
    ++tokens_a;
    return true;
  };
  DecodeBatch batch;
  const uint64_t ia = batch.add({&a, q, counted});
  const uint64_t ib = batch.add({&b, q, o});
  const uint64_t ifork = batch.add({&fork_of_a, q, o});  // shares a's first forward unless a is held then
  batch.hold(ia, true);                                  // held before its first forward
  std::map<uint64_t, Generation> got;
  for (int i = 0; i < 4; ++i) {
    const DecodeStep s = batch.step();
    CHECK(s.sequences == 2);  // b and the fork only
    for (const auto& [id, g] : s.finished) got[id] = g;
  }
  CHECK(tokens_a == 0);
  CHECK(batch.size() == 3);
  batch.hold(ia, false);
  batch.hold(ib, true);  // held in mid-answer
  for (int i = 0; i < 30 && batch.size() > 1; ++i) {
    for (const auto& [id, g] : batch.step().finished) got[id] = g;
  }
  CHECK(got.count(ib) == 0);
  batch.hold(ib, false);
  while (!batch.empty()) {
    for (const auto& [id, g] : batch.step().finished) got[id] = g;
  }
  CHECK(tokens_a == 10);
  check_same(got.at(ia), alone_a);
  check_same(got.at(ib), alone_b);
  check_same(got.at(ifork), alone_a);
  CHECK_THROWS_WITH(batch.hold(ia, true), Contains("DecodeBatch::hold: sequence") && Contains("is not running"));
}

TEST_CASE("generate_many refuses bad requests by name", "[decode][batch]") {
  auto engine = open_stories_small_pages();
  auto other = open_stories_small_pages();
  std::mt19937_64 rng(47);
  Window a = story_window(*engine, rng, 10), x = story_window(*other, rng, 10);
  GenerateOptions o, bad;
  bad.top_p = 2;
  const std::vector<int64_t> q = random_tokens(rng, 2);
  CHECK_THROWS_WITH(generate_many({{&a, q, o}, {&a, q, bad}}),
                    Contains("generate_many: request 1: generate: top_p = 2 must be in [0, 1]"));
  CHECK_THROWS_WITH(generate_many({{&a, q, o}, {&x, q, o}}), Contains("belongs to another engine"));
  CHECK_THROWS_WITH(generate_many({{nullptr, q, o}}), Contains("request 0: generate: no window given"));
  CHECK_THROWS_WITH(generate_many({{&a, {}, o}}), Contains("generate: empty query"));
  CHECK(generate_many({}).empty());
}

TEST_CASE("generate_many refuses more requests than kMaxGenerateMany before adding any", "[decode][batch]") {
  // Null windows: the old code added request 0 first and failed on it ("no window given").
  const std::vector<GenerateRequest> requests(static_cast<std::size_t>(kMaxGenerateMany) + 1);
  CHECK_THROWS_WITH(generate_many(requests),
                    Contains("generate_many: requests: 1025 requests, more than the 1024 one call takes"));
  STATIC_REQUIRE(kMaxGenerateMany == Window::kMaxGenerateN);  // generate_n is a generate_many over its n forks
}

}  // namespace ORBIT_TEST_FILE
