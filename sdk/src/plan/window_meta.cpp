// The planning view's plain helpers (window_meta.h).
#include "plan/window_meta.h"

#include <functional>

namespace orbit::detail {

uint64_t context_key_hash(const std::string& key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : key) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

void ContextWeights::push(const std::string& key, double length) {
  tokens[context_key_hash(key)] += length;
  total += length;
}

uint64_t context_hash(uint64_t h, const std::string& key, uint64_t version) {
  uint64_t x = std::hash<std::string>{}(key) ^ (version * 0x9e3779b97f4a7c15ULL);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (h * 0x100000001b3ULL) ^ x ^ (h >> 29);
}

ChunkRef EntryMeta::ref() const {
  if (chunk != nullptr) return chunk->ref;
  ChunkRef r;
  r.key = key;
  r.kind = ChunkKind::kTokens;
  r.length = length;
  r.extent = extent;
  r.label = "turn";
  return r;
}

}  // namespace orbit::detail
