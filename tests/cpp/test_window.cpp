// The window manager's oracle tests: windows driven by random operation sequences must match a
// re-prefill of the same contents (re-prefill policy exactly, full-rank patches to float tolerance);
// survivors need relocation only; forks are isolated; recalls cascade exactly along the dependency
// graph; byte budgets hold (bad input refused: test_window_refusals.cpp).
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <random>
#include <set>

#include "orbit/engine.h"
#include "orbit/interop/torch.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/reuse.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::shared_ptr<Engine> open_stories(int64_t pool_bytes = int64_t{64} << 20) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = pool_bytes;
  o.page_size = 4;
  return Engine::open(o);
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab = 512) {
  std::uniform_int_distribution<int64_t> d(1, vocab - 1);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

double max_diff(const Logits& a, const Logits& b) {
  REQUIRE(a.values.size() == b.values.size());
  double m = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i)
    m = std::max(m, static_cast<double>(std::abs(a.values[i] - b.values[i])));
  return m;
}

double window_error(const Window& w, const std::vector<int64_t>& query) {
  return max_diff(w.logits(query, true), w.reference_logits(query, true));
}

// Drives `w` through `steps` random operations over `chunks`, checking the oracle after each.
void random_walk(std::shared_ptr<Engine> engine, Window w, const std::vector<ChunkRef>& chunks, uint64_t seed,
                 int steps, double tolerance) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  for (int step = 0; step < steps; ++step) {
    const auto inst = w.instances();
    std::set<std::string> present;
    for (const auto& i : inst) present.insert(i.chunk.key);
    std::vector<ChunkRef> absent;
    for (const auto& c : chunks) {
      if (present.count(c.key) == 0) absent.push_back(c);
    }
    const auto evicted = w.evicted();
    const int op = static_cast<int>(rng() % 7);
    std::string what;
    if (op == 0 && !absent.empty()) {
      const ChunkRef c = absent[rng() % absent.size()];
      InstanceId before = 0;
      if (!inst.empty() && rng() % 3 == 0) before = inst[rng() % inst.size()].id;
      w.admit(c, before);
      what = "admit";
    } else if (op == 1) {
      w.add_turn(random_tokens(rng, 2 + static_cast<int64_t>(rng() % 3)));
      what = "turn";
    } else if (op == 2 && inst.size() > 1) {
      w.evict(inst[rng() % inst.size()].id);
      what = "evict";
    } else if (op == 3 && w.stats().chunk_instances > 1) {
      w.slide(1);
      what = "slide";
    } else if (op == 4 && !evicted.empty()) {
      w.recall(evicted[rng() % evicted.size()]);
      what = "recall";
    } else if (op == 5 && inst.size() > 1) {
      std::vector<InstanceId> order;
      for (const auto& i : inst) order.push_back(i.id);
      std::shuffle(order.begin(), order.end(), rng);
      w.reorder(order);
      what = "reorder";
    } else if (op == 6 && !inst.empty()) {
      w = w.fork();
      what = "fork";
    } else {
      continue;
    }
    if (w.instances().empty()) continue;
    INFO("seed " << seed << " step " << step << " (" << what << ") policy " << w.policy().name());
    CHECK(window_error(w, query) <= tolerance);
  }
  (void)engine;
}

std::vector<ChunkRef> make_chunks(Engine& engine, std::mt19937_64& rng, int count) {
  std::vector<ChunkRef> out;
  for (int i = 0; i < count; ++i) {
    ChunkOptions o;
    o.label = "c" + std::to_string(i);
    out.push_back(engine.add_tokens(random_tokens(rng, 5 + static_cast<int64_t>(rng() % 6)), o));
  }
  return out;
}

}  // namespace

TEST_CASE("re-prefill policy: every random operation sequence equals a prefill from scratch", "[window][oracle]") {
  auto engine = open_stories();
  std::mt19937_64 rng(1);
  const auto chunks = make_chunks(*engine, rng, 6);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    WindowOptions o;
    o.policy = parse_policy("reprefill");
    random_walk(engine, engine->new_window(o), chunks, seed, 24, 2e-4);
  }
}

