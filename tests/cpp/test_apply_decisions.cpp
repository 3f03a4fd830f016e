// Apply's decisions without a model or torch: each serving action's apply half (apply/actions.h) run against a
// fake ApplyEnv whose store holds exactly what each case needs, and which logs every read, forward, store and
// queued job. This executable links the torch-free apply library (orbit_apply) and Catch only; the same
// actions against real KV are checked end to end in test_plan_actions, test_window and test_exact_reuse.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apply/actions.h"
#include "orbit/common/error.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::detail;

namespace {

// KV the fake made: how it was made (for the assertions) and its rows.
struct FakeKv final : KvRows {
  FakeKv(std::string how_, int64_t rows_) : how(std::move(how_)), n(rows_) {}
  std::string how;
  int64_t n;
  int64_t rows() const override { return n; }
  int64_t bytes() const override { return n * 100; }
};

Kv kv(const std::string& how, int64_t rows) { return std::make_shared<const FakeKv>(how, rows); }
std::string how_of(const Kv& k) { return k == nullptr ? "null" : static_cast<const FakeKv&>(*k).how; }

class FakeEnv final : public ApplyEnv {
 public:
  std::vector<std::string> context;           // the window built so far (content keys)
  KvState built_chain{7, 9};                  // its KV-state chain
  std::map<std::string, int64_t> canonicals;  // chunk key -> rows stored (absent: encoded on read)
  std::map<std::string, int64_t> patches;     // patch key -> bytes (absent: dropped from the store)
  std::map<std::string, Kv> stored;           // store key -> conditioned KV
  std::vector<std::string> log;               // every call, in order
  std::vector<FormJob> forms;
  std::vector<std::pair<std::string, PatchRecord>> puts;

  bool context_empty() const override { return context.empty(); }
  std::vector<std::string> context_keys() const override { return context; }
  KvState chain() const override { return built_chain; }
  ModelLimits model() const override { return ModelLimits{2, 16, 16, 256, 512}; }

  CanonicalRead canonical(const ChunkRecord& chunk) override {
    auto it = canonicals.find(chunk.ref.key);
    CanonicalRead read;
    read.encoded = it == canonicals.end();
    read.forwarded_tokens = read.encoded ? chunk.ref.length : 0;
    read.bytes_read = read.encoded ? 0 : it->second * 100;
    log.push_back(read.encoded ? "encode " + chunk.ref.key : "read canonical " + chunk.ref.key);
    read.kv = kv("canonical", chunk.ref.length);
    return read;
  }
  std::optional<Kv> patched(const ChunkRecord& chunk, const Kv& canonical, const std::string& patch_key,
                            int64_t* patch_bytes) override {
    log.push_back("read patch " + patch_key);
    auto it = patches.find(patch_key);
    if (it == patches.end()) return std::nullopt;
    *patch_bytes = it->second;
    return kv(how_of(canonical) + "+" + patch_key, chunk.ref.length);
  }
  std::optional<Kv> conditioned(const std::string& key) override {
    log.push_back("read stored " + key);
    auto it = stored.find(key);
    if (it == stored.end()) return std::nullopt;
    return it->second;
  }
  void put_conditioned(const Kv& k, const std::string& chunk_key, PatchRecord record) override {
    log.push_back("put " + record.key + " = " + how_of(k));
    puts.emplace_back(chunk_key, std::move(record));
  }
  Kv forward(const ApplyTarget& t) override {
    log.push_back("forward " + t.key + " @" + std::to_string(t.position));
    return kv("forward", t.length);
  }
  Kv leading_rows(const Kv& k, int64_t rows) override {
    return kv(how_of(k) + "[:" + std::to_string(rows) + "]", rows);
  }
  Kv forward_rest(const ApplyTarget& t, const Kv& head) override {
    log.push_back("forward rest " + t.key + " after " + std::to_string(head->rows()));
    return kv(how_of(head) + "+forward", t.length);
  }
  Kv recompute(const ApplyTarget& t, const Kv& canonical, int64_t count, bool selective, double* probe) override {
    *probe = selective ? 2 : 0;
    log.push_back((selective ? "cacheblend " : "first-k ") + std::to_string(count));
    return kv(how_of(canonical) + "+recompute", t.length);
  }
  void queue_form(FormJob job) override {
    log.push_back("queue form " + job.chunk->ref.key);
    forms.push_back(std::move(job));
  }
  void queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>&, const Kv&) override {
    log.push_back("queue sensitivity " + key);
  }
};

ChunkRecord token_chunk(const std::string& key, int64_t n) {
  ChunkRecord c;
  c.ref.key = key;
  c.ref.kind = ChunkKind::kTokens;
  c.ref.length = c.ref.extent = n;
  for (int64_t i = 0; i < n; ++i) c.tokens.push_back(10 + i);
  return c;
}

PlanStep step(ServeActionId how) {
  PlanStep s;
  s.how = how;
  return s;
}

