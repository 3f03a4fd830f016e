#include "window/engine_core.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/loader.h"
#include "orbit/store/codec.h"
#include "window/tensor_convert.h"

namespace orbit::detail {

namespace {

// The store keeps content and patches as float32 host tensors whatever the model's device and dtype;
// these convert at its boundary (a no-op for a float32 CPU model).
runtime::Content content_to_host(const runtime::Content& content) {
  runtime::Content out;
  out.reserve(content.size());
  for (const runtime::LayerKV& kv : content)
    out.push_back({kv.k.to(at::kCPU, at::kFloat), kv.v.to(at::kCPU, at::kFloat)});
  return out;
}

runtime::Content content_to_model(const runtime::Model& m, runtime::Content content) {
  for (runtime::LayerKV& kv : content) {
    kv.k = kv.k.to(m.device(), m.dtype());
    kv.v = kv.v.to(m.device(), m.dtype());
  }
  return content;
}

runtime::Patch patch_to(runtime::Patch patch, const c10::Device& device) {
  for (auto* factors : {&patch.k, &patch.v}) {
    for (runtime::LowRank& f : *factors) {
      if (f.u.defined()) f.u = f.u.to(device, at::kFloat);
      if (f.vt.defined()) f.vt = f.vt.to(device, at::kFloat);
    }
  }
  return patch;
}

// Tokens a KV page may hold. Far past any useful page (a model's whole context is a few hundred
// thousand positions), and small enough that a page's byte size is a product that fits 64 bits.
constexpr int64_t kMaxPageSize = int64_t{1} << 20;

// Bytes of one KV page: layers × page_size × (sum of widths) × element size, refused with a message
// naming page_size when the product overflows int64.
int64_t checked_page_bytes(const runtime::KVPoolOptions& po, int64_t page_size) {
  const auto overflow = [&] {
    ORBIT_FAIL("EngineOptions::page_size = " << page_size << ": one KV page of this model (" << po.num_layers
                                             << " layers) would hold more than 2^63 bytes");
  };
  int64_t width_sum = 0;
  for (int64_t w : po.widths) {
    if (__builtin_add_overflow(width_sum, w, &width_sum)) overflow();
  }
  int64_t bytes = static_cast<int64_t>(c10::elementSize(po.dtype));
  for (int64_t factor : {width_sum, page_size, po.num_layers}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes)) overflow();
  }
  return bytes;
}

}  // namespace

EngineCore::EngineCore(const EngineOptions& options) : options_(options) {
  ORBIT_CHECK(!options.model.empty(), "EngineOptions::model: no model path given");
  ORBIT_CHECK(options.page_size >= 1, "EngineOptions::page_size must be >= 1 (got " << options.page_size << ")");
  ORBIT_CHECK(options.page_size <= kMaxPageSize,
              "EngineOptions::page_size must be <= " << kMaxPageSize << " tokens (got " << options.page_size << ")");
  ORBIT_CHECK(options.pool_bytes > 0, "EngineOptions::pool_bytes must be > 0 (got " << options.pool_bytes << ")");
  ORBIT_CHECK(options.host_budget_bytes >= 0, "EngineOptions::host_budget_bytes must be >= 0");
  ORBIT_CHECK(options.disk_budget_bytes >= 0, "EngineOptions::disk_budget_bytes must be >= 0 (0 = unlimited)");
  ORBIT_CHECK(options.threads >= 0, "EngineOptions::threads must be >= 0 (0 = keep the process setting)");
  const unsigned cores = std::thread::hardware_concurrency();
  const int64_t max_threads = cores > 0 ? static_cast<int64_t>(cores) : 256;
  ORBIT_CHECK(options.threads <= max_threads,
              "EngineOptions::threads = " << options.threads << " exceeds this machine's " << max_threads << " cores");
  if (options.threads > 0) at::set_num_threads(options.threads);
  model_ = runtime::load_model(options.model, runtime::parse_compute_target(options.device, options.dtype));
  const runtime::ModelConfig& c = model_->config();
  const std::string tokenizer_path =
      options.tokenizer.empty() ? runtime::find_tokenizer(options.model, c.vocab_size) : options.tokenizer;
  if (!tokenizer_path.empty()) tokenizer_ = runtime::load_tokenizer(tokenizer_path, c.vocab_size);

  store_ = std::make_unique<store::ChunkStore>(store_options());

  runtime::KVPoolOptions po;
  po.num_layers = c.num_layers;
  po.page_size = options.page_size;
  po.widths = c.content_widths();
  po.dtype = model_->dtype();
  po.device = runtime::device_name(model_->device());
  const int64_t page_bytes = checked_page_bytes(po, options.page_size);
  po.num_pages = options.pool_bytes / page_bytes;
  ORBIT_CHECK(po.num_pages >= 1, "EngineOptions::pool_bytes = " << options.pool_bytes
                                                                << " holds no page (one page of this model is "
                                                                << page_bytes << " bytes)");
  ORBIT_CHECK(po.num_pages <= std::numeric_limits<runtime::PageId>::max(),
              "EngineOptions::pool_bytes = "
                  << options.pool_bytes << " holds " << po.num_pages << " pages, more than the pool's "
                  << std::numeric_limits<runtime::PageId>::max() << " page ids (raise page_size or lower pool_bytes)");
  pool_ = std::make_unique<SharedPool>(po);
  usage_ = std::make_unique<UsageMeter>(po.num_pages * options.page_size);  // the KV memory the windows have
  background_ = std::make_unique<BackgroundQueue>(options.background);
}

