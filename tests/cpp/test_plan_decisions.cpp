// The planner's decisions without a model or torch: hand-made windows (WindowSnapshot), layouts and a fake
// PlanEnv whose store, catalog, reuse index and pool say exactly what each case needs. This executable links
// the planning library (orbit_plan) and Catch only; the end-to-end checks of the same decisions against real
// KV are in test_plan_actions, test_window and test_exact_reuse.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "orbit/planner/fidelity_model.h"
#include "orbit/store.h"
#include "plan/plan_env.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::detail;

namespace {

const std::string kModel = "fake-model";

class FakeEnv final : public PlanEnv {
 public:
  ModelLimits model{/*num_layers*/ 2, /*k_width*/ 16, /*v_width*/ 16, /*kv_bytes_per_token*/ 256,
                    /*max_positions*/ 512};
  std::set<std::string> stored;                       // contains() and available()
  std::map<std::string, StoreTier> canonicals;        // chunk key -> where its canonical is
  std::map<std::string, PatchFacts> facts;            // patch key -> what the catalog knows
  std::map<std::string, StaleMatch> stale;            // chunk key -> its closest stale patch
  std::map<std::string, double> sensitivity;          // chunk key -> measured sensitivity
  std::map<std::string, double> quantization;         // store key -> its int8 rounding error (energy share)
  mutable std::vector<std::string> sensitivity_asks;  // chunk keys planning asked about
  ReuseIndex reuse;
  PoolPages pool{1000, 1000};
  std::set<std::string> held_sets;  // chunk keys whose canonical page set a placement holds

  const ModelLimits& limits() const override { return model; }
  void check_open() const override {}
  std::string attention_path() const override { return "fake"; }
  planner::CostModel cost_model() const override { return {}; }
  planner::FidelityModel fidelity_model() const override { return {}; }
  std::string turn_key(const std::vector<int64_t>& tokens) const override { return chunk_key_tokens(kModel, tokens); }
  std::optional<StoreTier> canonical_residence(const std::string& chunk_key) const override {
    auto it = canonicals.find(chunk_key);
    return it == canonicals.end() ? std::nullopt : std::optional<StoreTier>(it->second);
  }
  double stored_quantization(const std::string& key) const override {
    auto it = quantization.find(key);
    return it == quantization.end() ? 0.0 : it->second;
  }
  bool contains(const std::string& key) const override { return stored.count(key) != 0; }
  bool available(const std::string& key) const override { return stored.count(key) != 0; }
  std::optional<PatchFacts> patch_facts(const std::string&, const std::string& patch_key) const override {
    auto it = facts.find(patch_key);
    return it == facts.end() ? std::nullopt : std::optional<PatchFacts>(it->second);
  }
  std::optional<StaleMatch> closest_patch(const std::string& chunk_key, const PatchKeys&, const ContextWeights&,
                                          std::size_t) const override {
    auto it = stale.find(chunk_key);
    return it == stale.end() ? std::nullopt : std::optional<StaleMatch>(it->second);
  }
  double chunk_sensitivity(const std::string& chunk_key) const override {
    sensitivity_asks.push_back(chunk_key);
    auto it = sensitivity.find(chunk_key);
    return it == sensitivity.end() ? -1 : it->second;
  }
  const ReuseIndex& reuse_index() const override { return reuse; }
  PoolPages pool_pages() const override { return pool; }
  bool placement_shares(const std::string& chunk_key) const override { return held_sets.count(chunk_key) > 0; }
};

ChunkRecord chunk(const std::string& label, int64_t length, int64_t seed) {
  ChunkRecord c;
  for (int64_t i = 0; i < length; ++i) c.tokens.push_back(3 + (seed * 131 + i * 17) % 500);
  c.ref.key = chunk_key_tokens(kModel, c.tokens);
  c.ref.kind = ChunkKind::kTokens;
  c.ref.length = c.ref.extent = length;
  c.ref.label = label;
  return c;
}

// A window whose instances were each formed exactly, in order, behind those before them (by forwards:
// their KV states chain as a re-prefill's would).
struct TestWindow {
  WindowOptions options;
  std::vector<std::unique_ptr<EntryMeta>> entries;

