// Embedding cache (DESIGN.md §5): an image or frame chunk's input embeddings ([n, hidden], about 1/8 of
// its KV bytes for a VL model), kept in the chunk store so that a chunk whose canonical was evicted is
// recalled by re-prefilling the canonical from its embeddings, without running the vision encoder.
//
//   chunk key ──► canonical        (the KV; may be evicted)
//   embedding_key(chunk key) ──► embeddings (+ grid)    (small; pin it or give it a high recompute cost)
//
// Thread-safety: as the ChunkStore (every member may be called from any thread).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"

namespace orbit::store {

// The store key of a chunk's embeddings: SHA-256 over a domain tag and the chunk's content key.
std::string embedding_key(const std::string& chunk_key);

struct Recalled {
  runtime::Content canonical;
  bool reprefilled = false;  // true when it was rebuilt from the cached embeddings
};

class EmbeddingCache {
 public:
  // The store must outlive the cache.
  explicit EmbeddingCache(ChunkStore& store) : store_(&store) {}

  // Stores `embeddings` [n, hidden] (and an optional int64 grid [n, dims]) for the chunk `chunk_key`.
  Status put(const std::string& chunk_key, const at::Tensor& embeddings, const at::Tensor& grid = at::Tensor(),
             const PutOptions& options = {});
  // The cached embeddings, or not_found.
  Result<at::Tensor> embeddings(const std::string& chunk_key);

  // The chunk's canonical: from the store when present, else re-prefilled from the cached embeddings with
  // `model` (positions 0..n-1; the M-RoPE grid is applied when the runtime supports it) and stored under
  // `chunk_key`. not_found when neither is stored. Throws orbit::Error when `model` is not the store's model.
  Result<Recalled> recall_canonical(const runtime::Model& model, const std::string& chunk_key,
                                    const PutOptions& canonical_options = {});

 private:
  ChunkStore* store_;
};

}  // namespace orbit::store