EngineCore::~EngineCore() {
  if (background_) background_->stop();
}

namespace {
// The engines the calling thread holds an OpHold on, innermost last (holds nest: a Window operation
// calls Engine internals that hold again).
thread_local std::vector<const EngineCore*> t_holds;
}  // namespace

OpHold::OpHold(const EngineCore& core) : core_(core) {
  std::lock_guard<std::mutex> lock(core.life_mu_);
  ORBIT_CHECK(!core.closed_.load(), "engine is closed");
  ++core.holds_;
  t_holds.push_back(&core);
}

OpHold::~OpHold() {
  for (auto it = t_holds.rbegin(); it != t_holds.rend(); ++it) {
    if (*it == &core_) {
      t_holds.erase(std::next(it).base());
      break;
    }
  }
  std::lock_guard<std::mutex> lock(core_.life_mu_);
  if (--core_.holds_ == 0) core_.life_cv_.notify_all();
}

bool EngineCore::held_by_this_thread() const {
  return std::find(t_holds.begin(), t_holds.end(), this) != t_holds.end();
}

const runtime::Model& EngineCore::model() const {
  check_open();
  return *model_;
}

const runtime::Tokenizer& EngineCore::tokenizer() const {
  ORBIT_CHECK(tokenizer_ != nullptr,
              "text needs a tokenizer and the model "
                  << options_.model
                  << " has none: orbit reads llama2.c tokenizer files (tok<vocab>.bin or tokenizer.bin beside a "
                     "llama2.c .bin), a Hugging Face directory's tokenizer.json, or EngineOptions::tokenizer; "
                     "without one, give token ids");
  return *tokenizer_;
}

const runtime::ChatTemplate* EngineCore::chat_template() const {
  std::call_once(chat_template_once_, [&] {
    // tokenizer_config.json of the model's directory, else beside the tokenizer file in use.
    std::vector<std::filesystem::path> dirs;
    std::error_code ec;
    if (std::filesystem::is_directory(options_.model, ec)) dirs.emplace_back(options_.model);
    if (tokenizer_ != nullptr) {
      const std::filesystem::path source(tokenizer_->source());
      dirs.push_back(std::filesystem::is_directory(source, ec) ? source : source.parent_path());
    }
    for (const std::filesystem::path& dir : dirs) {
      const std::filesystem::path config = dir / "tokenizer_config.json";
      if (!std::filesystem::is_regular_file(config, ec)) continue;
      try {
        std::optional<runtime::ChatTemplate> t = runtime::load_chat_template(config.string());
        if (t) chat_template_ = std::make_unique<runtime::ChatTemplate>(std::move(*t));
      } catch (const Error& e) {
        chat_template_error_ = e.what();
      }
      return;
    }
  });
  ORBIT_CHECK(chat_template_error_.empty(), chat_template_error_);
  return chat_template_.get();
}

void EngineCore::check_open() const { ORBIT_CHECK(!closed_.load(), "engine is closed"); }

store::ChunkStore& EngineCore::store() {
  // Only an operation in flight may use the store: its hold keeps close() from destroying it.
  ORBIT_CHECK(held_by_this_thread(), "internal error: the chunk store was used outside an engine operation");
  return *store_;
}

