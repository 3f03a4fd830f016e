// DecodeCache's latent layout for MLA on the CPU (decode_cache.h): a slot holds [c_KV ‖ RoPE(k_pe)] per token
// and layer, r_kv + d_rope numbers (binding-mla: 80, where the expanded rows took 4 · (32 + 16) = 192), and
// its forwards attend in the absorbed form. Checked on the bundled binding-mla model against Model::forward
// over a contiguous past in the naive form (the reference): 32 greedy decode steps of a prompt, then a fork
// decoded beside its parent in one forward_batch for 16 more, give logits within the float32 bound
// (float_tolerance.h) and the same tokens; key_attention, kept content and a slot opened from a paged past
// agree too; the cache's bytes are the latent size per token and layer; a form the slots cannot take is
// refused naming options.mla_form. With dynamic-NTK RoPE (binding-mla anchored at 24 tokens, decoded past
// it) the slots keep the latent too, k_pe stored before rotation and rotated when read, and decode as the
// naive form over a contiguous past does (the oracle), a fork and a 3-token query after a paged past included.
//
// Checked by breaking the runtime: with the expanded layout (DecodeCacheState::latent false, as before) the
// byte checks fail (3072 bytes a token over the 4 layers, not 1280; 61600 bytes for a slot of 20 rows, not
// 25760); with k_pe stored unrotated the logits move by 0.33 to 4.9 and the greedy tokens part; with a fork
// copying one row fewer the branch's logits move by 0.26; without the mask of later rows (R > 1) the 3-token
// query after the paged past moves by 0.46. Under dynamic NTK, with the read rotation skipped (the latent
// rows' k_pe attended unrotated) the logits move by 0.33 to 4.9 and the greedy tokens part; with the expanded
// rows (as before) the test case's latent() check fails.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <set>

#include "forward_batch_cases.h"
#include "orbit/common/error.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_past.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::case_tokens;
using orbit::test::contiguous_past;
using orbit::test::max_abs_diff;

namespace {

std::unique_ptr<Model> binding_mla() { return load_model(std::string(ORBIT_MODELS_DIR) + "/binding-mla"); }

// binding-mla with dynamic-NTK RoPE anchored at 24 tokens: a decode passes it, so k_pe's angles change with
// every step's window past it.
std::unique_ptr<Model> dynamic_mla() {
  const auto m = binding_mla();
  ModelConfig dyn = m->config();
  dyn.rope.scaling = RopeScaling::kDynamicNtk;
  dyn.rope.factor = 2.0;
  dyn.max_position_embeddings = dyn.rope.max_position_embeddings = 24;
  ModelWeights w = m->weights();
  return std::make_unique<Model>(dyn, std::move(w), "binding-mla, dynamic NTK at 24");
}

// A sequence decoded twice: through a cache slot, and over a contiguous past grown by its rows (the reference).
struct Twin {
  PastKV plain;
  int64_t slot = -1;
  int64_t token = 0;  // the next input token: both paths' greedy pick of the last step
};

void grow(PastKV& past, const ForwardResult& r, int64_t position) {
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    past.layers[l] = {at::cat({past.layers[l].k, r.content[l].k}), at::cat({past.layers[l].v, r.content[l].v})};
  }
  past.positions = at::cat({past.positions, at::tensor({position}, at::kLong)});
}

// One greedy step of every twin: through the cache in one forward_batch, and alone over its plain past in the
// naive form. Returns the largest logit difference.
double step(const Model& m, DecodeCache& cache, std::vector<Twin>& twins) {
  std::vector<ForwardInput> inputs(twins.size());
  std::vector<PastKV> slots(twins.size());
  ForwardOptions cached;
  cached.return_content = false;
  std::vector<SequenceForward> batch;
  for (std::size_t i = 0; i < twins.size(); ++i) {
    inputs[i].tokens = {twins[i].token};
    inputs[i].positions = at::tensor({twins[i].plain.length()}, at::kLong);
    slots[i] = cache.past(twins[i].slot);
    batch.push_back({&inputs[i], &slots[i], &cached});
  }
  const std::vector<ForwardResult> got = m.forward_batch(batch);
  ForwardOptions naive;
  naive.mla_form = MlaForm::kNaive;
  double worst = 0;
  for (std::size_t i = 0; i < twins.size(); ++i) {
    Twin& t = twins[i];
    const ForwardResult want = m.forward(inputs[i], &t.plain, naive);
    const double diff = max_abs_diff(got[i].logits, want.logits);
    const auto bound = orbit::test::float32_bound(m, t.plain.length() + 1);
    CHECK(diff <= bound(orbit::test::largest(want.logits), "logits"));
    worst = std::max(worst, diff);
    const int64_t picked = want.logits[-1].argmax().item<int64_t>();
    REQUIRE(got[i].logits[-1].argmax().item<int64_t>() == picked);  // the same greedy token
    grow(t.plain, want, t.plain.length());
    REQUIRE(cache.length(t.slot) == t.plain.length());
    t.token = picked;
  }
  return worst;
}

