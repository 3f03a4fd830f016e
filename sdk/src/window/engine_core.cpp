#include "window/engine_core.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>

#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "store/codec.h"
#include "window/tensor_convert.h"

namespace orbit::detail {

EngineCore::EngineCore(const EngineOptions& options) : options_(options) {
  ORBIT_CHECK(!options.model.empty(), "EngineOptions::model: no model path given");
  ORBIT_CHECK(options.page_size >= 1, "EngineOptions::page_size must be >= 1 (got " << options.page_size << ")");
  ORBIT_CHECK(options.pool_bytes > 0, "EngineOptions::pool_bytes must be > 0 (got " << options.pool_bytes << ")");
  ORBIT_CHECK(options.host_budget_bytes >= 0, "EngineOptions::host_budget_bytes must be >= 0");
  ORBIT_CHECK(options.disk_budget_bytes >= 0, "EngineOptions::disk_budget_bytes must be >= 0 (0 = unlimited)");
  ORBIT_CHECK(options.threads >= 0, "EngineOptions::threads must be >= 0 (0 = keep the process setting)");
  if (options.threads > 0) at::set_num_threads(options.threads);
  model_ = runtime::load_model(options.model);
  const runtime::ModelConfig& c = model_->config();
  const std::string tokenizer_path =
      options.tokenizer.empty() ? runtime::find_tokenizer(options.model, c.vocab_size) : options.tokenizer;
  if (!tokenizer_path.empty()) tokenizer_ = runtime::load_llama2c_tokenizer(tokenizer_path, c.vocab_size);

  store::ChunkStoreOptions so;
  so.model_fingerprint = model_->fingerprint();
  so.dir = options.store_dir;
  so.host_budget_bytes = options.host_budget_bytes;
  if (options.disk_budget_bytes > 0) so.disk_budget_bytes = options.disk_budget_bytes;
  store_ = std::make_unique<store::ChunkStore>(so);

  runtime::KVPoolOptions po;
  po.num_layers = c.num_layers;
  po.page_size = options.page_size;
  po.widths = c.content_widths();
  int64_t page_bytes = 0;
  for (int64_t w : po.widths) page_bytes += w * options.page_size * c.num_layers * 4;
  po.num_pages = options.pool_bytes / page_bytes;
  ORBIT_CHECK(po.num_pages >= 1, "EngineOptions::pool_bytes = " << options.pool_bytes
                                     << " holds no page (one page of this model is " << page_bytes << " bytes)");
  pool_ = std::make_unique<runtime::KVPool>(po);
}

EngineCore::~EngineCore() = default;

const runtime::Model& EngineCore::model() const {
  check_open();
  return *model_;
}

const runtime::Tokenizer& EngineCore::tokenizer() const {
  ORBIT_CHECK(tokenizer_ != nullptr,
              "text needs a tokenizer and the model " << options_.model << " has none: orbit reads llama2.c tokenizer "
              "files (tok<vocab>.bin or tokenizer.bin beside a llama2.c .bin, or EngineOptions::tokenizer); a Hugging "
              "Face tokenizer.json is not read, so give token ids (tokenize with your own tokenizer)");
  return *tokenizer_;
}

void EngineCore::check_open() const { ORBIT_CHECK(!closed_.load(), "engine is closed"); }

store::ChunkStore& EngineCore::store() {
  check_open();
  return *store_;
}

void EngineCore::close() {
  if (closed_.exchange(true)) return;
  if (store_) (void)store_->flush();
  store_.reset();
}

ModelInfo EngineCore::model_info() const {
  const runtime::Model& m = model();
  const runtime::ModelConfig& c = m.config();
  ModelInfo info;
  info.origin = m.origin();
  info.architecture = runtime::arch_name(c.arch);
  info.fingerprint = m.fingerprint();
  info.num_layers = c.num_layers;
  info.vocab_size = c.vocab_size;
  info.max_positions = c.max_position_embeddings;
  info.position_rows = c.position_rows();
  info.hidden_size = c.hidden_size;
  int64_t w = 0;
  for (int64_t x : c.content_widths()) w += x;
  info.kv_bytes_per_token = w * c.num_layers * 4;
  if (tokenizer_) {
    info.tokenizer = tokenizer_->source();
    info.bos_token = tokenizer_->bos_id();
    info.eos_token = tokenizer_->eos_id();
  }
  return info;
}

// ---- chunks ---------------------------------------------------------------------------------------

ChunkRef EngineCore::add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options) {
  const runtime::ModelConfig& c = config();
  ORBIT_CHECK(!tokens.empty(), "add_tokens: empty chunk (a chunk needs at least one token)");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size,
                "add_tokens: token " << i << " = " << tokens[i] << " is outside the vocabulary [0, " << c.vocab_size << ")");
  }
  auto rec = std::make_unique<ChunkRecord>();
  rec->ref.key = chunk_key_tokens(fingerprint(), tokens);
  rec->ref.kind = ChunkKind::kTokens;
  rec->ref.length = static_cast<int64_t>(tokens.size());
  rec->ref.extent = rec->ref.length;
  rec->ref.label = options.label;
  rec->tokens = tokens;
  rec->pinned = options.pin;
  return register_chunk(std::move(rec));
}

