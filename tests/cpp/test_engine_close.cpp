// Engine::close(CloseOptions): the background work queued before it is finished for a persistent store (all of
// it by default, none at finish_seconds 0, the rest dropped once `stop` answers true), none without one; what it
// finished a second engine on the same directory reads, what it dropped is formed again. Stops by count, not clock.
#include "orbit_catch.h"

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "orbit/engine.h"
#include "orbit/interrupt.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::random_tokens;

namespace {

constexpr int kChunks = 4;  // the first needs no patch (nothing before it): 3 jobs by default

std::shared_ptr<Engine> open_deferred(const std::string& store_dir) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{64} << 20;
  o.page_size = 4;
  o.background = BackgroundMode::kDeferred;
  o.store_dir = store_dir;
  return Engine::open(o);
}

WindowOptions patching() {
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");
  return o;
}

// The chunks' tokens (seeded: every engine of a case registers the same chunks, under the same keys).
std::vector<std::vector<int64_t>> chunk_tokens(int count = kChunks) {
  std::mt19937_64 rng(29);
  std::vector<std::vector<int64_t>> t;
  for (int i = 0; i < count; ++i) t.push_back(random_tokens(rng, 40));
  return t;
}

// Admits `count` chunks into a fresh window of `engine`: each first sight after the first queues its patch's job.
void admit_all(Engine& engine, int count = kChunks) {
  Window w = engine.new_window(patching());
  for (const std::vector<int64_t>& t : chunk_tokens(count)) w.admit(engine.add_tokens(t));
}

// How many of chunks 1.. a second engine on `store_dir` serves from a stored patch (no forward).
int stored_patches(const std::string& store_dir) {
  auto engine = open_deferred(store_dir);
  const std::vector<std::vector<int64_t>> tokens = chunk_tokens();
  int stored = 0;
  for (int i = 1; i < kChunks; ++i) {
    Window w = engine->new_window(patching());
    for (int j = 0; j < i; ++j) w.admit(engine->add_tokens(tokens[j]));
    const Plan plan = w.plan_admit(engine->add_tokens(tokens[i]));
    if (plan.steps.back().action == StepAction::kApplyPatch && plan.forward_tokens == 0) ++stored;
  }
  engine->close(CloseOptions{0, nullptr});
  return stored;
}

int layers_of(const Engine& engine) { return static_cast<int>(engine.model_info().num_layers); }

}  // namespace

TEST_CASE("close finishes every queued job for the store by default", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  admit_all(*engine);
  REQUIRE(engine->stats().background_pending == kChunks - 1);
  const CloseReport r = engine->close();
  CHECK(r.finished == kChunks - 1);
  CHECK(r.dropped == 0);
  CHECK_FALSE(r.stopped);
  CHECK(engine->stats().patches_formed == kChunks - 1);
  CHECK(stored_patches(dir.path().string()) == kChunks - 1);
  // Idempotent: a later close reports nothing.
  const CloseReport again = engine->close();
  CHECK(again.finished == 0);
  CHECK(again.dropped == 0);
}

TEST_CASE("close with finish_seconds 0 drops the queued jobs: nothing stored for them", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  admit_all(*engine);
  const CloseReport r = engine->close(CloseOptions{0, nullptr});
  CHECK(r.finished == 0);
  CHECK(r.dropped == kChunks - 1);
  CHECK(engine->stats().patches_formed == 0);
  CHECK(stored_patches(dir.path().string()) == 0);
}

TEST_CASE("close's stop drops the rest between two jobs or inside one's forward", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  const int layers = layers_of(*engine);
  admit_all(*engine);
  // A job asks once before it is taken, then once per layer of its canonical's encode and of its patch's SVD
  // (test_window_interrupt counts them): stopping at the point before the second job keeps the first only.
  const int per_job = 1 + 2 * layers;
  int calls = 0;
  const bool inside = GENERATE(false, true);
  const int stop_at = inside ? per_job + 3 : per_job + 1;  // inside the second job's encode, or before it
  const CloseReport r =
      engine->close(CloseOptions{std::numeric_limits<double>::infinity(), [&] { return ++calls == stop_at; }});
  CHECK(calls == stop_at);  // no check after the stop
  CHECK(r.stopped);
  CHECK(r.finished == 1);
  CHECK(r.dropped == kChunks - 2);
  CHECK(engine->stats().background_failed == 0);
  CHECK(stored_patches(dir.path().string()) == 1);
}

TEST_CASE("close without a persistent store runs none of the queued jobs", "[engine][close]") {
  auto engine = open_deferred("");
  admit_all(*engine);
  const CloseReport r = engine->close();
  CHECK(r.finished == 0);
  CHECK(r.dropped == kChunks - 1);
  CHECK(engine->stats().patches_formed == 0);
}

TEST_CASE("close refuses a negative or NaN finish_seconds and stays open", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  const double bad = GENERATE(-1.0, std::nan(""));
  CHECK_THROWS_WITH(engine->close(CloseOptions{bad, nullptr}),
                    Catch::Contains("CloseOptions::finish_seconds") && Catch::Contains(">= 0"));
  CHECK_FALSE(engine->closed());
  engine->close();
}

TEST_CASE("a second close waits for the first one's finish instead of cutting it short", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  admit_all(*engine, 8);
  REQUIRE(engine->stats().background_pending == 7);
  std::future<CloseReport> second;
  // The first close's check runs inside its finish: a second close (finish_seconds 0) begins there, on another
  // thread, and is given time to act before the first goes on.
  const CloseReport first = engine->close(
      CloseOptions{std::numeric_limits<double>::infinity(), [&] {
                     if (!second.valid()) {
                       second = std::async(std::launch::async, [&] { return engine->close(CloseOptions{0, nullptr}); });
                       std::this_thread::sleep_for(std::chrono::milliseconds(200));
                     }
                     return false;
                   }});
  CHECK(first.finished == 7);
  CHECK(first.dropped == 0);
  const CloseReport later = second.get();
  CHECK(later.finished == 0);
  CHECK(later.dropped == 0);
  CHECK(engine->stats().background_failed == 0);
}

TEST_CASE("close stops a run_background on another thread after its job in flight", "[engine][close]") {
  test::TempDir dir;
  auto engine = open_deferred(dir.path().string());
  const int jobs = 11;
  admit_all(*engine, jobs + 1);
  REQUIRE(engine->stats().background_pending == jobs);
  std::promise<void> started;
  int64_t ran = -1;
  std::thread runner([&] {
    bool first = true;
    // Its first interruption point (before it takes a job) lets the close begin, then waits a little for it: it
    // then takes no job, or the one it had taken.
    const InterruptScope hook([&] {
      if (first) {
        first = false;
        started.set_value();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      return false;
    });
    ran = engine->run_background();
  });
  started.get_future().wait();
  const CloseReport r = engine->close(CloseOptions{0, nullptr});
  runner.join();
  CHECK(r.finished == 0);
  CHECK(ran >= 0);
  CHECK(ran < jobs);  // it ran on through the whole queue while close waited for it
  CHECK(r.dropped == jobs - ran);
}

}  // namespace ORBIT_TEST_FILE
