// EngineCore: the state one Engine and all its windows share (engine.h is its public face), in parts with one
// job each:
//
//   model      immutable, forward() is thread-safe; the tokenizer and the chat template beside it
//   registry   ChunkRegistry (chunk_registry.h): chunks by content key, turn lengths, model inputs
//   kv         KvStore (kv_store.h): the chunk store's facade for canonicals, patches, conditioned and
//              reusable KV, the reuse index and the patch catalog
//   jobs       PatchJobs (patch_jobs.h): the background jobs first sights leave (canonical + patch) and
//              turn sensitivities, on the BackgroundQueue (background.h)
//   pool       SharedPool (shared_pool.h): the KV pool windows keep their pages in, with its own lock;
//              every page operation (create, append, fork, destroy, gather) is one of its methods
//   usage      UsageMeter (usage_meter.h): the counters and the two yardsticks (prefix ledger, radix
//              cache) windows are measured against
//   life       EngineLife (engine_life.h): the operations in flight (OpHold), close(), open windows
//   models     the cost and fidelity models (fitted by calibrate()) and the self-checks' correction
//
// Locking: each part locks on its own, inside its methods, and none holds its lock while calling out; mu_
// guards only the cost and fidelity models. No two locks are ever held together, except
// remote_calibration_mu_, held across the remote calibration read (which takes the store's locks and mu_);
// nothing takes it while holding another.
//
// close() finishes the queued background work (what the store exists to keep), refuses new operations,
// waits for those in flight, then stops the background worker and flushes and destroys the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/background.h"
#include "engine/chunk_registry.h"
#include "engine/engine_life.h"
#include "engine/kv_store.h"
#include "engine/patch_jobs.h"
#include "engine/shared_pool.h"
#include "engine/usage_meter.h"
#include "orbit/engine.h"
#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/pool_room.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/tokenizer.h"

namespace orbit::runtime {
class ChatTemplate;
}  // namespace orbit::runtime