  explicit TestWindow(const std::string& policy) { options.policy = parse_policy(policy); }

  void add_exact(const ChunkRecord& c) {
    auto e = std::make_unique<EntryMeta>();
    e->id = entries.size() + 1;
    e->key = c.ref.key;
    e->chunk = ChunkPtr(ChunkPtr(), &c);  // not owned: the test's records outlive the window
    e->length = c.ref.length;
    e->extent = c.ref.extent;
    e->version = entries.size() + 1;
    uint64_t h = 0, keys = 0;
    KvState chain;
    int64_t tokens = 0;
    for (const auto& before : entries) {
      h = context_hash(h, before->key, before->version);
      keys = context_hash(keys, before->key, 0);
      chain = kv_chain(chain, before->state);
      tokens += before->length;
    }
    e->formed_on = h;
    e->formed_on_keys = keys;
    e->formed_on_tokens = tokens;
    e->exact_when_formed = true;
    e->formed_by = entries.empty() ? StepAction::kCanonical : StepAction::kForm;
    e->state = kv_forward(e->key, chain);
    entries.push_back(std::move(e));
  }

  // The last instance as a stored patch `patch` served it (exact_when_formed false), carrying `kl_per_weight`
  // of loss; or, `formed` true, as a form behind an exact context that stored its KV's patch under `patch`.
  void serve_last_from(const std::string& patch, double kl_per_weight, bool formed) {
    EntryMeta& e = *entries.back();
    e.exact_when_formed = formed;
    e.formed_by = formed ? StepAction::kForm : StepAction::kApplyPatch;
    e.match = formed ? PatchMatch::kNone : PatchMatch::kStale;
    e.patch_key = patch;
    e.kl_per_weight = kl_per_weight;
    if (!formed) e.state = kv_patched(e.key, patch);
  }

  KvState chain_upto(std::size_t n) const {
    KvState chain;
    for (std::size_t i = 0; i < n; ++i) chain = kv_chain(chain, entries[i]->state);
    return chain;
  }

  WindowSnapshot snapshot() const {
    WindowSnapshot s;
    s.id = 7;
    s.version = 3;
    s.options = &options;
    for (const auto& e : entries) s.entries.push_back(e.get());
    s.page_size = 4;
    s.page_bytes = 4 * 256;
    return s;
  }
};

// The window's instances kept in order, plus `added` new chunks at the end.
Layout keep_all(const TestWindow& w, Operation op, const std::vector<const ChunkRecord*>& added = {}) {
  Layout l;
  l.op = op;
  for (std::size_t i = 0; i < w.entries.size(); ++i) {
    Slot s;
    s.existing = static_cast<int64_t>(i);
    s.id = w.entries[i]->id;
    l.slots.push_back(s);
  }
  for (const ChunkRecord* c : added) {
    Slot s;
    s.id = 100 + l.slots.size();
    s.chunk = ChunkPtr(ChunkPtr(), c);  // not owned
    l.slots.push_back(s);
  }
  return l;
}

Layout evict_first(const TestWindow& w) {
  Layout l = keep_all(w, Operation::kEvict);
  l.slots.erase(l.slots.begin());
  l.evict = {0};
  l.change_reason = "chunk 'a' evicted";
  return l;
}

// The step serving instance `id` (evictions included).
const PlanStep& step_of(const Plan& p, InstanceId id) {
  for (const PlanStep& s : p.steps) {
    if (s.instance == id) return s;
  }
  FAIL("the plan has no step for instance " << id);
  return p.steps.front();
}

}  // namespace

TEST_CASE("an unchanged window plans keep everywhere: exact, nothing forwarded or read", "[plan][decisions]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 9, 2);
  FakeEnv env;
  for (const char* policy : {"default", "patch:16", "reprefill", "prefix", "throughput"}) {
    TestWindow w(policy);
    w.add_exact(a);
    w.add_exact(b);
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kFlush), env);
    INFO(policy);
    REQUIRE(p.steps.size() == 2);
    for (const PlanStep& s : p.steps) {
      CHECK(s.how == ServeActionId::kKeep);
      CHECK(s.exact);
      CHECK(s.forward_tokens == 0);
      CHECK(s.bytes_moved == 0);
    }
    CHECK(p.exact);
    CHECK(p.refusal.empty());
    CHECK(p.window_id == 7);
    CHECK(p.window_version == 3);
    CHECK(p.order == std::vector<InstanceId>{1, 2});
    CHECK(p.window_tokens_after == 21);
    CHECK(p.device_bytes_after == (3 + 3) * 4 * 256);  // 12 and 9 tokens in 4-token pages
  }
}

