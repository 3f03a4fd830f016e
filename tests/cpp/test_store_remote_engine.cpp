// The remote tier as engines use it (test_store_remote.cpp's executable): two engine processes sharing
// canonicals through Redis, the remote read rate measured with a probe and priced by the planner,
// Engine::calibrate measuring it before any remote hit, and the fidelity calibration shared through Redis by
// engines with store directories of their own (a refused entry ignored with a warning once; the engine's own
// reads of it counted apart from the user's).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/stored_calibration.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/planner/cost_model.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "redis_test_server.h"
#include "stderr_capture.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_remote.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using test::remote_key;
using test::wait_until;

TEST_CASE("two engine processes share canonicals through redis: the second encodes none", "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  {
    test::ChildProcess first(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), dir / "a", server.url(), "6"});
    std::string line;
    REQUIRE(first.next_line(&line));
    CHECK(nlohmann::json::parse(line)["canonicals_encoded"] == 6);
    first.close_stdin();  // closing the engine sends its queued remote writes
    REQUIRE(WEXITSTATUS(first.wait()) == 0);
  }
  // Another machine: its own (empty) store directory, the same server.
  test::ChildProcess second(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), dir / "b", server.url(), "6"});
  std::string line;
  REQUIRE(second.next_line(&line));
  const auto b = nlohmann::json::parse(line);
  CHECK(b["canonicals_encoded"] == 0);
  CHECK(b["remote_hits"] >= 6);  // the canonicals, and the patches the first engine formed
  second.close_stdin();
  CHECK(WEXITSTATUS(second.wait()) == 0);
}

namespace {

// A backend whose every read takes at least `delay` longer (a slow link), over a MemoryBackend.
class SlowBackend final : public BlobBackend {
 public:
  explicit SlowBackend(std::chrono::milliseconds delay) : delay_(delay) {}
  std::string describe() const override { return "slow-memory"; }
  BackendRead get(const std::string& key) override {
    std::this_thread::sleep_for(delay_);
    ++reads;
    return inner_.get(key);
  }
  Status put(const std::string& key, const std::string& bytes) override { return inner_.put(key, bytes); }
  Status remove(const std::string& key) override { return inner_.remove(key); }
  Result<bool> exists(const std::string& key) override { return inner_.exists(key); }
  std::atomic<int> reads{0};

 private:
  std::chrono::milliseconds delay_;
  MemoryBackend inner_;
};

}  // namespace

TEST_CASE("the remote read rate is measured with a probe, and the planner prices remote recalls with it",
          "[store][remote]") {
  auto slow = std::make_shared<SlowBackend>(std::chrono::milliseconds(50));
  ChunkStoreOptions o = test::remote_store_options("");
  o.remote_backend = slow;
  ChunkStore s(o);
  const int64_t bytes = 64 << 10;
  Result<RemoteReadSample> sample = s.measure_remote_read(bytes);
  REQUIRE(sample.is_ok());
  CHECK(slow->reads == 3);                // best of three reads of the probe
  CHECK(sample.value().bytes >= bytes);   // the probe blob: payload plus header and checksum
  CHECK(sample.value().seconds >= 0.05);  // every read waited for the link
  CHECK(s.stats().remote.hits == 0);      // a probe is not a hit
  // A cost model fitted with the probe prices a recall of B bytes at B / (probe bytes / probe seconds):
  // at least 50 ms for the probe's size, where the default 100 MB/s would say 0.7 ms.
  std::vector<planner::CostSample> samples{{planner::sample_kind::kForward, 8, 0, 0, 1e-3},
                                           {planner::sample_kind::kForward, 32, 0, 0, 4e-3},
                                           {planner::sample_kind::kRelocate, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kPatchApply, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kPatchForm, 0, 0, 1 << 20, 1e-3},
                                           {planner::sample_kind::kTransferDevice, 0, 0, 1 << 20, 1e-5},
                                           {planner::sample_kind::kTransferHost, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kTransferDisk, 0, 0, 1 << 20, 1e-3}};
  const planner::CostModel unmeasured = planner::CostModel::fit(samples);
  samples.push_back({planner::sample_kind::kTransferRemote, 0, 0, sample.value().bytes, sample.value().seconds});
  const planner::CostModel measured = planner::CostModel::fit(samples);
  CHECK(unmeasured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) < 0.01);
  CHECK(measured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) >= 0.05);
  CHECK(measured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) ==
        Approx(sample.value().seconds).epsilon(1e-9));
  // Without a remote tier there is nothing to measure.
  ChunkStore local(test::remote_store_options(""));
  CHECK(local.measure_remote_read(bytes).status().code() == StatusCode::kRefused);
}

