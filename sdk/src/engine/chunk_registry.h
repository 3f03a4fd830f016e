// ChunkRegistry: the chunks an engine knows (EngineCore, engine_core.h), by content key: token chunks,
// embedding chunks (+ relative position grid, and their embedding cache behind find_media), the lengths
// of the live turns it has seen, and each placement's model input.
//
// Records are shared (ChunkPtr): windows' instances and queued background jobs hold the records they use, so
// a record lives while anything uses it (a window's evicted instance only remembers its record: window_state.h). The
// registry itself holds every record (max_idle_chunks = 0, the default: a ChunkRef stays valid for the engine's life)
// or only the max_idle_chunks most recently registered or looked up, plus the pinned ones; past that it lets go of the
// least recently used, which is forgotten once nothing else holds it (a long-running server's distinct
// messages do not grow it). A forgotten chunk's key reads as unregistered until it is added again (its
// stored KV is found again by the same key). Its lock guards only the tables: it is never held while
// calling out (the store, the model).
#pragma once

#include <ATen/core/Tensor.h>
#include <atomic>

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "orbit/engine.h"
#include "orbit/runtime/model.h"
#include "plan/window_meta.h"

namespace orbit::detail {

class EngineCore;

// An embedding chunk's tensors (ChunkRecord::tensors, window_meta.h).
struct ChunkTensors {
  at::Tensor embeddings;  // float32 [n, hidden]
  at::Tensor grid;        // int64 [rows, n] relative to its per-row minimum, or undefined
};

class ChunkRegistry {
 public:
  // max_idle_chunks: records kept for lookup by key beyond those in use (0 = all; EngineOptions).
  ChunkRegistry(EngineCore& core, int64_t max_idle_chunks);
  ChunkRegistry(const ChunkRegistry&) = delete;
  ChunkRegistry& operator=(const ChunkRegistry&) = delete;

  ChunkRef add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options);
  ChunkRef add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options);
  // Engine::find_media: a chunk registered here, else one rebuilt from the store's embedding cache.
  std::optional<ChunkRef> find_media(const MediaLookup& lookup, const ChunkOptions& options);
  // The record for `ref` (checks it belongs to this engine; throws naming the key when it is not, or no
  // longer, registered). Counts as a use (the least recently used are let go first).
  ChunkPtr record(const ChunkRef& ref) const;
  ChunkPtr record(const std::string& key) const;
  bool knows(const std::string& key) const;
  // A window evicted `rec`: a use, as a lookup is, so the chunks evicted last are kept longest (a window's
  // evicted chunks are not held by it: EvictedInstance, window_state.h).
  void note_evicted(const ChunkPtr& rec);
  // Whether `chunk`'s canonical is to be pinned in the store: its record says so, or the same content was
  // registered again with ChunkOptions::pin (the record, shared and read only, keeps the first options).
  bool pinned(const ChunkRecord& chunk) const;
  int64_t live_chunks() const;            // records alive (held here or in use)
  TableUsage turn_lengths_usage() const;  // the turn lengths kept (entries, against kMaxTurnLengths)
  // The token length of a registered chunk; nullopt when it is not registered.
  std::optional<int64_t> chunk_length(const std::string& key) const;
  std::vector<ChunkRef> chunks() const;  // the live ones, in registration order
  // Key of a live turn's tokens (the same hash as a token chunk).
  std::string turn_key(const std::vector<int64_t>& tokens) const;
  // Token length of a content key (chunk or a turn seen by this engine); 1 when unknown.
  int64_t key_length(const std::string& key) const;
  void note_turn(const std::string& key, int64_t length);

  // The forward input of a chunk (or turn tokens) placed with its first position at `start`.
  runtime::ForwardInput input_for(const ChunkRecord& chunk, int64_t start) const;
  runtime::ForwardInput input_for_tokens(const std::vector<int64_t>& tokens, int64_t start) const;
  // Positions of a placement: int64 [n] (or [3, n] on M-RoPE models).
  at::Tensor positions_for(const ChunkRecord* chunk, int64_t length, int64_t start) const;

 private:
  ChunkRef register_chunk(std::shared_ptr<ChunkRecord> record);  // idempotent by key
  ChunkRef register_new_locked(std::shared_ptr<ChunkRecord> record, std::vector<ChunkPtr>& released);
  // Under mu_: `rec` the most recently used; lets go of the least recently used past max_idle_chunks_
  // (moved into `released`, destroyed by the caller after the lock).
  void touch(const ChunkPtr& rec, std::vector<ChunkPtr>& released) const;
  void sweep() const;  // under mu_: drops the keys of records forgotten since
  ChunkPtr find_locked(const std::string& key) const;
  ChunkPtr find_known(const std::string& key) const;  // record() without the throw: null when unknown
  void note_length_locked(const std::string& key, int64_t length) const;  // under mu_
  // Throws unless a chunk spanning `extent` positions can be encoded by this model.
  void check_extent(int64_t extent, const char* what, const char* unit) const;
  // Fills an embeddings chunk's record (kind, length, extent checked against the model, label, tensors).
  void fill_embeddings(ChunkRecord& rec, const at::Tensor& emb, const at::Tensor& grid, const ChunkOptions& options,
                       const char* what) const;
  // The content key of a media chunk: its digest and relative grid [rows, n], or 0..n-1 without a grid.
  std::string media_key(const std::string& digest, const at::Tensor& grid, int64_t n) const;
  // Stores a media chunk's embeddings (+ grid) in the embedding cache unless they are there already.
  void cache_embeddings(const ChunkRecord& chunk);
  void count_media(bool found);

  EngineCore& core_;
  int64_t max_idle_chunks_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::weak_ptr<const ChunkRecord>> chunks_;
  mutable std::vector<std::string> order_;  // registration order (keys of forgotten records until a sweep)
  mutable std::size_t sweep_at_ = 1024;     // chunks_'s size that sweeps it next
  // The records held here: all of them (max_idle_chunks_ = 0), or the most recently used first.
  mutable std::list<ChunkPtr> recent_;
  mutable std::unordered_map<std::string, std::list<ChunkPtr>::iterator> recent_at_;
  std::vector<ChunkPtr> pinned_;                 // pinned chunks are never let go
  std::unordered_set<std::string> pinned_keys_;  // their keys
  // Records alive, wherever held: each record's deleter counts down (shared: a record may outlive this).
  std::shared_ptr<std::atomic<int64_t>> live_ = std::make_shared<std::atomic<int64_t>>(0);
  // Live turns' lengths by key, and forgotten chunks' (the stale-patch catalog weighs contexts by them): the
  // kMaxTurnLengths noted last are kept, an older one reads as 1 token, so a long-running server's distinct turns do
  // not grow it.
  static constexpr std::size_t kMaxTurnLengths = std::size_t{1} << 16;
  mutable std::unordered_map<std::string, int64_t> turn_lengths_;
  mutable std::deque<std::string> turn_order_;  // their keys, oldest first
};

}  // namespace orbit::detail
