// EngineCore: the state one Engine and all its windows share (engine.h is its public face).
//
//   model      immutable, forward() is thread-safe
//   registry   chunks by content key: tokens or embeddings (+ relative position grid)
//   store      canonicals and patches (store/chunk_store.h), thread-safe on its own
//   catalog    per chunk, the patches formed for it and the context each was formed under (for stale
//              lookups with a divergence score); in memory, rebuilt as patches are formed
//   pool       the KV pool windows keep their pages in; KVPool is not thread-safe, so every page
//              operation (append, fork, destroy, gather) runs under pool_mutex()
//
// Locking: mu_ guards registry, catalog and counters; pool_mu_ guards the pool. Never hold both.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/engine.h"
#include "orbit/planner/cost_model.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"
#include "orbit/runtime/tokenizer.h"
#include "store/chunk_store.h"

namespace orbit::detail {

struct ChunkRecord {
  ChunkRef ref;
  std::vector<int64_t> tokens;  // kTokens
  at::Tensor embeddings;        // kEmbeddings: float32 [n, hidden]
  at::Tensor grid;              // kEmbeddings: int64 [rows, n] relative to its per-row minimum, or undefined
  bool pinned = false;
};

// A patch (or stored conditioned KV) as the catalog remembers it.
struct PatchRecord {
  std::string key;
  std::vector<std::string> context;  // ordered content keys of the antecedents it was formed under
  std::string variant;
  bool conditioned = false;          // whole conditioned KV (prefix-cache policy), not factors
  bool exact = false;                // full rank and formed over an exact context
};

struct Counters {
  int64_t canonicals_encoded = 0;
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;
  double forward_tokens = 0;
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

  // ---- chunks ----
  ChunkRef add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options);
  ChunkRef add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options);
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
  std::optional<runtime::Patch> get_patch(const std::string& key);
  std::optional<runtime::Content> get_conditioned(const std::string& key);
  void put_patch(const runtime::Patch& patch, const std::string& chunk_key, PatchRecord record);
  void put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record);
  std::vector<PatchRecord> patches_of(const std::string& chunk_key) const;
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
  CalibrationReport calibrate();

  // ---- pool ----
  std::mutex& pool_mutex() { return pool_mu_; }
  runtime::KVPool& pool() { return *pool_; }

  // ---- ids and counters ----
  uint64_t next_instance_id() { return next_instance_.fetch_add(1) + 1; }
  uint64_t next_window_id() { return next_window_.fetch_add(1) + 1; }
  uint64_t next_content_version() { return next_version_.fetch_add(1) + 1; }
  void count(const Counters& delta);
  Counters counters() const;
  void window_opened() { ++windows_; }
  void window_closed() { --windows_; }
  int64_t windows() const { return windows_.load(); }
  store::ChunkStore& store();

  void close();
  bool closed() const { return closed_.load(); }
  void check_open() const;

 private:
  ChunkRef register_chunk(std::unique_ptr<ChunkRecord> record);  // idempotent by key
  void catalog_add(const std::string& chunk_key, PatchRecord record);

  EngineOptions options_;
  std::unique_ptr<runtime::Model> model_;
  std::unique_ptr<runtime::Tokenizer> tokenizer_;  // null when the model has none
  std::unique_ptr<store::ChunkStore> store_;
  std::unique_ptr<runtime::KVPool> pool_;
  std::mutex pool_mu_;

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<ChunkRecord>> chunks_;
  std::vector<std::string> chunk_order_;
  std::unordered_map<std::string, std::vector<PatchRecord>> catalog_;
  std::unordered_map<std::string, int64_t> turn_lengths_;
  Counters counters_;
  planner::CostModel cost_model_;

  std::atomic<uint64_t> next_instance_{0};
  std::atomic<uint64_t> next_window_{0};
  std::atomic<uint64_t> next_version_{0};
  std::atomic<int64_t> windows_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace orbit::detail