ApplyOutput run(FakeEnv& env, const ChunkRecord* chunk, const PlanStep& s, bool has_old = false,
                const std::vector<int64_t>* turn = nullptr) {
  ApplyInput in{env, ApplyTarget{}};
  in.target.key = chunk != nullptr ? chunk->ref.key : "turn";
  in.target.chunk = ChunkPtr(ChunkPtr(), chunk);  // not owned: the test's record outlives the call
  in.target.turn_tokens = turn;
  in.target.length = chunk != nullptr ? chunk->ref.length : static_cast<int64_t>(turn->size());
  in.target.position = 40;
  in.target.has_old = has_old;
  ApplyOutput out;
  apply_action(in, s, out);
  return out;
}

}  // namespace

TEST_CASE("keep keeps the old pages and touches nothing; a keep of an instance the window lacks throws", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  const ApplyOutput out = run(env, &c, step(ServeActionId::kKeep), /*has_old=*/true);
  CHECK(out.keep_pages);
  CHECK(out.content == nullptr);
  CHECK(out.done_as == StepAction::kKeep);
  CHECK(env.log.empty());
  CHECK_THROWS_AS(run(env, &c, step(ServeActionId::kKeep), /*has_old=*/false), Error);
}

TEST_CASE("a canonical read from the store moves its bytes; one encoded counts its forward", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  env.canonicals["A"] = 8;
  ApplyOutput out = run(env, &c, step(ServeActionId::kCanonical));
  CHECK(out.done_as == StepAction::kCanonical);
  CHECK(out.forward_tokens == 0);
  CHECK(out.bytes_moved == 800);
  CHECK(out.canonicals_encoded == 0);
  CHECK_FALSE(out.conditioned);
  env.canonicals.clear();
  out = run(env, &c, step(ServeActionId::kBlind));
  CHECK(out.done_as == StepAction::kBlind);
  CHECK(out.canonicals_encoded == 1);
  CHECK(out.forward_tokens == 8);
  CHECK(out.encode_tokens == 8);
}

TEST_CASE("stored-patch applies the patch to the canonical, and prefills in context when it is gone", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  env.canonicals["A"] = 8;
  env.patches["P"] = 64;
  PlanStep s = step(ServeActionId::kStoredPatch);
  s.patch_key = "P";
  ApplyOutput out = run(env, &c, s);
  CHECK(how_of(out.content) == "canonical+P");
  CHECK(out.done_as == StepAction::kApplyPatch);
  CHECK(out.patch_hits == 1);
  CHECK(out.bytes_moved == 800 + 64);
  CHECK(out.forward_tokens == 0);
  CHECK(out.conditioned);

  env.patches.clear();  // evicted between plan and apply
  out = run(env, &c, s);
  CHECK(how_of(out.content) == "forward");
  CHECK(out.done_as == StepAction::kReprefill);
  CHECK(out.forward_tokens == 8);
  CHECK(out.patch_hits == 0);
  CHECK(env.log.back() == "forward A @40");
}

TEST_CASE("load-conditioned reads the stored KV, and prefills when it is gone", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  PlanStep s = step(ServeActionId::kLoadConditioned);
  s.patch_key = "C";
  env.stored["C"] = kv("conditioned", 8);
  ApplyOutput out = run(env, &c, s);
  CHECK(out.done_as == StepAction::kLoadConditioned);
  CHECK(how_of(out.content) == "conditioned");
  CHECK(out.bytes_moved == 800);
  CHECK(out.forward_tokens == 0);
  env.stored.clear();
  out = run(env, &c, s);
  CHECK(out.done_as == StepAction::kReprefill);
  CHECK(out.forward_tokens == 8);
}

TEST_CASE("reuse reads the key of the window as built, and forwards when it is missing or of another length",
          "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  const std::string key = reuse_key("A", env.built_chain);
  env.stored[key] = kv("reused", 8);
  ApplyOutput out = run(env, &c, step(ServeActionId::kReuse));
  CHECK(out.done_as == StepAction::kLoadConditioned);
  CHECK(how_of(out.content) == "reused");
  CHECK(out.forward_tokens == 0);
  CHECK(env.log.front() == "read stored " + key);

  env.stored[key] = kv("reused", 5);  // not this instance's rows: forwarded instead
  out = run(env, &c, step(ServeActionId::kReuse));
  CHECK(out.done_as == StepAction::kReprefill);
  CHECK(out.forward_tokens == 8);

  const std::vector<int64_t> turn = {1, 2, 3};
  env.stored.clear();
  out = run(env, nullptr, step(ServeActionId::kReuse), false, &turn);
  CHECK(out.done_as == StepAction::kPrefillTurn);
  CHECK(out.forward_tokens == 3);
  CHECK(out.background_jobs == 0);

  // A turn served from stored rows (an answer a read computed, sent back) is measured when the step asks, as
  // a prefilled turn is.
  env.stored[reuse_key("turn", env.built_chain)] = kv("reused", 3);
  PlanStep measured = step(ServeActionId::kReuse);
  measured.measure_sensitivity = true;
  out = run(env, nullptr, measured, false, &turn);
  CHECK(out.done_as == StepAction::kLoadConditioned);
  CHECK(out.forward_tokens == 0);
  CHECK(out.background_jobs == 1);
  CHECK(env.log.back() == "queue sensitivity turn");
}