TEST_CASE("Engine::calibrate measures the remote tier's read rate before any remote hit", "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.remote = server.url();
  o.stored_calibration = false;  // the probe is then all calibrate() writes to the server
  auto engine = Engine::open(o);
  CHECK(engine->stats().store.remote.hits == 0);
  const CalibrationReport report = engine->calibrate();
  CHECK(report.remote_bytes_per_s > 0);
  CHECK(report.remote_bytes_per_s != 100e6);  // not the default any more
  CHECK_THAT(report.cost_model, Contains("remote"));
  CHECK(engine->stats().store.remote.hits == 0);
  CHECK(std::stoll(test::redis_cli(server.port(), "DBSIZE")) == 0);  // the probe removed itself
  WARN("loopback redis read rate measured by calibrate: " << report.remote_bytes_per_s / 1e6 << " MB/s");
  // Without a remote tier, nothing is measured.
  o.remote.clear();
  CHECK(Engine::open(o)->calibrate().remote_bytes_per_s == 0);
}

namespace {

EngineOptions calibration_engine(const std::string& store_dir, const std::string& remote) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.store_dir = store_dir;
  o.remote = remote;
  return o;
}

// The stories model's fingerprint (from an engine with neither a store nor a remote) and the store key of its
// fidelity calibration.
struct CalibrationKey {
  std::string fingerprint;
  std::string key;
};

CalibrationKey calibration_key() {
  const std::string fingerprint = Engine::open(calibration_engine("", ""))->model_info().fingerprint;
  return {fingerprint, orbit::detail::fidelity_calibration_key(fingerprint)};
}

// A calibration that encodes but that decoding refuses: sample 1 has a negative feature.
orbit::detail::FidelityCalibration negative_feature_calibration() {
  orbit::detail::FidelityCalibration bad;
  bad.reference_sensitivity = 0.01;
  bad.samples = {{planner::Loss::kKeep, 0.25, 1e-3}, {planner::Loss::kBlind, -0.5, 2.5e-2}};
  return bad;
}

// The remote tier's reads so far: hits, misses (a refused value included), errors, and the engine's own reads of
// its stored calibration (internal_reads: not hits or misses).
int64_t remote_reads(Engine& engine) {
  const RemoteStats remote = engine.stats().store.remote;
  return remote.hits + remote.misses + remote.errors + remote.internal_reads;
}

}  // namespace

TEST_CASE("two engines with their own store directories share the fidelity calibration through redis",
          "[store][remote][model][calibrate]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  std::string description;
  {
    auto first = Engine::open(calibration_engine(dir / "a", server.url()));
    CHECK(first->fidelity_calibration() == "default");  // nothing on the server yet
    CHECK(first->calibrate_fidelity().stored);
    description = first->fidelity_model_description();
    first->close();  // sends the queued remote write
  }
  const std::string key = calibration_key().key;
  CHECK(std::stoll(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key) + "'")) == 1);
  {
    // Another machine: its own (empty) store directory, the same Redis. The open asks the remote nothing;
    // the first question does, and the answer is the first engine's calibration: nothing measured here.
    auto second = Engine::open(calibration_engine(dir / "b", server.url()));
    CHECK(remote_reads(*second) == 0);
    CHECK(second->fidelity_calibration() == "remote");
    CHECK(second->fidelity_model_description() == description);
    CHECK(second->stats().store.remote.internal_reads == 1);  // the engine's read, not its user's
    CHECK(second->stats().store.remote.hits == 0);
    second->close();
  }
  {
    // The remote hit was copied into b: the next engine there reads it from disk, the remote not asked.
    auto third = Engine::open(calibration_engine(dir / "b", server.url()));
    CHECK(third->fidelity_calibration() == "store");
    CHECK(third->fidelity_model_description() == description);
    CHECK(remote_reads(*third) == 0);
  }
  // A memory-only engine on the remote alone reads it too, at its first plan.
  auto remote_only = Engine::open(calibration_engine("", server.url()));
  Window w = remote_only->new_window();
  w.admit(remote_only->add_tokens({1, 403, 407, 261, 378, 410, 44, 33}));
  CHECK(remote_only->stats().store.remote.internal_reads >= 1);
  CHECK(remote_only->fidelity_calibration() == "remote");
  // Off: neither asked nor written.
  EngineOptions off = calibration_engine(dir / "c", server.url());
  off.stored_calibration = false;
  auto unkept = Engine::open(off);
  CHECK(unkept->fidelity_calibration() == "default");
  CHECK(remote_reads(*unkept) == 0);
}

