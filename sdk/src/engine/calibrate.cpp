// EngineCore::calibrate: time the operations the planner's cost model prices (planner/cost_model.h) with
// this engine's model on this machine, and fit it.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>

#include "engine/calibrate_fidelity.h"
#include "engine/engine_core.h"
#include "engine/stored_calibration.h"
#include "orbit/common/error.h"

namespace orbit::detail {

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return std::max(best, 1e-9);
}

std::vector<int64_t> tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// What the cost timings share: the engine (for its model inputs), the model, the random tokens they time and
// the samples they add.
struct CostTiming {
  CostTiming(const EngineCore& c, int64_t length) : core(c), m(c.model()), big(length) {
    fo.logits = runtime::LogitsMode::kNone;
  }
  const EngineCore& core;
  const runtime::Model& m;
  std::mt19937_64 rng{0};
  const int64_t big;           // the chunk and the context length timed
  runtime::ForwardOptions fo;  // content only
  std::vector<planner::CostSample> samples;
};

// The chunk the patch timings used: its canonical content and that content's bytes.
struct TimedChunk {
  runtime::Content canonical;
  int64_t bytes = 0;
};

// Forwards: a few lengths, with and without a `big`-token context. Returns that context.
runtime::PastKV time_forwards(CostTiming& t) {
  const runtime::ModelConfig& c = t.m.config();
  const int64_t big = t.big;
  const runtime::ForwardInput ctx_in = t.core.registry().input_for_tokens(tokens(t.rng, big, c.vocab_size), 0);
  runtime::PastKV ctx;
  ctx.layers = t.m.forward(ctx_in, nullptr, t.fo).content;
  ctx.positions = ctx_in.positions;
  for (int64_t n : {std::max<int64_t>(1, big / 16), std::max<int64_t>(2, big / 4), big}) {
    for (bool with_ctx : {false, true}) {
      const runtime::ForwardInput in =
          t.core.registry().input_for_tokens(tokens(t.rng, n, c.vocab_size), with_ctx ? big : 0);
      const double s = best_of(3, [&] { (void)t.m.forward(in, with_ctx ? &ctx : nullptr, t.fo); });
      t.samples.push_back({planner::sample_kind::kForward, n, with_ctx ? big : 0, 0, s});
    }
  }
  return ctx;
}

// Relocation, patch apply and patch forming on a `big`-token chunk behind the context `ctx`.
TimedChunk time_patches(CostTiming& t, const runtime::PastKV& ctx) {
  const runtime::Model& m = t.m;
  const runtime::ModelConfig& c = m.config();
  const int64_t big = t.big;
  const runtime::ForwardInput chunk_in = t.core.registry().input_for_tokens(tokens(t.rng, big, c.vocab_size), 0);
  TimedChunk chunk;
  chunk.canonical = m.forward(chunk_in, nullptr, t.fo).content;
  const runtime::Content& canonical = chunk.canonical;
  runtime::ForwardInput shifted = t.core.registry().input_for_tokens(chunk_in.tokens, big);
  const runtime::Content conditioned = m.forward(shifted, &ctx, t.fo).content;
  const int64_t bytes = chunk.bytes = runtime::content_bytes(canonical);
  const at::Tensor positions = t.core.registry().positions_for(nullptr, big, big);
  t.samples.push_back({planner::sample_kind::kRelocate, 0, 0, bytes,
                       best_of(3, [&] { (void)runtime::relocate_keys(m, canonical, positions); })});
  runtime::PatchOptions po;
  po.rank_k = std::min<int64_t>(16, std::min(big, c.content_k_shape().width()));
  po.rank_v = std::min<int64_t>(16, std::min(big, c.content_v_shape().width()));
  runtime::Patch patch;
  t.samples.push_back({planner::sample_kind::kPatchForm, 0, 0, bytes, best_of(2, [&] {
                         patch = runtime::form_patch(m, runtime::deficit(conditioned, canonical), po);
                       })});
  t.samples.push_back({planner::sample_kind::kPatchApply, 0, 0, bytes,
                       best_of(3, [&] { (void)runtime::apply_patch(m, canonical, patch); })});
  return chunk;
}

