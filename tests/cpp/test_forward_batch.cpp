// Model::forward_batch on CPU: a ragged batch (prefills and decode steps of several lengths, each sequence
// with its own past: none, contiguous, paged with a patch, paged plus contiguous rows; a partial recompute,
// embeddings, a content-only sequence, an M-RoPE grid) gives every sequence the logits and content of its
// own forward within the float32 bound of float_tolerance.h, for every attention family; and a batch's
// errors name the sequence at fault.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <numeric>

#include "forward_batch_cases.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "src/forward_batch.h"
#include "test_helpers.h"

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::BatchCase;

namespace {

std::vector<std::size_t> all_of(const BatchCase& b) {
  std::vector<std::size_t> v(b.inputs.size());
  std::iota(v.begin(), v.end(), std::size_t{0});
  return v;
}

void check_model(const Model& m, const std::string& name) {
  INFO("model " << name);
  const BatchCase b = orbit::test::make_batch_case(m);
  const auto bound = orbit::test::float32_bound(m, 64);
  std::vector<std::size_t> order = all_of(b);
  const auto forward = orbit::test::compare_batch(m, b, order, bound);
  std::reverse(order.begin(), order.end());  // groups of equal R interleaved differently
  const auto backward = orbit::test::compare_batch(m, b, order, bound);
  CHECK(forward.sequences == static_cast<int64_t>(b.inputs.size()));
  WARN(name << ": " << forward.sequences << " sequences, largest logit difference "
            << std::max(forward.worst_logits, backward.worst_logits) << ", content "
            << std::max(forward.worst_content, backward.worst_content));
}

}  // namespace

TEST_CASE("forward_batch: every sequence gets its own forward's logits and content, every family") {
  for (const std::string& name : orbit::test::device_test_models()) {
    const auto m = load_model(orbit::test::device_test_model_dir(name));
    check_model(*m, name);
  }
  check_model(*load_model(orbit::test::stories_path()), "stories260K");
  check_model(*load_model(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k"), "tinystories-656k");
}

TEST_CASE("forward_batch on the CPU: groups at the kernel's heads are laid out for it, others padded") {
  namespace rd = orbit::runtime::detail;
  // The bundled models' heads (8 and 16 wide) are the CPU attention kernel's: their groups write each
  // member's keys into its own slot, with no padded copies, zero fill or padded angle tables.
  CHECK(rd::kernel_groups(*load_model(orbit::test::stories_path())));
  CHECK(rd::kernel_groups(*load_model(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k")));
  // MLA and heads wider than 32 keep the padded groups, as the device test models do: the first test case
  // compares both kinds' batches with single forwards.
  int padded = 0;
  for (const std::string& name : orbit::test::device_test_models()) {
    const auto m = load_model(orbit::test::device_test_model_dir(name));
    const ModelConfig& c = m->config();
    const bool takes = c.attention() == AttentionKind::kGqa && c.head_dim <= 32;
    INFO(name << ": heads " << c.head_dim);
    CHECK(rd::kernel_groups(*m) == takes);
    padded += takes ? 0 : 1;
  }
  CHECK(padded > 0);
}

TEST_CASE("forward_batch: K decode steps of one past together equal the step alone") {
  const auto m = load_model(orbit::test::stories_path());
  const auto past = orbit::test::contiguous_past(*m, orbit::test::case_tokens(*m, 40, 1));
  std::vector<ForwardInput> inputs(16);
  ForwardOptions o;
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i].tokens = {static_cast<int64_t>(3 + i)};
  std::vector<SequenceForward> batch;
  for (const ForwardInput& in : inputs) batch.push_back({&in, past.get(), &o});
  const std::vector<ForwardResult> together = m->forward_batch(batch);
  const auto bound = orbit::test::float32_bound(*m, 41);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ForwardResult alone = m->forward(inputs[i], past.get(), o);
    REQUIRE(together[i].logits.sizes() == alone.logits.sizes());
    CHECK(orbit::test::max_abs_diff(together[i].logits, alone.logits) <=
          bound(orbit::test::largest(alone.logits), "logits"));
    // Each row is its own token's: the batch does not mix them up.
    CHECK(together[i].logits.argmax(-1).item<int64_t>() == alone.logits.argmax(-1).item<int64_t>());
  }
}

TEST_CASE("forward_batch: before_layer is called for every sequence before each layer") {
  const auto m = load_model(orbit::test::stories_path());
  const auto past = orbit::test::contiguous_past(*m, orbit::test::case_tokens(*m, 10, 1));
  ForwardInput a, b;
  a.tokens = {5, 6};
  b.tokens = {7};
  std::vector<std::pair<int, int64_t>> calls;
  ForwardOptions oa, ob;
  oa.before_layer = [&](int64_t l) { calls.push_back({0, l}); };
  ob.before_layer = [&](int64_t l) { calls.push_back({1, l}); };
  m->forward_batch({{&a, nullptr, &oa}, {&b, past.get(), &ob}});
  REQUIRE(static_cast<int64_t>(calls.size()) == 2 * m->config().num_layers);
  for (int64_t l = 0; l < m->config().num_layers; ++l) {
    CHECK(calls[static_cast<std::size_t>(2 * l)] == std::make_pair(0, l));
    CHECK(calls[static_cast<std::size_t>(2 * l + 1)] == std::make_pair(1, l));
  }
}

TEST_CASE("forward_batch: max_layers runs the same layers for every sequence") {
  const auto m = load_model(orbit::test::stories_path());
  ForwardInput a, b;
  a.tokens = {5, 6, 7};
  b.tokens = {8};
  ForwardOptions o;
  o.logits = LogitsMode::kNone;
  o.max_layers = 2;
  const auto r = m->forward_batch({{&a, nullptr, &o}, {&b, nullptr, &o}});
  CHECK(r[0].content.size() == 2);
  CHECK(r[1].content.size() == 2);
  CHECK(orbit::test::max_abs_diff(r[0].content[1].k, m->forward(a, nullptr, o).content[1].k) < 1e-5);
  ForwardOptions other = o;
  other.max_layers = 1;
  CHECK_THROWS_WITH(m->forward_batch({{&a, nullptr, &o}, {&b, nullptr, &other}}),
                    Contains("every sequence of a batch runs the same layers") && Contains("sequence 1 1"));
}

TEST_CASE("forward_batch: errors name the sequence") {
  const auto m = load_model(orbit::test::stories_path());
  ForwardInput good, bad, empty;
  good.tokens = {5, 6};
  bad.tokens = {5, m->config().vocab_size};
  CHECK_THROWS_WITH(m->forward_batch({{&good}, {&bad}}),
                    Contains("forward: sequence 1: ") && Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(m->forward_batch({{&good}, {&good}, {&empty}}),
                    Contains("forward: sequence 2: give exactly one of input.tokens and input.embeddings"));
  CHECK_THROWS_WITH(m->forward_batch({}), Contains("forward: an empty batch"));
  CHECK_THROWS_WITH(m->forward_batch({{nullptr}, {&good}}), Contains("forward: sequence 0: no input given"));
  // A single forward keeps its messages as they were.
  CHECK_THROWS_WITH(m->forward(bad), Contains("tokens[1] = ") && !Contains("sequence"));
}