namespace {

// `value` put on the server under `key` by a store of `fingerprint`'s, past the engine's validator.
void put_on_server(const test::RedisServer& server, const std::string& fingerprint, const std::string& key,
                   const store::ValuePtr& value) {
  ChunkStoreOptions so = test::remote_store_options(server.url());
  so.model_fingerprint = fingerprint;
  ChunkStore s(so);
  REQUIRE(s.put(key, value).is_ok());
  REQUIRE(s.drain_remote(std::chrono::seconds(10)));
}

// The calibration value of `calibration`, its version attribute replaced (a calibration of another measure).
store::ValuePtr with_version(const orbit::detail::FidelityCalibration& calibration, const std::string& fingerprint,
                             const std::string& version) {
  const store::ValuePtr v = orbit::detail::fidelity_calibration_value(calibration, fingerprint);
  std::map<std::string, std::string> attrs = v->attrs;
  attrs["version"] = version;
  return store::make_value(v->kind, v->tensors, attrs);
}

}  // namespace

namespace {

// How many times `needle` occurs in `text`.
std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("a calibration the remote tier refuses is ignored with a warning naming its key once, and why",
          "[store][remote][model][calibrate]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  const auto [fingerprint, key] = calibration_key();
  const orbit::detail::FidelityCalibration bad = negative_feature_calibration();
  put_on_server(server, fingerprint, key, orbit::detail::fidelity_calibration_value(bad, fingerprint));
  REQUIRE(std::stoll(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key) + "'")) == 1);
  auto engine = Engine::open(calibration_engine(dir / "store", server.url()));
  {
    test::StderrCapture err;
    CHECK(engine->fidelity_calibration() == "default");
    CHECK_THAT(err.text(), Contains("ignoring the remote tier's fidelity calibration: "));
    CHECK(occurrences(err.text(), key) == 1);  // the remote tier's reason names it; the warning adds no second
    CHECK_THAT(err.text(), Contains("sample 1 has a negative or non-finite feature or KL"));
  }
  CHECK(engine->stats().store.remote.corrupt == 1);
  // Removed from the server, so that a calibration replaces it.
  CHECK(std::stoll(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key) + "'")) == 0);
  CHECK(engine->calibrate_fidelity().stored);
  engine->close();
  CHECK(Engine::open(calibration_engine(dir / "other", server.url()))->fidelity_calibration() == "remote");

  // A calibration of another measure's version under the key: the warning says so, not "corrupt".
  orbit::detail::FidelityCalibration good = bad;
  good.samples[1].feature = 0.5;
  put_on_server(server, fingerprint, key, with_version(good, fingerprint, "999"));
  auto next = Engine::open(calibration_engine(dir / "third", server.url()));
  test::StderrCapture err;
  CHECK(next->fidelity_calibration() == "default");
  CHECK_THAT(err.text(), Contains("ignoring the remote tier's fidelity calibration: "));
  CHECK(occurrences(err.text(), key) == 1);
  CHECK_THAT(err.text(), Contains("version is not " + std::to_string(orbit::detail::kFidelityMeasureVersion)));
}