TEST_CASE("a first chunk is served by its canonical, a later one by the policy's miss action", "[plan][decisions]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  struct Case {
    const char* policy;
    ServeActionId miss;
    double background;  // token-forwards queued: the canonical's encode when a patch is formed
  };
  for (const Case& c : {Case{"patch:16", ServeActionId::kForm, 8}, Case{"reprefill", ServeActionId::kPrefill, 0},
                        Case{"blind", ServeActionId::kBlind, 0}}) {
    INFO(c.policy);
    TestWindow w(c.policy);
    const Plan first = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
    REQUIRE(first.steps.size() == 1);
    CHECK(first.steps[0].how == ServeActionId::kCanonical);
    CHECK(first.steps[0].exact);

    w.add_exact(a);
    const Plan second = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    REQUIRE(second.steps.size() == 2);
    CHECK(second.steps[0].how == ServeActionId::kKeep);
    const PlanStep& s = second.steps[1];
    CHECK(s.how == c.miss);
    CHECK(s.position == 12);
    CHECK(s.background_tokens == c.background);
    if (c.miss == ServeActionId::kBlind) {
      CHECK_FALSE(s.exact);
      CHECK(s.predicted_kl > 0);
      CHECK(s.forward_tokens == 8);  // the canonical's encode
    } else {
      CHECK(s.exact);
      CHECK(s.forward_tokens == 8);
    }
  }
}

TEST_CASE("a stored patch behind the same context serves with no forward; an orbit patch with a predicted loss",
          "[plan][decisions]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  TestWindow w("patch:16");
  w.add_exact(a);
  const WindowPolicy& policy = w.options.policy;
  const PatchKeys keys = patch_keys(env.model, policy, b, {a.ref.key}, 0);
  env.canonicals[b.ref.key] = StoreTier::kHost;

  env.stored = {keys.exact};
  env.facts[keys.exact] = PatchFacts{true, 0.0};
  Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  const PlanStep& hit = p.steps[1];
  CHECK(hit.how == ServeActionId::kStoredPatch);
  CHECK(hit.match == PatchMatch::kExact);
  CHECK(hit.patch_key == keys.exact);
  CHECK(hit.forward_tokens == 0);
  CHECK(hit.bytes_moved == 8 * 256);  // the canonical, read from the host tier
  CHECK(hit.exact == keys.full_rank);
  CHECK(p.forward_tokens == 0);

  env.stored = {keys.orbit};
  p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  const PlanStep& orbit_hit = p.steps[1];
  CHECK(orbit_hit.how == ServeActionId::kStoredPatch);
  CHECK(orbit_hit.match == PatchMatch::kOrbit);
  CHECK_FALSE(orbit_hit.exact);
  CHECK(orbit_hit.predicted_kl > 0);
  CHECK(orbit_hit.forward_tokens == 0);

  // A measured sensitivity scales the prediction: twice as sensitive, a larger predicted loss.
  env.sensitivity[b.ref.key] = 2.0;
  const Plan sensitive = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  CHECK(sensitive.steps[1].sensitivity == 2.0);
  CHECK(sensitive.steps[1].predicted_kl > orbit_hit.predicted_kl);
}

