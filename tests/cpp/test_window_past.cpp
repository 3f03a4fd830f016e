// A window's kept past (sdk/src/window/window_past.h): its rows are kept where their keys match, rows handed out
// are never written again, and a window read after every edit gives bit for bit what the same window read once,
// its past gathered afresh.
#include <ATen/ATen.h>

#include <algorithm>
#include <random>
#include <vector>

#include "orbit/engine.h"
#include "orbit/policy.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "test_helpers.h"
#include "window/window_past.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::detail::WindowPast;

namespace {

// `rows` rows of 2 layers, each row's values its index plus `base` (positions the same).
orbit::runtime::PastKV piece(int64_t rows, float base) {
  orbit::runtime::PastKV p;
  const at::Tensor values = at::arange(rows, at::kFloat).add(base).view({rows, 1, 1}).expand({rows, 2, 3}).contiguous();
  p.layers = {{values.clone(), values.clone()}, {values.clone(), values.clone()}};
  p.positions = at::arange(rows, at::kLong).add(static_cast<int64_t>(base));
  return p;
}

float row_value(const orbit::runtime::PastKV& p, int64_t row) { return p.layers[1].v[row][1][2].item<float>(); }

}  // namespace

TEST_CASE("kept rows: the leading entries whose keys match, nothing past a forward's own rows", "[window_past]") {
  WindowPast::Rows r;
  r.append(piece(3, 0), {{1, 0, 1}, {2, 1, 2}});
  r.append(piece(2, 10), {{3, 3, 2}});
  CHECK(r.rows == 5);
  CHECK(r.keyed_rows == 5);
  CHECK(r.matching({{1, 0, 1}, {2, 1, 2}, {4, 3, 2}}) == 2);
  CHECK(r.matching({{1, 0, 1}, {2, 2, 2}}) == 1);  // another start: another position
  r.append(piece(1, 20), {});                      // a forward's rows: never keyed
  r.append(piece(1, 30), {{5, 6, 1}});             // nor anything after them
  CHECK(r.rows == 7);
  CHECK(r.keys.size() == 3);
  CHECK(r.keyed_rows == 5);
  r.keep(1);
  CHECK(r.rows == 1);
  r.append(piece(2, 40), {{6, 1, 2}});
  const orbit::runtime::PastKV v = r.view();
  REQUIRE(v.length() == 3);
  CHECK(row_value(v, 0) == 0);
  CHECK(row_value(v, 1) == 40);
  CHECK(row_value(v, 2) == 41);
  CHECK(v.positions[2].item<int64_t>() == 41);
}

TEST_CASE("rows handed out are never written again: the buffers are copied first", "[window_past]") {
  WindowPast::Rows r;
  r.append(piece(4, 0), {{1, 0, 4}});
  r.append(piece(4, 100), {{2, 4, 4}});  // grown: room past the 8 rows
  const orbit::runtime::PastKV before = r.view();
  r.keep(1);
  r.append(piece(4, 200), {{3, 4, 4}});  // rows 4-7 again, while `before` views them
  CHECK(row_value(before, 4) == 100);
  CHECK(before.positions[7].item<int64_t>() == 103);
  CHECK(row_value(r.view(), 4) == 200);

  // Two holders of one set of buffers (a fork's window and its parent's): the first to write copies them.
  WindowPast::Rows child = r;
  child.keep(1);
  child.append(piece(4, 300), {{4, 4, 4}});
  CHECK(row_value(r.view(), 5) == 201);
  CHECK(row_value(child.view(), 5) == 301);
}

TEST_CASE("rows cut to a few are fitted: the buffers hold at most twice them, or 64", "[window_past]") {
  WindowPast kept;
  WindowPast::Rows r;
  r.append(piece(300, 0), {{1, 0, 8}, {2, 8, 292}});
  r.append(piece(100, 300), {{3, 300, 100}});  // grown to 600 rows
  CHECK(r.kv.front().k.size(0) == 600);
  kept.put(r);  // put fits nothing here: 400 of 600 rows
  CHECK(kept.bytes() == r.bytes());
  kept.fit({{1, 0, 8}, {9, 8, 5}});  // the window evicted all but its first entry
  WindowPast::Rows back = kept.take();
  CHECK(back.rows == 8);
  CHECK(back.kv.front().k.size(0) <= 64);
  CHECK(row_value(back.view(), 7) == 7);
  kept.put(std::move(back));
  kept.fit({});  // an empty window keeps nothing
  CHECK(kept.bytes() == 0);
}

