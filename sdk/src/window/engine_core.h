// EngineCore: the state one Engine and all its windows share (engine.h is its public face).
//
//   model      immutable, forward() is thread-safe
//   registry   chunks by content key: tokens or embeddings (+ relative position grid)
//   store      canonicals and patches (store/chunk_store.h), thread-safe on its own
//   catalog    PatchCatalog (patch_catalog.h): per chunk, the patches formed for it, the context each was
//              formed under (for stale lookups with a divergence score), residuals and sensitivities; in
//              memory, rebuilt as patches are formed; its own lock
//   pool       the KV pool windows keep their pages in, with its own lock (SharedPool, shared_pool.h):
//              every page operation (create, append, fork, destroy, gather) is one of its methods
//   usage      UsageMeter (usage_meter.h): the counters and the two yardsticks (prefix ledger, radix
//              cache) windows are measured against; its own lock
//   background the queue of canonical + patch formations left by first sights (background.h); close()
//              stops it (cancels what is queued, joins the worker) before it closes the store
//
// Locking: mu_ guards the registry (chunks, turn lengths) and the cost and fidelity models. The pool
// (SharedPool), the catalog (PatchCatalog) and the usage meter (UsageMeter) each have a lock of their own,
// taken only inside their methods, which never call out: none is ever held together with mu_ or with
// another. The store, the reuse index and the background queue lock on their own too.
//
// Lifetime: every public Engine and Window operation holds an OpHold for its whole duration. close()
// marks the engine closed (new holds throw "engine is closed"), waits until the holds in flight are
// released, then flushes and destroys the store. The store is therefore never destroyed under an
// operation, and an operation that starts after close() fails cleanly instead of touching it.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "orbit/engine.h"
#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/planner/prefix_cache.h"
#include "orbit/planner/prefix_ledger.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/store/chunk_store.h"
#include "window/background.h"
#include "window/kv_state.h"
#include "window/patch_catalog.h"
#include "window/shared_pool.h"
#include "window/usage_meter.h"
#include "window/window_meta.h"

namespace orbit::runtime {
class ChatTemplate;
}  // namespace orbit::runtime

namespace orbit::detail {

// An embedding chunk's tensors (ChunkRecord::tensors, window_meta.h).
struct ChunkTensors {
  at::Tensor embeddings;  // float32 [n, hidden]
  at::Tensor grid;        // int64 [rows, n] relative to its per-row minimum, or undefined
};

// What a chunk's first sight leaves for the background: its conditioned KV (the exact in-context
// prefill), the context it saw, and the patch to form from it and where to store it.
struct PatchJob {
  const ChunkRecord* chunk = nullptr;   // owned by the engine (records are never removed)
  runtime::Content conditioned;         // KV(B|C), content channel
  std::vector<std::string> context;     // ordered content keys of C
  std::vector<std::string> store_keys;  // exact key first, then the orbit key when new
  std::string variant;
  int64_t rank_k = 0;
  int64_t rank_v = 0;
  bool deep_only = false;
  double deep_energy = 0.9;
  bool full_rank = false;
  bool exact = false;  // formed over an exact context
};

class EngineCore;

// An operation's hold on an engine (see "Lifetime" above). Holds nest on one thread. Throws
// orbit::Error "engine is closed" when close() has begun. Never blocks: close() is the only waiter.
class OpHold {
 public:
  explicit OpHold(const EngineCore& core);
  ~OpHold();
  OpHold(const OpHold&) = delete;
  OpHold& operator=(const OpHold&) = delete;

 private:
  const EngineCore& core_;
};

class EngineCore {
 public:
  explicit EngineCore(const EngineOptions& options);
  ~EngineCore();

  const EngineOptions& options() const { return options_; }
  const runtime::Model& model() const;  // throws "engine is closed"
  const runtime::ModelConfig& config() const { return model().config(); }
  const std::string& fingerprint() const { return model().fingerprint(); }
  ModelInfo model_info() const;
  // The tokenizer (EngineOptions::tokenizer or the one beside the model); throws orbit::Error saying the
  // model has none. Immutable after open: safe from any thread.
  const runtime::Tokenizer& tokenizer() const;
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  // The model's chat template: the chat_template of tokenizer_config.json in the model's Hugging Face
  // directory (or beside the tokenizer.json EngineOptions::tokenizer names); null when there is none.
  // Read on first use, so a template the interpreter refuses never stops the engine from opening: its
  // error is thrown by every call that needs it. Immutable once read: safe from any thread.
  const runtime::ChatTemplate* chat_template() const;