TEST_CASE("an eviction's survivors: kept approximately, deferred, or re-prefilled, as the policy says",
          "[plan][decisions]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2), c = chunk("c", 6, 3);
  FakeEnv env;
  SECTION("a deferring policy relocates the survivors and marks them; nothing is forwarded") {
    TestWindow w("reprefill");
    for (const ChunkRecord* x : {&a, &b, &c}) w.add_exact(*x);
    const Plan p = plan_layout(w.snapshot(), evict_first(w), env);
    CHECK(step_of(p, 1).how == ServeActionId::kEvict);
    CHECK(step_of(p, 1).position == 0);
    for (InstanceId id : {InstanceId{2}, InstanceId{3}}) {
      CHECK(step_of(p, id).how == ServeActionId::kKeep);
      CHECK(step_of(p, id).deferred);
      CHECK_FALSE(step_of(p, id).exact);
    }
    CHECK(p.forward_tokens == 0);
    CHECK(p.window_tokens_after == 14);
  }
  SECTION("an eager re-prefill forwards every survivor from the change point") {
    TestWindow w("reprefill:eager");
    for (const ChunkRecord* x : {&a, &b, &c}) w.add_exact(*x);
    const Plan p = plan_layout(w.snapshot(), evict_first(w), env);
    CHECK(step_of(p, 2).how == ServeActionId::kCanonical);  // now first: its canonical is exact
    CHECK(step_of(p, 3).how == ServeActionId::kPrefill);
    CHECK(step_of(p, 3).position == 8);
    CHECK(p.exact);
    CHECK(step_of(p, 3).forward_tokens == 6);
  }
  SECTION("an eager patch policy keeps the survivors as they are, relocated, and says why") {
    TestWindow w("patch:16:eager");
    for (const ChunkRecord* x : {&a, &b, &c}) w.add_exact(*x);
    const Plan p = plan_layout(w.snapshot(), evict_first(w), env);
    const PlanStep& kept = step_of(p, 3);
    CHECK(kept.how == ServeActionId::kKeep);
    CHECK_FALSE(kept.deferred);
    CHECK_FALSE(kept.exact);
    CHECK(kept.predicted_kl > 0);
    CHECK(kept.drift_tokens == 12);
    CHECK(kept.reason.find("chunk 'a' evicted") != std::string::npos);
    CHECK(p.forward_tokens == 0);
  }
}

TEST_CASE("exact reuse: KV computed behind the same states serves an instance instead of a forward",
          "[plan][decisions][reuse]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  // [a, b] + a again: a forward of a behind [a, b], unless that forward's KV is stored (an earlier plan
  // computed exactly this).
  TestWindow w("prefix");
  w.add_exact(a);
  w.add_exact(b);
  const std::string key = reuse_key(a.ref.key, w.chain_upto(2));
  Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
  CHECK(p.steps[2].how == ServeActionId::kPrefill);
  CHECK(p.steps[2].reuse_key == key);  // the forward's KV is kept under it
  CHECK(p.forward_tokens == 12);

  env.stored.insert(key);
  p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
  CHECK(p.steps[2].how == ServeActionId::kReuse);
  CHECK(p.steps[2].patch_key == key);
  CHECK(p.steps[2].exact);
  CHECK(p.forward_tokens == 0);

  // Under a policy that does not reuse computed KV the same store changes nothing.
  TestWindow noreuse("reprefill");
  noreuse.add_exact(a);
  noreuse.add_exact(b);
  p = plan_layout(noreuse.snapshot(), keep_all(noreuse, Operation::kAdmit, {&a}), env);
  CHECK(p.steps[2].how == ServeActionId::kPrefill);
  CHECK(p.steps[2].reuse_key.empty());
  CHECK(p.forward_tokens == 12);
}

