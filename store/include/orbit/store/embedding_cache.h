// Embedding cache (docs/ARCHITECTURE.md §6): a media chunk's input embeddings ([n, hidden], the vision tower's output
// for an image or a frame; about 1/8 of its KV bytes for a VL model), kept in the chunk store under a key
// derived from the chunk's content key. An engine that sees the same media again (this process, another
// one sharing the store directory, or another machine through the remote tier) registers the chunk from
// them without running the vision encoder (Engine::find_media); a chunk whose canonical was evicted is
// re-prefilled from the embeddings its record holds.
//
//   chunk key ──► canonical                       (the KV; may be evicted)
//   embedding_key(chunk key) ──► embeddings (+ grid)   (small; the engine gives it its chunk's recompute
//                                                       cost, so cost-aware eviction keeps it longer)
//
// Thread-safety: as the ChunkStore (every member may be called from any thread).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "orbit/store/chunk_store.h"

namespace orbit::store {

// The store key of a chunk's embeddings: SHA-256 over a domain tag and the chunk's content key.
std::string embedding_key(const std::string& chunk_key);

struct CachedEmbeddings {
  at::Tensor embeddings;  // [n, hidden], as stored
  at::Tensor grid;        // int64 [n, dims], or undefined when none was stored
};

class EmbeddingCache {
 public:
  // The store must outlive the cache.
  explicit EmbeddingCache(ChunkStore& store) : store_(&store) {}

  // Stores `embeddings` [n, hidden] (and an optional int64 grid [n, dims]) for the chunk `chunk_key`.
  Status put(const std::string& chunk_key, const at::Tensor& embeddings, const at::Tensor& grid = at::Tensor(),
             const PutOptions& options = {});
  // The cached embeddings (and grid), or not_found. Throws orbit::Error when the entry under the
  // embedding key is not an embedding value.
  Result<CachedEmbeddings> get(const std::string& chunk_key);
  bool contains(const std::string& chunk_key) const { return store_->contains(embedding_key(chunk_key)); }

 private:
  ChunkStore* store_;
};

}  // namespace orbit::store
