// Exact reuse (docs/ARCHITECTURE.md §4): what a forward computed is served again, with no forward, wherever
// the window before it has the same KV states; an appended answer reuses its decode; a forward whose
// leading tokens were computed behind the same window loads them. Checked against the re-prefill oracle.
#include "orbit_catch.h"

#include <algorithm>
#include <optional>
#include <random>

#include "orbit/engine.h"
#include "plan/kv_state.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::kExactWindowTolerance;
using orbit::test::open_stories_small_pages;
using orbit::test::random_tokens;
using orbit::test::window_error;

namespace {

WindowOptions with(const std::string& spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return o;
}

GenerateOptions at_most(int64_t tokens) {
  GenerateOptions g;
  g.max_tokens = tokens;
  return g;
}

// What the yardstick cases read: an engine, a 20-token document, a 5-token system turn and a 3-token query,
// drawn in that order from rng(seed).
struct Yardstick {
  std::shared_ptr<Engine> engine = open_stories_small_pages();
  std::mt19937_64 rng;
  ChunkRef doc;
  std::vector<int64_t> system, query;

  explicit Yardstick(uint64_t seed)
      : rng(seed),
        doc(engine->add_tokens(random_tokens(rng, 20))),
        system(random_tokens(rng, 5)),
        query(random_tokens(rng, 3)) {}
  // A new window under the policy `spec` holding the system turn.
  Window with_system(const std::string& spec) {
    Window w = engine->new_window(with(spec));
    w.add_turn(system);
    return w;
  }
};

}  // namespace

TEST_CASE("a window read before is served again from what its forwards computed", "[window][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(31);
  const ChunkRef doc = engine->add_tokens(random_tokens(rng, 20)), page = engine->add_tokens(random_tokens(rng, 12));
  const std::vector<int64_t> system = random_tokens(rng, 6), user = random_tokens(rng, 9), q = random_tokens(rng, 3);
  for (const std::string spec : {"default", "prefix", "patch:full:exact"}) {
    INFO(spec);
    Window a = engine->new_window(with(spec));
    a.add_turn(system);
    a.admit(doc);
    a.admit(page);
    a.add_turn(user);
    Window b = engine->new_window(with(spec));
    b.add_turn(system);
    b.admit(doc);
    b.admit(page);
    const Plan p = b.plan_add_turn(user);
    INFO(p.describe());
    CHECK(p.forward_tokens == 0);
    CHECK(p.steps.back().how == ServeActionId::kReuse);
    CHECK(p.exact);
    CHECK(b.apply(p).value().forward_tokens == 0);
    CHECK(window_error(b, q) < kExactWindowTolerance);
    CHECK(window_error(b, q) == Approx(window_error(a, q)).margin(1e-6));
  }
}

TEST_CASE("an answer appended as a turn is not forwarded again", "[window][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(32);
  const ChunkRef doc = engine->add_tokens(random_tokens(rng, 24));
  const std::vector<int64_t> query = random_tokens(rng, 4), probe = random_tokens(rng, 3);
  for (const std::string spec : {"default", "patch:16:noreuse"}) {
    INFO(spec);
    Window w = engine->new_window(with(spec));
    w.add_turn(random_tokens(rng, 5));
    w.admit(doc);
    GenerateOptions g;
    g.max_tokens = 6;
    const Generation answer = w.generate(query, g);
    std::vector<int64_t> turn = query;
    turn.insert(turn.end(), answer.tokens.begin(), answer.tokens.end());
    const Plan p = w.plan_add_turn(turn);
    INFO(p.describe());
    if (w.policy().reuse_computed) {
      CHECK(p.forward_tokens == 0);
      CHECK(p.steps.back().how == ServeActionId::kReuse);
    } else {
      CHECK(p.forward_tokens == Approx(static_cast<double>(turn.size())));
    }
    w.apply(p).value();
    CHECK(window_error(w, probe) < kExactWindowTolerance);
  }
}