TEST_CASE("full-rank patches with re-conditioning equal a prefill from scratch", "[window][oracle]") {
  auto engine = open_stories();
  std::mt19937_64 rng(2);
  const auto chunks = make_chunks(*engine, rng, 6);
  for (uint64_t seed = 10; seed < 14; ++seed) {
    WindowOptions o;
    o.policy = parse_policy("patch:full:exact");
    random_walk(engine, engine->new_window(o), chunks, seed, 24, 5e-4);
  }
  // Patches were formed (by the background worker, which a loaded machine may not have run yet: wait for it).
  engine->run_background();
  CHECK(engine->stats().patches_formed > 0);
}

TEST_CASE("a stored patch is reused with zero forwards and gives the window a re-prefill would", "[window]") {
  auto engine = open_stories();
  std::mt19937_64 rng(3);
  const auto chunks = make_chunks(*engine, rng, 3);
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");  // exact reuse would serve b before the patch
  Window a = engine->new_window(o);
  a.admit(chunks[0]);
  const ApplyReport first = a.admit(chunks[1]);
  CHECK(first.patches_formed == 1);  // queued for the background
  CHECK(first.background_jobs == 1);
  // First sight: one exact in-context prefill on the critical path; the canonical encode and the SVD run
  // in the background.
  CHECK(first.forward_tokens == Approx(static_cast<double>(chunks[1].length)));
  engine->run_background();
  const EngineStats st = engine->stats();
  CHECK(st.background_pending == 0);
  CHECK(st.background_forward_tokens == Approx(static_cast<double>(chunks[1].length)));
  CHECK(st.forward_tokens == Approx(st.critical_forward_tokens + st.background_forward_tokens));

  Window b = engine->new_window(o);
  b.admit(chunks[0]);
  const Plan plan = b.plan_admit(chunks[1]);
  REQUIRE(plan.steps.size() == 2);
  CHECK(plan.steps[1].action == StepAction::kApplyPatch);
  CHECK(plan.steps[1].match == PatchMatch::kExact);
  CHECK(plan.forward_tokens == 0);
  CHECK(plan.exact);
  const ApplyReport second = b.apply(plan).value();
  CHECK(second.forward_tokens == 0);
  CHECK(second.patch_hits == 1);
  const std::vector<int64_t> q = random_tokens(rng, 4);
  CHECK(window_error(b, q) <= 5e-4);

  // Blind reuse of the same chunk differs from the reference (the patch is doing something).
  WindowOptions blind;
  blind.policy = parse_policy("blind");
  Window c = engine->new_window(blind);
  c.admit(chunks[0]);
  c.admit(chunks[1]);
  CHECK(window_error(c, q) > 1e-2);
}

TEST_CASE("survivors of a slide keep bit-identical KV and are exact in position", "[window]") {
  auto engine = open_stories();
  auto model = runtime::load_model(test::stories_path());
  std::mt19937_64 rng(4);
  const auto chunks = make_chunks(*engine, rng, 3);
  WindowOptions plain;
  plain.policy = parse_policy("patch:16");  // survivors kept (no budget that could repair them)
  Window w = engine->new_window(plain);
  for (const auto& c : chunks) w.admit(c);
  const auto before = w.instances();
  const InstanceKV kv_b = w.kv(before[1].id);
  const InstanceKV kv_c = w.kv(before[2].id);
  const Plan plan = w.plan_slide(1);
  CHECK(plan.forward_tokens == 0);
  CHECK(plan.count(StepAction::kKeep) == 2);
  CHECK(plan.count(StepAction::kEvict) == 1);
  w.apply(plan).value();
  const auto after = w.instances();
  REQUIRE(after.size() == 2);
  CHECK(after[0].id == before[1].id);
  CHECK(after[0].position == 0);
  CHECK(after[1].position == before[2].position - chunks[0].length);
  const InstanceKV kv_b2 = w.kv(after[0].id);
  const InstanceKV kv_c2 = w.kv(after[1].id);
  CHECK(kv_b2.k == kv_b.k);
  CHECK(kv_b2.v == kv_b.v);
  CHECK(kv_c2.k == kv_c.k);
  CHECK(kv_c2.pages == kv_c.pages);  // the very same pages: nothing was rewritten

  // Exact in position: the window's logits equal a forward over the survivors' stored KV placed at
  // positions 0.. (computed here independently with the runtime).
  runtime::PastKV past;
  past.layers.resize(static_cast<std::size_t>(model->config().num_layers));
  std::vector<float> dummy;
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    std::vector<at::Tensor> ks, vs;
    for (const InstanceKV* kv : {&kv_b2, &kv_c2}) {
      std::vector<int64_t> shape = {kv->length};
      shape.insert(shape.end(), kv->k_shape.begin(), kv->k_shape.end());
      ks.push_back(at::from_blob(const_cast<float*>(kv->k[l].data()), shape, at::kFloat).clone());
      vs.push_back(at::from_blob(const_cast<float*>(kv->v[l].data()), shape, at::kFloat).clone());
    }
    past.layers[l] = {at::cat(ks, 0), at::cat(vs, 0)};
  }
  const int64_t n = chunks[1].length + chunks[2].length;
  past.positions = at::arange(n, at::kLong);
  const std::vector<int64_t> q = random_tokens(rng, 3);
  runtime::ForwardInput in;
  in.tokens = q;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kAll;
  const at::Tensor expected = model->forward(in, &past, fo).logits.contiguous();
  const Logits got = w.logits(q, true);
  double m = 0;
  for (int64_t i = 0; i < expected.numel(); ++i)
    m = std::max(
        m, static_cast<double>(std::abs(expected.data_ptr<float>()[i] - got.values[static_cast<std::size_t>(i)])));
  CHECK(m == 0.0);
}

