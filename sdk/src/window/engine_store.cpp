// The engine's chunk store: EngineOptions' tier settings turned into the store's options, where each
// kind of value is put, and the embedding cache behind Engine::find_media.
#include <ATen/ATen.h>

#include <cstdlib>

#include "orbit/common/error.h"
#include "orbit/runtime/device.h"
#include "orbit/store/codec.h"
#include "orbit/store/embedding_cache.h"
#include "window/engine_core.h"
#include "window/remote_values.h"
#include "window/tensor_convert.h"

namespace orbit::detail {

store::ChunkStoreOptions EngineCore::store_options() const {
  const EngineOptions& o = options_;
  const runtime::Model& m = *model_;
  store::ChunkStoreOptions so;
  so.model_fingerprint = m.fingerprint();
  so.dir = o.store_dir;
  so.host_budget_bytes = o.host_budget_bytes;
  if (o.disk_budget_bytes > 0) so.disk_budget_bytes = o.disk_budget_bytes;
  ORBIT_CHECK(o.remote_ttl_seconds >= 0, "EngineOptions::remote_ttl_seconds must be >= 0 (0 = never expire)");
  so.remote.url = o.remote;
  so.remote.ttl_seconds = o.remote_ttl_seconds;
  so.remote.secret = o.remote_secret;
  if (so.remote.secret.empty()) {
    const char* env = std::getenv("ORBIT_REMOTE_SECRET");
    if (env != nullptr) so.remote.secret = env;
  }
  RemoteValueExpectations expect;
  expect.config = m.config();
  expect.fingerprint = m.fingerprint();
  // The engine outlives its store, so the lookup may use it; mu_ guards only short sections that never
  // reach the store, so taking it here (on a reading thread, inside the store's get) cannot deadlock.
  expect.chunk_length = [this](const std::string& key) -> std::optional<int64_t> {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = chunks_.find(key);
    if (it == chunks_.end()) return std::nullopt;
    return it->second->ref.length;
  };
  so.remote.validate = [expect](const std::string& key, const store::StoredValue& value) {
    return check_remote_value(expect, key, value);
  };

  std::shared_ptr<const store::EvictionPolicy> policy;
  try {
    policy = store::make_eviction_policy(o.eviction);
  } catch (const Error& e) {
    ORBIT_FAIL("EngineOptions::eviction: " << e.what());
  }
  so.device_policy = so.host_policy = so.disk_policy = policy;

  ORBIT_CHECK(o.cold_tier == "exact" || o.cold_tier == "int8",
              "EngineOptions::cold_tier = '" << o.cold_tier << "' is unknown (known: exact, int8)");
  so.int8_cold_tier = o.cold_tier == "int8";

  const bool cuda = m.device().is_cuda();
  ORBIT_CHECK(o.device_tier_bytes >= 0,
              "EngineOptions::device_tier_bytes must be >= 0 (0 = no device tier), got " << o.device_tier_bytes);
  if (o.device_tier_bytes > 0) {
    ORBIT_CHECK(cuda, "EngineOptions::device_tier_bytes = " << o.device_tier_bytes << " asks for a device tier, which "
                                                            << "needs a CUDA engine (EngineOptions::device is '"
                                                            << o.device
                                                            << "'); use device='cuda' or device_tier_bytes=0");
    store::DeviceTierOptions device;
    device.layout = store::device_layout_for(m.config(), o.page_size);
    device.layout.device = runtime::device_name(m.device());
    int64_t page_bytes = 0;
    for (int64_t w : device.layout.widths) page_bytes += w * o.page_size * m.config().num_layers * 4;  // float32
    device.num_pages = o.device_tier_bytes / page_bytes;
    ORBIT_CHECK(device.num_pages >= 1, "EngineOptions::device_tier_bytes = "
                                           << o.device_tier_bytes << " holds no page (one page of this model is "
                                           << page_bytes << " bytes)");
    so.device = device;
  }
  so.pinned_host = cuda;  // recalls from the host tier to the device are DMA copies
  return so;
}

store::PutOptions EngineCore::kv_put_options(double recompute_tokens, bool pin) const {
  store::PutOptions po;
  po.tier = options_.device_tier_bytes > 0 ? StoreTier::kDevice : StoreTier::kHost;
  po.pin = pin;
  po.recompute_cost = recompute_tokens;
  return po;
}

// ---- the embedding cache -------------------------------------------------------------------------

std::string EngineCore::media_key(const std::string& digest, const at::Tensor& grid, int64_t n) const {
  if (grid.defined()) return chunk_key_media(fingerprint(), digest, grid_token_major(grid), grid.size(0));
  std::vector<int64_t> positions(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = i;
  return chunk_key_media(fingerprint(), digest, positions, 1);
}

void EngineCore::cache_embeddings(const ChunkRecord& chunk) {
  if (!options_.embedding_cache) return;
  store::EmbeddingCache cache(store());
  if (cache.contains(chunk.ref.key)) return;  // this or another process stored them already
  store::PutOptions po;
  po.pin = chunk.pinned;
  // The chunk's own recompute cost on far fewer bytes than its KV: cost-aware eviction keeps the
  // embeddings after the canonical, and a re-prefill from them still beats running the encoder again.
  po.recompute_cost = static_cast<double>(chunk.ref.length);
  const ChunkTensors& t = *chunk.tensors;
  const at::Tensor grid = t.grid.defined() ? t.grid.t().contiguous() : at::Tensor();  // [n, dims]
  (void)cache.put(chunk.ref.key, t.embeddings, grid, po);  // a refusal only means it is not cached
}

std::optional<ChunkRef> EngineCore::find_media(const MediaLookup& lookup, const ChunkOptions& options) {
  const runtime::ModelConfig& c = config();
  ORBIT_CHECK(!lookup.media_digest.empty(), "find_media: MediaLookup::media_digest is empty");
  ORBIT_CHECK(lookup.rows >= 0, "find_media: MediaLookup::rows = " << lookup.rows << " must be >= 0");
  int64_t n = lookup.rows;
  if (!lookup.grid.empty()) {
    const std::vector<int64_t>& shape = lookup.grid.shape;
    ORBIT_CHECK(shape.size() == 1 || shape.size() == 2,
                "find_media: grid must be [" << c.position_rows() << ", n] or [n]");
    const int64_t grid_n = shape.back();
    ORBIT_CHECK(n == 0 || n == grid_n, "find_media: rows = " << n << " but the grid has " << grid_n << " tokens");
    n = grid_n;
  }
  ORBIT_CHECK(n >= 1, "find_media: give the grid, or rows (the number of embedding rows) when the media had no grid");
  const at::Tensor grid = grid_from_view(lookup.grid, n, c.position_rows(), "find_media: grid");
  const std::string key = media_key(lookup.media_digest, grid, n);
  auto missed = [&] {
    Counters d;
    d.media_missed = 1;
    count(d);
    return std::nullopt;
  };
  if (knows(key)) {  // registered here already: the record holds the embeddings
    Counters d;
    d.media_found = 1;
    count(d);
    return record(key).ref;
  }
  Result<store::CachedEmbeddings> cached = store::EmbeddingCache(store()).get(key);
  if (!cached) return missed();
  const at::Tensor emb = cached.value().embeddings.to(at::kCPU, at::kFloat).contiguous();
  ORBIT_CHECK(emb.dim() == 2 && emb.size(0) == n && emb.size(1) == c.hidden_size,
              "find_media: the cached embeddings of " << key.substr(0, 16) << " are " << emb.sizes() << ", not [" << n
                                                      << ", " << c.hidden_size << "]");
  auto rec = std::make_unique<ChunkRecord>();
  rec->ref.key = key;
  fill_embeddings(*rec, emb, grid, options, "find_media");
  Counters d;
  d.media_found = 1;
  count(d);
  return register_chunk(std::move(rec));
}

}  // namespace orbit::detail
