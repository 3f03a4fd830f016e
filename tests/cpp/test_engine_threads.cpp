// Engine lifetime under threads (engine.h: every Engine member is safe from any thread, close() releases
// the store early and later calls throw): close() racing window operations on other threads, concurrent
// close() calls, an operation in flight run to its end, close() from a generate callback (refused, not waited
// for), and every operation refused after close; the stored calibration's remote read retried from several threads
// while the remote is down. Labelled `thread`: the TSan stage runs it.
#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit_catch.h"
#include "redis_test_server.h"
#include "stderr_capture.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using orbit::Engine;
using orbit::EngineOptions;

std::shared_ptr<Engine> open_engine(const std::string& store_dir) {
  EngineOptions o;
  o.model = orbit::test::stories_path();
  o.store_dir = store_dir;
  o.pool_bytes = int64_t{8} << 20;
  o.page_size = 4;
  return Engine::open(o);
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<int64_t> d(1, 511);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// What one worker saw: operations completed, and how it stopped.
struct WorkerResult {
  int64_t ops = 0;
  std::string error;  // empty: it finished its loop
};

// Registers random chunks and admits them into its own window, sliding to stay under 400 tokens, until
// the engine refuses it or `iterations` is done. `started` counts the workers with one operation done.
void worker(Engine& engine, uint64_t seed, int iterations, std::atomic<int>* started, WorkerResult* out) {
  std::mt19937_64 rng(seed);
  try {
    orbit::Window w = engine.new_window();
    for (int i = 0; i < iterations; ++i) {
      const orbit::ChunkRef c = engine.add_tokens(random_tokens(rng, 20));
      w.admit(c);
      if (w.tokens() > 400) w.slide(1);
      // Counted as started once one operation has completed, so close() always races a worker that is
      // under way (on a loaded machine a thread may not have run at all by the time close() comes).
      if (++out->ops == 1) ++*started;
    }
  } catch (const orbit::Error& e) {
    out->error = e.what();
  }
}

}  // namespace

TEST_CASE("close() racing window operations on two threads fails them cleanly", "[engine][thread]") {
  for (int round = 0; round < 4; ++round) {
    orbit::test::TempDir dir;
    auto engine = open_engine(dir / "store");
    std::atomic<int> started{0};
    WorkerResult a, b;
    std::thread ta(worker, std::ref(*engine), 11 + round, 100000, &started, &a);
    std::thread tb(worker, std::ref(*engine), 23 + round, 100000, &started, &b);
    while (started.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + 20 * round));
    engine->close();  // waits for the operations in flight; the store is gone when it returns
    CHECK(engine->closed());
    ta.join();
    tb.join();
    // Each worker stopped on the clean refusal, never on anything else (and the process is alive).
    CHECK(a.error == "engine is closed");
    CHECK(b.error == "engine is closed");
    CHECK(a.ops > 0);
    CHECK(b.ops > 0);
  }
}

TEST_CASE("close() from several threads at once returns in all of them after the store is closed", "[engine][thread]") {
  orbit::test::TempDir dir;
  auto engine = open_engine(dir / "store");
  std::atomic<int> started{0};
  WorkerResult a;
  std::thread worker_thread(worker, std::ref(*engine), 5, 100000, &started, &a);
  while (started.load() < 1) std::this_thread::yield();
  std::vector<std::thread> closers;
  for (int i = 0; i < 3; ++i) closers.emplace_back([&] { engine->close(); });
  for (auto& t : closers) t.join();
  worker_thread.join();
  CHECK(engine->closed());
  CHECK(a.error == "engine is closed");
  // The store was closed and released: another engine can open the same directory now.
  auto again = open_engine(dir / "store");
  CHECK(again->chunks().empty());
}

TEST_CASE("close() from a generate callback throws instead of waiting for the decode it runs in", "[engine][thread]") {
  auto engine = open_engine("");
  orbit::Window w = engine->new_window();
  w.add_turn({1, 365, 169, 44});
  const auto inside = Catch::Contains("close(): called from inside an operation of this engine");
  orbit::GenerateOptions o;
  o.max_tokens = 4;
  o.on_token = [&](int64_t, int64_t) {
    engine->close();
    return true;
  };
  CHECK_THROWS_WITH(w.generate({403}, o), inside);
  o.on_token = nullptr;
  o.on_text = [&](const std::string&) {
    engine->close();
    return true;
  };
  CHECK_THROWS_WITH(w.generate({403}, o), inside);
  // The engine stays open and the window answers; close() after the call closes.
  CHECK_FALSE(engine->closed());
  o.on_text = nullptr;
  CHECK(w.generate({403}, o).tokens.size() == 4);
  engine->close();
  CHECK(engine->closed());
}