ChunkRef EngineCore::add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options) {
  const runtime::ModelConfig& c = config();
  at::Tensor emb = embeddings_from_view(chunk.embeddings, c.hidden_size, "add_embeddings: embeddings");
  const int64_t n = emb.size(0);
  at::Tensor grid = grid_from_view(chunk.grid, n, c.position_rows(), "add_embeddings: grid");
  auto rec = std::make_unique<ChunkRecord>();
  const std::vector<int64_t> grid_flat = grid.defined() ? grid_token_major(grid) : std::vector<int64_t>{};
  const int64_t grid_dims = grid.defined() ? grid.size(0) : 3;
  if (!chunk.media_digest.empty()) {
    std::vector<int64_t> g = grid_flat;
    if (g.empty()) {
      for (int64_t i = 0; i < n; ++i) g.push_back(i);
    }
    rec->ref.key = chunk_key_media(fingerprint(), chunk.media_digest, g, grid.defined() ? grid_dims : 1);
  } else {
    EmbeddingBytes bytes;
    bytes.data = emb.data_ptr();
    bytes.size = static_cast<std::size_t>(emb.numel()) * sizeof(float);
    bytes.dtype = "float32";
    bytes.rows = n;
    bytes.cols = emb.size(1);
    rec->ref.key = chunk_key_embeddings(fingerprint(), bytes, grid_flat, grid_dims);
  }
  rec->ref.kind = ChunkKind::kEmbeddings;
  rec->ref.length = n;
  rec->ref.extent = grid.defined() ? grid.max().item<int64_t>() + 1 : n;
  rec->ref.label = options.label;
  rec->embeddings = emb;
  rec->grid = grid;
  rec->pinned = options.pin;
  return register_chunk(std::move(rec));
}

ChunkRef EngineCore::register_chunk(std::unique_ptr<ChunkRecord> rec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = chunks_.find(rec->ref.key);
  if (it != chunks_.end()) return it->second->ref;  // the same content registered again
  ChunkRef ref = rec->ref;
  chunk_order_.push_back(ref.key);
  chunks_.emplace(ref.key, std::move(rec));
  return ref;
}

const ChunkRecord& EngineCore::record(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = chunks_.find(key);
  ORBIT_CHECK(it != chunks_.end(), "chunk " << (key.empty() ? std::string("(empty key)") : key.substr(0, 16))
                                            << " is not registered with this engine (add it with add_tokens or add_embeddings)");
  return *it->second;
}

const ChunkRecord& EngineCore::record(const ChunkRef& ref) const {
  ORBIT_CHECK(ref.valid(), "invalid ChunkRef (default-constructed)");
  return record(ref.key);
}

bool EngineCore::knows(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_.count(key) > 0;
}

std::vector<ChunkRef> EngineCore::chunks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ChunkRef> out;
  for (const auto& k : chunk_order_) out.push_back(chunks_.at(k)->ref);
  return out;
}

std::string EngineCore::turn_key(const std::vector<int64_t>& tokens) const {
  return chunk_key_tokens(fingerprint(), tokens);
}

int64_t EngineCore::key_length(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = chunks_.find(key);
  if (it != chunks_.end()) return it->second->ref.length;
  auto t = turn_lengths_.find(key);
  return t != turn_lengths_.end() ? t->second : 1;
}

void EngineCore::note_turn(const std::string& key, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  turn_lengths_[key] = length;
}

// ---- canonicals and patches --------------------------------------------------------------------

