// The fidelity calibration kept in the store (EngineOptions::stored_calibration, engine/stored_calibration.h):
// an engine opening the bundled model on a store another engine calibrated on plans with that calibration
// without measuring; off, or without a store, nothing is read or written; an entry that does not decode is
// ignored with a warning and the defaults stay; the value round-trips and its decoder refuses what it must;
// calibrate_fidelity's progress callback sees each seed and may stop it. (The remote tier's copy:
// test_store_remote_engine.cpp.)
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/stored_calibration.h"
#include "orbit/engine.h"
#include "orbit/policy.h"
#include "orbit/store/chunk_store.h"
#include "stderr_capture.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;

namespace {

std::shared_ptr<Engine> open_on(const std::string& store_dir, bool stored = true) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.store_dir = store_dir;
  o.stored_calibration = stored;
  return Engine::open(o);
}

// What a blind placement of a second chunk is predicted to lose: the blind coefficient at work in a plan.
double blind_prediction(Engine& engine) {
  WindowOptions wo;
  wo.policy = parse_policy("blind");
  Window w = engine.new_window(wo);
  w.admit(engine.add_tokens({1, 403, 407, 261, 378, 410, 44, 33}));
  return w.plan_admit(engine.add_tokens({22, 11, 10, 403, 412, 261, 44, 378})).predicted_kl;
}

orbit::detail::FidelityCalibration some_deficits() {
  orbit::detail::FidelityCalibration c;
  c.reference_sensitivity = 0.0123456789012345678;
  c.samples = {{planner::Loss::kKeep, 0.25, 1e-3}, {planner::Loss::kBlind, 0.5, 2.5e-2}};
  return c;
}

}  // namespace

TEST_CASE("an engine on a store another engine calibrated plans with that calibration, unmeasured",
          "[calibrate][store][model]") {
  test::TempDir dir;
  double calibrated = 0, fresh_default = 0;
  std::string description;
  {
    auto first = open_on(dir / "store");
    CHECK(first->fidelity_calibration() == "default");
    fresh_default = blind_prediction(*first);
    const CalibrationReport report = first->calibrate_fidelity();
    CHECK(report.stored);
    CHECK(first->fidelity_calibration() == "calibrated");
    description = first->fidelity_model_description();
    CHECK(description == report.fidelity_model);
    calibrated = blind_prediction(*first);
    first->close();
  }
  REQUIRE(calibrated != fresh_default);  // the calibration moves this prediction at all

  auto second = open_on(dir / "store");
  CHECK(second->fidelity_calibration() == "store");
  CHECK(second->fidelity_model_description() == description);
  CHECK(blind_prediction(*second) == calibrated);  // the same deficits fitted the same way: equal bits
  second->close();

  // Off: neither read ...
  auto off = open_on(dir / "store", /*stored=*/false);
  CHECK(off->fidelity_calibration() == "default");
  CHECK(blind_prediction(*off) == fresh_default);
  // ... nor written.
  test::TempDir other;
  auto unkept = open_on(other / "store", /*stored=*/false);
  CHECK_FALSE(unkept->calibrate_fidelity().stored);
  unkept->close();
  CHECK(open_on(other / "store")->fidelity_calibration() == "default");
}

TEST_CASE("a memory-only engine keeps its calibration to itself", "[calibrate][store][model]") {
  auto engine = open_on("");
  const CalibrationReport report = engine->calibrate_fidelity();
  CHECK_FALSE(report.stored);
  CHECK(engine->fidelity_calibration() == "calibrated");
  CHECK(open_on("")->fidelity_calibration() == "default");
}

TEST_CASE("a stored calibration that does not decode is ignored with a warning naming it",
          "[calibrate][store][model]") {
  test::TempDir dir;
  const std::string fingerprint = open_on("")->model_info().fingerprint;
  const std::string key = orbit::detail::fidelity_calibration_key(fingerprint);
  orbit::detail::FidelityCalibration bad = some_deficits();
  bad.samples.push_back({static_cast<planner::Loss>(planner::kLossKinds), 0.5, 1e-3});  // no such loss kind
  {
    store::ChunkStoreOptions so;
    so.model_fingerprint = fingerprint;
    so.dir = dir / "store";
    store::ChunkStore s(so);
    store::PutOptions po;
    REQUIRE(s.put(key, orbit::detail::fidelity_calibration_value(bad, fingerprint), po).is_ok());
  }
  test::StderrCapture err;
  auto engine = open_on(dir / "store");
  CHECK(engine->fidelity_calibration() == "default");
  const std::string warned = err.text();
  CHECK_THAT(warned, Contains("ignoring the store's entry " + key));
  CHECK_THAT(warned, Contains("sample 2 has loss kind " + std::to_string(planner::kLossKinds)));
  // A calibration replaces it, and the next engine reads that.
  CHECK(engine->calibrate_fidelity().stored);
  engine->close();
  CHECK(open_on(dir / "store")->fidelity_calibration() == "store");
}

