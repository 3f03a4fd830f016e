// ChunkRegistry (chunk_registry.h): registering chunks, their records, their model inputs, and the
// embedding cache behind find_media.
#include "engine/chunk_registry.h"

#include <ATen/ATen.h>

#include "engine/engine_core.h"
#include "engine/tensor_convert.h"
#include "orbit/common/error.h"
#include "orbit/runtime/index_range.h"
#include "orbit/store/embedding_cache.h"

namespace orbit::detail {

// A chunk is placed at positions [0, extent) when encoded alone; past the model's limit that forward is
// refused (dynamic NTK scaling runs past it, so only a sanity bound applies there).
void ChunkRegistry::fill_embeddings(ChunkRecord& rec, const at::Tensor& emb, const at::Tensor& grid,
                                    const ChunkOptions& options, const char* what) const {
  rec.ref.kind = ChunkKind::kEmbeddings;
  rec.ref.length = emb.size(0);
  rec.ref.extent = grid.defined() ? grid.max().item<int64_t>() + 1 : rec.ref.length;
  check_extent(rec.ref.extent, what, grid.defined() ? "positions (grid extent)" : "embedding rows");
  rec.ref.label = options.label;
  rec.tensors = std::make_shared<ChunkTensors>(ChunkTensors{emb, grid});
  rec.pinned = options.pin;
}

void ChunkRegistry::check_extent(int64_t extent, const char* what, const char* unit) const {
  const runtime::ModelConfig& c = core_.config();
  const int64_t limit = window_position_limit(c);
  ORBIT_CHECK(extent <= limit, what << ": " << extent << " " << unit << " exceed the model's " << limit
                                    << " positions (" << window_position_limit_source(c) << ")");
}

ChunkRef ChunkRegistry::add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options) {
  const runtime::ModelConfig& c = core_.config();
  ORBIT_CHECK(!tokens.empty(), "add_tokens: empty chunk (a chunk needs at least one token)");
  check_extent(static_cast<int64_t>(tokens.size()), "add_tokens", "tokens");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "add_tokens: token " << i << " = " << tokens[i]
                                                                                 << " is outside the vocabulary [0, "
                                                                                 << c.vocab_size << ")");
  }
  auto rec = std::make_shared<ChunkRecord>();
  rec->ref.key = chunk_key_tokens(core_.fingerprint(), tokens);
  rec->ref.kind = ChunkKind::kTokens;
  rec->ref.length = static_cast<int64_t>(tokens.size());
  rec->ref.extent = rec->ref.length;
  rec->ref.label = options.label;
  rec->tokens = tokens;
  rec->pinned = options.pin;
  return register_chunk(std::move(rec));
}

ChunkRef ChunkRegistry::add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options) {
  const runtime::ModelConfig& c = core_.config();
  at::Tensor emb = embeddings_from_view(chunk.embeddings, c.hidden_size, "add_embeddings: embeddings");
  const int64_t n = emb.size(0);
  at::Tensor grid = grid_from_view(chunk.grid, n, c.position_rows(), "add_embeddings: grid");
  auto rec = std::make_shared<ChunkRecord>();
  const std::vector<int64_t> grid_flat = grid.defined() ? grid_token_major(grid) : std::vector<int64_t>{};
  const int64_t grid_dims = grid.defined() ? grid.size(0) : 3;
  if (!chunk.media_digest.empty()) {
    rec->ref.key = media_key(chunk.media_digest, grid, n);
  } else {
    EmbeddingBytes bytes;
    bytes.data = emb.data_ptr();
    bytes.size = static_cast<std::size_t>(emb.numel()) * sizeof(float);
    bytes.dtype = "float32";
    bytes.rows = n;
    bytes.cols = emb.size(1);
    rec->ref.key = chunk_key_embeddings(core_.fingerprint(), bytes, grid_flat, grid_dims);
  }
  fill_embeddings(*rec, emb, grid, options, "add_embeddings");
  const ChunkRef ref = register_chunk(std::move(rec));
  if (!chunk.media_digest.empty()) cache_embeddings(*record(ref));  // only a digest lets find_media ask for them
  return ref;
}

ChunkRegistry::ChunkRegistry(EngineCore& core, int64_t max_idle_chunks)
    : core_(core), max_idle_chunks_(max_idle_chunks) {
  ORBIT_CHECK(max_idle_chunks >= 0,
              "EngineOptions::max_idle_chunks must be >= 0 (0 = keep every chunk), got " << max_idle_chunks);
}