TEST_CASE("KV read back from int8 rows is priced by its rounding and is not exact", "[plan][decisions][int8]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  const double e = 3e-5;  // a canonical's rounding error, as a share of its energy
  const double coefficient = planner::FidelityModel().coefficient(planner::Loss::kQuantized);
  env.canonicals[a.ref.key] = StoreTier::kDisk;
  env.canonicals[b.ref.key] = StoreTier::kDisk;
  env.quantization[a.ref.key] = e;
  env.quantization[b.ref.key] = e;
  TestWindow w("blind");
  const Plan first = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
  CHECK(first.steps[0].how == ServeActionId::kCanonical);
  CHECK(first.steps[0].quantized_kl == Approx(coefficient * e));  // the last instance: recency weight 1
  CHECK(first.steps[0].predicted_kl == Approx(coefficient * e));
  CHECK_FALSE(first.steps[0].exact);
  CHECK_FALSE(first.exact);

  w.add_exact(a);
  const Plan second = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  const PlanStep& blind = second.steps[1];
  CHECK(blind.how == ServeActionId::kBlind);
  CHECK(blind.quantized_kl == Approx(coefficient * e));
  CHECK(blind.predicted_kl > blind.quantized_kl);  // the blind loss, and the rounding on top
  env.quantization.clear();
  const Plan exact_store = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  CHECK(exact_store.steps[1].quantized_kl == 0);
  CHECK(blind.predicted_kl == Approx(exact_store.steps[1].predicted_kl + blind.quantized_kl));

  // A recompute of some of its tokens leaves the rest with the canonical's rounding.
  TestWindow firstk("firstk:2");
  firstk.add_exact(a);
  env.quantization[b.ref.key] = e;
  const PlanStep& recompute = plan_layout(firstk.snapshot(), keep_all(firstk, Operation::kAdmit, {&b}), env).steps[1];
  CHECK(recompute.how == ServeActionId::kFirstK);
  CHECK(recompute.quantized_kl == Approx(coefficient * e * 6.0 / 8.0));
}

TEST_CASE("exact reuse of rows read back from int8 replaces a forward only within the budget",
          "[plan][decisions][int8]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  TestWindow w("default");  // a budget, and exact reuse
  w.add_exact(a);
  w.add_exact(b);
  const std::string key = reuse_key(a.ref.key, w.chain_upto(2));
  env.stored.insert(key);
  REQUIRE(w.options.policy.kl_budget > 0);
  REQUIRE(w.options.policy.reuse_computed);
  env.quantization[key] = 3e-5;  // 4 · 3e-5 at weight 1: within the budget
  Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
  CHECK(p.steps[2].how == ServeActionId::kReuse);
  CHECK(p.steps[2].quantized_kl > 0);
  CHECK_FALSE(p.steps[2].exact);
  env.quantization[key] = 0.01;  // its rounding alone past the budget: the exact step stays
  p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&a}), env);
  CHECK(p.steps[2].how != ServeActionId::kReuse);
  CHECK(p.steps[2].exact);
  CHECK(p.steps[2].quantized_kl == 0);
}

TEST_CASE("a partial match loads the leading tokens a forward behind the same states stored",
          "[plan][decisions][reuse]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 16, 2);
  FakeEnv env;
  TestWindow w("prefix");
  w.add_exact(a);
  // An earlier forward behind [a] stored the KV of b's first 10 tokens followed by something else.
  std::vector<int64_t> earlier(b.tokens.begin(), b.tokens.begin() + 10);
  earlier.push_back(9999);
  const KvState chain = w.chain_upto(1);
  const std::string stored_key = "stored-sequence";
  env.reuse.add(chain, content_chain(KvState{}, a.ref.key), stored_key, earlier);
  env.stored.insert(stored_key);
  const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  const PlanStep& s = p.steps[1];
  CHECK(s.how == ServeActionId::kPrefill);
  CHECK(s.reuse_from == stored_key);
  CHECK(s.reused_tokens == 10);
  CHECK(s.forward_tokens == 6);
  CHECK(s.exact);
}