TEST_CASE("calibrate_fidelity reports each seed to its progress callback, which may stop it",
          "[calibrate][store][model]") {
  test::TempDir dir;
  auto engine = open_on(dir / "store");
  std::vector<std::pair<int64_t, int64_t>> seen;
  const CalibrationReport report =
      engine->calibrate_fidelity([&](int64_t done, int64_t seeds) { seen.emplace_back(done, seeds); });
  REQUIRE(!seen.empty());
  const int64_t seeds = seen.back().second;
  CHECK(seeds >= 1);
  CHECK(seen.size() == static_cast<std::size_t>(seeds));
  for (std::size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].first == static_cast<int64_t>(i) + 1);
    CHECK(seen[i].second == seeds);
  }
  CHECK(report.stored);
  engine->close();
  // A callback that throws stops the calibration: nothing fitted, nothing stored.
  auto other = open_on(dir / "other");
  CHECK_THROWS_WITH(other->calibrate_fidelity([](int64_t, int64_t) { throw std::runtime_error("stop here"); }),
                    Contains("stop here"));
  CHECK(other->fidelity_calibration() == "default");
  other->close();
  CHECK(open_on(dir / "other")->fidelity_calibration() == "default");
}

TEST_CASE("the stored calibration's value round-trips and its decoder refuses what does not fit",
          "[calibrate][store]") {
  const std::string fp(64, 'a');
  const orbit::detail::FidelityCalibration c = some_deficits();
  const store::ValuePtr v = orbit::detail::fidelity_calibration_value(c, fp);
  CHECK(v->kind == EntryKind::kOther);
  CHECK(orbit::detail::is_fidelity_calibration(*v));
  Result<orbit::detail::FidelityCalibration> back = orbit::detail::decode_fidelity_calibration(*v, fp);
  REQUIRE(back.is_ok());
  CHECK(back.value().reference_sensitivity == c.reference_sensitivity);  // %.17g: exact
  REQUIRE(back.value().samples.size() == 2);
  CHECK(back.value().samples[1].kind == planner::Loss::kBlind);
  CHECK(back.value().samples[1].feature == 0.5);
  CHECK(back.value().samples[1].kl == 2.5e-2);

  auto refusal = [&](const store::StoredValue& value, const std::string& fingerprint) {
    Result<orbit::detail::FidelityCalibration> r = orbit::detail::decode_fidelity_calibration(value, fingerprint);
    REQUIRE_FALSE(r.is_ok());
    return r.status().reason();
  };
  CHECK_THAT(refusal(*v, std::string(64, 'b')), Contains("another model's calibration"));
  store::StoredValue negative =
      *orbit::detail::fidelity_calibration_value({{{planner::Loss::kKeep, 0.25, -1e-3}}, c.reference_sensitivity}, fp);
  CHECK_THAT(refusal(negative, fp), Contains("sample 0 has a negative or non-finite feature or KL"));
  // Finite but past any measurement: a fit over 1e200 overflowed to NaN coefficients.
  for (const auto& [feature, kl] : {std::pair<double, double>{1e200, 1e-3}, {0.25, 1e200}}) {
    store::StoredValue huge = *orbit::detail::fidelity_calibration_value(
        {{{planner::Loss::kKeep, feature, kl}}, c.reference_sensitivity}, fp);
    CHECK_THAT(refusal(huge, fp), Contains("sample 0 has feature") && Contains("past what a measurement gives"));
  }
  store::StoredValue no_kl = *v;
  no_kl.tensors.pop_back();
  CHECK_THAT(refusal(no_kl, fp), Contains("exactly 'kind' int64, 'feature' and 'kl' float64"));
  store::StoredValue older = *v;
  older.attrs["version"] = "0";
  CHECK_THAT(refusal(older, fp), Contains("version is not"));
  store::StoredValue no_reference = *v;
  no_reference.attrs["reference_sensitivity"] = "nan";
  CHECK_THAT(refusal(no_reference, fp), Contains("reference_sensitivity"));
  // The key names the model: another fingerprint, another key.
  CHECK(orbit::detail::fidelity_calibration_key(fp) != orbit::detail::fidelity_calibration_key(std::string(64, 'b')));
  CHECK(is_store_key(orbit::detail::fidelity_calibration_key(fp)));
}

}  // namespace ORBIT_TEST_FILE