void ChunkRegistry::touch(const ChunkPtr& rec, std::vector<ChunkPtr>& released) const {
  const auto at = recent_at_.find(rec->ref.key);
  if (at != recent_at_.end()) {
    recent_.splice(recent_.begin(), recent_, at->second);
  } else {
    recent_.push_front(rec);
    recent_at_.emplace(rec->ref.key, recent_.begin());
  }
  if (max_idle_chunks_ == 0) return;
  while (static_cast<int64_t>(recent_.size()) > max_idle_chunks_) {
    const ChunkPtr& last = recent_.back();
    // Its length stays known for weighing contexts (key_length), as a past turn's does.
    note_length_locked(last->ref.key, last->ref.length);
    recent_at_.erase(last->ref.key);
    released.push_back(std::move(recent_.back()));
    recent_.pop_back();
  }
}

void ChunkRegistry::sweep() const {
  if (chunks_.size() < sweep_at_) return;
  for (auto it = chunks_.begin(); it != chunks_.end();) it = it->second.expired() ? chunks_.erase(it) : std::next(it);
  std::vector<std::string> order;
  for (std::string& key : order_) {
    if (chunks_.count(key) != 0) order.push_back(std::move(key));
  }
  order_ = std::move(order);
  sweep_at_ = std::max<std::size_t>(1024, 2 * chunks_.size());
}

ChunkPtr ChunkRegistry::find_locked(const std::string& key) const {
  const auto it = chunks_.find(key);
  return it == chunks_.end() ? nullptr : it->second.lock();
}

ChunkRef ChunkRegistry::register_chunk(std::shared_ptr<ChunkRecord> rec) {
  std::vector<ChunkPtr> released;  // destroyed after the lock
  bool pin_stored = false;
  ChunkRef known_ref;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ChunkPtr known = find_locked(rec->ref.key)) {  // the same content registered again
      touch(known, released);
      if (rec->pinned && pinned_keys_.insert(known->ref.key).second) {  // pinned now, not before
        pinned_.push_back(known);
        pin_stored = true;
      }
      known_ref = known->ref;
    } else {
      return register_new_locked(std::move(rec), released);
    }
  }
  // A canonical already stored is pinned there now; one not stored yet is pinned when it is (KvStore::canonical
  // asks pinned()). not_found: not stored; a refusal (the index cannot be written) leaves it unpinned, as a put
  // refused for room would.
  if (pin_stored) (void)core_.kv().store().pin(known_ref.key);
  return known_ref;
}

bool ChunkRegistry::pinned(const ChunkRecord& chunk) const {
  if (chunk.pinned) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_keys_.count(chunk.ref.key) > 0;
}

ChunkRef ChunkRegistry::register_new_locked(std::shared_ptr<ChunkRecord> rec, std::vector<ChunkPtr>& released) {
  ChunkRef ref = rec->ref;
  // The record counts itself alive until whatever holds it last lets go (live_chunks without a scan).
  std::shared_ptr<std::atomic<int64_t>> live = live_;
  live->fetch_add(1);
  ChunkPtr counted(new ChunkRecord(std::move(*rec)), [live](const ChunkRecord* r) {
    live->fetch_sub(1);
    delete r;
  });
  if (chunks_.count(ref.key) == 0) order_.push_back(ref.key);
  chunks_[ref.key] = counted;
  if (counted->pinned) {
    pinned_.push_back(counted);
    pinned_keys_.insert(ref.key);
  }
  touch(counted, released);
  sweep();
  return ref;
}

ChunkPtr ChunkRegistry::find_known(const std::string& key) const {
  std::vector<ChunkPtr> released;
  std::lock_guard<std::mutex> lock(mu_);
  ChunkPtr rec = find_locked(key);
  if (rec) touch(rec, released);
  return rec;
}

ChunkPtr ChunkRegistry::record(const std::string& key) const {
  ChunkPtr rec = find_known(key);
  ORBIT_CHECK(rec != nullptr, "chunk " << (key.empty() ? std::string("(empty key)") : key.substr(0, 16))
                                       << " is not registered with this engine (add it with add_tokens or "
                                          "add_embeddings"
                                       << (max_idle_chunks_ > 0 ? "; a chunk no window holds is forgotten past "
                                                                  "EngineOptions::max_idle_chunks: add it again"
                                                                : "")
                                       << ")");
  return rec;
}

ChunkPtr ChunkRegistry::record(const ChunkRef& ref) const {
  ORBIT_CHECK(ref.valid(), "invalid ChunkRef (default-constructed)");
  return record(ref.key);
}

void ChunkRegistry::note_evicted(const ChunkPtr& rec) {
  if (max_idle_chunks_ == 0) return;  // every record is held: the order of use is never read
  std::vector<ChunkPtr> released;     // destroyed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  touch(rec, released);
}

bool ChunkRegistry::knows(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return find_locked(key) != nullptr;
}

int64_t ChunkRegistry::live_chunks() const { return live_->load(); }

std::vector<ChunkRef> ChunkRegistry::chunks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ChunkRef> out;
  for (const auto& k : order_) {
    if (ChunkPtr rec = find_locked(k)) out.push_back(rec->ref);
  }
  return out;
}

