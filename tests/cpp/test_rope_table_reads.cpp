// The RoPE table's readers (runtime/src/rope_table.h) against the per-step computation they replace, bit for
// bit: a plain past's key tables (key_rope: positions relocated, windows below and past dynamic NTK's
// anchor) and dynamic NTK's read tables of a decode cache (read_tables: slots read and not, rows past a
// slot's length), where the table applies and where it must not (a window past the anchor).
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "decode_cache_state.h"
#include "forward_batch_cases.h"
#include "forward_sequence.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "rope_table.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using orbit::test::case_tokens;
namespace ops = orbit::runtime::ops;
namespace rt_detail = orbit::runtime::detail;

namespace {

constexpr int64_t kAnchor = 40;  // the dynamic model's max_position_embeddings

std::unique_ptr<Model> dynamic_model() {
  static orbit::test::TempDir dir;
  static int n = 0;
  ModelConfig c = generator_preset("tiny-llama");
  c.rope.scaling = RopeScaling::kDynamicNtk;
  c.rope.factor = 2.0;
  c.max_position_embeddings = c.rope.max_position_embeddings = kAnchor;
  GeneratorOptions o;
  o.config = c;
  o.seed = 3;
  const std::string path = (dir.path() / ("dynamic" + std::to_string(n++))).string();
  generate_model(o, path);
  return load_model(path);
}

bool same_bits(const ops::RopeTables& a, const ops::RopeTables& b) {
  auto same = [](const at::Tensor& x, const at::Tensor& y) {
    return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() && x.is_contiguous() && y.is_contiguous() &&
           std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<std::size_t>(x.nbytes())) == 0;
  };
  return same(a.cos, b.cos) && same(a.sin, b.sin);
}

// key_rope of a past of 30 tokens relocated to positions 50.. and 3 input tokens after them, with and
// without the table, at each window length; `table_windows` of them read the table.
void check_key_rope(const Model& m, const std::vector<int64_t>& windows, int64_t table_windows) {
  const auto past = orbit::test::contiguous_past(m, case_tokens(m, 30, 1));
  past->positions = at::arange(50, 80, at::kLong);
  const at::Tensor positions = at::arange(80, 83, at::kLong);
  const ForwardOptions options;
  const rt_detail::ForwardPast fp(m, past.get(), 3, options);
  rt_detail::RopeTableCache table;
  int64_t read = 0;
  for (int64_t window : windows) {
    INFO("window " << window);
    const ops::RopeTables computed = rt_detail::key_rope(m, fp, positions, window, nullptr);
    const ops::RopeTables gathered = rt_detail::key_rope(m, fp, positions, window, &table);
    REQUIRE(computed.cos.size(0) == 33);
    CHECK(same_bits(gathered, computed));
    read += rt_detail::RopeTableCache::applies(m.config().rope, window) ? 1 : 0;
  }
  CHECK(read == table_windows);
  CHECK(table.capacity() > 0);
}

}  // namespace

TEST_CASE("a plain past's key tables read from the rope table are the computed ones bit for bit", "[rope][table]") {
  check_key_rope(*load_model(orbit::test::stories_path()), {33, 1000}, 2);
  // Dynamic NTK: windows up to the anchor share its frequencies; past it they change (computed).
  check_key_rope(*dynamic_model(), {1, 33, kAnchor, kAnchor + 1, 200}, 3);
}