TEST_CASE("under a KL budget the planner takes the cheapest action that fits", "[plan][decisions][budget]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  env.canonicals[b.ref.key] = StoreTier::kHost;
  env.stale[b.ref.key] = StaleMatch{"stale-patch", 0.3};
  env.stored.insert("stale-patch");
  TestWindow w("default");
  w.add_exact(a);
  // b is the window's last instance: its recency weight is 1.
  const planner::FidelityModel fidelity;
  const double blind_kl = fidelity.predict(planner::Loss::kBlind, 1.0, 1.0, -1);
  const double stale_kl = fidelity.predict(planner::Loss::kStale, 0.3, 1.0, -1);
  REQUIRE(stale_kl < blind_kl);
  const auto plan_b = [&](double budget) {
    w.options.policy.kl_budget = budget;
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.predicted_kl <= budget);
    return p.steps[1];
  };
  // Anything fits: no forward. An upgrade that removes loss for next to no time is still taken (the search's
  // free rate), so the stale patch beats blind; without it, blind is the cheapest.
  const PlanStep loose = plan_b(1.0);
  CHECK(loose.forward_tokens == 0);
  CHECK(loose.how == ServeActionId::kStoredPatch);
  env.stale.clear();
  const PlanStep no_patch = plan_b(1.0);
  CHECK(no_patch.how == ServeActionId::kBlind);
  CHECK(no_patch.predicted_kl == Approx(blind_kl));
  env.stale[b.ref.key] = StaleMatch{"stale-patch", 0.3, 32, 24};  // formed at higher ranks than the plan asks

  const PlanStep middle = plan_b((stale_kl + blind_kl) / 2);
  CHECK(middle.rank_k == 32);  // the ranks read, not the plan's
  CHECK(middle.rank_v == 24);
  CHECK(middle.how == ServeActionId::kStoredPatch);
  CHECK(middle.match == PatchMatch::kStale);
  CHECK(middle.divergence == 0.3);
  CHECK(middle.predicted_kl == Approx(stale_kl));
  CHECK(middle.forward_tokens == 0);

  const PlanStep tight = plan_b(1e-12);  // only exact actions fit: the cheapest is one forward in context
  CHECK(tight.how == ServeActionId::kForm);
  CHECK(tight.exact);
  CHECK(tight.forward_tokens == 8);
}

// An instance whose KV is a stored patch (served from it, or a form that stored it) and whose context then
// changed: re-serving that same patch gives the same KV, so it cannot be priced below the keep, and a plan
// never takes it as a repair.
TEST_CASE("a re-serve of the stored patch an instance holds is priced as its keep and repairs nothing",
          "[plan][decisions][budget]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2), c = chunk("c", 10, 3);
  FakeEnv env;
  env.canonicals[c.ref.key] = StoreTier::kHost;
  env.stored.insert("held-patch");
  // The closest stored patch to c's context after the eviction is the one c holds, formed under a context
  // near this one: its own stale price is far below what c's keep carries.
  env.stale[c.ref.key] = StaleMatch{"held-patch", 0.02};
  for (const bool formed : {false, true}) {
    INFO((formed ? "formed, its exact patch stored" : "served from a stale patch"));
    if (formed) env.facts["held-patch"] = PatchFacts{true, 0.0};  // full rank over an exact context
    TestWindow w("patch:16:eager");
    for (const ChunkRecord* x : {&a, &b, &c}) w.add_exact(*x);
    w.serve_last_from("held-patch", formed ? 0.0 : 2e-4, formed);
    const auto plan = [&](double budget, bool force) {
      w.options.policy.kl_budget = budget;
      Layout l = evict_first(w);
      l.slots.back().force = force;
      return plan_layout(w.snapshot(), l, env);
    };
    // What the keep is priced at: with no stored patch to find, and a budget nothing needs repairing for.
    env.stale.clear();
    const Plan no_patch = plan(1.0, false);
    env.stale[c.ref.key] = StaleMatch{"held-patch", 0.02};
    REQUIRE(step_of(no_patch, 3).how == ServeActionId::kKeep);
    const double keep_kl = step_of(no_patch, 3).predicted_kl;
    const double patch_kl = planner::FidelityModel{}.predict(planner::Loss::kStale, 0.02, 1.0, -1);
    REQUIRE(patch_kl < keep_kl / 2);

    // The held patch found: the same KV, so the same plan (a cheap upgrade below the budget would be taken).
    const Plan loose = plan(1.0, false);
    CHECK(step_of(loose, 3).how == ServeActionId::kKeep);
    CHECK(loose.predicted_kl == Approx(no_patch.predicted_kl));

    // Forced to be served again (keep is not a candidate): the held patch is the cheapest action, at the
    // keep's price, not at its own lower one.
    const Plan forced_plan = plan(1.0, true);
    const PlanStep& forced = step_of(forced_plan, 3);
    CHECK(forced.how == ServeActionId::kStoredPatch);
    CHECK(forced.patch_key == "held-patch");
    CHECK(forced.predicted_kl == Approx(keep_kl));

    // A budget between the two prices: the held patch does not bring the plan under it, a real repair does.
    const Plan tight = plan((patch_kl + keep_kl) / 2, false);
    const PlanStep& repaired = step_of(tight, 3);
    CHECK_FALSE((repaired.how == ServeActionId::kStoredPatch && repaired.patch_key == "held-patch"));
    CHECK(repaired.how != ServeActionId::kKeep);
    CHECK(tight.predicted_kl <= (patch_kl + keep_kl) / 2);

    // Without a budget, a policy that re-serves survivors and accepts stale patches keeps it instead.
    TestWindow exact("patch:16:exact:stale=0.5:eager");
    for (const ChunkRecord* x : {&a, &b, &c}) exact.add_exact(*x);
    exact.serve_last_from("held-patch", formed ? 0.0 : 2e-4, formed);
    const Plan unbudgeted = plan_layout(exact.snapshot(), evict_first(exact), env);
    CHECK(step_of(unbudgeted, 2).how == ServeActionId::kCanonical);  // now first
    const PlanStep& survivor = step_of(unbudgeted, 3);
    CHECK(survivor.how == ServeActionId::kKeep);
    CHECK(survivor.reason.find("the KV it holds") != std::string::npos);
  }
}