TEST_CASE("forks are isolated and shared pages are freed only with their last owner", "[window][fork]") {
  auto engine = open_stories();
  std::mt19937_64 rng(5);
  const auto chunks = make_chunks(*engine, rng, 4);
  const int64_t free_at_start = engine->stats().pool_free_pages;
  const std::vector<int64_t> q = random_tokens(rng, 3);
  Logits parent_logits;
  {
    Window parent = engine->new_window();
    parent.admit(chunks[0]);
    parent.admit(chunks[1]);
    parent.add_turn(random_tokens(rng, 3));
    parent_logits = parent.logits(q, true);
    const auto parent_instances = parent.instances();
    const int64_t used_by_parent = free_at_start - engine->stats().pool_free_pages;
    {
      Window child = parent.fork();
      CHECK(engine->stats().pool_free_pages == free_at_start - used_by_parent);  // fork allocates nothing
      CHECK(child.stats().shared_pages == used_by_parent);
      child.admit(chunks[2]);
      child.evict(parent_instances[0].id);
      child.add_turn(random_tokens(rng, 2));
      child.reorder([&] {
        std::vector<InstanceId> o;
        for (const auto& i : child.instances()) o.push_back(i.id);
        std::reverse(o.begin(), o.end());
        return o;
      }());
      CHECK(max_diff(parent.logits(q, true), parent_logits) == 0.0);
      CHECK(parent.instances().size() == parent_instances.size());
      CHECK(parent.evicted().empty());
      Window grandchild = child.fork();
      parent = Window(std::move(parent));  // moving keeps it alive
    }
    // Child gone: the parent's pages are its own again.
    CHECK(parent.stats().shared_pages == 0);
    CHECK(max_diff(parent.logits(q, true), parent_logits) == 0.0);
    Window survivor = parent.fork();
    { Window gone = std::move(parent); }
    // The parent is gone but its fork still reads the shared pages.
    CHECK(max_diff(survivor.logits(q, true), parent_logits) == 0.0);
  }
  CHECK(engine->stats().pool_free_pages == free_at_start);
}

