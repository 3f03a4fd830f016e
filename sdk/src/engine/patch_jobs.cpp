// PatchJobs (patch_jobs.h): the background jobs' bodies: forming a patch from a first sight's conditioned
// KV, and measuring a live turn's sensitivity.
#include "engine/patch_jobs.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>

#include "engine/engine_core.h"
#include "engine/interruptible.h"

namespace orbit::detail {

namespace {

// The bytes a queued job's KV holds (BackgroundQueue::Job::bytes).
int64_t held_bytes(const runtime::Content& content) {
  int64_t bytes = 0;
  for (const runtime::LayerKV& layer : content) {
    if (layer.k.defined()) bytes += static_cast<int64_t>(layer.k.nbytes());
    if (layer.v.defined()) bytes += static_cast<int64_t>(layer.v.nbytes());
  }
  return bytes;
}

}  // namespace

PatchJobs::PatchJobs(EngineCore& core, BackgroundMode mode, int64_t max_bytes)
    : core_(core), queue_(std::make_unique<BackgroundQueue>(mode, max_bytes)) {}

PatchJobs::Finished PatchJobs::finish(double max_seconds, const std::function<bool()>& stop) {
  Finished f;
  if (!(max_seconds > 0)) return f;
  using Clock = std::chrono::steady_clock;
  const bool timed = max_seconds < 1e9;  // past that, no deadline (and no time_point overflow)
  const Clock::time_point deadline =
      timed ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_seconds))
            : Clock::time_point::max();
  const InterruptScope closing([&] {
    if (stop && stop()) f.stopped = true;
    return f.stopped || (timed && Clock::now() >= deadline);
  });
  // Only what was queued when close() began: operations still queuing on other threads cannot keep it running.
  const int64_t queued = queue_->queued();
  try {
    while (f.ran < queued && queue_->run(1e30, 1) == 1) ++f.ran;
  } catch (const Interrupted&) {
    // out of time or stopped: the job not taken, or stopped inside its forward, stays queued for stop()
  }
  return f;
}

void PatchJobs::stop() { queue_->stop(); }

void PatchJobs::queue_patch(PatchJob job) {
  for (std::size_t i = 0; i < job.form.store_keys.size(); ++i) {
    PatchRecord rec;
    rec.key = job.form.store_keys[i];
    rec.context = job.form.context;
    rec.variant = job.form.variant;
    rec.exact = job.form.exact && job.form.full_rank && i == 0;
    rec.alias = i > 0;  // the same formation under its orbit key
    rec.rank_k = job.form.rank_k;
    rec.rank_v = job.form.rank_v;
    core_.kv().catalog_add(job.chunk->ref.key, std::move(rec));
  }
  BackgroundQueue::Job j;
  j.keys = job.form.store_keys;
  j.bytes = held_bytes(job.conditioned);
  auto shared = std::make_shared<PatchJob>(std::move(job));
  j.run = [this, shared](bool critical) { run_patch_job(*shared, critical); };
  queue_->queue(std::move(j));
}

void PatchJobs::queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens,
                                       runtime::Content conditioned) {
  auto shared = std::make_shared<TurnSensitivityJob>(TurnSensitivityJob{key, tokens, std::move(conditioned)});
  BackgroundQueue::Job j;  // writes no store key: nothing awaits it
  j.bytes = held_bytes(shared->conditioned);
  j.run = [this, shared](bool critical) { run_turn_sensitivity(*shared, critical); };
  queue_->queue(std::move(j));
}

void PatchJobs::run_turn_sensitivity(const TurnSensitivityJob& job, bool critical) {
  const OpHold hold(core_);
  if (core_.kv().chunk_sensitivity(job.key) >= 0) return;  // measured meanwhile (the same turn in another window)
  const auto t0 = std::chrono::steady_clock::now();
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  fo = interruptible(fo);  // BackgroundQueue puts the job back when it throws
  const runtime::Content alone =
      core_.model().forward(core_.registry().input_for_tokens(job.tokens, 0), nullptr, fo).content;
  const double s = runtime::deficit_share(runtime::deficit(job.conditioned, alone), job.conditioned);
  core_.kv().note_turn_sensitivity(job.key, s);
  Counters d;
  d.forward_tokens = static_cast<double>(job.tokens.size());
  if (!critical) {
    d.background_jobs = 1;
    d.background_forward_tokens = d.forward_tokens;
    d.background_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  core_.usage().count(d);
}

void PatchJobs::after_apply() {
  if (queue_->mode() == BackgroundMode::kInline) (void)queue_->run(1e30);
}

void PatchJobs::run_patch_job(const PatchJob& job, bool critical) {
  const OpHold hold(core_);
  const auto t0 = std::chrono::steady_clock::now();
  bool all_stored = true;
  for (const std::string& k : job.form.store_keys) all_stored = all_stored && core_.kv().contains(k);
  if (all_stored) return;  // formed meanwhile (another window, another job)
  int64_t forwarded = 0;   // an encode's tokens after the leading run it loaded (0: read from the store)
  const runtime::Content canonical = core_.kv().canonical(*job.chunk, nullptr, nullptr, &forwarded);
  c10::InferenceMode guard;
  const runtime::Content delta = runtime::deficit(job.conditioned, canonical);
  runtime::PatchOptions po;
  po.rank_k = job.form.rank_k;
  po.rank_v = job.form.rank_v;
  if (job.form.deep_only) po.first_layer = runtime::choose_first_layer(delta, job.form.deep_energy);
  po.before_layer = layer_interruption("patch");  // the SVD stops between layers; the job then goes back whole
  runtime::Patch patch = runtime::form_patch(core_.model(), delta, po);
  patch.sensitivity = runtime::deficit_share(delta, job.conditioned);
  core_.kv().put_patch(job.chunk->ref.key, job.form.store_keys, patch);
  Counters d;
  d.patches_formed = 1;
  if (!critical) {
    d.background_jobs = 1;
    d.background_forward_tokens = static_cast<double>(forwarded);
    d.background_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  core_.usage().count(d);
}

}  // namespace orbit::detail