TEST_CASE("plans that apply would refuse say so, with nothing to run", "[plan][decisions][refusal]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  TestWindow w("patch:16");
  w.add_exact(a);
  SECTION("past the model's positions") {
    env.model.max_positions = 16;
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.refusal.find("past the model's limit of 16 (evict or slide first)") != std::string::npos);
    CHECK_FALSE(p.refused_capacity);
    CHECK(p.forward_tokens == 0);
  }
  SECTION("past the model's positions, naming where the limit comes from") {
    env.model.max_positions = 16;
    env.model.max_positions_source = "max_position_embeddings * rope_scaling.factor";
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.refusal.find("past the model's limit of 16 from max_position_embeddings * rope_scaling.factor "
                         "(evict or slide first)") != std::string::npos);
  }
  SECTION("over the window's byte budget") {
    w.options.max_bytes = 4 * 4 * 256;  // four pages; the plan needs five
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.refusal.find("over its max_bytes budget") != std::string::npos);
    CHECK(p.refused_capacity);
  }
  SECTION("more fresh pages than the shared pool has free") {
    env.pool = PoolPages{1, 100};  // b needs two
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.refusal.find("the KV pool is full (1 of 100 pages free; this plan needs 2)") != std::string::npos);
    CHECK(p.refused_capacity);
  }
  SECTION("more fresh pages than the whole pool has: too small, not full") {
    env.pool = PoolPages{1, 1};  // b needs two; the one page is free
    const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
    CHECK(p.refusal.find("the KV pool is too small (1 pages in all, 1 free; this plan needs 2): give the engine a "
                         "larger pool (pool_bytes)") != std::string::npos);
    CHECK(p.refused_capacity);
  }
}

TEST_CASE("a placement of a chunk whose canonical set is held takes no fresh pages", "[plan][decisions][refusal]") {
  // Served from its canonical (blind here), b reads the set another window's placement holds: a full pool
  // does not refuse it. A step that forwards (a live turn) still needs pages of its own.
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  TestWindow w("blind");
  w.add_exact(a);
  env.pool = PoolPages{0, 100};
  const Plan alone = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  CHECK(alone.refusal.find("the KV pool is full (0 of 100 pages free; this plan needs 2)") != std::string::npos);
  env.held_sets.insert(b.ref.key);
  const Plan shared = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&b}), env);
  CHECK(shared.refusal.empty());
  REQUIRE(shared.steps.size() == 2);
  CHECK(shared.steps[1].how == ServeActionId::kBlind);
  env.held_sets = {a.ref.key, b.ref.key};
  env.pool = PoolPages{1, 100};
  Layout with_turn = keep_all(w, Operation::kAddTurn);
  Slot t;
  t.id = 200;
  t.turn_tokens = std::vector<int64_t>(8, 7);
  t.is_turn = true;
  with_turn.slots.push_back(t);
  const Plan turn = plan_layout(w.snapshot(), with_turn, env);
  CHECK(turn.refusal.find("this plan needs 2") != std::string::npos);
}