TEST_CASE("a recall re-conditions exactly the dependents the graph names, in topological order", "[window][recall]") {
  auto engine = open_stories();
  std::mt19937_64 rng(6);
  const auto c = make_chunks(*engine, rng, 5);
  WindowOptions plain;
  plain.policy = parse_policy("patch:16");  // survivors kept, cascade on recall (no budget)
  Window w = engine->new_window(plain);
  w.admit(c[0]);
  w.admit(c[1]);  // formed with A
  w.admit(c[2]);  // formed with A, B
  const auto ids = w.instances();
  const InstanceId a = ids[0].id, b = ids[1].id, cc = ids[2].id;
  w.evict(a);     // B and C kept as-is (they still carry A's conditioning)
  w.admit(c[3]);  // D formed on B, C: a transitive dependent of A
  WindowPolicy blind = w.policy();
  blind.on_miss = MissAction::kBlind;
  blind.reuse_stored = false;
  w.set_policy(blind);
  w.admit(c[4]);  // E blind: no conditioning, depends on nothing
  const InstanceId d = w.instances()[2].id;
  w.set_policy(parse_policy("patch:16"));

  // Recalled at the tail, A comes after all of its dependents: none can see it again, so none is
  // re-formed (a recall costs the chunk, not its old dependents).
  const Plan tail = w.plan_recall(c[0]);
  CHECK(tail.cascade.empty());
  CHECK(tail.forward_tokens == static_cast<double>(c[0].length));
  // Recalled in front of B, every dependent comes after it again.
  const Plan plan = w.plan_recall(c[0], b);
  REQUIRE(plan.cascade.size() == 3);
  CHECK(plan.cascade[0] == b);  // topological: B before C before D
  CHECK(plan.cascade[1] == cc);
  CHECK(plan.cascade[2] == d);
  std::set<InstanceId> reconditioned;
  for (const PlanStep& s : plan.steps) {
    if (s.action != StepAction::kKeep && s.instance != a) reconditioned.insert(s.instance);
  }
  CHECK(reconditioned == std::set<InstanceId>{b, cc, d});
  const ApplyReport r = w.apply(plan).value();
  CHECK(w.instances().front().id == a);  // the recalled instance keeps its id, in front of B
  CHECK(r.patches_formed >= 1);
  // Re-conditioning now touches only E — not a dependent of A (blind, no conditioning), but its
  // antecedents' KV was re-formed by the cascade.
  const InstanceId e = w.instances()[4].id;
  const Plan again = w.plan_recondition();
  for (const PlanStep& s : again.steps) {
    INFO("instance " << s.instance << " " << step_action_name(s.action));
    CHECK((s.action == StepAction::kKeep) == (s.instance != e));
  }

  // Without cascade the same recall touches only the recalled chunk.
  // (The policy is set before the evict: patch:16 keeps survivors, so nothing waits for the recall.)
  Window w2 = engine->new_window();
  w2.admit(c[0]);
  w2.admit(c[1]);
  WindowPolicy no_cascade = parse_policy("patch:16");
  no_cascade.cascade_on_recall = false;
  w2.set_policy(no_cascade);
  w2.evict(w2.instances()[0].id);
  const Plan p2 = w2.plan_recall(c[0]);
  CHECK(p2.cascade.empty());
  CHECK(p2.count(StepAction::kKeep) == 1);
}

TEST_CASE("byte budgets are never exceeded; refusals leave the window unchanged", "[window][budget]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t pool = (int64_t{1} << 16) * (1 + trial);  // small pools: refusals happen
    auto engine = open_stories(pool);
    const auto chunks = make_chunks(*engine, rng, 8);
    WindowOptions o;
    o.max_bytes = static_cast<int64_t>(rng() % 40000) + 4000;
    Window w = engine->new_window(o);
    int refusals = 0;
    for (int step = 0; step < 30; ++step) {
      const uint64_t version = w.version();
      const auto before = w.instances();
      Plan plan;
      const int op = static_cast<int>(rng() % 4);
      std::set<std::string> present;
      for (const auto& i : before) present.insert(i.chunk.key);
      if (op <= 1) {
        const ChunkRef ch = chunks[rng() % chunks.size()];
        if (present.count(ch.key)) continue;
        plan = w.plan_admit(ch);
      } else if (op == 2) {
        plan = w.plan_add_turn(random_tokens(rng, 3));
      } else if (!before.empty()) {
        plan = w.plan_evict(before[rng() % before.size()].id);
      } else {
        continue;
      }
      const Result<ApplyReport> r = w.apply(plan);
      if (!r.is_ok()) {
        ++refusals;
        CHECK(r.status().code() == StatusCode::kOutOfCapacity);
        CHECK(w.version() == version);
        CHECK(w.instances().size() == before.size());
      }
      CHECK(w.stats().device_bytes <= o.max_bytes);
    }
    CHECK(refusals > 0);  // the budgets were small enough to bite
  }
}