void EngineCore::close() {
  std::unique_lock<std::mutex> lock(life_mu_);
  const bool inside = held_by_this_thread();
  if (closed_.load()) {
    // Another close() is draining; wait for it (unless this thread's own hold is what it waits for).
    if (!inside) life_cv_.wait(lock, [&] { return store_closed_; });
    return;
  }
  ORBIT_CHECK(!inside,
              "close(): called from inside an operation of this engine on the same thread; close the "
              "engine after that operation returns");
  // Canonicals and patches queued by first sights are what the store exists to keep (another process
  // sharing the directory, or the next run, would otherwise encode them again): finish them on this
  // thread first, while operations are still accepted. Work queued after this point is dropped below.
  lock.unlock();
  if (background_) (void)background_->run(1e30, background_->queued());
  lock.lock();
  if (closed_.load()) {
    life_cv_.wait(lock, [&] { return store_closed_; });
    return;
  }
  closed_.store(true);
  life_cv_.wait(lock, [&] { return holds_ == 0; });
  lock.unlock();
  // Background jobs use the model and the store: once no operation is in flight, cancel the queued ones
  // and join the worker before the store goes.
  if (background_) background_->stop();
  if (store_) (void)store_->flush();
  store_.reset();
  lock.lock();
  store_closed_ = true;
  life_cv_.notify_all();
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
  info.device = runtime::device_name(m.device());
  info.dtype = runtime::dtype_name(m.dtype());
  if (tokenizer_) {
    info.tokenizer = tokenizer_->source();
    info.bos_token = tokenizer_->bos_id();
    info.eos_token = tokenizer_->eos_id();
  }
  return info;
}

// ---- chunks ---------------------------------------------------------------------------------------

// A chunk is placed at positions [0, extent) when encoded alone; past the model's limit that forward is
// refused (dynamic NTK scaling runs past it, so only a sanity bound applies there).
void EngineCore::fill_embeddings(ChunkRecord& rec, const at::Tensor& emb, const at::Tensor& grid,
                                 const ChunkOptions& options, const char* what) const {
  rec.ref.kind = ChunkKind::kEmbeddings;
  rec.ref.length = emb.size(0);
  rec.ref.extent = grid.defined() ? grid.max().item<int64_t>() + 1 : rec.ref.length;
  check_extent(rec.ref.extent, what, grid.defined() ? "positions (grid extent)" : "embedding rows");
  rec.ref.label = options.label;
  rec.tensors = std::make_shared<ChunkTensors>(ChunkTensors{emb, grid});
  rec.pinned = options.pin;
}

void EngineCore::check_extent(int64_t extent, const char* what, const char* unit) const {
  const runtime::ModelConfig& c = config();
  if (c.rope.scaling == runtime::RopeScaling::kDynamicNtk) {
    ORBIT_CHECK(extent <= (int64_t{1} << 31), what << ": " << extent << " " << unit << " is too large (at most 2^31)");
    return;
  }
  ORBIT_CHECK(extent <= c.max_position_embeddings, what << ": " << extent << " " << unit << " exceed the model's "
                                                        << c.max_position_embeddings
                                                        << " positions (max_position_embeddings)");
}

ChunkRef EngineCore::add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options) {
  const runtime::ModelConfig& c = config();
  ORBIT_CHECK(!tokens.empty(), "add_tokens: empty chunk (a chunk needs at least one token)");
  check_extent(static_cast<int64_t>(tokens.size()), "add_tokens", "tokens");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "add_tokens: token " << i << " = " << tokens[i]
                                                                                 << " is outside the vocabulary [0, "
                                                                                 << c.vocab_size << ")");
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
    rec->ref.key = media_key(chunk.media_digest, grid, n);
  } else {
    EmbeddingBytes bytes;
    bytes.data = emb.data_ptr();
    bytes.size = static_cast<std::size_t>(emb.numel()) * sizeof(float);
    bytes.dtype = "float32";
    bytes.rows = n;
    bytes.cols = emb.size(1);
    rec->ref.key = chunk_key_embeddings(fingerprint(), bytes, grid_flat, grid_dims);
  }
  fill_embeddings(*rec, emb, grid, options, "add_embeddings");
  const ChunkRef ref = register_chunk(std::move(rec));
  if (!chunk.media_digest.empty()) cache_embeddings(record(ref));  // only a digest lets find_media ask for them
  return ref;
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
  ORBIT_CHECK(it != chunks_.end(),
              "chunk " << (key.empty() ? std::string("(empty key)") : key.substr(0, 16))
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
  ORBIT_CHECK(held_by_this_thread(), "internal error: the chunk store was used outside an engine operation");
  return store_->residence(key);
}

