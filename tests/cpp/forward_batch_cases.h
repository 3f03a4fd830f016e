// A ragged batch for Model::forward_batch, shared by the CPU and CUDA tests: prefills and decode steps of
// several lengths, each sequence with its own past (none, contiguous of two lengths, paged with a patch,
// the paged past followed by contiguous rows), a partial recompute, an embeddings input, a content-only
// sequence and, for M-RoPE models, a position grid. compare_batch() runs every sequence alone and all
// together and checks that each one's logits and content agree within the float32 bound of
// float_tolerance.h (or a caller's bound for 16-bit dtypes).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "float_tolerance.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/paged_past.h"

namespace orbit::test {

struct BatchCase {
  std::vector<rt::ForwardInput> inputs;
  std::vector<std::shared_ptr<rt::PastKV>> pasts;  // null: no past
  std::vector<rt::ForwardOptions> options;
  std::vector<std::string> names;
  PagedScenario paged;  // holds the pool the paged pasts read
};

inline std::vector<int64_t> case_tokens(const rt::Model& m, int64_t n, int64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  const at::Tensor t = at::randint(3, m.config().vocab_size, {n}, gen, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

// The KV of `tokens` at positions 0.. as a contiguous past.
inline std::shared_ptr<rt::PastKV> contiguous_past(const rt::Model& m, const std::vector<int64_t>& tokens) {
  rt::ForwardInput in;
  in.tokens = tokens;
  rt::ForwardOptions o;
  o.logits = rt::LogitsMode::kNone;
  auto past = std::make_shared<rt::PastKV>();
  past->layers = m.forward(in, nullptr, o).content;
  past->positions = at::arange(static_cast<int64_t>(tokens.size()), at::kLong);
  return past;
}

inline BatchCase make_batch_case(const rt::Model& m) {
  BatchCase b;
  b.paged = make_paged_scenario(m, 21, 13, 5, 8, 11);
  auto add = [&](std::string name, std::vector<int64_t> tokens, std::shared_ptr<rt::PastKV> past, int64_t start,
                 rt::LogitsMode mode) {
    rt::ForwardInput in;
    in.tokens = std::move(tokens);
    in.positions = at::arange(start, start + static_cast<int64_t>(in.tokens.size()), at::kLong);
    rt::ForwardOptions o;
    o.logits = mode;
    b.names.push_back(std::move(name));
    b.inputs.push_back(std::move(in));
    b.pasts.push_back(std::move(past));
    b.options.push_back(o);
  };
  const auto short_past = contiguous_past(m, case_tokens(m, 9, 1));
  const auto long_past = contiguous_past(m, case_tokens(m, 30, 2));
  auto paged = std::make_shared<rt::PastKV>(rt::make_paged_past(b.paged.paged, b.paged.positions));
  add("prefill, no past", case_tokens(m, 7, 3), nullptr, 0, rt::LogitsMode::kAll);
  add("decode after 9", case_tokens(m, 1, 4), short_past, 9, rt::LogitsMode::kAll);
  add("decode after 30", case_tokens(m, 1, 5), long_past, 30, rt::LogitsMode::kLast);
  add("query after paged", b.paged.query, paged, b.paged.query_start, rt::LogitsMode::kAll);
  add("decode after paged", case_tokens(m, 1, 6), paged, b.paged.query_start, rt::LogitsMode::kLast);
  add("prefill after 30", case_tokens(m, 3, 7), long_past, 30, rt::LogitsMode::kAll);

  // The paged past with three contiguous rows after its pages (a decode's own tokens after a window).
  {
    const std::vector<int64_t> tail = case_tokens(m, 3, 8);
    rt::ForwardInput in;
    in.tokens = tail;
    in.positions = at::arange(b.paged.query_start, b.paged.query_start + 3, at::kLong);
    rt::ForwardOptions o;
    o.logits = rt::LogitsMode::kNone;
    const rt::Content extra = m.forward(in, paged.get(), o).content;
    auto mixed = std::make_shared<rt::PastKV>(rt::make_paged_past(
        b.paged.paged, at::cat({b.paged.positions, in.positions}), std::vector<rt::LayerKV>(extra)));
    add("decode after paged + 3 rows", case_tokens(m, 1, 9), mixed, b.paged.query_start + 3, rt::LogitsMode::kAll);
  }
  // Partial recompute: tokens 1, 4 and 5 of six computed over their canonical (cached) KV, after a past.
  {
    const std::vector<int64_t> tokens = case_tokens(m, 6, 10);
    add("partial recompute", tokens, short_past, 9, rt::LogitsMode::kAll);
    rt::ForwardInput alone;
    alone.tokens = tokens;
    rt::ForwardOptions co;
    co.logits = rt::LogitsMode::kNone;
    b.options.back().recompute = at::tensor(std::vector<int64_t>{1, 4, 5}, at::kLong);
    b.options.back().cached = m.forward(alone, nullptr, co).content;
  }
  // Embeddings instead of tokens, and a content-only sequence (no logits).
  {
    add("embeddings", {}, short_past, 9, rt::LogitsMode::kAll);
    b.inputs.back().embeddings = m.embed(case_tokens(m, 4, 12)).to(at::kCPU, at::kFloat) * 1.5;
    b.inputs.back().positions = at::arange(9, 13, at::kLong);
    add("content only", case_tokens(m, 5, 13), long_past, 30, rt::LogitsMode::kNone);
  }
  if (m.config().rope.is_mrope()) {
    add("position grid", case_tokens(m, 6, 14), short_past, 9, rt::LogitsMode::kAll);
    at::Tensor grid = at::stack({at::full({6}, 9, at::kLong), at::tensor(std::vector<int64_t>{9, 9, 9, 10, 10, 10}),
                                 at::tensor(std::vector<int64_t>{9, 10, 11, 9, 10, 11})});
    b.inputs.back().positions = grid;
  }
  return b;
}

inline std::vector<rt::SequenceForward> batch_of(const BatchCase& b, const std::vector<std::size_t>& which) {
  std::vector<rt::SequenceForward> out;
  for (std::size_t i : which) out.push_back({&b.inputs[i], b.pasts[i].get(), &b.options[i]});
  return out;
}

// max |x| over a sequence's results (logits, or content when it has none) as the float32 bound's scale.
inline double largest(const at::Tensor& t) { return t.abs().max().item<double>(); }

struct BatchAgreement {
  double worst_logits = 0;  // the largest |batched − single| logit difference over every sequence
  double worst_content = 0;
  int64_t sequences = 0;
};

// Each sequence of `b` alone, then all of them in one forward_batch in the order `which`; REQUIREs that each
// one's logits and content agree within `bound` (a function of the sequence's largest value: the float32
// drift for float32 models).
template <typename Bound>
BatchAgreement compare_batch(const rt::Model& m, const BatchCase& b, const std::vector<std::size_t>& which,
                             Bound bound) {
  const std::vector<rt::ForwardResult> batched = m.forward_batch(batch_of(b, which));
  REQUIRE(batched.size() == which.size());
  BatchAgreement agreement;
  for (std::size_t j = 0; j < which.size(); ++j) {
    const std::size_t i = which[j];
    INFO("sequence " << j << ": " << b.names[i]);
    const rt::ForwardResult single = m.forward(b.inputs[i], b.pasts[i].get(), b.options[i]);
    REQUIRE(single.logits.defined() == batched[j].logits.defined());
    if (single.logits.defined()) {
      REQUIRE(single.logits.sizes() == batched[j].logits.sizes());
      const double diff = max_abs_diff(batched[j].logits.to(at::kCPU), single.logits.to(at::kCPU));
      CHECK(diff <= bound(largest(single.logits), "logits"));
      agreement.worst_logits = std::max(agreement.worst_logits, diff);
    }
    REQUIRE(single.content.size() == batched[j].content.size());
    for (std::size_t l = 0; l < single.content.size(); ++l) {
      for (bool k : {true, false}) {
        const at::Tensor& want = k ? single.content[l].k : single.content[l].v;
        const at::Tensor& got = k ? batched[j].content[l].k : batched[j].content[l].v;
        REQUIRE(want.sizes() == got.sizes());
        const double diff = max_abs_diff(got.to(at::kCPU, at::kFloat), want.to(at::kCPU, at::kFloat));
        CHECK(diff <= bound(largest(want.to(at::kFloat)), "content"));
        agreement.worst_content = std::max(agreement.worst_content, diff);
      }
    }
    ++agreement.sequences;
  }
  return agreement;
}

// The float32 bound for `m` over pasts of up to `keys` tokens.
inline auto float32_bound(const rt::Model& m, int64_t keys) {
  const rt::ModelConfig& c = m.config();
  return [&c, keys](double scale, const char*) {
    Float32Shape s;
    s.layers = c.num_layers;
    s.reduction = std::max({c.hidden_size, c.intermediate_size, keys});
    s.logit_scale = scale;
    return float32_logit_drift(s);
  };
}

}  // namespace orbit::test