TEST_CASE("planning asks the environment only about what may change its decision", "[plan][decisions]") {
  const ChunkRecord a = chunk("a", 12, 1), b = chunk("b", 8, 2);
  FakeEnv env;
  TestWindow w("default");
  w.add_exact(a);
  w.add_exact(b);
  // Nothing changed: no instance's sensitivity is read (each carries what its serving action left).
  (void)plan_layout(w.snapshot(), keep_all(w, Operation::kFlush), env);
  CHECK(env.sensitivity_asks.empty());
  // b's context changes: its sensitivity is read, a's (first, unchanged) is not.
  (void)plan_layout(w.snapshot(), evict_first(w), env);
  CHECK(env.sensitivity_asks == std::vector<std::string>{b.ref.key});
}

TEST_CASE("dynamic NTK: a window grown past the anchor re-forms what was formed far short of it", "[plan][decisions]") {
  // a (96 tokens, the window's first: its canonical, formed at its own length) and b (formed at 112) read in a
  // window of 128 once c is admitted. Anchored at 64 with factor 2, a's content carries scale 2 where the window
  // reads at 3: predicted 0.29 · ln(3/2)² · a's weight, about 2e-2 (planner::shortfall_feature), far past the
  // 3e-3 budget; b, formed at 2.5, about 1e-3 plus what c reads through it. The plan forwards at the window's
  // length (Plan::rope_window) and re-prefills a there; without dynamic NTK (the old planner, which priced no
  // shortfall) every instance stays kept.
  const ChunkRecord a = chunk("a", 96, 1), b = chunk("b", 16, 2), c = chunk("c", 16, 3);
  TestWindow w("default");
  w.add_exact(a);
  w.add_exact(b);
  w.entries[0]->formed_window = 96;
  w.entries[1]->formed_window = 112;
  FakeEnv unscaled;
  const Plan plain = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&c}), unscaled);
  CHECK(plain.rope_window == 0);
  CHECK(step_of(plain, 1).how == ServeActionId::kKeep);
  CHECK(step_of(plain, 2).how == ServeActionId::kKeep);
  CHECK(plain.predicted_kl == 0);

  FakeEnv dynamic;
  dynamic.model.dynamic_ntk = planner::DynamicNtk{64, 2.0};
  const Plan p = plan_layout(w.snapshot(), keep_all(w, Operation::kAdmit, {&c}), dynamic);
  CHECK(p.rope_window == 128);
  const PlanStep& first = step_of(p, 1);
  INFO("a: " << serve_action_name(first.how) << ", " << first.reason << "; plan predicts " << p.predicted_kl);
  CHECK(first.how == ServeActionId::kPrefill);
  CHECK(first.shortfall_kl == 0);
  CHECK(first.forward_tokens == 96);
  // b: kept with its shortfall priced, or re-formed at the window's length too.
  const PlanStep& second = step_of(p, 2);
  CHECK((second.how == ServeActionId::kKeep ? second.shortfall_kl > 0 : second.shortfall_kl == 0));
  CHECK(p.predicted_kl <= w.options.policy.kl_budget);
  // Kept as it was, a would have been predicted to lose (the keep's price, before the budget moved off it):
  const double kept_a = 0.29 * std::pow(std::log(3.0 / 2.0), 2.0);  // · a's weight (at most 1)
  CHECK(p.predicted_kl < kept_a);

  // Within the anchor nothing changes: a window of 48 tokens forwards at each instance's own end.
  TestWindow small("default");
  const ChunkRecord d = chunk("d", 24, 4), e = chunk("e", 16, 5), f = chunk("f", 8, 6);
  small.add_exact(d);
  small.add_exact(e);
  small.entries[0]->formed_window = 24;
  small.entries[1]->formed_window = 40;
  const Plan within = plan_layout(small.snapshot(), keep_all(small, Operation::kAdmit, {&f}), dynamic);
  CHECK(within.rope_window == 0);
  CHECK(within.predicted_kl == 0);
  CHECK(step_of(within, 1).how == ServeActionId::kKeep);
}

}  // namespace ORBIT_TEST_FILE
