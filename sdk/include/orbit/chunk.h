// Chunks as the public API sees them (docs/ARCHITECTURE.md §1): immutable content registered with an Engine,
// identified by a content key (orbit/store.h), placed into windows as instances.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/tensor.h"

namespace orbit {

enum class ChunkKind { kTokens, kEmbeddings };
const char* chunk_kind_name(ChunkKind kind) noexcept;  // "tokens", "embeddings"

// A handle to a chunk registered with an Engine. A value: cheap to copy, compare by key. Valid for the
// Engine that made it (another engine throws orbit::Error naming the key).
struct ChunkRef {
  std::string key;  // 64-hex content key (model fingerprint + content; never position)
  ChunkKind kind = ChunkKind::kTokens;
  int64_t length = 0;  // tokens
  int64_t extent = 0;  // positions it spans in a window (= length for text; grid span for media)
  std::string label;   // the caller's name for it (for plans, traces and errors); may be empty

  bool valid() const { return !key.empty(); }
  friend bool operator==(const ChunkRef& a, const ChunkRef& b) { return a.key == b.key; }
  friend bool operator!=(const ChunkRef& a, const ChunkRef& b) { return a.key != b.key; }
};

struct ChunkOptions {
  std::string label;
  // Keep the canonical resident in the store (never evicted), wherever it comes from: encoded here, or read
  // from the store (an earlier engine stored it). Adding the same content again with pin pins it then; a
  // re-add without pin leaves a pin as it is. The label stays the first add's.
  bool pin = false;
};

// A media chunk given as input embeddings (an image's or frame's vision-tower output).
struct EmbeddingChunk {
  TensorView embeddings;     // [n, hidden], float32 / bfloat16 / float16
  TensorView grid;           // optional int64 [3, n] (t, h, w) for M-RoPE models, or [n]; empty = 0..n-1.
                             // Only its shape matters across placements: it is stored relative to its
                             // per-row minimum and shifted to the chunk's place in a window.
  std::string media_digest;  // optional: the caller's digest of the pixels; when set, the key hashes it
                             // (plus the grid) instead of the embedding bytes
};

// What Engine::find_media looks up: a media chunk by the digest and grid its add_embeddings was given.
struct MediaLookup {
  std::string media_digest;  // required: the same digest as EmbeddingChunk::media_digest
  TensorView grid;           // the same grid ([3, n] or [n] int64), or empty when add_embeddings had none
  int64_t rows = 0;          // tokens (embedding rows): required when grid is empty; else 0 or n
};

}  // namespace orbit
