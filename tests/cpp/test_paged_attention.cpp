// Paged attention on CPU: the reference kernel (kernels/cpu/paged_attention.h, through the op) against
// gather + patch + RoPE + the blocked attention the forward uses; and Model::forward over a PagedPast
// (pool pages placed at new positions with a patch) against the same past gathered and patched by hand.
#include "orbit_catch.h"

#include <string>
#include <vector>

#include "device_test_support.h"
#include "ops/paged_attention_op.h"
#include "ops/past_attention_op.h"
#include "orbit/runtime/rope.h"
#include "src/attention.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

namespace rt = orbit::runtime;
using orbit::test::rel_error;

struct Case {
  int64_t heads, kv_heads, head_dim, queries, paged, tail, rank;
  bool interleaved, mrope;
};

// Ops-level check: reference kernel == dense composition of the runtime's own pieces.
void check_reference(const Case& k, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  const int64_t d = k.head_dim, W = k.kv_heads * d, rows = k.paged * 2 + 8, S = k.paged + k.tail;
  rt::RopeConfig rope;
  rope.head_dim = rope.rotary_dim = d;
  rope.theta = 10000.0;
  rope.layout = k.interleaved ? rt::RopeLayout::kInterleaved : rt::RopeLayout::kHalfSplit;
  rope.max_position_embeddings = 1 << 20;
  if (k.mrope) rope.mrope_section = {d / 8, d / 8, d / 2 - d / 4};

  rt::ops::PagedAttentionInputs in;
  in.q = at::randn({k.queries, k.heads, d});
  in.k_pages = at::randn({rows, W});
  in.v_pages = at::randn({rows, W});
  in.slots = at::randperm(rows, at::kLong).narrow(0, 0, k.paged).to(at::kInt);
  in.k_tail = at::randn({k.tail, k.kv_heads, d});
  in.v_tail = at::randn({k.tail, k.kv_heads, d});
  // Positions far from 0..S (a chunk relocated late in a long window), M-RoPE rows differing.
  at::Tensor grid = at::randint(0, 30000, {k.mrope ? 3 : 1, S}, at::kLong);
  in.positions = grid.t().contiguous();
  in.inv_freq = rt::rope_inv_freq(rope, 0);
  if (k.mrope) {
    std::vector<int8_t> rows_of;
    for (int r = 0; r < 3; ++r)
      rows_of.insert(rows_of.end(), static_cast<size_t>(rope.mrope_section[r]), static_cast<int8_t>(r));
    in.row_of_freq = at::tensor(at::ArrayRef<int8_t>(rows_of), at::kChar);
  }
  in.interleaved = k.interleaved;
  in.scale = 1.0 / std::sqrt(static_cast<double>(d));
  // One patch segment over paged tokens [1, 1 + n).
  const int64_t n = k.paged / 2;
  at::Tensor uk = at::randn({n, k.rank}), vtk = at::randn({k.rank, W}) * 0.1, uv = at::randn({n, k.rank}),
             vtv = at::randn({k.rank, W}) * 0.1;
  orbit::kernels::cpu::PatchSegment seg;
  seg.first = 1;
  seg.length = n;
  seg.rank_k = seg.rank_v = k.rank;
  seg.u_k = uk.data_ptr<float>();
  seg.vt_k = vtk.data_ptr<float>();
  seg.u_v = uv.data_ptr<float>();
  seg.vt_v = vtv.data_ptr<float>();
  in.patch_of = at::full({k.paged}, -1, at::kInt);
  in.patch_of.narrow(0, 1, n).fill_(0);
  in.segments = rt::ops::make_segment_table({seg}, at::kCPU);

  const at::Tensor got = rt::ops::paged_attention(in);

  at::Tensor kp = in.k_pages.index_select(0, in.slots.to(at::kLong)).clone();
  at::Tensor vp = in.v_pages.index_select(0, in.slots.to(at::kLong)).clone();
  kp.narrow(0, 1, n).add_(at::mm(uk, vtk));
  vp.narrow(0, 1, n).add_(at::mm(uv, vtv));
  const at::Tensor keys = at::cat({kp.view({k.paged, k.kv_heads, d}), in.k_tail});
  const at::Tensor values = at::cat({vp.view({k.paged, k.kv_heads, d}), in.v_tail});
  const at::Tensor angles = rt::rope_angles(rope, k.mrope ? grid : grid.squeeze(0), 0);
  const at::Tensor query_index = at::arange(S - k.queries, S, at::kLong);
  const at::Tensor want = rt::detail::attend(in.q, rt::rope_rotate(rope, keys, angles), values, query_index, in.scale);
  INFO("heads " << k.heads << "/" << k.kv_heads << " d " << d << " R " << k.queries << " S_p " << k.paged << " S_t "
                << k.tail << (k.interleaved ? " interleaved" : " half-split") << (k.mrope ? " mrope" : ""));
  CHECK(rel_error(got, want) < 1e-5);
}

}  // namespace