std::string ChunkRegistry::turn_key(const std::vector<int64_t>& tokens) const {
  return chunk_key_tokens(core_.fingerprint(), tokens);
}

int64_t ChunkRegistry::key_length(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ChunkPtr rec = find_locked(key)) return rec->ref.length;
  auto t = turn_lengths_.find(key);
  return t != turn_lengths_.end() ? t->second : 1;
}

void ChunkRegistry::note_turn(const std::string& key, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  note_length_locked(key, length);
}

void ChunkRegistry::note_length_locked(const std::string& key, int64_t length) const {
  if (!turn_lengths_.insert_or_assign(key, length).second) return;
  turn_order_.push_back(key);
  if (turn_order_.size() > kMaxTurnLengths) {
    turn_lengths_.erase(turn_order_.front());
    turn_order_.pop_front();
  }
}

at::Tensor ChunkRegistry::positions_for(const ChunkRecord* chunk, int64_t length, int64_t start) const {
  const int64_t rows = core_.config().position_rows();
  if (chunk != nullptr && chunk->tensors != nullptr && chunk->tensors->grid.defined()) {
    const at::Tensor g = chunk->tensors->grid + start;  // [rows, n]
    return rows == 1 ? g[0] : g;                        // 1-D RoPE models take positions [n]
  }
  at::Tensor p = runtime::index_range(start, length);
  return rows == 1 ? p : p.unsqueeze(0).expand({rows, length}).contiguous();
}

runtime::ForwardInput ChunkRegistry::input_for(const ChunkRecord& chunk, int64_t start) const {
  runtime::ForwardInput in;
  if (chunk.ref.kind == ChunkKind::kTokens) {
    in.tokens = chunk.tokens;
  } else {
    in.embeddings = chunk.tensors->embeddings;
  }
  in.positions = positions_for(&chunk, chunk.ref.length, start);
  return in;
}

runtime::ForwardInput ChunkRegistry::input_for_tokens(const std::vector<int64_t>& tokens, int64_t start) const {
  runtime::ForwardInput in;
  in.tokens = tokens;
  in.positions = positions_for(nullptr, static_cast<int64_t>(tokens.size()), start);
  return in;
}

std::string ChunkRegistry::media_key(const std::string& digest, const at::Tensor& grid, int64_t n) const {
  if (grid.defined()) return chunk_key_media(core_.fingerprint(), digest, grid_token_major(grid), grid.size(0));
  std::vector<int64_t> positions(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = i;
  return chunk_key_media(core_.fingerprint(), digest, positions, 1);
}

void ChunkRegistry::cache_embeddings(const ChunkRecord& chunk) {
  if (!core_.options().embedding_cache) return;
  store::EmbeddingCache cache(core_.kv().store());
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

std::optional<ChunkRef> ChunkRegistry::find_media(const MediaLookup& lookup, const ChunkOptions& options) {
  const runtime::ModelConfig& c = core_.config();
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
    count_media(false);
    return std::nullopt;
  };
  if (ChunkPtr known = find_known(key)) {  // registered here already: the record holds the embeddings
    count_media(true);
    if (!options.pin) return known->ref;
    auto again = std::make_shared<ChunkRecord>(*known);  // registered again with the pin, as add_embeddings would
    again->pinned = true;
    return register_chunk(std::move(again));
  }
  Result<store::CachedEmbeddings> cached = store::EmbeddingCache(core_.kv().store()).get(key);
  if (!cached) return missed();
  const at::Tensor emb = cached.value().embeddings.to(at::kCPU, at::kFloat).contiguous();
  ORBIT_CHECK(emb.dim() == 2 && emb.size(0) == n && emb.size(1) == c.hidden_size,
              "find_media: the cached embeddings of " << key.substr(0, 16) << " are " << emb.sizes() << ", not [" << n
                                                      << ", " << c.hidden_size << "]");
  auto rec = std::make_shared<ChunkRecord>();
  rec->ref.key = key;
  fill_embeddings(*rec, emb, grid, options, "find_media");
  count_media(true);
  return register_chunk(std::move(rec));
}

std::optional<int64_t> ChunkRegistry::chunk_length(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  ChunkPtr rec = find_locked(key);
  if (rec == nullptr) return std::nullopt;
  return rec->ref.length;
}

void ChunkRegistry::count_media(bool found) {
  Counters d;
  (found ? d.media_found : d.media_missed) = 1;
  core_.usage().count(d);
}

TableUsage ChunkRegistry::turn_lengths_usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  TableUsage u;
  u.entries = static_cast<int64_t>(turn_lengths_.size());
  u.max_entries = static_cast<int64_t>(kMaxTurnLengths);
  return u;
}

}  // namespace orbit::detail
