// `orbit serve`'s fidelity model before listening (prepare_fidelity.h).
#include "serve/prepare_fidelity.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "orbit/store/redis_client.h"

namespace orbit::serve {

namespace {

// Where a stored calibration is written to (EngineOptions::stored_calibration), for messages.
std::string calibration_store(const ServeOptions& options) {
  std::string where;
  if (!options.store_dir.empty()) where = "--store " + options.store_dir;
  if (!options.remote.empty())
    where += (where.empty() ? "--remote " : " or --remote ") + store::redact_redis_url(options.remote);
  return where;
}

// calibrate_fidelity's progress on stderr, after each seed: on a terminal one line rewritten in place, else a
// line per seed (as replay's progress); then `between_seeds`, when set.
CalibrationProgress calibration_progress(const std::function<void()>& between_seeds) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  return [tty, start, between_seeds](int64_t done, int64_t seeds) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%sorbit serve: fidelity calibration: seed %lld/%lld measured (%.1f s)%s", tty ? "\r" : "",
                 static_cast<long long>(done), static_cast<long long>(seeds), seconds,
                 !tty || done == seeds ? "\n" : "");
    std::fflush(stderr);
    if (between_seeds) between_seeds();
  };
}

}  // namespace

// In order: a calibration the store holds (asking the remote, timed from here for the message when it does
// not answer), then the measurement when asked for.
void prepare_fidelity_model(Engine& engine, const ServeOptions& options, bool calibrate,
                            const std::function<void()>& between_seeds) {
  const std::string where = calibration_store(options);
  const auto start = std::chrono::steady_clock::now();
  const std::string origin = engine.fidelity_calibration();
  if (origin == "store" || origin == "remote") {
    const std::string from = origin == "store" ? "in --store " + options.store_dir
                                               : "on --remote " + store::redact_redis_url(options.remote);
    std::fprintf(stderr, "orbit serve: fidelity model read from the calibration %s: %s\n", from.c_str(),
                 engine.fidelity_model_description().c_str());
    return;
  }
  const bool remote_down =
      !options.remote.empty() && options.stored_calibration && !engine.stats().store.remote.available;
  if (remote_down) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "orbit serve: --remote %s did not answer the read of a stored fidelity calibration (%.1f s, bounded "
                 "by the remote tier's timeouts); %s\n",
                 store::redact_redis_url(options.remote).c_str(), seconds,
                 calibrate ? "calibrating here instead"
                           : "planning with the default fidelity model until a later request reads one from it");
  }
  if (!calibrate) {
    // The defaults were fitted on the bundled stories260K: on another model the predictions (usage's predicted_kl,
    // what :kl= budgets plan with) can be off several-fold, and a server should say what it plans with.
    if (!remote_down) {
      std::fprintf(stderr,
                   "orbit serve: planning with the default fidelity model (fitted on the bundled stories260K; on "
                   "another model its predicted KL can be off several-fold); --calibrate-fidelity fits it here "
                   "before listening%s\n",
                   where.empty() || !options.stored_calibration ? "" : (" and keeps it in " + where).c_str());
    }
    return;
  }
  std::fprintf(stderr, "orbit serve: calibrating the fidelity model on %s (seeded, nothing timed)...\n",
               options.model.c_str());
  std::fflush(stderr);
  const CalibrationReport report = engine.calibrate_fidelity(calibration_progress(between_seeds));
  const std::string kept = report.stored                 ? "stored in " + where
                           : !options.stored_calibration ? "not stored: --no-stored-calibration"
                           : where.empty()               ? "not stored: no --store or --remote"
                                                         : "not stored: the store refused it";
  std::fprintf(stderr, "orbit serve: fidelity model calibrated in %.1f s from %lld deficits (%s): %s\n", report.seconds,
               static_cast<long long>(report.fidelity_samples), kept.c_str(), report.fidelity_model.c_str());
}

}  // namespace orbit::serve