TEST_CASE("paged attention reference == gather + patch + rotate + attend", "[paged]") {
  const std::vector<Case> cases = {
      {4, 1, 64, 1, 37, 1, 3, false, false},
      {8, 2, 64, 3, 50, 5, 2, true, false},
      {2, 2, 128, 2, 20, 2, 4, false, true},
      {8, 1, 16, 4, 9, 4, 1, false, false},
  };
  uint64_t seed = 1;
  for (const Case& k : cases) check_reference(k, seed++);
}

TEST_CASE("a bfloat16 reference reads factors held as bfloat16 as it reads their float32 copies", "[paged]") {
  at::manual_seed(7);
  const int64_t heads = 4, kv_heads = 2, d = 64, W = kv_heads * d, paged = 12, tail = 2, rank = 3, n = 7;
  const auto bf16 = [](at::IntArrayRef shape, double scale = 1.0) {
    return (at::randn(shape) * scale).to(at::kBFloat16);
  };
  rt::RopeConfig rope;
  rope.head_dim = rope.rotary_dim = d;
  rope.max_position_embeddings = 1 << 20;
  rt::ops::PagedAttentionInputs in;
  in.q = bf16({tail, heads, d});
  in.k_pages = bf16({paged + 4, W});
  in.v_pages = bf16({paged + 4, W});
  in.slots = at::randperm(paged + 4, at::kLong).narrow(0, 0, paged).to(at::kInt);
  in.k_tail = bf16({tail, kv_heads, d});
  in.v_tail = bf16({tail, kv_heads, d});
  in.positions = at::randint(0, 30000, {paged + tail, 1}, at::kLong);
  in.inv_freq = rt::rope_inv_freq(rope, 0);
  in.scale = 0.125;
  in.patch_of = at::full({paged}, -1, at::kInt);
  in.patch_of.narrow(0, 3, n).fill_(0);
  const std::vector<at::Tensor> held = {bf16({n, rank}), bf16({rank, W}, 0.1), bf16({n, rank}), bf16({rank, W}, 0.1)};
  auto table = [&](const std::vector<at::Tensor>& f, bool as_pages) {
    orbit::kernels::cpu::PatchSegment seg;
    seg.first = 3;
    seg.length = n;
    seg.rank_k = seg.rank_v = rank;
    seg.u_k = f[0].data_ptr();
    seg.vt_k = f[1].data_ptr();
    seg.u_v = f[2].data_ptr();
    seg.vt_v = f[3].data_ptr();
    seg.factors_as_pages = as_pages;
    return rt::ops::make_segment_table({seg}, at::kCPU);
  };
  std::vector<at::Tensor> copies;
  for (const at::Tensor& f : held) copies.push_back(f.to(at::kFloat));
  in.segments = table(copies, false);
  const at::Tensor from_float = rt::ops::paged_attention(in);
  in.segments = table(held, true);
  const at::Tensor from_bf16 = rt::ops::paged_attention(in);
  CHECK(at::equal(from_bf16, from_float));
  // The factors count: without them the output moves.
  in.patch_of.fill_(-1);
  CHECK_FALSE(at::equal(rt::ops::paged_attention(in), from_bf16));
}