// Tier reads: device and host are memory copies on the CPU build; disk reads a file of the same bytes
// (a temporary file named by `tag`, removed after).
void time_local_tiers(CostTiming& t, const TimedChunk& chunk, uintptr_t tag) {
  const int64_t bytes = chunk.bytes;
  const double copy = best_of(3, [&] {
    for (const auto& l : chunk.canonical) {
      (void)l.k.clone();
      (void)l.v.clone();
    }
  });
  t.samples.push_back({planner::sample_kind::kTransferDevice, 0, 0, bytes, copy});
  t.samples.push_back({planner::sample_kind::kTransferHost, 0, 0, bytes, copy});
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("orbit-calibrate-" + std::to_string(tag) + ".bin");
  {
    std::vector<char> buf(static_cast<std::size_t>(bytes), 1);
    std::ofstream out(file, std::ios::binary);
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    out.close();
    // A file not written whole would time reads of nothing: the disk would look free to the cost model.
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(file, ec);
      ORBIT_FAIL("calibrate: could not write " << bytes << " bytes to " << file.string()
                                               << " to time disk reads (is the temporary directory full?)");
    }
  }
  std::vector<char> in_buf(static_cast<std::size_t>(bytes));
  bool read_whole = true;
  t.samples.push_back({planner::sample_kind::kTransferDisk, 0, 0, bytes, best_of(3, [&] {
                         std::ifstream in(file, std::ios::binary);
                         in.read(in_buf.data(), static_cast<std::streamsize>(in_buf.size()));
                         read_whole = read_whole && in.gcount() == static_cast<std::streamsize>(in_buf.size());
                       })});
  std::error_code ec;
  std::filesystem::remove(file, ec);
  ORBIT_CHECK(read_whole, "calibrate: reading back " << file.string() << " gave fewer than its " << bytes << " bytes");
}

// The remote tier: a probe blob of the chunk's size written to the server and read back (fetch,
// checksum, decode: what a hit pays), so remote recalls are priced at this link's measured rate from the
// first calibration on; the hits so far (bytes and wall time of verified reads) count too. A remote
// that is down leaves the default rate. True when a remote sample was added.
bool time_remote(store::ChunkStore& store, int64_t bytes, std::vector<planner::CostSample>& samples) {
  bool measured = false;
  if (store.has_remote()) {
    const Result<store::RemoteReadSample> probe = store.measure_remote_read(bytes);
    if (probe) {
      samples.push_back({planner::sample_kind::kTransferRemote, 0, 0, probe.value().bytes, probe.value().seconds});
      measured = true;
    }
  }
  const RemoteStats remote = store.stats().remote;
  if (remote.enabled && remote.hits > 0 && remote.read_seconds > 0) {
    samples.push_back({planner::sample_kind::kTransferRemote, 0, 0, remote.bytes_read, remote.read_seconds});
    measured = true;
  }
  return measured;
}

}  // namespace

planner::CostModel EngineCore::cost_model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cost_model_;
}

// The model as fitted (or the defaults), scaled by what the self-checks measured: every plan sees it so.
planner::FidelityModel EngineCore::fidelity_model() const {
  read_remote_calibration();  // EngineOptions::stored_calibration: before the first plan
  std::lock_guard<std::mutex> lock(mu_);
  return fidelity_model_.scaled(fidelity_checks_.correction.factor());
}

EngineCore::FidelityChecks EngineCore::fidelity_checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fidelity_checks_;
}

bool EngineCore::note_fidelity_check(double measured_kl, double predicted_kl, double forward_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  // The window's prediction was made with the current factor (up to the checks since its plans): unscaled,
  // it is what the model itself predicted.
  planner::FidelityCorrection& c = fidelity_checks_.correction;
  const bool counted = c.observe(measured_kl, predicted_kl / c.factor());
  fidelity_checks_.forward_tokens += forward_tokens;
  return counted;
}

planner::FidelityModel calibrated_fidelity_model(const FidelityCalibration& deficits) {
  // Halfway from the defaults toward the fit in log space, the shortfall's fit whole (planner::kCalibrationWeight
  // says why).
  const planner::FidelityModel fit = planner::FidelityModel::fit(deficits.samples, deficits.reference_sensitivity);
  return planner::FidelityModel::blend(planner::FidelityModel(), fit, planner::kCalibrationWeight)
      .with_coefficient_of(planner::Loss::kShortfall, fit);
}

// Whether the engine keeps its calibration in a store that outlives it (EngineOptions::stored_calibration): its
// directory or the remote tier (a memory-only store would hold it for this engine alone).
static bool keeps_calibration(const EngineOptions& o) {
  return o.stored_calibration && (!o.store_dir.empty() || !o.remote.empty());
}

