#include "orbit/store/embedding_cache.h"

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/store/codec.h"

namespace orbit::store {

std::string embedding_key(const std::string& chunk_key) {
  ORBIT_CHECK(is_store_key(chunk_key), "embedding_key: '" << chunk_key << "' is not a store key");
  Sha256 h;
  const std::string tag = "orbit.embedding.v1";
  h.update_u64(tag.size()).update(tag).update_u64(chunk_key.size()).update(chunk_key);
  return h.hex_digest();
}

Status EmbeddingCache::put(const std::string& chunk_key, const at::Tensor& embeddings, const at::Tensor& grid,
                           const PutOptions& options) {
  return store_->put(embedding_key(chunk_key), embedding_value(embeddings, grid), options);
}

Result<CachedEmbeddings> EmbeddingCache::get(const std::string& chunk_key) {
  Result<ValuePtr> value = store_->get(embedding_key(chunk_key));
  if (!value) return value.status();
  ORBIT_CHECK(value.value()->kind == EntryKind::kEmbedding,
              "embedding cache: entry for chunk " << chunk_key << " is a " << entry_kind_name(value.value()->kind));
  CachedEmbeddings out;
  out.embeddings = value.value()->at("embeddings");
  if (const at::Tensor* grid = value.value()->find("grid")) out.grid = *grid;
  return out;
}

}  // namespace orbit::store