TEST_CASE("forward over a paged past == forward over the same past gathered and patched", "[paged][model]") {
  for (const std::string& name : orbit::test::device_test_models()) {
    const auto m = rt::load_model(orbit::test::device_test_model_dir(name));
    orbit::test::PagedScenario s = orbit::test::make_paged_scenario(*m, 13, 9, 5, 4, 11);
    rt::ForwardInput in;
    in.tokens = s.query;
    in.positions = at::arange(s.query_start, s.query_start + 3, at::kLong);
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kAll;
    const rt::PastKV paged = rt::make_paged_past(s.paged, s.positions);
    const rt::ForwardResult got = m->forward(in, &paged, fo);
    const rt::ForwardResult want = m->forward(in, &s.contiguous, fo);
    INFO(name);
    CHECK(rel_error(got.logits, want.logits) < 1e-5);
    // Content of the input tokens is the same either way, and the past stays what was paged.
    CHECK(rel_error(got.content[0].k, want.content[0].k) < 1e-5);
    CHECK(m->attention_path(1, true).find("fallback: the model runs on CPU") != std::string::npos);
    // Heads of up to 32 attend through the CPU kernel, wider ones through the blocked products. An MLA model
    // says its form too: a decode step over a past of 1+ tokens absorbed (mla_absorbed_cheaper), and over a
    // decode cache's latent rows.
    const bool mla = m->config().attention() == rt::AttentionKind::kMla;
    const std::string forms = mla ? "; MLA: the absorbed form over a past of 1+ tokens (mla_absorbed_cheaper for "
                                    "1 query: decode steps and short queries), else the naive form; a decode "
                                    "cache's past: the absorbed form over its latent rows"
                                  : "";
    CHECK(m->attention_path(1, false) ==
          (m->config().head_dim <= 32
               ? "contiguous past: orbit's CPU attention kernel (each query over the keys it sees)"
               : "contiguous past: blocked PyTorch attention on CPU") +
              forms);
    CHECK(m->attention_path(1, true) ==
          "gathered past + " +
              m->attention_path(1, false).substr(17, m->attention_path(1, false).size() - 17 - forms.size()) +
              " (fallback: the model runs on CPU)" + forms);

    // The paged past followed by contiguous extra tokens (as generate() grows it).
    rt::ForwardInput first;
    first.tokens = {s.query[0]};
    first.positions = at::arange(s.query_start, s.query_start + 1, at::kLong);
    const rt::ForwardResult step = m->forward(first, &paged, fo);
    rt::PastKV extended = rt::make_paged_past(s.paged, at::cat({s.positions, first.positions}), step.content);
    rt::ForwardInput second;
    second.tokens = {s.query[1], s.query[2]};
    second.positions = at::arange(s.query_start + 1, s.query_start + 3, at::kLong);
    const rt::ForwardResult tail = m->forward(second, &extended, fo);
    CHECK(rel_error(tail.logits, want.logits.narrow(0, 1, 2)) < 1e-4);
  }
}

TEST_CASE("a paged past with a slot outside its pool is refused", "[paged]") {
  const auto m = rt::load_model(orbit::test::device_test_model_dir("llama-d64-g4"));
  orbit::test::PagedScenario s = orbit::test::make_paged_scenario(*m, 5, 4, 0, 4, 3);
  auto bad = std::make_shared<rt::PagedPast>(*s.paged);
  bad->slots = bad->slots.clone();
  bad->slots[0] = s.pool->num_pages() * s.pool->page_size();
  const rt::PastKV past = rt::make_paged_past(bad, s.positions);
  rt::ForwardInput in;
  in.tokens = {5};
  REQUIRE_THROWS_WITH(m->forward(in, &past), Catch::Contains("outside the pool"));
}

TEST_CASE("past attention refuses what it cannot run, naming it", "[past]") {
  const at::Tensor q = at::randn({2, 4, 32}), k = at::randn({5, 2, 32});
  CHECK_FALSE(orbit::runtime::ops::past_attention_available(q));
  CHECK_THROWS_WITH(orbit::runtime::ops::past_attention(q, k, k, 1.0), Catch::Matchers::Contains("needs bfloat16"));
  CHECK_THROWS_WITH(orbit::runtime::ops::past_attention(q, k.narrow(0, 0, 1), k.narrow(0, 0, 1), 1.0),
                    Catch::Matchers::Contains("2 queries over 1 keys"));
  CHECK_THROWS_WITH(orbit::runtime::ops::past_attention(at::randn({2, 3, 32}), k, k, 1.0),
                    Catch::Matchers::Contains("must divide H"));
}

}  // namespace ORBIT_TEST_FILE