TEST_CASE("a stored calibration the remote did not answer for is read at a later plan; a clean miss is final",
          "[store][remote][model][calibrate]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  // Asked while the server holds nothing: a clean miss, final: the entry written after it is not read.
  auto missed = Engine::open(calibration_engine(dir / "missed", server.url()));
  CHECK(missed->fidelity_calibration() == "default");
  const int64_t missed_reads = remote_reads(*missed);
  CHECK(missed_reads == 1);
  std::string description;
  {
    auto first = Engine::open(calibration_engine(dir / "a", server.url()));
    REQUIRE(first->calibrate_fidelity().stored);
    description = first->fidelity_model_description();
    first->close();  // sends the queued remote write
  }
  CHECK(missed->fidelity_calibration() == "default");
  CHECK(remote_reads(*missed) == missed_reads);  // not asked again
  CHECK(missed->fidelity_model_description() != description);

  // Asked while the server is down: the defaults for now, asked again later (the old engine kept them).
  server.kill();  // its append-only file keeps the entry for the restart below
  auto engine = Engine::open(calibration_engine(dir / "b", server.url()));
  {
    test::StderrCapture err;  // the tier's outage warning
    CHECK(engine->fidelity_calibration() == "default");
  }
  CHECK(engine->stats().store.remote.errors >= 1);
  server.start();
  // Plans on several threads while the main thread asks: whichever call comes after the tier's
  // retry_after_ms reads the entry; the others go on with the model they have.
  std::atomic<bool> read{false};
  std::vector<std::thread> planners;
  for (int t = 0; t < 3; ++t) {
    planners.emplace_back([&engine, &read, t] {
      Window w = engine->new_window();
      for (int64_t i = 0; !read.load(); ++i) {
        w.admit(engine->add_tokens({1, 403 + t, 407, 261, 378, 410, 44, 33 + (i % 50)}));
        if (w.tokens() > 64) w.slide(1);
      }
    });
  }
  test::wait_until([&] { return engine->fidelity_calibration() == "remote"; }, 60000);
  read = true;
  for (std::thread& p : planners) p.join();
  CHECK(engine->fidelity_calibration() == "remote");
  CHECK(engine->fidelity_model_description() == description);
}

// While the remote is down the engine reads its stored calibration again at each plan or question; those reads
// are its own, so they fill neither the store's misses nor the remote's misses and skipped (old: one store miss,
// one remote miss and, within retry_after_ms, one skipped per question). The remote's failure itself still shows.
TEST_CASE("an engine's calibration reads while the remote is down stay out of the user's hit and miss counters",
          "[store][remote][model][calibrate]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  server.kill();  // down from the start
  std::shared_ptr<Engine> engine;
  {
    test::StderrCapture err;  // the tier's outage warning
    engine = Engine::open(calibration_engine(dir / "store", server.url()));
    for (int i = 0; i < 20; ++i) CHECK(engine->fidelity_calibration() == "default");
  }
  const StoreStats down = engine->stats().store;
  CHECK(down.remote.internal_reads == 20);  // each question read again: the remote did not answer
  CHECK(down.remote.misses == 0);
  CHECK(down.remote.skipped == 0);
  CHECK(down.remote.hits == 0);
  CHECK(down.misses == 0);
  CHECK(down.internal_reads >= 20);
  for (const TierStats& t : down.tiers) CHECK(t.hits == 0);
  CHECK(down.remote.errors >= 1);  // the failed call is not hidden
  CHECK(down.remote.outages >= 1);
  CHECK_FALSE(down.remote.available);
  CHECK_THAT(down.remote.last_error, Contains("127.0.0.1"));
  // The user's own reads still count: a window's lookups miss on the store and on the (down) remote.
  Window w = engine->new_window();
  w.admit(engine->add_tokens({1, 403, 407, 261, 378, 410, 44, 33}));
  const StoreStats after = engine->stats().store;
  CHECK(after.misses >= 1);
  CHECK(after.remote.misses >= 1);
}

// A local entry that does not decode is the store's answer: warned about at open, and not again at the first plan
// (old: the plan's read found it before asking the remote and warned a second time).
TEST_CASE("a stored calibration in the store directory that does not decode is warned about once, with a remote",
          "[store][remote][model][calibrate]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  const auto [fingerprint, key] = calibration_key();
  const orbit::detail::FidelityCalibration bad = negative_feature_calibration();
  {
    ChunkStoreOptions so;
    so.model_fingerprint = fingerprint;
    so.dir = dir / "store";
    ChunkStore s(so);
    PutOptions po;
    po.remote = false;
    REQUIRE(s.put(key, orbit::detail::fidelity_calibration_value(bad, fingerprint), po).is_ok());
  }
  test::StderrCapture err;
  auto engine = Engine::open(calibration_engine(dir / "store", server.url()));
  CHECK(engine->fidelity_calibration() == "default");
  Window w = engine->new_window();
  w.admit(engine->add_tokens({1, 403, 407, 261, 378, 410, 44, 33}));
  CHECK(engine->fidelity_calibration() == "default");
  const std::string text = err.text();
  CHECK(occurrences(text, "ignoring the store's entry " + key) == 1);
  CHECK_THAT(text, Contains("sample 1 has a negative or non-finite feature or KL"));
  CHECK(engine->stats().store.remote.internal_reads == 0);  // the remote is not asked past the local entry
}

}  // namespace ORBIT_TEST_FILE