// One sequence of 12 prompt rows (case_tokens seed 2) twinned: in a slot of `cache` and as a contiguous past,
// token 7 next.
std::vector<Twin> prompt_twins(const Model& m, DecodeCache& cache) {
  std::vector<Twin> twins(1);
  twins[0].plain = *contiguous_past(m, case_tokens(m, 12, 2));
  twins[0].slot = cache.open(&twins[0].plain);
  twins[0].token = 7;
  return twins;
}

// `steps` greedy steps of every twin (step); the first twin's picks appended to `picked`. Returns the largest
// logit difference.
double decode(const Model& m, DecodeCache& cache, std::vector<Twin>& twins, int steps,
              std::vector<int64_t>* picked = nullptr) {
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    worst = std::max(worst, step(m, cache, twins));
    if (picked != nullptr) picked->push_back(twins[0].token);
  }
  return worst;
}

// The first twin forked given another token and decoded beside its parent for `beside` steps, then alone (the
// parent closed: its slot free below the branch's) for `alone`. Returns the largest logit difference.
double fork_and_close(const Model& m, DecodeCache& cache, std::vector<Twin>& twins, int beside, int alone) {
  Twin branch = twins[0];
  branch.slot = cache.fork(twins[0].slot);
  branch.token = (twins[0].token + 1) % m.config().vocab_size;
  twins.push_back(branch);
  double worst = decode(m, cache, twins, beside);
  cache.close(twins[0].slot);
  twins.erase(twins.begin());
  return std::max(worst, decode(m, cache, twins, alone));
}

// A 3-token query, every logit, after a paged past (gathered, patched; 21 + 13 rows) through a slot of `cache`
// opened from it (keeping its rows where `keep`), and in the naive form over the paged past itself.
struct PagedQuery {
  int64_t slot = -1;
  ForwardResult got, want;
  int64_t keys = 0;  // the query's keys: the past's rows and its own
};

PagedQuery paged_query(const Model& m, DecodeCache& cache, bool keep, bool key_attention) {
  orbit::test::PagedScenario paged = orbit::test::make_paged_scenario(m, 21, 13, 5, 8, 11);
  const PastKV plain = make_paged_past(paged.paged, paged.positions);
  PagedQuery q;
  q.slot = cache.open(&plain, keep);
  ForwardInput in;
  in.tokens = case_tokens(m, 3, 4);
  in.positions = at::arange(paged.query_start, paged.query_start + 3, at::kLong);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  o.key_attention = key_attention;
  const PastKV p = cache.past(q.slot);
  q.got = m.forward(in, &p, o);
  o.mla_form = MlaForm::kNaive;
  q.want = m.forward(in, &plain, o);
  q.keys = plain.length() + 3;
  return q;
}

}  // namespace

TEST_CASE("decode cache MLA: a slot holds the latent, r_kv + d_rope numbers a token and layer", "[decode_cache][mla]") {
  const auto m = binding_mla();
  const ModelConfig& c = m->config();
  DecodeCache cache(*m);
  CHECK(cache.latent());
  const int64_t latent = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;  // 64 + 16
  const int64_t row = c.num_layers * latent * 4;                       // float32, every layer
  CHECK(cache.row_bytes() == row);
  const auto past = contiguous_past(*m, case_tokens(*m, 20, 1));
  const int64_t slot = cache.open(past.get());
  // One slot of 20 rows: the latent rows of every layer and the positions, nothing else.
  CHECK(cache.bytes() == 20 * row + 20 * 8);
  // A decode step doubles the rows (20 -> 40) in the same layout.
  const PastKV p = cache.past(slot);
  ForwardInput in;
  in.tokens = {5};
  m->forward(in, &p);
  CHECK(cache.bytes() == 40 * row + 40 * 8);
  // Dynamic-NTK RoPE (k_pe rotated when read) keeps the latent rows too: [c_KV ‖ k_pe].
  const auto dynamic = dynamic_mla();
  DecodeCache rotated_at_read(*dynamic);
  CHECK(rotated_at_read.latent());
  CHECK(rotated_at_read.row_bytes() == row);
}