TEST_CASE("a generate callback that uses the window it decodes is refused, naming the call", "[engine][thread]") {
  // An edit from on_token was applied in the middle of the decode, which went on over KV the window no longer
  // held; a nested read of the window ran inside the step.
  auto engine = open_engine("");
  orbit::Window w = engine->new_window();
  const orbit::ChunkRef chunk = engine->add_tokens({1, 365, 169, 44, 403, 11});
  w.admit(chunk);
  w.add_turn({1, 365, 169, 44});
  const orbit::InstanceId first = w.instances().front().id;
  orbit::Window other = engine->new_window();
  other.add_turn({1, 365});
  const std::vector<std::pair<std::string, std::function<void()>>> uses = {
      {"apply (evict)", [&] { w.evict(first); }},
      {"apply (slide)", [&] { w.slide(1); }},
      {"apply (turn)", [&] { w.add_turn({403}); }},
      {"generate", [&] { w.generate({403}); }},
      {"logits", [&] { w.logits({403}); }},
      {"set_policy", [&] { w.set_policy(orbit::WindowPolicy{}); }},
      {"idle", [&] { w.idle(); }},
      {"fork", [&] { w.fork(); }},
      {"sync", [&] {
         orbit::ChatMessage m;
         m.role = "user";
         m.content = "hi";
         w.sync({m});
       }}};
  for (const auto& [name, use] : uses) {
    CAPTURE(name);
    std::string refused;
    bool unchanged = true;
    orbit::GenerateOptions o;
    o.max_tokens = 3;
    o.on_token = [&](int64_t, int64_t) {
      const uint64_t version = w.version();
      try {
        use();
      } catch (const orbit::Error& e) {
        refused = e.what();
      }
      unchanged = unchanged && w.version() == version;
      return true;
    };
    const orbit::Generation g = w.generate({403}, o);
    CHECK(g.tokens.size() == 3);
    CHECK_THAT(refused, Catch::StartsWith(name + ": window " + std::to_string(w.id()) + " is decoding on this thread"));
    CHECK(unchanged);
  }
  // Another window is not the one decoding: it may be used from the callback.
  orbit::GenerateOptions o;
  o.max_tokens = 2;
  o.on_text = [&](const std::string&) {
    other.add_turn({403});
    return true;
  };
  CHECK_NOTHROW(w.generate({403}, o));
  CHECK(other.tokens() > 2);
  // After the run the window is its own again.
  CHECK_NOTHROW(w.evict(first));
}