TEST_CASE("placement reorders a window into the order with stored orbit patches", "[window][place]") {
  auto engine = open_stories();
  std::mt19937_64 rng(8);
  const auto c = make_chunks(*engine, rng, 3);
  // Window 1 holds C, B, A: patches formed for B behind {C} and for A behind {C, B}.
  Window w1 = engine->new_window();
  w1.admit(c[2]);
  w1.admit(c[1]);
  w1.admit(c[0]);
  // Window 2 admits A, B, C with blind reuse (nothing formed), then asks the planner for an order.
  WindowOptions o;
  o.policy = parse_policy("blind");
  Window w2 = engine->new_window(o);
  for (const auto& x : c) w2.admit(x);
  WindowPolicy patch;  // default patch policy: orbit patches count
  w2.set_policy(patch);
  const Plan plan = w2.plan_place();
  REQUIRE(plan.order.size() == 3);
  std::vector<std::string> keys;
  for (InstanceId id : plan.order) keys.push_back(w2.instance(id)->chunk.key);
  CHECK(keys == std::vector<std::string>{c[2].key, c[1].key, c[0].key});
  CHECK(plan.forward_tokens == 0);  // every re-placed chunk is an orbit hit (or leads the window)
}

TEST_CASE("generate: greedy follows the argmax, sampling is seeded, stop tokens end the run", "[window][generate]") {
  auto engine = open_stories();
  std::mt19937_64 rng(9);
  const auto c = make_chunks(*engine, rng, 2);
  Window w = engine->new_window();
  w.admit(c[0]);
  w.admit(c[1]);
  const std::vector<int64_t> q = random_tokens(rng, 3);
  GenerateOptions g;
  g.max_tokens = 5;
  const Generation greedy = w.generate(q, g);
  REQUIRE(greedy.tokens.size() == 5);
  std::vector<int64_t> prefix = q;
  for (int64_t t : greedy.tokens) {
    CHECK(w.logits(prefix).argmax(0) == t);
    prefix.push_back(t);
  }
  g.temperature = 1.0;
  g.top_p = 0.9;
  g.seed = 42;
  CHECK(w.generate(q, g).tokens == w.generate(q, g).tokens);
  GenerateOptions stop;
  stop.max_tokens = 10;
  stop.stop_tokens = {greedy.tokens[1]};
  const Generation s = w.generate(q, stop);
  CHECK(s.stop_reason == "stop_token");
  CHECK(s.tokens.size() <= 2);
}

TEST_CASE("disposability: decoding with a chunk's conditioning switched off", "[window]") {
  auto engine = open_stories();
  std::mt19937_64 rng(10);
  const auto c = make_chunks(*engine, rng, 2);
  Window w = engine->new_window();
  w.admit(c[0]);
  w.admit(c[1]);
  const auto ids = w.instances();
  const std::vector<int64_t> q = random_tokens(rng, 3);
  // The first chunk has nothing before it: its KV is the canonical, so switching off changes nothing.
  const DisposabilityReport first = w.disposable(ids[0].id, q, 3);
  CHECK(first.disposable);
  CHECK(first.kl_first == Approx(0.0).margin(1e-9));
  GenerateOptions g;
  g.max_tokens = 3;
  CHECK(first.answer == w.generate(q, g).tokens);
  const DisposabilityReport second = w.disposable(ids[1].id, q, 3);
  CHECK(second.kl_first > 0);
  CHECK(second.answer == first.answer);
}

// The KL of a window's next-token distributions after `q` against a re-prefill's, averaged over q's rows.
double window_kl(const Window& w, const std::vector<int64_t>& q) {
  const Logits got = w.logits(q, true), want = w.reference_logits(q, true);
  const auto as_tensor = [](const Logits& l) {
    return at::from_blob(const_cast<float*>(l.values.data()), {l.rows, l.vocab}, at::kFloat).clone();
  };
  return runtime::mean_kl(as_tensor(want), as_tensor(got));
}