CalibrationReport EngineCore::calibrate_fidelity(const CalibrationProgress& progress) {
  const auto start = Clock::now();
  {
    // A measurement replaces what the remote would have given: a read in flight finishes first, none follows.
    std::lock_guard<std::mutex> lock(remote_calibration_mu_);
    if (remote_calibration_.load() != RemoteCalibration::kNone) remote_calibration_.store(RemoteCalibration::kDone);
  }
  const FidelityCalibration deficits = measure_fidelity_samples(*this, kFidelityCalibrationSeeds, progress);
  const planner::FidelityModel fidelity = calibrated_fidelity_model(deficits);
  CalibrationReport report;
  report.fidelity_samples = static_cast<int64_t>(deficits.samples.size());
  report.fidelity_model = fidelity.describe();
  for (const planner::FidelitySample& s : deficits.samples)
    report.shortfall_samples += s.kind == planner::Loss::kShortfall;
  if (fidelity.fitted(planner::Loss::kShortfall))
    report.shortfall_coefficient = fidelity.coefficient(planner::Loss::kShortfall);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fidelity_model_ = fidelity;
    fidelity_origin_ = "calibrated";
  }
  if (keeps_calibration(options_)) {
    report.stored = save_fidelity_calibration(kv().store(), fingerprint(), deficits, /*remote=*/true);
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

// Fits the fidelity model from `stored` and marks it as `origin`'s ("store" or "remote"); false (the defaults
// kept, a warning on stderr naming the key) when the fit refuses it: a value that decodes may still hold a
// sample fit() finds wrong.
bool EngineCore::apply_stored_calibration(const FidelityCalibration& stored, const char* origin) const {
  planner::FidelityModel fidelity;
  try {
    fidelity = calibrated_fidelity_model(stored);
  } catch (const Error& e) {
    std::fprintf(stderr, "orbit: warning: ignoring the %s's entry %s: %s; the fidelity model keeps its defaults\n",
                 std::string(origin) == "remote" ? "remote tier" : "store",
                 fidelity_calibration_key(fingerprint()).c_str(), e.what());
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  fidelity_model_ = fidelity;
  fidelity_origin_ = origin;
  return true;
}

bool EngineCore::load_stored_calibration() {
  if (!keeps_calibration(options_)) return false;
  bool found = false;
  const std::optional<FidelityCalibration> stored = load_fidelity_calibration(kv().store(), fingerprint(), &found);
  if (stored && apply_stored_calibration(*stored, "store")) return true;
  // Not in the store directory: the remote tier's, later (stored_calibration.h says why). An entry there that was
  // refused (and warned about) stays the answer: the later read would find it first and warn again.
  if (!found && kv_->store().has_remote()) remote_calibration_.store(RemoteCalibration::kPending);
  return false;
}

void EngineCore::read_remote_calibration() const {
  const RemoteCalibration seen = remote_calibration_.load();
  if (seen != RemoteCalibration::kPending && seen != RemoteCalibration::kRetry) return;
  // The first read is waited for (the first plan sees its answer); a retry is made by one caller while the
  // others plan on with the model they have, rather than queue behind a remote that was down.
  std::unique_lock<std::mutex> lock(remote_calibration_mu_, std::defer_lock);
  if (seen == RemoteCalibration::kPending) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return;
  }
  // Read only if no other caller read (or calibrate_fidelity() cancelled) while this one waited.
  if (remote_calibration_.load() != seen) return;
  const RemoteCalibrationRead read = load_remote_fidelity_calibration(kv_->store(), fingerprint());
  if (read.calibration) (void)apply_stored_calibration(*read.calibration, read.from_remote ? "remote" : "store");
  remote_calibration_.store(read.unavailable ? RemoteCalibration::kRetry : RemoteCalibration::kDone);
}

void EngineCore::read_remote_calibration_if_open() const {
  const RemoteCalibration state = remote_calibration_.load();
  if ((state != RemoteCalibration::kPending && state != RemoteCalibration::kRetry) || life_.closed()) return;
  try {
    const OpHold hold(*this);
    read_remote_calibration();
  } catch (const Error&) {
    if (!life_.closed()) throw;
    // Closed meanwhile (the hold refused): the store is gone, and the answer is what the engine had.
  }
}

std::string EngineCore::fidelity_calibration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fidelity_origin_;
}

CalibrationReport EngineCore::calibrate() {
  const auto start = Clock::now();
  const runtime::ModelConfig& c = model().config();
  c10::InferenceMode guard;
  const int64_t limit = window_position_limit(c) > 0 ? window_position_limit(c) : 4096;
  CostTiming timing(*this, std::min<int64_t>(128, limit / 2));
  // Interruption points between the timings (orbit/interrupt.h), and calibrate_fidelity's before each arm.
  interruption_point("calibrate");
  const runtime::PastKV ctx = time_forwards(timing);
  interruption_point("calibrate");
  const TimedChunk chunk = time_patches(timing, ctx);
  interruption_point("calibrate");
  time_local_tiers(timing, chunk, reinterpret_cast<uintptr_t>(this));
  const bool remote_measured = time_remote(kv().store(), chunk.bytes, timing.samples);

  planner::CostModel fitted = planner::CostModel::fit(timing.samples);
  CalibrationReport report = calibrate_fidelity();
  report.samples = static_cast<int64_t>(timing.samples.size());
  report.cost_model = fitted.describe();
  if (remote_measured) report.remote_bytes_per_s = fitted.coefficients().transfer_remote_bytes_per_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cost_model_ = fitted;
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace orbit::detail