std::optional<StoreTier> EngineCore::canonical_residence(const std::string& key) const {
  check_open();
  return store_->residence(key);
}

runtime::Content EngineCore::canonical(const ChunkRecord& chunk, bool* encoded, int64_t* bytes_read) {
  if (encoded != nullptr) *encoded = false;
  if (bytes_read != nullptr) *bytes_read = 0;
  Result<store::ValuePtr> hit = store().get(chunk.ref.key);
  if (hit.is_ok()) {
    if (bytes_read != nullptr) *bytes_read = hit.value()->bytes();
    return store::content_from_value(*hit.value());
  }
  c10::InferenceMode guard;
  runtime::ForwardInput in = input_for(chunk, 0);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  runtime::Content content = model().forward(in, nullptr, fo).content;
  store::PutOptions po;
  po.pin = chunk.pinned;
  po.recompute_cost = static_cast<double>(chunk.ref.length);
  // A refusal (budgets full of pinned entries) or a disk error only means the canonical is not kept:
  // the window still holds its KV, and the next use encodes again.
  (void)store_->put(chunk.ref.key, store::canonical_value(content), po);
  if (encoded != nullptr) *encoded = true;
  Counters d;
  d.canonicals_encoded = 1;
  d.forward_tokens = static_cast<double>(chunk.ref.length);
  count(d);
  return content;
}

bool EngineCore::contains(const std::string& store_key) const {
  check_open();
  return store_->contains(store_key);
}

std::optional<runtime::Patch> EngineCore::get_patch(const std::string& key) {
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kPatch) return std::nullopt;
  return store::patch_from_value(*hit.value());
}

std::optional<runtime::Content> EngineCore::get_conditioned(const std::string& key) {
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kCanonical) return std::nullopt;
  return store::content_from_value(*hit.value());
}

void EngineCore::put_patch(const runtime::Patch& patch, const std::string& chunk_key, PatchRecord record) {
  store::PutOptions po;
  po.recompute_cost = static_cast<double>(patch.length);
  (void)store().put(record.key, store::patch_value(patch), po);
  catalog_add(chunk_key, std::move(record));
}

void EngineCore::put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record) {
  store::PutOptions po;
  po.recompute_cost = content.empty() ? 1.0 : static_cast<double>(content.front().k.size(0));
  (void)store().put(record.key, store::canonical_value(content), po);
  catalog_add(chunk_key, std::move(record));
}

void EngineCore::catalog_add(const std::string& chunk_key, PatchRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = catalog_[chunk_key];
  for (const auto& r : list) {
    if (r.key == record.key) return;
  }
  list.push_back(std::move(record));
}

std::vector<PatchRecord> EngineCore::patches_of(const std::string& chunk_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = catalog_.find(chunk_key);
  return it == catalog_.end() ? std::vector<PatchRecord>{} : it->second;
}

// ---- model inputs --------------------------------------------------------------------------------

at::Tensor EngineCore::positions_for(const ChunkRecord* chunk, int64_t length, int64_t start) const {
  const int64_t rows = config().position_rows();
  if (chunk != nullptr && chunk->grid.defined()) return chunk->grid + start;  // [rows, n]
  at::Tensor p = at::arange(start, start + length, at::kLong);
  return rows == 1 ? p : p.unsqueeze(0).expand({rows, length}).contiguous();
}

runtime::ForwardInput EngineCore::input_for(const ChunkRecord& chunk, int64_t start) const {
  runtime::ForwardInput in;
  if (chunk.ref.kind == ChunkKind::kTokens) {
    in.tokens = chunk.tokens;
  } else {
    in.embeddings = chunk.embeddings;
  }
  in.positions = positions_for(&chunk, chunk.ref.length, start);
  return in;
}

runtime::ForwardInput EngineCore::input_for_tokens(const std::vector<int64_t>& tokens, int64_t start) const {
  runtime::ForwardInput in;
  in.tokens = tokens;
  in.positions = positions_for(nullptr, static_cast<int64_t>(tokens.size()), start);
  return in;
}

// ---- counters ------------------------------------------------------------------------------------

void EngineCore::count(const Counters& d) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.canonicals_encoded += d.canonicals_encoded;
  counters_.patches_formed += d.patches_formed;
  counters_.patch_hits += d.patch_hits;
  counters_.forward_tokens += d.forward_tokens;
}

Counters EngineCore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace orbit::detail