TEST_CASE("form forwards in context and queues the patch with the context, keys and rank it was planned with",
          "[apply]") {
  FakeEnv env;
  env.context = {"S", "T"};
  const ChunkRecord c = token_chunk("A", 8);
  PlanStep s = step(ServeActionId::kForm);
  s.store_keys = {"exact", "orbit"};
  s.variant = "full";
  s.rank_k = s.rank_v = 8;  // min(8 tokens, width 16): full rank
  s.exact = true;
  ApplyOutput out = run(env, &c, s);
  CHECK(out.done_as == StepAction::kForm);
  CHECK(out.forward_tokens == 8);
  CHECK(out.background_jobs == 1);
  REQUIRE(env.forms.size() == 1);
  const FormJob& job = env.forms.front();
  CHECK(job.form.context == std::vector<std::string>{"S", "T"});
  CHECK(job.form.store_keys == std::vector<std::string>{"exact", "orbit"});
  CHECK(job.form.full_rank);
  CHECK(job.form.exact);
  CHECK(how_of(job.conditioned) == "forward");

  s.rank_k = 4;  // truncated: not full rank
  run(env, &c, s);
  CHECK_FALSE(env.forms.back().form.full_rank);
}

TEST_CASE("a forwarding step loads the leading rows stored for the same tokens and forwards only the rest", "[apply]") {
  FakeEnv env;
  env.context = {"S"};
  const ChunkRecord c = token_chunk("A", 8);
  PlanStep s = step(ServeActionId::kPrefill);
  s.reuse_from = "R";
  s.reused_tokens = 5;
  env.stored["R"] = kv("run", 6);
  ApplyOutput out = run(env, &c, s);
  CHECK(how_of(out.content) == "run[:5]+forward");
  CHECK(out.forward_tokens == 3);
  CHECK(out.patch_hits == 1);
  CHECK(out.bytes_moved == 500);
  CHECK_FALSE(out.approximate_reuse);

  s.match = PatchMatch::kStale;  // rows computed behind the same content served another way
  out = run(env, &c, s);
  CHECK(out.approximate_reuse);

  env.stored["R"] = kv("run", 4);  // shorter than the plan counted on: the whole instance is forwarded
  out = run(env, &c, s);
  CHECK(how_of(out.content) == "forward");
  CHECK(out.forward_tokens == 8);
  CHECK_FALSE(out.approximate_reuse);
}

TEST_CASE("prefill stores its KV under each of the step's keys as conditioned KV of this context", "[apply]") {
  FakeEnv env;
  env.context = {"S"};
  const ChunkRecord c = token_chunk("A", 8);
  PlanStep s = step(ServeActionId::kPrefill);
  s.store_keys = {"K1"};
  s.exact = true;
  const ApplyOutput out = run(env, &c, s);
  CHECK(out.done_as == StepAction::kReprefill);
  REQUIRE(env.puts.size() == 1);
  CHECK(env.puts[0].first == "A");
  const PatchRecord& rec = env.puts[0].second;
  CHECK(rec.key == "K1");
  CHECK(rec.conditioned);
  CHECK(rec.exact);
  CHECK(rec.variant == "conditioned");
  CHECK(rec.context == std::vector<std::string>{"S"});
}

TEST_CASE("first-k and cacheblend recompute behind a context and serve the canonical without one", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  env.canonicals["A"] = 8;
  PlanStep s = step(ServeActionId::kFirstK);
  s.recompute_tokens = 3;
  ApplyOutput out = run(env, &c, s);
  CHECK(how_of(out.content) == "canonical");  // nothing precedes it: nothing to recompute
  CHECK(out.forward_tokens == 0);
  CHECK(out.done_as == StepAction::kRecompute);

  env.context = {"S"};
  out = run(env, &c, s);
  CHECK(how_of(out.content) == "canonical+recompute");
  CHECK(out.forward_tokens == 3);
  s.how = ServeActionId::kCacheBlend;
  out = run(env, &c, s);
  CHECK(out.forward_tokens == 3 + 2);  // the tokens recomputed and the probe that chose them
  CHECK(env.log.back() == "cacheblend 3");
}

TEST_CASE("a live turn is prefilled and, when the step asks, its sensitivity is queued", "[apply]") {
  FakeEnv env;
  const std::vector<int64_t> turn = {1, 2, 3, 4};
  PlanStep s = step(ServeActionId::kPrefillTurn);
  ApplyOutput out = run(env, nullptr, s, false, &turn);
  CHECK(out.done_as == StepAction::kPrefillTurn);
  CHECK(out.forward_tokens == 4);
  CHECK(out.background_jobs == 0);
  s.measure_sensitivity = true;
  out = run(env, nullptr, s, false, &turn);
  CHECK(out.background_jobs == 1);
  CHECK(env.log.back() == "queue sensitivity turn");
}

TEST_CASE("an eviction step never makes KV", "[apply]") {
  FakeEnv env;
  const ChunkRecord c = token_chunk("A", 8);
  CHECK_THROWS_AS(run(env, &c, step(ServeActionId::kEvict)), Error);
}

}  // namespace ORBIT_TEST_FILE