TEST_CASE("dynamic NTK's read tables from the rope table are the computed ones bit for bit", "[rope][table]") {
  const auto m = dynamic_model();
  DecodeCache cache(*m);
  const std::vector<int64_t> lengths{30, 12, 25};
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const int64_t slot = cache.open(nullptr);
    ForwardInput in;
    in.tokens = case_tokens(*m, lengths[i], static_cast<int64_t>(i));
    const int64_t start = i == 1 ? 100 : 0;  // slot 1 relocated
    in.positions = at::arange(start, start + lengths[i], at::kLong);
    PastKV p = cache.past(slot);
    m->forward(in, &p);
  }
  rt_detail::DecodeCacheState& s = rt_detail::DecodeCacheState::of(cache);
  rt_detail::RopeTableCache table;
  // Each slot's own window (-1: not read); 30 keys read past slots 1 and 2's rows.
  const std::vector<std::vector<int64_t>> cases{
      {31, 13, 26}, {31, -1, 26}, {-1, kAnchor, 5}, {kAnchor + 1, 13, 26}, {200, -1, 200}};
  for (const std::vector<int64_t>& windows : cases) {
    INFO("windows " << windows[0] << " " << windows[1] << " " << windows[2]);
    const ops::RopeTables computed = rt_detail::read_tables(*m, s, 0, 30, windows, nullptr);
    const ops::RopeTables gathered = rt_detail::read_tables(*m, s, 0, 30, windows, &table);
    REQUIRE(computed.cos.size(0) == 90);
    CHECK(same_bits(gathered, computed));
    const bool applies = *std::max_element(windows.begin(), windows.end()) <= kAnchor;
    CHECK(rt_detail::table_read_tables(*m, s, 0, 30, windows, &table).has_value() == applies);
  }
  // Slots [1, 3) alone.
  CHECK(same_bits(rt_detail::read_tables(*m, s, 1, 20, {13, 26}, &table),
                  rt_detail::read_tables(*m, s, 1, 20, {13, 26}, nullptr)));
}

namespace {

bool same_tensor_bits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<std::size_t>(x.nbytes())) == 0;
}

// A slot opened from a past of 30 tokens relocated out of order (positions 79, 78, ..., 65, then 20..34):
// open_tables with and without the table, and the rows DecodeCache::open wrote (from the model's table) against
// the layout's rows rotated by the computed tables, bit for bit, every layer.
void check_open(const Model& m, const std::string& name) {
  INFO(name);
  const ModelConfig& c = m.config();
  const auto past = orbit::test::contiguous_past(m, case_tokens(m, 30, 4));
  past->positions = at::cat({at::arange(79, 64, -1, at::kLong), at::arange(20, 35, at::kLong)});
  const int64_t n = 30;
  rt_detail::RopeTableCache table;
  const ops::RopeTables computed = rt_detail::open_tables(m, past->positions, n, nullptr);
  REQUIRE(computed.cos.size(0) == n);
  CHECK(same_bits(rt_detail::open_tables(m, past->positions, n, &table), computed));
  CHECK(table.capacity() >= 80);  // read from the table
  DecodeCache cache(m);
  cache.open(nullptr);  // the past goes to slot 1
  const int64_t slot = cache.open(past.get());
  rt_detail::DecodeCacheState& s = rt_detail::DecodeCacheState::of(cache);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    INFO("layer " << l);
    const auto [k, v] = s.attention_rows(l, past->layers[static_cast<std::size_t>(l)], &computed);
    CHECK(same_tensor_bits(s.keys[static_cast<std::size_t>(l)].select(0, slot).narrow(1, 0, n), k.permute({1, 0, 2})));
  }
}

}  // namespace

TEST_CASE("a decode cache's opened keys rotated by the rope table are the computed ones bit for bit",
          "[rope][table][decode_cache]") {
  check_open(*load_model(orbit::test::stories_path()), "stories260K");
  // MLA's latent layout on the CPU: [c_KV ‖ RoPE(k_pe)].
  check_open(*load_model(std::string(ORBIT_MODELS_DIR) + "/binding-mla"), "binding-mla");
  ModelConfig linear = generator_preset("tiny-llama");
  linear.rope.scaling = RopeScaling::kLinear;
  linear.rope.factor = 4.0;
  GeneratorOptions o;
  o.config = linear;
  o.seed = 5;
  static orbit::test::TempDir dir;
  generate_model(o, (dir.path() / "linear").string());
  check_open(*load_model((dir.path() / "linear").string()), "tiny-llama linear x4");
}

}  // namespace ORBIT_TEST_FILE