runtime::Content EngineCore::canonical(const ChunkRecord& chunk, bool* encoded, int64_t* bytes_read) {
  if (encoded != nullptr) *encoded = false;
  if (bytes_read != nullptr) *bytes_read = 0;
  Result<store::ValuePtr> hit = store().get(chunk.ref.key);
  if (hit.is_ok()) {
    if (bytes_read != nullptr) *bytes_read = hit.value()->bytes();
    return content_to_model(model(), store::content_from_value(*hit.value()));
  }
  c10::InferenceMode guard;
  runtime::ForwardInput in = input_for(chunk, 0);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  runtime::Content content = model().forward(in, nullptr, fo).content;
  const store::PutOptions po = kv_put_options(static_cast<double>(chunk.ref.length), chunk.pinned);
  // A refusal (budgets full of pinned entries) or a disk error only means the canonical is not kept:
  // the window still holds its KV, and the next use encodes again.
  (void)store().put(chunk.ref.key, store::canonical_value(content_to_host(content)), po);
  if (encoded != nullptr) *encoded = true;
  Counters d;
  d.canonicals_encoded = 1;
  d.forward_tokens = static_cast<double>(chunk.ref.length);
  count(d);
  return content;
}

bool EngineCore::contains(const std::string& store_key) const {
  ORBIT_CHECK(held_by_this_thread(), "internal error: the chunk store was used outside an engine operation");
  return store_->contains(store_key);
}

bool EngineCore::available(const std::string& store_key) const {
  return contains(store_key) || background_->pending(store_key);
}

std::optional<runtime::Patch> EngineCore::get_patch(const std::string& key) {
  background_->await(key);  // only when a job writing it is queued or running
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kPatch) return std::nullopt;
  return patch_to(store::patch_from_value(*hit.value()), model().device());
}

std::optional<runtime::Content> EngineCore::get_conditioned(const std::string& key) {
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kCanonical) return std::nullopt;
  return content_to_model(model(), store::content_from_value(*hit.value()));
}

void EngineCore::put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record) {
  const store::PutOptions po =
      kv_put_options(content.empty() ? 1.0 : static_cast<double>(content.front().k.size(0)), false);
  (void)store().put(record.key, store::canonical_value(content_to_host(content)), po);
  catalog_add(chunk_key, std::move(record));
}

void EngineCore::put_reusable(const std::string& reuse_key, const runtime::Content& content, const KvState& chain,
                              const KvState& content_chain, const std::vector<int64_t>& tokens) {
  if (content.empty()) return;
  if (!store().contains(reuse_key)) {
    const store::PutOptions po = kv_put_options(static_cast<double>(content.front().k.size(0)), false);
    if (!store().put(reuse_key, store::canonical_value(content_to_host(content)), po).is_ok()) return;
  }
  reuse_index_.add(chain, content_chain, reuse_key, tokens);
}

void EngineCore::catalog_add(const std::string& chunk_key, PatchRecord record) {
  std::vector<double> lengths;
  lengths.reserve(record.context.size());
  for (const std::string& key : record.context) lengths.push_back(static_cast<double>(key_length(key)));
  catalog_.add(chunk_key, std::move(record), lengths);
}

std::optional<EngineCore::StaleMatch> EngineCore::closest_patch(const std::string& chunk_key,
                                                                const std::string& variant,
                                                                const ContextWeights& context,
                                                                std::size_t max_records) const {
  // Availability reads the store, outside the catalog's lock.
  for (StaleMatch& m : catalog_.closest(chunk_key, variant, context.tokens, context.total, max_records)) {
    if (available(m.key)) return std::move(m);
  }
  return std::nullopt;
}

double EngineCore::chunk_sensitivity(const std::string& chunk_key) const { return catalog_.sensitivity(chunk_key); }

void EngineCore::note_read_patch(const std::string& chunk_key, const std::string& patch_key,
                                 const runtime::Patch& patch) {
  catalog_.note_read(chunk_key, patch_key, patch.sensitivity);
}

std::optional<EngineCore::PatchFacts> EngineCore::patch_facts(const std::string& chunk_key,
                                                              const std::string& patch_key) const {
  return catalog_.facts(chunk_key, patch_key);
}

void EngineCore::queue_patch(PatchJob job) {
  for (std::size_t i = 0; i < job.store_keys.size(); ++i) {
    PatchRecord rec;
    rec.key = job.store_keys[i];
    rec.context = job.context;
    rec.variant = job.variant;
    rec.exact = job.exact && job.full_rank && i == 0;
    catalog_add(job.chunk->ref.key, std::move(rec));
  }
  BackgroundQueue::Job j;
  j.keys = job.store_keys;
  auto shared = std::make_shared<PatchJob>(std::move(job));
  j.run = [this, shared](bool critical) { run_patch_job(*shared, critical); };
  background_->queue(std::move(j));
}