TEST_CASE("a turn whose first tokens were read behind the same window loads them", "[window][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(33);
  const ChunkRef doc = engine->add_tokens(random_tokens(rng, 16));
  const std::vector<int64_t> head = random_tokens(rng, 7), probe = random_tokens(rng, 3);
  std::vector<int64_t> first = head, second = head;
  for (int64_t t : random_tokens(rng, 4)) first.push_back(t);
  for (int64_t t : random_tokens(rng, 5)) second.push_back(t);
  Window a = engine->new_window(with("default"));
  a.admit(doc);
  a.add_turn(first);
  Window b = engine->new_window(with("default"));
  b.admit(doc);
  const Plan p = b.plan_add_turn(second);
  INFO(p.describe());
  REQUIRE(p.steps.back().reused_tokens == static_cast<int64_t>(head.size()));
  CHECK(p.forward_tokens == Approx(5));
  CHECK(p.exact);
  const ApplyReport r = b.apply(p).value();
  CHECK(r.forward_tokens == Approx(5));
  CHECK(window_error(b, probe) < kExactWindowTolerance);
  // Off, the turn is forwarded whole.
  Window c = engine->new_window(with("patch:16:noreuse"));
  c.admit(doc);
  CHECK(c.plan_add_turn(second).forward_tokens == Approx(static_cast<double>(second.size())));
}

TEST_CASE("a state the window returns to costs no forward", "[window][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(34);
  std::vector<ChunkRef> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(engine->add_tokens(random_tokens(rng, 14)));
  const std::vector<int64_t> question = random_tokens(rng, 8), probe = random_tokens(rng, 3);
  Window w = engine->new_window(with("default"));
  for (const ChunkRef& d : docs) w.admit(d);
  const InstanceId asked = w.add_turn(question).added.front();
  const std::vector<InstanceId> order = [&] {
    std::vector<InstanceId> ids;
    for (const InstanceInfo& i : w.instances()) ids.push_back(i.id);
    return ids;
  }();
  // Away (the question leaves, the last two documents swap) and back (the same order, the same question).
  w.evict(asked);
  w.reorder({order[0], order[2], order[1]});
  w.add_turn(random_tokens(rng, 4));
  w.flush();
  std::vector<InstanceId> back;
  for (const InstanceInfo& i : w.instances()) {
    if (!i.is_turn) back.push_back(i.id);
  }
  for (const InstanceInfo& i : w.instances()) {
    if (i.is_turn) w.evict(i.id);
  }
  w.reorder({back[0], back[2], back[1]});
  const Plan p = w.plan_add_turn(question);
  INFO(p.describe());
  CHECK(p.forward_tokens == 0);
  CHECK(p.exact);
  w.apply(p).value();
  CHECK(window_error(w, probe) < kExactWindowTolerance);
}

TEST_CASE("KV states name how the KV was made; the reuse index finds the longest stored run", "[reuse][unit]") {
  using namespace orbit::detail;
  const std::string a(64, 'a'), b(64, 'b');
  const KvState empty;
  const KvState after_a = kv_chain(empty, kv_forward(a, empty));
  CHECK(kv_forward(b, after_a) == kv_forward(b, kv_chain(empty, kv_forward(a, empty))));  // content-derived
  CHECK(kv_forward(b, after_a) != kv_forward(b, empty));                                  // behind something else
  CHECK(kv_chain(kv_chain(empty, kv_canonical(a)), kv_canonical(b)) !=
        kv_chain(kv_chain(empty, kv_canonical(b)), kv_canonical(a)));  // order matters
  CHECK(kv_state_after(StepAction::kCanonical, a, "", 0, empty, empty) == kv_forward(a, empty));
  CHECK(kv_state_after(StepAction::kBlind, b, "", 0, after_a, empty) == kv_canonical(b));
  CHECK(kv_state_after(StepAction::kKeep, b, "", 0, after_a, after_a) == after_a);
  CHECK(kv_patched(b, a) != kv_patched(b, std::string(64, 'c')));
  const std::string key = reuse_key(b, after_a);
  CHECK(key.size() == 64);
  CHECK(key == reuse_key(b, after_a));
  CHECK(key != reuse_key(a, after_a));

  ReuseIndex index;
  const KvState content = content_chain(empty, a);
  index.add(after_a, content, "k1", {5, 6, 7, 8});
  index.add(after_a, content, "k2", {5, 6, 9});
  ReuseIndex::Match m = index.longest(after_a, content, {5, 6, 7, 1}, 10);
  CHECK(m.store_key == "k1");
  CHECK(m.tokens == 3);
  CHECK(m.exact);
  CHECK(index.longest(after_a, content, {5, 6, 7, 8}, 2).tokens == 2);  // at most the limit
  CHECK(index.longest(after_a, content, {1, 2}, 10).tokens == 0);
  // Behind other KV states of the same content: found, as an approximate match.
  const KvState other = kv_chain(empty, kv_canonical(a));
  m = index.longest(other, content, {5, 6, 9, 9}, 10);
  CHECK(m.store_key == "k2");
  CHECK(m.tokens == 3);
  CHECK_FALSE(m.exact);
  CHECK(index.longest(other, content_chain(empty, b), {5, 6}, 10).tokens == 0);
}