TEST_CASE("take leaves nothing behind; put keeps only the keyed rows", "[window_past]") {
  WindowPast kept;
  WindowPast::Rows r;
  r.append(piece(2, 0), {{1, 0, 2}});
  r.append(piece(3, 5), {});
  kept.put(std::move(r));
  CHECK(kept.bytes() > 0);
  WindowPast::Rows back = kept.take();
  CHECK(back.rows == 2);
  CHECK(kept.take().rows == 0);  // taken: another reader gathers its own
}

// Every edit of a window read straight after (its kept past grown, cut and grown again, shared with a fork that goes
// its own way) against the same edits and reads in an engine whose windows keep no past: the logits are equal bit
// for bit.
TEST_CASE("a window that keeps its past reads what one that gathers every read reads", "[window_past][model]") {
  std::mt19937_64 rng(7);
  std::vector<std::vector<int64_t>> chunks;
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> t(3 + rng() % 6);
    for (auto& x : t) x = 1 + static_cast<int64_t>(rng() % 500);
    chunks.push_back(t);
  }
  for (const char* policy : {"default", "patch", "blind", "reprefill"}) {
    DYNAMIC_SECTION("policy " << policy) {
      // ("patch" and "blind" keep the survivors of an edit as they are: the same rows at new positions.)
      // Admit ten chunks; evict the 3rd, move the 5th to the end, recall the 3rd in front; fork, and admit one
      // more chunk to each of the two windows. Reads: logits after each edit, a decode at the end.
      const auto replay = [&](bool window_past) {
        orbit::EngineOptions o;
        o.model = orbit::test::stories_path();
        o.pool_bytes = int64_t{16} << 20;
        o.page_size = 4;
        o.background = orbit::BackgroundMode::kInline;
        o.window_past = window_past;
        auto engine = orbit::Engine::open(o);
        orbit::WindowOptions wo;
        wo.policy = orbit::parse_policy(policy);
        orbit::Window w = engine->new_window(wo);
        std::vector<orbit::ChunkRef> refs;
        for (const auto& t : chunks) refs.push_back(engine->add_tokens(t));
        std::vector<std::vector<float>> reads;
        const auto read = [&](const orbit::Window& x) { reads.push_back(x.logits({5, 6, 7}, true).values); };
        for (int s = 0; s < 10; ++s) {
          w.admit(refs[static_cast<std::size_t>(s)]);
          read(w);
        }
        w.evict(w.instances()[2].id);
        read(w);
        std::vector<orbit::InstanceId> order;
        for (const auto& i : w.instances()) order.push_back(i.id);
        std::rotate(order.begin() + 4, order.begin() + 5, order.end());
        w.reorder(order);
        read(w);
        w.recall(refs[2], w.instances()[0].id);
        read(w);
        orbit::Window child = w.fork();
        child.admit(refs[10]);
        read(child);
        w.admit(refs[11]);
        read(w);
        read(child);
        CHECK((w.stats().past_bytes > 0) == window_past);
        orbit::GenerateOptions g;
        g.max_tokens = 8;
        const orbit::Generation answer = w.generate({5, 6, 7}, g);
        reads.push_back(std::vector<float>(answer.tokens.begin(), answer.tokens.end()));
        return reads;
      };
      const auto kept = replay(true), gathered = replay(false);
      REQUIRE(kept.size() == gathered.size());
      for (std::size_t i = 0; i < kept.size(); ++i) {
        INFO("read " << i);
        CHECK(kept[i] == gathered[i]);
      }
    }
  }
}

}  // namespace ORBIT_TEST_FILE