TEST_CASE("loss by instance: each approximate instance's own KL, the exact ones left out", "[window][fidelity]") {
  auto engine = open_stories();
  std::mt19937_64 rng(12);
  const auto c = make_chunks(*engine, rng, 3);
  const std::vector<int64_t> q = random_tokens(rng, 3);
  WindowOptions blind;
  blind.policy = parse_policy("blind");
  Window w = engine->new_window(blind);
  w.admit(c[0]);  // at position 0: the canonical is exact
  w.admit(c[1]);  // blind: approximate
  const auto ids = w.instances();
  std::vector<InstanceLoss> one = w.loss_by_instance(q);
  REQUIRE(one.size() == 1);
  CHECK(one[0].instance == ids[1].id);
  CHECK(one[0].label == ids[1].chunk.label);
  CHECK(one[0].position == ids[1].position);
  CHECK(one[0].length == ids[1].length);
  CHECK(one[0].formed_by == StepAction::kBlind);
  CHECK(one[0].kv_change > 1e-3);
  CHECK(one[0].predicted_kl > 0);
  // With one approximate instance, its own loss is the window's.
  CHECK(one[0].measured_kl > 0);
  CHECK(one[0].measured_kl == Approx(window_kl(w, q)).epsilon(1e-4));  // float32 forwards, split differently

  // Two approximate instances: each measured alone, neither is the window's loss.
  w.admit(c[2]);
  const std::vector<InstanceLoss> two = w.loss_by_instance(q);
  REQUIRE(two.size() == 2);
  CHECK(two[0].instance == ids[1].id);
  CHECK(two[1].instance == w.instances()[2].id);
  for (const InstanceLoss& l : two) CHECK(l.measured_kl > 0);
  CHECK(two[0].measured_kl < window_kl(w, q));

  // An exact window has nothing to attribute.
  Window exact = engine->new_window();
  exact.set_policy(parse_policy("reprefill"));
  for (const ChunkRef& x : c) exact.admit(x);
  CHECK(exact.loss_by_instance(q).empty());
  CHECK_THROWS_WITH(exact.loss_by_instance({}), Catch::Matchers::Contains("loss_by_instance: empty query"));

  // Like a read, it runs a deferred repair first and measures the repaired window: after a re-prefill
  // window's edit, nothing is approximate.
  exact.evict(exact.instances()[0].id);
  REQUIRE(exact.instances()[0].deferred);
  CHECK(exact.loss_by_instance(q).empty());
  CHECK_FALSE(exact.instances()[0].deferred);
}

// ---- the families: generated GQA (Qwen2 biases), MLA (DeepSeek-V2) and M-RoPE (Qwen2-VL) models --------