TEST_CASE("an operation in flight when close() begins runs to its end; close() returns after it", "[engine][thread]") {
  orbit::test::TempDir dir;
  auto engine = open_engine(dir / "store");
  orbit::Window w = engine->new_window();
  w.add_turn({1, 365, 169, 44});
  std::atomic<bool> decoding{false};
  std::atomic<bool> close_returned{false};
  std::atomic<bool> decoded_after_close_returned{false};
  orbit::GenerateOptions o;
  o.max_tokens = 24;
  o.on_token = [&](int64_t, int64_t) {
    if (!decoding.exchange(true)) {
      // The first token: hold the decode until close() has begun (it marks the engine closed first).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!engine->closed() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    if (close_returned.load()) decoded_after_close_returned = true;
    return true;
  };
  orbit::Generation g;
  std::string error;
  std::thread decoder([&] {
    try {
      g = w.generate({403}, o);
    } catch (const orbit::Error& e) {
      error = e.what();
    }
  });
  while (!decoding.load()) std::this_thread::yield();
  engine->close();
  close_returned = true;
  decoder.join();
  CHECK_FALSE(decoded_after_close_returned.load());  // close() waited for the decode
  CHECK(error.empty());
  CHECK(g.tokens.size() == 24);
  CHECK_THROWS_WITH(w.generate({403}, o), Catch::Contains("engine is closed"));  // a call after close() is refused
}

TEST_CASE("every engine and window operation after close() throws 'engine is closed'", "[engine][thread]") {
  auto engine = open_engine("");
  const orbit::ChunkRef c = engine->add_tokens({1, 2, 3, 4, 5});
  orbit::Window w = engine->new_window();
  w.admit(c);
  const orbit::InstanceId id = w.instances().front().id;
  engine->close();
  const auto closed = Catch::Matches("engine is closed");
  CHECK_THROWS_WITH(engine->add_tokens({1, 2}), closed);
  CHECK_THROWS_WITH(engine->chunk(c.key), closed);
  CHECK_THROWS_WITH(engine->chunks(), closed);
  CHECK_THROWS_WITH(engine->precompute(c), closed);
  CHECK_THROWS_WITH(engine->new_window(), closed);
  CHECK_THROWS_WITH(w.instances(), closed);
  CHECK_THROWS_WITH(w.kv(id), closed);
  CHECK_THROWS_WITH(w.tokens(), closed);
  CHECK_THROWS_WITH(w.stats(), closed);
  CHECK_THROWS_WITH(w.evicted(), closed);
  CHECK_THROWS_WITH(w.logits({1}), closed);
  CHECK_THROWS_WITH(w.generate({1}), closed);
  CHECK_THROWS_WITH(w.plan_evict(id), closed);
  CHECK_THROWS_WITH(w.evict(id), closed);
  CHECK_THROWS_WITH(w.fork(), closed);
  // stats() still answers (counters; the store's part is empty), and close() is idempotent.
  CHECK(engine->stats().chunks == 1);
  engine->close();
}

namespace {

// The remote tier's reads so far: the user's (hits, and misses: skipped while down and failed included) and the
// engine's own reads of its stored calibration (internal_reads, answered or not). Not errors: the background
// writer's failed deliveries (the calibration's own write among them) count there too, at any moment.
int64_t remote_reads(const Engine& engine) {
  const orbit::RemoteStats remote = engine.stats().store.remote;
  return remote.hits + remote.misses + remote.internal_reads;
}

}  // namespace

TEST_CASE("a stored calibration read the remote did not answer is asked again, from many threads at once",
          "[engine][thread][calibrate]") {
  orbit::test::TempDir dir;
  EngineOptions o;
  o.model = orbit::test::stories_path();
  o.store_dir = dir / "store";
  o.pool_bytes = int64_t{8} << 20;
  o.remote = "redis://127.0.0.1:" + std::to_string(orbit::test::free_port());  // nothing listens there
  orbit::test::StderrCapture err;  // the tier's warnings (outage, writes not delivered at close)
  auto engine = Engine::open(o);
  CHECK(engine->fidelity_calibration() == "default");
  const int64_t first = remote_reads(*engine);
  REQUIRE(first >= 1);
  // Not answered: each later question reads again (the tier answers at once while it backs off), where the
  // engine used to keep the defaults for its life without asking.
  for (int i = 0; i < 5; ++i) CHECK(engine->fidelity_calibration() == "default");
  CHECK(remote_reads(*engine) >= first + 5);
  // Questions and plans on several threads retry at once; a calibration on another ends the retries.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint64_t t = 0; t < 3; ++t) {
    threads.emplace_back([&engine, &failures, t] {
      std::mt19937_64 rng(t);
      try {
        orbit::Window w = engine->new_window();
        for (int i = 0; i < 20; ++i) {
          (void)engine->fidelity_calibration();
          w.admit(engine->add_tokens(random_tokens(rng, 12)));
          if (w.tokens() > 200) w.slide(1);
        }
      } catch (const orbit::Error&) {
        ++failures;
      }
    });
  }
  threads.emplace_back([&engine] { (void)engine->calibrate_fidelity(); });
  for (std::thread& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(engine->fidelity_calibration() == "calibrated");
  const int64_t after = remote_reads(*engine);
  for (int i = 0; i < 5; ++i) CHECK(engine->fidelity_calibration() == "calibrated");
  CHECK(remote_reads(*engine) == after);  // the calibration ended the retries
}

}  // namespace ORBIT_TEST_FILE