void EngineCore::queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens,
                                        runtime::Content conditioned) {
  auto shared = std::make_shared<TurnSensitivityJob>(TurnSensitivityJob{key, tokens, std::move(conditioned)});
  BackgroundQueue::Job j;  // writes no store key: nothing awaits it
  j.run = [this, shared](bool critical) { run_turn_sensitivity(*shared, critical); };
  background_->queue(std::move(j));
}

void EngineCore::run_turn_sensitivity(const TurnSensitivityJob& job, bool critical) {
  const OpHold hold(*this);
  if (catalog_.sensitivity(job.key) >= 0) return;  // measured meanwhile (the same turn in another window)
  const auto t0 = std::chrono::steady_clock::now();
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  const runtime::Content alone = model().forward(input_for_tokens(job.tokens, 0), nullptr, fo).content;
  const double s = runtime::deficit_share(runtime::deficit(job.conditioned, alone), job.conditioned);
  catalog_.record_measured_sensitivity(job.key, s);
  Counters d;
  d.forward_tokens = static_cast<double>(job.tokens.size());
  if (!critical) {
    d.background_jobs = 1;
    d.background_forward_tokens = d.forward_tokens;
    d.background_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  count(d);
}

void EngineCore::after_apply() {
  if (background_->mode() == BackgroundMode::kInline) (void)background_->run(1e30);
}

void EngineCore::run_patch_job(const PatchJob& job, bool critical) {
  // A job on the background worker is an operation like any other: close() waits for it, and one that
  // starts after close() fails with "engine is closed" (counted by the queue, nothing stored).
  const OpHold hold(*this);
  const auto t0 = std::chrono::steady_clock::now();
  bool all_stored = true;
  for (const std::string& k : job.store_keys) all_stored = all_stored && contains(k);
  if (all_stored) return;  // formed meanwhile (another window, another job)
  bool encoded = false;
  const runtime::Content canonical = this->canonical(*job.chunk, &encoded);
  c10::InferenceMode guard;
  const runtime::Content delta = runtime::deficit(job.conditioned, canonical);
  runtime::PatchOptions po;
  po.rank_k = job.rank_k;
  po.rank_v = job.rank_v;
  if (job.deep_only) po.first_layer = runtime::choose_first_layer(delta, job.deep_energy);
  runtime::Patch patch = runtime::form_patch(model(), delta, po);
  patch.sensitivity = runtime::deficit_share(delta, job.conditioned);
  for (const std::string& k : job.store_keys) {
    store::PutOptions opt;
    opt.recompute_cost = static_cast<double>(patch.length);
    (void)store().put(k, store::patch_value(patch_to(patch, c10::Device(c10::kCPU))), opt);
  }
  catalog_.set_formed(job.chunk->ref.key, job.store_keys, patch.residual, patch.sensitivity);
  Counters d;
  d.patches_formed = 1;
  if (!critical) {
    d.background_jobs = 1;
    d.background_forward_tokens = encoded ? static_cast<double>(job.chunk->ref.length) : 0.0;
    d.background_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  count(d);
}

// ---- model inputs --------------------------------------------------------------------------------

at::Tensor EngineCore::positions_for(const ChunkRecord* chunk, int64_t length, int64_t start) const {
  const int64_t rows = config().position_rows();
  if (chunk != nullptr && chunk->tensors != nullptr && chunk->tensors->grid.defined()) {
    const at::Tensor g = chunk->tensors->grid + start;  // [rows, n]
    return rows == 1 ? g[0] : g;                        // 1-D RoPE models take positions [n]
  }
  at::Tensor p = at::arange(start, start + length, at::kLong);
  return rows == 1 ? p : p.unsqueeze(0).expand({rows, length}).contiguous();
}

runtime::ForwardInput EngineCore::input_for(const ChunkRecord& chunk, int64_t start) const {
  runtime::ForwardInput in;
  if (chunk.ref.kind == ChunkKind::kTokens) {
    in.tokens = chunk.tokens;
  } else {
    in.embeddings = chunk.tensors->embeddings;
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

void EngineCore::count(const Counters& d) { usage_->count(d); }

int64_t EngineCore::radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens) {
  return usage_->radix_read(tokens, prompt_tokens);
}

int64_t EngineCore::prefix_cache_read(const std::vector<planner::PrefixSpan>& window) {
  return usage_->prefix_cache_read(window);
}

Counters EngineCore::counters() const { return usage_->counters(); }

}  // namespace orbit::detail