namespace orbit::detail {

struct FidelityCalibration;  // calibrate_fidelity.h

// The positions a window on a model with `config` may hold (exclusive). max_position_embeddings, except under
// dynamic-NTK RoPE (Hugging Face's "dynamic"), whose max_position_embeddings (or
// rope_scaling.original_max_position_embeddings) is the anchor the scaling starts at: the runtime grows theta
// with the window's length past it and sets no limit of its own (no position table caps it), as transformers'
// _compute_dynamic_ntk_parameters does, so the limit is where the config says the scaling reaches:
// floor(anchor * rope_scaling.factor) (transformers documents rope_scaling.factor x as handling x times the
// original length), at least max_position_embeddings.
int64_t window_position_limit(const runtime::ModelConfig& config);
// What window_position_limit read, for refusals: "max_position_embeddings", or
// "max_position_embeddings * rope_scaling.factor" under dynamic-NTK RoPE.
const char* window_position_limit_source(const runtime::ModelConfig& config);

class EngineCore {
 public:
  explicit EngineCore(const EngineOptions& options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  const EngineOptions& options() const { return options_; }
  const runtime::Model& model() const;  // throws "engine is closed"
  const runtime::ModelConfig& config() const { return model().config(); }
  const std::string& fingerprint() const { return model().fingerprint(); }
  ModelInfo model_info() const;
  // The positions a window may hold (exclusive limit; window_position_limit of the model's config): every
  // SDK check of a window's, chunk's or text's extent against the model reads this, not the config field.
  int64_t max_positions() const { return window_position_limit(config()); }
  // The tokenizer (EngineOptions::tokenizer or the one beside the model); throws orbit::Error saying the
  // model has none. Immutable after open: safe from any thread.
  const runtime::Tokenizer& tokenizer() const;
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  // The model's chat template: the chat_template of tokenizer_config.json in the model's Hugging Face
  // directory (or beside the tokenizer.json EngineOptions::tokenizer names); null when there is none.
  // Read on first use, so a template the interpreter refuses never stops the engine from opening: its
  // error is thrown by every call that needs it. Immutable once read: safe from any thread.
  const runtime::ChatTemplate* chat_template() const;

  // ---- the parts (see above) ----
  ChunkRegistry& registry() { return *registry_; }
  const ChunkRegistry& registry() const { return *registry_; }
  KvStore& kv() { return *kv_; }
  const KvStore& kv() const { return *kv_; }
  PatchJobs& jobs() { return *jobs_; }
  SharedPool& pool() { return *pool_; }
  const SharedPool& pool() const { return *pool_; }
  UsageMeter& usage() { return *usage_; }
  const UsageMeter& usage() const { return *usage_; }
  const EngineLife& life() const { return life_; }
  EngineLife& life() { return life_; }
  ConstraintCache& constraint_cache() { return constraint_cache_; }

  // ---- cost and fidelity models (calibrate.cpp) ----
  planner::CostModel cost_model() const;
  // The fitted (or default) model scaled by the self-checks' correction: what every plan predicts with.
  planner::FidelityModel fidelity_model() const;
  // The self-checks (Window::idle): the correction they feed and the probe forwards they cost.
  struct FidelityChecks {
    planner::FidelityCorrection correction;
    double forward_tokens = 0;
  };
  FidelityChecks fidelity_checks() const;
  // One check: the KL a window's probe measured against an exact recompute, the window's predicted KL (its
  // entries' sum, predicted with the correction of their plans) and the check's forwards.
  // Returns whether the correction counted it (FidelityCorrection::observe).
  bool note_fidelity_check(double measured_kl, double predicted_kl, double forward_tokens);
  CalibrationReport calibrate();
  // The fidelity model only (Engine::calibrate_fidelity). Cancels the remote read below if still pending.
  CalibrationReport calibrate_fidelity(const CalibrationProgress& progress = {});
  // EngineOptions::stored_calibration: fits the fidelity model from the calibration the local tiers hold for
  // this model, if any (stored_calibration.h); called once by Engine::open, inside an operation, before any
  // other thread sees the engine. Returns whether it found one. When it did not and the engine has a remote
  // tier, the remote's is left to read_remote_calibration (never asked at open: stored_calibration.h).
  bool load_stored_calibration();
  // The remote tier's stored calibration: fidelity_model() calls it, so the first plan sees the result.
  // Nothing to do unless load_stored_calibration left it pending. The first read: the first caller reads,
  // callers meanwhile wait for it. Its answer is final when the remote answered (a hit, a miss, a refused
  // entry); when it did not (down), a later call reads again: one caller, while the others go on with the
  // model they have. The remote tier's own backoff (RemoteOptions::retry_after_ms: reads answered as a miss
  // at once while it is down) keeps those retries from costing a plan a connection attempt each. The
  // caller holds an operation (the store is open).
  void read_remote_calibration() const;
  // read_remote_calibration under an operation of its own, skipped once the engine is closed (Engine's
  // fidelity_calibration() and fidelity_model_description() answer after close()).
  void read_remote_calibration_if_open() const;
  // Engine::fidelity_calibration(): "default", "store", "remote" or "calibrated".
  std::string fidelity_calibration() const;

  // ---- ids ----
  uint64_t next_instance_id() { return next_instance_.fetch_add(1) + 1; }
  // Window ids are unique in the process, not per engine: apply() and sync(messages, planned) refuse a plan
  // whose window id differs, which then also refuses a plan made by another engine's window (with per-engine
  // ids, one engine's window 1 applied the other's window-1 plan: its evictions evicted other chunks).
  static uint64_t next_window_id() {
    static std::atomic<uint64_t> next_window{0};
    return next_window.fetch_add(1) + 1;
  }
  uint64_t next_content_version() { return next_version_.fetch_add(1) + 1; }

  // orbit::pages_freed_by_closing (orbit/pool_room.h), here for the windows' state (pool_room.cpp).
  static int64_t pages_freed_by_closing(const PoolRoomQuery& query);

  // Closes the engine (EngineLife::close): the queued background work finished (as `options` bound it; none
  // without a persistent store), then, once the operations in flight have finished, the worker stopped, what is
  // still queued dropped, and the store flushed and destroyed.
  CloseReport close(const CloseOptions& options);

 private:
  // Fits the fidelity model from a stored calibration (load_stored_calibration, read_remote_calibration);
  // `origin` is what fidelity_calibration() then says: "store" or "remote".
  bool apply_stored_calibration(const FidelityCalibration& stored, const char* origin) const;

  EngineOptions options_;
  std::unique_ptr<runtime::Model> model_;
  std::unique_ptr<runtime::Tokenizer> tokenizer_;  // null when the model has none
  mutable std::once_flag chat_template_once_;
  mutable std::unique_ptr<runtime::ChatTemplate> chat_template_;  // chat_template(): null when none
  mutable std::string chat_template_error_;                       // ... or why it could not be read
  EngineLife life_;
  std::unique_ptr<ChunkRegistry> registry_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<SharedPool> pool_;
  std::unique_ptr<UsageMeter> usage_;
  std::unique_ptr<PatchJobs> jobs_;
  ConstraintCache constraint_cache_{options_.constraint_cache};

  mutable std::mutex mu_;  // the models below
  planner::CostModel cost_model_;
  // mutable: read_remote_calibration fills them in from const callers (fidelity_model()), once.
  mutable planner::FidelityModel fidelity_model_;
  mutable std::string fidelity_origin_ = "default";  // fidelity_calibration()
  // The remote calibration read (read_remote_calibration): kPending set at open, before any other thread
  // sees the engine; kRetry after a read the remote did not answer; kDone after one it answered, or once
  // calibrate_fidelity() cancelled it. Changed only under remote_calibration_mu_ (after open), read without.
  enum class RemoteCalibration { kNone, kPending, kRetry, kDone };
  mutable std::atomic<RemoteCalibration> remote_calibration_{RemoteCalibration::kNone};
  mutable std::mutex remote_calibration_mu_;  // one read at a time (see Locking above)
  FidelityChecks fidelity_checks_;

  std::atomic<uint64_t> next_instance_{0};
  std::atomic<uint64_t> next_version_{0};
};

}  // namespace orbit::detail