  // ---- chunks ----
  ChunkRef add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options);
  ChunkRef add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options);
  // Engine::find_media (engine_store.cpp).
  std::optional<ChunkRef> find_media(const MediaLookup& lookup, const ChunkOptions& options);
  // The record for `ref` (checks it belongs to this engine). Records are never removed, so the
  // reference stays valid for the engine's life.
  const ChunkRecord& record(const ChunkRef& ref) const;
  const ChunkRecord& record(const std::string& key) const;
  bool knows(const std::string& key) const;
  std::vector<ChunkRef> chunks() const;
  // Key of a live turn's tokens (the same hash as a token chunk).
  std::string turn_key(const std::vector<int64_t>& tokens) const;

  // ---- canonicals and patches ----
  // Where the canonical is stored (nullopt: it must be encoded).
  std::optional<StoreTier> canonical_residence(const std::string& key) const;
  // The canonical (from the store, else encoded and stored). *encoded = true when it ran the forward.
  runtime::Content canonical(const ChunkRecord& chunk, bool* encoded = nullptr, int64_t* bytes_read = nullptr);
  bool contains(const std::string& store_key) const;
  // Stored, or queued/being formed in the background (get_patch then waits for that one job).
  bool available(const std::string& store_key) const;
  std::optional<runtime::Patch> get_patch(const std::string& key);
  std::optional<runtime::Content> get_conditioned(const std::string& key);
  void put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record);
  // Exact reuse (kv_state.h): the KV a forward computed, stored under its reuse key (no catalog entry; read
  // back with get_conditioned). A store that refuses it (budgets full of pinned entries) only loses the reuse.
  // `tokens` (the instance's token ids; empty for embeddings) go to reuse_index() under `chain` and
  // `content_chain`, the states and the content before it, so a later forward behind either can load a
  // matching leading run.
  void put_reusable(const std::string& reuse_key, const runtime::Content& content, const KvState& chain,
                    const KvState& content_chain, const std::vector<int64_t>& tokens);
  const ReuseIndex& reuse_index() const { return reuse_index_; }
  // What the catalog knows of one of the chunk's patches (nullopt: none under that key): whether it was
  // formed full-rank over an exact context, and its residual (-1 until formed, or unknown).
  using PatchFacts = PatchCatalog::Facts;
  std::optional<PatchFacts> patch_facts(const std::string& chunk_key, const std::string& patch_key) const;
  // The stored patch of `chunk_key` (factors of `variant`, not a conditioned KV) formed under the context
  // closest to `context`: 1 − Σ min / Σ max over the two multisets of keys weighted by tokens (0 = the same
  // set, 1 = disjoint), among its newest `max_records` such patches; nullopt when none is available.
  using StaleMatch = PatchCatalog::Candidate;
  std::optional<StaleMatch> closest_patch(const std::string& chunk_key, const std::string& variant,
                                          const ContextWeights& context, std::size_t max_records) const;
  // The mean runtime::Patch::sensitivity over the chunk's patches this engine has formed or read from
  // the store; -1 when it knows none (the planner then predicts from the fidelity model's reference).
  double chunk_sensitivity(const std::string& chunk_key) const;
  // Remembers the sensitivity of a patch read from the store (formed by another process, or before this
  // engine opened the store); no-op when the patch did not record one.
  void note_read_patch(const std::string& chunk_key, const std::string& patch_key, const runtime::Patch& patch);
  // Queues `job` (BackgroundMode decides when it runs); its catalog records are added now.
  void queue_patch(PatchJob job);
  // Queues the measurement of a live turn's sensitivity (PlanStep::measure_sensitivity): its tokens
  // forwarded alone, ‖KV in context − KV alone‖² / ‖KV in context‖² (runtime::deficit_share, as a patch's),
  // recorded under its content key for chunk_sensitivity(). A background job: its forward is counted as
  // background work; one that finds the turn measured meanwhile does nothing.
  void queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens, runtime::Content conditioned);
  BackgroundQueue& background() { return *background_; }
  // Called at the end of every apply(): runs the queued jobs under BackgroundMode::kInline.
  void after_apply();
  // Token length of a content key (chunk or a turn seen by this engine); 1 when unknown.
  int64_t key_length(const std::string& key) const;
  void note_turn(const std::string& key, int64_t length);

  // ---- model inputs ----
  // The forward input of a chunk (or turn tokens) placed with its first position at `start`.
  runtime::ForwardInput input_for(const ChunkRecord& chunk, int64_t start) const;
  runtime::ForwardInput input_for_tokens(const std::vector<int64_t>& tokens, int64_t start) const;
  // Positions of a placement: int64 [n] (or [3, n] on M-RoPE models).
  at::Tensor positions_for(const ChunkRecord* chunk, int64_t length, int64_t start) const;

  // ---- cost model ----
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
  void note_fidelity_check(double measured_kl, double predicted_kl, double forward_tokens);
  CalibrationReport calibrate();

  // ---- pool ----
  // The KV pool with its lock (shared_pool.h): every page operation goes through it.
  SharedPool& pool() { return *pool_; }
  const SharedPool& pool() const { return *pool_; }

  // ---- ids and counters ----
  uint64_t next_instance_id() { return next_instance_.fetch_add(1) + 1; }
  uint64_t next_window_id() { return next_window_.fetch_add(1) + 1; }
  uint64_t next_content_version() { return next_version_.fetch_add(1) + 1; }
  void count(const Counters& delta);
  Counters counters() const;
  // The tokens a prefix cache forwards to hold `window`, read as the engine's windows are read: the
  // engine-wide PrefixLedger (planner/prefix_ledger.h), so forks share what their parent computed.
  int64_t prefix_cache_read(const std::vector<planner::PrefixSpan>& window);
  // One model call through the engine-wide radix yardstick (planner/prefix_cache.h: SGLang's radix cache over
  // the KV memory the pool has): `tokens` is the window, the query and what was generated, the first
  // `prompt_tokens` of them the prompt. Returns the prompt tokens it forwards.
  int64_t radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens);
  void window_opened() { ++windows_; }
  void window_closed() { --windows_; }
  int64_t windows() const { return windows_.load(); }
  store::ChunkStore& store();

  // Closes the store once the operations in flight have finished (blocks until then; returns at once
  // when already closed; a second concurrent close waits for the first). Throws orbit::Error when
  // called from inside an operation of this engine on the same thread (it would wait for itself).
  void close();
  bool closed() const { return closed_.load(); }
  void check_open() const;
  // True when the calling thread holds an OpHold on this engine.
  bool held_by_this_thread() const;

 private:
  friend class OpHold;
  ChunkRef register_chunk(std::unique_ptr<ChunkRecord> record);  // idempotent by key
  // ---- the store (engine_store.cpp) ----
  // The store's options from EngineOptions (tiers, budgets, eviction, cold tier, remote); throws
  // orbit::Error naming the option at fault. Needs the model loaded.
  store::ChunkStoreOptions store_options() const;
  // Where canonical-shaped KV (canonicals, conditioned KV) is put: the device tier when there is one.
  store::PutOptions kv_put_options(double recompute_tokens, bool pin) const;
  // The content key of a media chunk: its digest and relative grid [rows, n], or 0..n-1 without a grid.
  std::string media_key(const std::string& digest, const at::Tensor& grid, int64_t n) const;
  // Stores a media chunk's embeddings (+ grid) in the embedding cache unless they are there already.
  void cache_embeddings(const ChunkRecord& chunk);
  void run_patch_job(const PatchJob& job, bool critical);
  struct TurnSensitivityJob {
    std::string key;
    std::vector<int64_t> tokens;
    runtime::Content conditioned;
  };
  void run_turn_sensitivity(const TurnSensitivityJob& job, bool critical);
  // Throws unless a chunk spanning `extent` positions can be encoded by this model.
  void check_extent(int64_t extent, const char* what, const char* unit) const;
  // Fills an embeddings chunk's record (kind, length, extent checked against the model, label, tensors).
  void fill_embeddings(ChunkRecord& rec, const at::Tensor& emb, const at::Tensor& grid, const ChunkOptions& options,
                       const char* what) const;
  // Adds `record` to the catalog with its context's token lengths (key_length).
  void catalog_add(const std::string& chunk_key, PatchRecord record);

  EngineOptions options_;
  std::unique_ptr<runtime::Model> model_;
  std::unique_ptr<runtime::Tokenizer> tokenizer_;  // null when the model has none
  mutable std::once_flag chat_template_once_;
  mutable std::unique_ptr<runtime::ChatTemplate> chat_template_;  // chat_template(): null when none
  mutable std::string chat_template_error_;                       // ... or why it could not be read
  std::unique_ptr<store::ChunkStore> store_;
  std::unique_ptr<SharedPool> pool_;  // its own lock

  mutable std::mutex mu_;
  ReuseIndex reuse_index_;  // its own lock
  std::unordered_map<std::string, std::unique_ptr<ChunkRecord>> chunks_;
  std::vector<std::string> chunk_order_;
  PatchCatalog catalog_;  // its own lock
  std::unordered_map<std::string, int64_t> turn_lengths_;
  std::unique_ptr<UsageMeter> usage_;  // counters and yardsticks, its own lock
  planner::CostModel cost_model_;
  planner::FidelityModel fidelity_model_;
  FidelityChecks fidelity_checks_;  // under mu_
  std::unique_ptr<BackgroundQueue> background_;

  std::atomic<uint64_t> next_instance_{0};
  std::atomic<uint64_t> next_window_{0};
  std::atomic<uint64_t> next_version_{0};
  std::atomic<int64_t> windows_{0};
  std::atomic<bool> closed_{false};

  // Operations in flight (OpHold) and the close() that waits for them.
  mutable std::mutex life_mu_;
  mutable std::condition_variable life_cv_;
  mutable int64_t holds_ = 0;
  bool store_closed_ = false;  // close() has finished
};

}  // namespace orbit::detail