TEST_CASE("the reuse index stays within its token and chain bounds, dropping the oldest chains", "[window][reuse]") {
  using namespace orbit::detail;
  ReuseIndex index;
  const std::vector<int64_t> long_tokens(2000, 7);  // remembered up to kMaxTokens
  const std::size_t per = ReuseIndex::kMaxTokens;
  const std::size_t chains = ReuseIndex::kMaxTotalTokens / per + 3;
  auto chain_of = [](std::size_t i) { return kv_forward(std::to_string(i), KvState{}); };
  for (std::size_t i = 0; i < chains; ++i) index.add(chain_of(i), chain_of(i), "k" + std::to_string(i), long_tokens);
  CHECK(index.tokens_held() <= ReuseIndex::kMaxTotalTokens);
  CHECK(index.tokens_held() >= ReuseIndex::kMaxTotalTokens - per);
  CHECK(index.longest(chain_of(0), chain_of(0), long_tokens, 5000).tokens == 0);  // the oldest went
  const ReuseIndex::Match last = index.longest(chain_of(chains - 1), chain_of(chains - 1), long_tokens, 5000);
  CHECK(last.tokens == static_cast<int64_t>(per));
  // Sequences added again to a kept chain count once; past kPerChain the chain's oldest goes.
  ReuseIndex small;
  for (std::size_t i = 0; i < ReuseIndex::kPerChain + 2; ++i) {
    small.add(chain_of(1), chain_of(1), "s" + std::to_string(i), {1, 2, static_cast<int64_t>(i)});
    small.add(chain_of(1), chain_of(1), "s" + std::to_string(i), {1, 2, static_cast<int64_t>(i)});
  }
  CHECK(small.tokens_held() == 3 * ReuseIndex::kPerChain);
  // Past kMaxChains chains the oldest goes.
  ReuseIndex many;
  for (std::size_t i = 0; i <= ReuseIndex::kMaxChains; ++i) many.add(chain_of(i), chain_of(i), "m", {int64_t(i) + 1});
  CHECK(many.tokens_held() == ReuseIndex::kMaxChains);
  CHECK(many.longest(chain_of(0), chain_of(0), {1}, 1).tokens == 0);
  CHECK(many.longest(chain_of(1), chain_of(1), {2}, 1).tokens == 1);
}

TEST_CASE("windows and the engine count what a radix cache would forward for their model calls",
          "[window][yardstick]") {
  Yardstick y(35);
  auto& engine = y.engine;
  const GenerateOptions g = at_most(4);
  Window a = y.with_system("default");
  a.admit(y.doc);
  CHECK(a.stats().radix_cache_tokens == 0);  // no model call yet
  const Generation first = a.generate(y.query, g);
  CHECK(a.stats().radix_cache_tokens == Approx(5 + 20 + 3));  // the whole prompt, the query included
  // The same call from another window: the radix cache holds that prompt (and its answer).
  Window b = y.with_system("default");
  b.admit(y.doc);
  std::vector<int64_t> turn = y.query;
  turn.insert(turn.end(), first.tokens.begin(), first.tokens.end());
  b.add_turn(turn);
  b.generate(y.query, g);
  CHECK(b.stats().radix_cache_tokens == Approx(3));  // only the new query after the held answer
  CHECK(engine->stats().radix_cache_tokens == Approx(a.stats().radix_cache_tokens + b.stats().radix_cache_tokens));
  CHECK(b.stats().critical_forward_tokens == 0);  // orbit: every instance of b served from what a computed
}

