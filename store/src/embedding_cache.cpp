#include "orbit/store/embedding_cache.h"

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/store/codec.h"

namespace orbit::store {

namespace rt = orbit::runtime;

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

Result<at::Tensor> EmbeddingCache::embeddings(const std::string& chunk_key) {
  Result<ValuePtr> value = store_->get(embedding_key(chunk_key));
  if (!value) return value.status();
  ORBIT_CHECK(value.value()->kind == EntryKind::kEmbedding,
              "embedding cache: entry for chunk " << chunk_key << " is a " << entry_kind_name(value.value()->kind));
  return value.value()->at("embeddings");
}

Result<Recalled> EmbeddingCache::recall_canonical(const rt::Model& model, const std::string& chunk_key,
                                                  const PutOptions& canonical_options) {
  ORBIT_CHECK(model.fingerprint() == store_->options().model_fingerprint,
              "embedding cache: model " << model.origin() << " has fingerprint " << model.fingerprint()
                                        << ", the store holds " << store_->options().model_fingerprint);
  Result<ValuePtr> stored = store_->get(chunk_key);
  if (stored) return Recalled{content_from_value(*stored.value()), false};
  Result<at::Tensor> cached = embeddings(chunk_key);
  if (!cached) {
    return Status::not_found("embedding cache: neither a canonical nor embeddings for chunk " + chunk_key);
  }
  rt::ChunkInput input;
  input.embeddings = cached.value();
  Recalled out{rt::canonical(model, input), true};
  Status s = store_->put(chunk_key, canonical_value(out.canonical), canonical_options);
  (void)s;  // the canonical is returned either way; a refused put only means it is not cached
  return out;
}

}  // namespace orbit::store