namespace {

std::shared_ptr<Engine> open_generated(const test::TempDir& dir, const std::string& preset) {
  runtime::GeneratorOptions g;
  g.config = runtime::generator_preset(preset);
  g.seed = 3;
  g.init_std = 0.3;  // large enough that chunks condition each other visibly
  runtime::generate_model(g, dir / preset);
  EngineOptions o;
  o.model = dir / preset;
  o.page_size = 4;
  o.pool_bytes = int64_t{32} << 20;
  return Engine::open(o);
}

// Token chunks, and on M-RoPE models also image-like embedding chunks with (t, h, w) grids.
std::vector<ChunkRef> family_chunks(Engine& engine, std::mt19937_64& rng, int count) {
  const ModelInfo info = engine.model_info();
  std::vector<ChunkRef> out;
  for (int i = 0; i < count; ++i) {
    ChunkOptions o;
    o.label = "c" + std::to_string(i);
    if (info.position_rows == 3 && i % 2 == 1) {
      const int64_t h = 2, w = 2 + i % 3, n = h * w;
      std::normal_distribution<float> d(0.0f, 0.3f);
      std::vector<float> emb(static_cast<std::size_t>(n * info.hidden_size));
      for (auto& x : emb) x = d(rng);
      std::vector<int64_t> grid;
      for (int row = 0; row < 3; ++row) {
        for (int64_t y = 0; y < h; ++y) {
          for (int64_t x = 0; x < w; ++x) grid.push_back(row == 0 ? 0 : (row == 1 ? y : x));
        }
      }
      EmbeddingChunk e;
      e.embeddings = view_of(emb, {n, info.hidden_size});
      e.grid = view_of(grid, {3, n});
      out.push_back(engine.add_embeddings(e, o));
    } else {
      out.push_back(engine.add_tokens(random_tokens(rng, 4 + static_cast<int64_t>(rng() % 5), info.vocab_size), o));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("GQA, MLA and M-RoPE windows match a prefill from scratch", "[window][oracle][families]") {
  for (const std::string preset : {"tiny-qwen2", "tiny-mla", "tiny-qwen2-vl"}) {
    test::TempDir dir;
    auto engine = open_generated(dir, preset);
    std::mt19937_64 rng(20);
    const auto chunks = family_chunks(*engine, rng, 5);
    if (preset == "tiny-qwen2-vl") {
      // A 2x3 image spans 3 positions (its grid's extent), not 6 tokens.
      CHECK(chunks[3].length == 2 * (2 + 3 % 3));
      CHECK(chunks[1].extent == 3);
    }
    for (const std::string policy : {"reprefill", "patch:full:exact"}) {
      INFO(preset << " " << policy);
      WindowOptions o;
      o.policy = parse_policy(policy);
      random_walk(engine, engine->new_window(o), chunks, 30, 16, 5e-4);
    }
    // Blind reuse is visibly approximate on these models (the oracle tests can fail).
    WindowOptions blind;
    blind.policy = parse_policy("blind");
    Window w = engine->new_window(blind);
    for (const auto& c : chunks) w.admit(c);
    const std::vector<int64_t> q = {1, 2, 3};
    INFO(preset);
    CHECK(window_error(w, q) > 1e-3);
  }
}

TEST_CASE("calibration fits the cost model that plans estimate with and cost-aware policies decide by",
          "[window][cost]") {
  auto engine = open_stories();
  std::mt19937_64 rng(12);
  const auto c = make_chunks(*engine, rng, 2);
  const CalibrationReport cal = engine->calibrate();
  CHECK(cal.samples == 12);  // 6 forwards, relocate, form, apply, 3 tier reads
  CHECK(cal.cost_model.find("forward") != std::string::npos);
  Window w = engine->new_window();
  w.admit(c[0]);
  const Plan form = w.plan_admit(c[1]);
  CHECK(form.steps.back().action == StepAction::kForm);
  CHECK(form.estimated_seconds > 0);
  // With no reuse expected, forming a patch never pays (it includes the forward a recompute does).
  WindowPolicy p = parse_policy("patch:16");  // cost-aware choice applies without a KL budget
  p.cost_aware = true;
  p.expected_reuse = 0;
  w.set_policy(p);
  const Plan plain = w.plan_admit(c[1]);
  CHECK(plain.steps.back().action == StepAction::kReprefill);
  CHECK(plain.steps.back().reason.rfind("cost model: ", 0) == 0);
  CHECK(plain.estimated_seconds <= form.estimated_seconds);
}

TEST_CASE("torch interop: embeddings from a tensor view equal the same embeddings from a vector", "[window][interop]") {
  test::TempDir dir;
  auto engine = open_generated(dir, "tiny-qwen2-vl");
  const int64_t hidden = engine->model_info().hidden_size;
  const at::Tensor emb = at::randn({4, hidden}, at::kFloat);
  const at::Tensor grid = at::tensor({0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1}, at::kLong).reshape({3, 4});
  EmbeddingChunk a;
  a.embeddings = interop::view(emb);
  a.grid = interop::view(grid);
  const ChunkRef ra = engine->add_embeddings(a);
  std::vector<float> values(emb.data_ptr<float>(), emb.data_ptr<float>() + emb.numel());
  std::vector<int64_t> g(grid.data_ptr<int64_t>(), grid.data_ptr<int64_t>() + grid.numel());
  EmbeddingChunk b;
  b.embeddings = view_of(values, {4, hidden});
  b.grid = view_of(g, {3, 4});
  CHECK(engine->add_embeddings(b).key == ra.key);
  CHECK(ra.extent == 2);
  Window w = engine->new_window();
  w.admit(ra);
  const at::Tensor logits = interop::to_tensor(w.logits({1, 2}, true));
  CHECK(logits.size(0) == 2);
  CHECK(logits.size(1) == engine->model_info().vocab_size);
  CHECK_THROWS_WITH(interop::view(emb.t()), Catch::Contains("not contiguous"));
  CHECK_THROWS_WITH(interop::view(emb.to(at::kDouble)), Catch::Contains("dtype"));
  b.embeddings = view_of(values, {2, 2 * hidden});
  CHECK_THROWS_WITH(engine->add_embeddings(b), Catch::Contains("width"));
}

}  // namespace ORBIT_TEST_FILE