TEST_CASE("the reads' query forwards are counted apart from forward_tokens, window and engine alike",
          "[window][yardstick]") {
  Yardstick y(36);
  auto& engine = y.engine;
  const std::vector<int64_t>& query = y.query;
  const GenerateOptions g = at_most(4);
  Window a = y.with_system("default");
  const InstanceId d = a.admit(y.doc).added.front();
  // The doc's first sight leaves its canonical's encode to the background worker, which counts it on the engine
  // whenever it runs: settled here and before the engine's count is read below, so that count moves only with
  // what the reads themselves encode.
  engine->run_background();
  const WindowStats applied = a.stats();
  CHECK(applied.query_forward_tokens == 0);
  CHECK(applied.logits_forward_tokens == 0);

  const Generation first = a.generate(query, g);
  REQUIRE(first.prompt_forward_tokens == 3);  // nothing computed behind this window holds the query yet
  CHECK(a.stats().query_forward_tokens == Approx(3));
  (void)a.logits(query, true);
  CHECK(a.stats().logits_forward_tokens == Approx(3));
  // The query was not appended: disposable reads the window as it was, its two greedy decodes each forward it.
  engine->run_background();
  const int64_t encoded_before = engine->stats().canonicals_encoded;
  (void)a.disposable(d, query, 2);
  CHECK(a.stats().query_forward_tokens == Approx(3 + 2 * 3));
  CHECK(a.stats().logits_forward_tokens == Approx(3));
  // The reads forwarded no operation's tokens: forward_tokens is the operations' alone, but for the doc's
  // canonical disposable encodes to fall back to when none is stored (20 tokens, counted as the engine does).
  const double encoded = 20.0 * static_cast<double>(engine->stats().canonicals_encoded - encoded_before);
  CHECK(a.stats().forward_tokens == Approx(applied.forward_tokens + encoded));
  CHECK(a.stats().critical_forward_tokens == Approx(applied.critical_forward_tokens + encoded));

  // A repeated generate over the same window forwards only the query's last token (exact reuse), and says so.
  const Generation again = a.generate(query, g);
  REQUIRE(again.prompt_forward_tokens == 1);
  CHECK(a.stats().query_forward_tokens == Approx(3 + 6 + 1));

  // The engine sums its windows' reads; another window's count is its own.
  Window b = y.with_system("default");
  (void)b.logits(query);
  CHECK(b.stats().logits_forward_tokens == Approx(3));
  CHECK(b.stats().query_forward_tokens == 0);
  const EngineStats e = engine->stats();
  CHECK(e.query_forward_tokens == Approx(a.stats().query_forward_tokens));
  CHECK(e.logits_forward_tokens == Approx(a.stats().logits_forward_tokens + b.stats().logits_forward_tokens));
}

TEST_CASE("a canonical disposable encodes counts on the critical path of its window as of the engine",
          "[window][yardstick]") {
  // Under the prefix preset the window's doc is forwarded in context and its canonical is never encoded, so
  // disposable has to encode it to fall back to: the agent waits for that forward, window and engine alike.
  Yardstick y(37);
  auto& engine = y.engine;
  const std::vector<int64_t>& query = y.query;
  Window a = y.with_system("prefix");
  const InstanceId d = a.admit(y.doc).added.front();
  const WindowStats w0 = a.stats();
  const EngineStats e0 = engine->stats();
  (void)a.disposable(d, query, 2);
  const WindowStats w1 = a.stats();
  const EngineStats e1 = engine->stats();
  REQUIRE(e1.canonicals_encoded == e0.canonicals_encoded + 1);
  CHECK(e1.critical_forward_tokens - e0.critical_forward_tokens == Approx(20));
  CHECK(w1.critical_forward_tokens - w0.critical_forward_tokens == Approx(20));
  CHECK(w1.forward_tokens - w0.forward_tokens == Approx(20));
  CHECK(w1.query_forward_tokens - w0.query_forward_tokens == Approx(2 * 3));  // apart, as before
  // Stored now: a second call encodes nothing and forwards only its query.
  (void)a.disposable(d, query, 2);
  CHECK(engine->stats().canonicals_encoded == e1.canonicals_encoded);
  CHECK(a.stats().critical_forward_tokens == Approx(w1.critical_forward_tokens));
  CHECK(engine->stats().critical_forward_tokens == Approx(e1.critical_forward_tokens));
}