TEST_CASE("decode cache MLA: 32 greedy steps and a fork decode as the forward's naive form", "[decode_cache][mla]") {
  const auto m = binding_mla();
  DecodeCache cache(*m);
  std::vector<Twin> twins = prompt_twins(*m, cache);
  std::vector<int64_t> tokens;
  double worst = decode(*m, cache, twins, 32, &tokens);
  CHECK(std::set<int64_t>(tokens.begin(), tokens.end()).size() > 3);  // the steps see different pasts
  // A branch of the 44 rows, given another token, decoded beside its parent in one forward_batch for 16 steps;
  // then the parent closed, the branch decodes on in a slot above a free one.
  worst = std::max(worst, fork_and_close(*m, cache, twins, 16, 4));
  WARN("binding-mla latent decode cache: largest logit difference " << worst << " over 52 steps");
}

TEST_CASE("decode cache MLA: key_attention, kept content and a paged past read the latent rows",
          "[decode_cache][mla]") {
  const auto m = binding_mla();
  DecodeCache cache(*m);
  // A slot opened from a paged past (gathered, patched), keeping what its forwards append.
  const PagedQuery q = paged_query(*m, cache, true, true);
  const auto bound = orbit::test::float32_bound(*m, q.keys);
  CHECK(max_abs_diff(q.got.logits, q.want.logits) <= bound(orbit::test::largest(q.want.logits), "logits"));
  REQUIRE(q.got.key_attention.defined());
  CHECK(max_abs_diff(q.got.key_attention, q.want.key_attention) <= bound(1.0, "key attention"));
  // The kept rows are the content the forward returned (content form, whatever the layout).
  REQUIRE(cache.kept_rows(q.slot) == 3);
  const std::vector<LayerKV> kept = cache.kept(q.slot, 0, 3);
  for (std::size_t l = 0; l < kept.size(); ++l) {
    CHECK(at::equal(kept[l].k, q.got.content[l].k));
    CHECK(at::equal(kept[l].v, q.got.content[l].v));
  }
}

TEST_CASE("decode cache MLA: the latent rows take the absorbed form; naive is refused by name", "[decode_cache][mla]") {
  const auto m = binding_mla();
  DecodeCache cache(*m);
  const auto past = contiguous_past(*m, case_tokens(*m, 6, 3));
  const PastKV p = cache.past(cache.open(past.get()));
  ForwardInput in;
  in.tokens = {9};
  ForwardOptions o;
  o.mla_form = MlaForm::kNaive;
  CHECK_THROWS_WITH(m->forward(in, &p, o),
                    Contains("options.mla_form = naive") && Contains("decode cache") && Contains("latent"));
  CHECK(cache.length(p.cache_slot) == 6);  // refused before any row was written
  o.mla_form = MlaForm::kAbsorbed;
  CHECK_NOTHROW(m->forward(in, &p, o));
  CHECK(cache.length(p.cache_slot) == 7);
}

TEST_CASE("decode cache MLA: with dynamic-NTK RoPE the latent rows decode as the forward's naive form",
          "[decode_cache][mla]") {
  const auto m = dynamic_mla();
  DecodeCache cache(*m);
  REQUIRE(cache.latent());
  std::vector<Twin> twins = prompt_twins(*m, cache);
  std::vector<int64_t> tokens;
  // Windows 13 to 44: below the anchor (24), at it and past it.
  double worst = decode(*m, cache, twins, 32, &tokens);
  CHECK(std::set<int64_t>(tokens.begin(), tokens.end()).size() > 3);
  // A fork decoded beside its parent (the same windows, other rows), then alone in a slot above a free one.
  worst = std::max(worst, fork_and_close(*m, cache, twins, 8, 4));
  // A slot opened from a paged past (gathered, patched, 21 + 13 rows: past the anchor), then 3 tokens at once
  // (R > 1: later rows masked), every logit.
  const PagedQuery q = paged_query(*m, cache, false, false);
  const auto bound = orbit::test::float32_bound(*m, q.keys);
  CHECK(max_abs_diff(q.got.logits, q.want.logits) <= bound(orbit::test::largest(q.want.logits), "logits"));
  WARN("binding-mla dynamic NTK latent decode cache: largest logit difference " << worst << " over 44 steps");
}

}  // namespace ORBIT_TEST_FILE
