// PatchJobs: the engine's background jobs (EngineCore, engine_core.h): what a chunk's first sight leaves to
// form (its canonical and its patch, stored under the step's keys) and the measurement of a live turn's
// sensitivity, queued on the BackgroundQueue (background.h), whose mode decides when they run.
//
// A job is an operation like any other: it holds the engine (OpHold) while it runs, so close() waits for
// it, and one that starts after close() fails with "engine is closed" (counted by the queue, nothing
// stored).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/background.h"
#include "orbit/engine.h"
#include "orbit/runtime/reuse.h"
#include "plan/patch_catalog.h"
#include "plan/window_meta.h"

namespace orbit::detail {

class EngineCore;

// What a chunk's first sight leaves for the background: its conditioned KV (the exact in-context
// prefill), the context it saw, and the patch to form from it and where to store it.
struct PatchJob {
  ChunkPtr chunk;                // held while the job is queued
  runtime::Content conditioned;  // KV(B|C), content channel
  PatchForm form;
};

class PatchJobs {
 public:
  // max_bytes: the KV the queued jobs may hold (EngineOptions::max_background_bytes; 0 = no bound).
  PatchJobs(EngineCore& core, BackgroundMode mode, int64_t max_bytes);
  PatchJobs(const PatchJobs&) = delete;
  PatchJobs& operator=(const PatchJobs&) = delete;

  // Queues `job`; its catalog records are added now (so plans see the patch as available).
  void queue_patch(PatchJob job);
  // Queues the measurement of a live turn's sensitivity (PlanStep::measure_sensitivity): its tokens
  // forwarded alone, ‖KV in context − KV alone‖² / ‖KV in context‖² (runtime::deficit_share, as a patch's),
  // recorded under its content key for KvStore::chunk_sensitivity(). Its forward is counted as background
  // work; one that finds the turn measured meanwhile does nothing.
  void queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens, runtime::Content conditioned);
  BackgroundQueue& queue() { return *queue_; }
  // Called at the end of every apply(): runs the queued jobs under BackgroundMode::kInline.
  void after_apply();
  struct Finished {
    int64_t ran = 0;       // jobs run to their end
    bool stopped = false;  // `stop` answered true
  };
  // Runs what is queued now, on this thread (close() does, before it refuses new operations), until none is
  // left, `max_seconds` passed or `stop` (when set) answers true: both are asked before each job and each layer
  // of its forwards, in place of the calling thread's InterruptScope. A job stopped part way goes back to the
  // queue (stop() then drops it).
  Finished finish(double max_seconds, const std::function<bool()>& stop);
  // Cancels what is queued and joins the worker (close(), once no operation is in flight; the destructor).
  void stop();

 private:
  struct TurnSensitivityJob {
    std::string key;
    std::vector<int64_t> tokens;
    runtime::Content conditioned;
  };
  void run_patch_job(const PatchJob& job, bool critical);
  void run_turn_sensitivity(const TurnSensitivityJob& job, bool critical);

  EngineCore& core_;
  std::unique_ptr<BackgroundQueue> queue_;
};

}  // namespace orbit::detail