namespace {

// One random edit of a window (the kinds an agent makes): append a turn, trim the oldest chunk, remove one
// from the middle, recall an evicted one, reorder, or return to an order the window had before.
void random_edit(Window& w, const std::vector<ChunkRef>& docs, std::mt19937_64& rng,
                 std::vector<std::vector<InstanceId>>& orders) {
  std::vector<InstanceId> chunks;
  for (const InstanceInfo& i : w.instances()) {
    if (!i.is_turn) chunks.push_back(i.id);
  }
  const int kind = static_cast<int>(rng() % 6);
  if (kind == 0 || chunks.size() < 2) {
    w.add_turn(random_tokens(rng, 3 + static_cast<int64_t>(rng() % 5)));
  } else if (kind == 1) {
    w.evict(chunks.front());
  } else if (kind == 2) {
    w.evict(chunks[chunks.size() / 2]);
  } else if (kind == 3) {
    for (const ChunkRef& d : docs) {
      bool present = false;
      for (const InstanceInfo& i : w.instances()) present = present || (!i.is_turn && i.chunk.key == d.key);
      if (!present) {
        w.recall(d);
        break;
      }
    }
  } else {
    std::vector<InstanceId> order;
    for (const InstanceInfo& i : w.instances()) order.push_back(i.id);
    if (kind == 5 && !orders.empty()) {
      const std::vector<InstanceId>& before = orders[rng() % orders.size()];
      std::vector<InstanceId> sorted_a = order, sorted_b = before;
      std::sort(sorted_a.begin(), sorted_a.end());
      std::sort(sorted_b.begin(), sorted_b.end());
      if (sorted_a == sorted_b) order = before;  // the same instances: return to that order
    } else {
      std::shuffle(order.begin(), order.end(), rng);
    }
    w.reorder(order);
  }
  std::vector<InstanceId> now;
  for (const InstanceInfo& i : w.instances()) now.push_back(i.id);
  orders.push_back(now);
}

}  // namespace

TEST_CASE("over random edits and returns, no policy forwards more than a radix cache reading the same calls",
          "[window][reuse][property]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(36);
  std::vector<ChunkRef> docs;
  for (int i = 0; i < 5; ++i) docs.push_back(engine->add_tokens(random_tokens(rng, 10 + i)));
  const std::vector<int64_t> query = random_tokens(rng, 2);
  GenerateOptions g;
  g.max_tokens = 2;
  for (const std::string spec : {"prefix", "default", "throughput"}) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      INFO(spec << " seed " << seed);
      std::mt19937_64 walk(100 + seed);
      Window w = engine->new_window(with(spec));
      for (const ChunkRef& d : docs) w.admit(d);
      w.generate(query, g);  // the first read: counting starts after it, both sides
      std::vector<std::vector<InstanceId>> orders;
      Window* current = &w;
      std::optional<Window> branch;
      // orbit's side: the operations' critical-path forwards and the reads' query forwards, the tokens the
      // radix cache's side counts (EngineStats::radix_cache_tokens).
      const auto orbit_side = [&](const EngineStats& s) { return s.critical_forward_tokens + s.query_forward_tokens; };
      double orbit_before = orbit_side(engine->stats()), radix_before = engine->stats().radix_cache_tokens;
      double orbit_total = 0, radix_total = 0;
      for (int step = 0; step < 24; ++step) {
        if (step % 8 == 4) {  // fork: the branch edits on, the parent resumes at the next fork point
          branch.emplace(current->fork());
          current = &*branch;
          orders.clear();
        } else if (step % 8 == 0 && branch) {
          current = &w;
          branch.reset();
          orders.clear();
        }
        random_edit(*current, docs, walk, orders);
        const Generation answer = current->generate(query, g);
        (void)answer;
        const EngineStats s = engine->stats();
        const double orbit = orbit_side(s) - orbit_before, radix = s.radix_cache_tokens - radix_before;
        orbit_before = orbit_side(s);
        radix_before = s.radix_cache_tokens;
        orbit_total += orbit;
        radix_total += radix;
        INFO("step " << step << ": " << orbit << " tokens vs " << radix);
        CHECK(orbit_total <= radix_total);
        if (spec == "prefix") CHECK(orbit <= radix);  // exact: per call as well
      }
    }
  }
}

TEST_CASE("a read made before forwards only its query's last token", "[window][reuse]") {
  auto engine = open_stories_small_pages();
  std::mt19937_64 rng(37);
  const ChunkRef doc = engine->add_tokens(random_tokens(rng, 18));
  const std::vector<int64_t> query = random_tokens(rng, 5);
  GenerateOptions g;
  g.max_tokens = 4;
  for (const std::string spec : {"default", "patch:16:noreuse"}) {
    INFO(spec);
    Window w = engine->new_window(with(spec));
    w.admit(doc);
    const Generation first = w.generate(query, g);
    const Generation again = w.generate(query, g);
    CHECK(again.tokens == first.tokens);  // the same answer, from the same KV
    if (w.policy().reuse_computed) {
      CHECK(again.prompt_forward_tokens == 1);
    } else {
      CHECK(again.prompt_forward_tokens == static_cast<int64_t>(query.size()));
    }
    g.max_tokens = 0;
    CHECK(w.generate(query, g).prompt_forward_tokens == 0);  // nothing forwarded
    g.max_tokens = 4;
  }
}

}  // namespace ORBIT_TEST_FILE
