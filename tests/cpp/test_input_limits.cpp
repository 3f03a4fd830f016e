// Inputs past the model's or the machine's limits are refused up front with a message naming the
// argument or trace field, instead of hanging, allocating without bound or failing later low-level; and
// inputs that used to be accepted then break (a 1-D grid on a 1-D RoPE model) now work.
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "orbit/engine.h"
#include "orbit_catch.h"
#include "test_helpers.h"

namespace {

using Catch::Contains;
using orbit::Engine;
using orbit::EngineOptions;

EngineOptions stories_options() {
  EngineOptions o;
  o.model = orbit::test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.page_size = 4;
  return o;
}

orbit::TensorView view(const std::vector<float>& v, std::vector<int64_t> shape) {
  return orbit::TensorView{v.data(), orbit::DType::kFloat32, std::move(shape)};
}
orbit::TensorView view(const std::vector<int64_t>& v, std::vector<int64_t> shape) {
  return orbit::TensorView{v.data(), orbit::DType::kInt64, std::move(shape)};
}

}  // namespace

TEST_CASE("Engine threads beyond this machine's cores are refused, naming the option", "[limits][model]") {
  EngineOptions o = stories_options();
  o.threads = 1000000;
  CHECK_THROWS_WITH(Engine::open(o), Contains("EngineOptions::threads = 1000000") && Contains("cores"));
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CHECK_NOTHROW(Engine::open(o));
}

TEST_CASE("a chunk longer than the model's positions is refused at registration", "[limits][model]") {
  auto engine = Engine::open(stories_options());
  const int64_t limit = engine->model_info().max_positions;
  CHECK_THROWS_WITH(engine->add_tokens(std::vector<int64_t>(static_cast<std::size_t>(limit + 88), 5)),
                    Contains("add_tokens: " + std::to_string(limit + 88) + " tokens exceed the model's " +
                             std::to_string(limit) + " positions"));
  // The longest chunk the model can encode is accepted and encodes.
  const orbit::ChunkRef longest = engine->add_tokens(std::vector<int64_t>(static_cast<std::size_t>(limit), 5));
  CHECK_NOTHROW(engine->precompute(longest));
}

TEST_CASE("embedding grids: 1-D on a 1-D RoPE model works; overflowing or too-wide grids are refused",
          "[limits][model]") {
  auto engine = Engine::open(stories_options());
  const orbit::ModelInfo info = engine->model_info();
  REQUIRE(info.position_rows == 1);
  const int64_t n = 4;
  std::vector<float> emb(static_cast<std::size_t>(n * info.hidden_size));
  for (std::size_t i = 0; i < emb.size(); ++i) emb[i] = 0.01f * static_cast<float>(i % 37) - 0.15f;

  orbit::EmbeddingChunk chunk;
  chunk.embeddings = view(emb, {n, info.hidden_size});
  const std::vector<int64_t> grid{0, 1, 2, 3};
  chunk.grid = view(grid, {n});
  const orbit::ChunkRef ref = engine->add_embeddings(chunk);
  orbit::Window w = engine->new_window();
  w.add_turn({1, 2, 3});
  REQUIRE_NOTHROW(w.admit(ref));
  // The window equals a re-prefill of the same content at the same positions.
  const orbit::Logits got = w.logits({7, 8}, true);
  const orbit::Logits want = w.reference_logits({7, 8}, true);
  double worst = 0;
  for (std::size_t i = 0; i < got.values.size(); ++i) worst = std::max(worst, std::fabs(double(got.values[i]) - want.values[i]));
  CHECK(worst < 1e-3);

  const std::vector<int64_t> huge{0, INT64_MAX, 2, 3};
  chunk.grid = view(huge, {n});
  CHECK_THROWS_WITH(engine->add_embeddings(chunk), Contains("add_embeddings: grid") && Contains("too large"));
  const std::vector<int64_t> wide{0, 1, 2, info.max_positions};
  chunk.grid = view(wide, {n});
  CHECK_THROWS_WITH(engine->add_embeddings(chunk), Contains("exceed the model's " + std::to_string(info.max_positions)));
}

