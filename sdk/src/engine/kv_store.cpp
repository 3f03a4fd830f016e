// KvStore (kv_store.h): canonicals, patches, conditioned and reusable KV through the chunk store, and the
// patch catalog.
#include "engine/kv_store.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "engine/engine_core.h"
#include "engine/forward_in_pieces.h"
#include "engine/interruptible.h"
#include "engine/patch_directory.h"
#include "orbit/common/error.h"
#include "orbit/store/codec.h"

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

}  // namespace

KvStore::KvStore(EngineCore& core, const store::ChunkStoreOptions& options)
    : core_(core), store_(std::make_unique<store::ChunkStore>(options)) {}

void KvStore::check_held() const {
  ORBIT_CHECK(core_.life().held_by_this_thread(),
              "internal error: the chunk store was used outside an engine operation");
}

store::ChunkStore& KvStore::store() {
  // Only an operation in flight may use the store: its hold keeps close() from destroying it.
  check_held();
  return *store_;
}

std::optional<StoreTier> KvStore::canonical_residence(const std::string& key) const {
  check_held();
  return store_->residence(key);
}

double KvStore::quantization_error(const std::string& key) const {
  check_held();
  return store_->quantization_error(key);
}

runtime::Content KvStore::canonical(const ChunkRecord& chunk, bool* encoded, int64_t* bytes_read, int64_t* forwarded) {
  if (encoded != nullptr) *encoded = false;
  if (bytes_read != nullptr) *bytes_read = 0;
  if (forwarded != nullptr) *forwarded = 0;
  const bool pin = core_.registry().pinned(chunk);
  Result<store::ValuePtr> hit = store().get(chunk.ref.key);
  if (hit.is_ok()) {
    // Stored unpinned (by an earlier engine, or before the chunk was added again with pin): pinned now. A
    // refusal (the index cannot be written) leaves it as it is, as a put refused for room would.
    if (pin) (void)store().pin(chunk.ref.key);
    if (bytes_read != nullptr) *bytes_read = hit.value()->bytes();
    index_canonical(chunk);  // read from the store (another process, an earlier engine): findable here too
    return content_to_model(core_.model(), store::content_from_value(*hit.value()));
  }
  int64_t head_bytes = 0, tokens = 0;
  runtime::Content content = encode_canonical(chunk, &head_bytes, &tokens);
  const store::PutOptions po = kv_put_options(static_cast<double>(chunk.ref.length), pin);
  // A refusal (budgets full of pinned entries) or a disk error only means the canonical is not kept:
  // the window still holds its KV, and the next use encodes again.
  if (store().put(chunk.ref.key, store::canonical_value(content_to_host(content)), po).is_ok()) index_canonical(chunk);
  if (encoded != nullptr) *encoded = true;
  if (bytes_read != nullptr) *bytes_read = head_bytes;
  if (forwarded != nullptr) *forwarded = tokens;
  Counters d;
  d.canonicals_encoded = 1;
  d.forward_tokens = static_cast<double>(tokens);
  core_.usage().count(d);
  return content;
}

// A canonical is the forward of the chunk behind nothing, at positions 0.., so its rows are those any
// forward behind the empty chain computes for the same leading tokens: the reuse index's empty chain holds
// both (canonicals, and forwards of instances at the front of a window), exactly.
bool KvStore::matchable_by_tokens(const ChunkRecord& chunk) {
  // An embeddings chunk has no token ids to match (its rows depend on embeddings and, for M-RoPE models, a
  // position grid, neither of which the index keys on). A token chunk's positions are 0.. on every row,
  // M-RoPE's (t, h, w) included (t = h = w for text), the same as any token sequence's at the front.
  return chunk.ref.kind == ChunkKind::kTokens && chunk.tensors == nullptr && !chunk.tokens.empty();
}

void KvStore::index_canonical(const ChunkRecord& chunk) {
  if (matchable_by_tokens(chunk)) reuse_index_.add(KvState{}, KvState{}, chunk.ref.key, chunk.tokens);
}

runtime::Content KvStore::leading_rows_at_front(const ChunkRecord& chunk, int64_t* bytes_read) {
  if (!matchable_by_tokens(chunk)) return {};
  const ReuseIndex::Match m = reuse_index_.longest(KvState{}, KvState{}, chunk.tokens, chunk.ref.length);
  // Entries whose store key was evicted since are found and fail to load: the chunk is then encoded whole.
  if (m.tokens <= 0 || m.store_key == chunk.ref.key) return {};
  std::optional<runtime::Content> stored = get_conditioned(m.store_key);
  if (!stored.has_value() || stored->empty() || stored->front().k.size(0) < m.tokens) return {};
  runtime::Content head(stored->size());
  for (std::size_t l = 0; l < head.size(); ++l) {
    head[l] = {(*stored)[l].k.narrow(0, 0, m.tokens), (*stored)[l].v.narrow(0, 0, m.tokens)};
  }
  *bytes_read = runtime::content_bytes(head);
  return head;
}

runtime::Content KvStore::encode_canonical(const ChunkRecord& chunk, int64_t* head_bytes, int64_t* forwarded) {
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  fo = interruptible(fo);  // a long chunk's encode stops between layers; canonical() then stores nothing
  runtime::Content head = leading_rows_at_front(chunk, head_bytes);
  const int64_t k = head.empty() ? 0 : head.front().k.size(0), n = chunk.ref.length;
  *forwarded = n - k;
  if (k == n) return head;
  runtime::PastKV past;
  if (k > 0) {
    past.layers = head;
    past.positions = core_.registry().positions_for(nullptr, k, 0);
  }
  runtime::Content tail;
  if (matchable_by_tokens(chunk) && goes_in_pieces(n - k)) {  // a ForwardPieces scope (orbit/forward_pieces.h)
    tail = forward_in_pieces(core_, chunk.tokens, k, 0, std::move(past), fo);
  } else if (k == 0) {
    return core_.model().forward(core_.registry().input_for(chunk, 0), nullptr, fo).content;
  } else {
    const std::vector<int64_t> rest(chunk.tokens.begin() + k, chunk.tokens.end());
    tail = core_.model().forward(core_.registry().input_for_tokens(rest, k), &past, fo).content;
  }
  if (k == 0) return tail;
  runtime::Content all(head.size());
  for (std::size_t l = 0; l < all.size(); ++l) {
    all[l] = {at::cat({head[l].k, tail[l].k}, 0), at::cat({head[l].v, tail[l].v}, 0)};
  }
  return all;
}

bool KvStore::contains(const std::string& store_key) const {
  check_held();
  return store_->contains(store_key);
}

bool KvStore::available(const std::string& store_key) const {
  return contains(store_key) || core_.jobs().queue().pending(store_key);
}

std::optional<runtime::Patch> KvStore::get_patch(const std::string& key) {
  core_.jobs().queue().await(key);  // only when a job writing it is queued or running
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kPatch) return std::nullopt;
  return patch_to(store::patch_from_value(*hit.value()), core_.model().device());
}

std::optional<runtime::Content> KvStore::get_conditioned(const std::string& key) {
  Result<store::ValuePtr> hit = store().get(key);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kCanonical) return std::nullopt;
  return content_to_model(core_.model(), store::content_from_value(*hit.value()));
}

void KvStore::put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record) {
  const store::PutOptions po =
      kv_put_options(content.empty() ? 1.0 : static_cast<double>(content.front().k.size(0)), false);
  (void)store().put(record.key, store::canonical_value(content_to_host(content)), po);
  catalog_add(chunk_key, std::move(record));
}

void KvStore::put_reusable(const std::string& reuse_key, const runtime::Content& content, const KvState& chain,
                           const KvState& content_chain, const std::vector<int64_t>& tokens) {
  if (content.empty()) return;
  if (!store().contains(reuse_key)) {
    const store::PutOptions po = kv_put_options(static_cast<double>(content.front().k.size(0)), false);
    if (!store().put(reuse_key, store::canonical_value(content_to_host(content)), po).is_ok()) return;
  }
  reuse_index_.add(chain, content_chain, reuse_key, tokens);
}

void KvStore::catalog_add(const std::string& chunk_key, PatchRecord record) {
  std::vector<double> lengths;
  lengths.reserve(record.context.size());
  for (const std::string& key : record.context)
    lengths.push_back(static_cast<double>(core_.registry().key_length(key)));
  catalog_.add(chunk_key, std::move(record), lengths);
}

std::optional<KvStore::StaleMatch> KvStore::closest_patch(const std::string& chunk_key, const PatchShape& shape,
                                                          const ContextWeights& context,
                                                          std::size_t max_records) const {
  read_directory(chunk_key);
  // Availability reads the store, outside the catalog's lock.
  for (StaleMatch& m : catalog_.closest(chunk_key, shape, context.tokens, context.total, max_records)) {
    if (available(m.key)) return std::move(m);
  }
  return std::nullopt;
}

double KvStore::chunk_sensitivity(const std::string& chunk_key) const {
  read_directory(chunk_key);  // the sensitivities of patches an earlier engine formed count too
  return catalog_.sensitivity(chunk_key);
}

double KvStore::worst_patch_sensitivity() const { return catalog_.worst_patch_sensitivity(); }

void KvStore::note_read_patch(const std::string& chunk_key, const std::string& patch_key, const runtime::Patch& patch) {
  catalog_.note_read(chunk_key, patch_key, patch.sensitivity);
}

std::optional<KvStore::PatchFacts> KvStore::patch_facts(const std::string& chunk_key,
                                                        const std::string& patch_key) const {
  if (std::optional<PatchFacts> known = catalog_.facts(chunk_key, patch_key)) return known;
  // The catalog is filled only as this engine forms and reads patches: after a reopen it knows none of the
  // stored ones, and a plan priced them by the rank's stand-in and the engine's sensitivity prior (the
  // worst it has seen, which grows with what it reads) where the patch recorded both when it was formed.
  // A disk hit is promoted, so the apply that follows reads it from memory.
  check_held();
  store::GetOptions local;
  local.remote = false;  // planning does not wait on the network
  Result<store::ValuePtr> hit = store_->get(patch_key, local);
  if (!hit.is_ok() || hit.value()->kind != EntryKind::kPatch) return std::nullopt;
  const runtime::Patch patch = store::patch_from_value(*hit.value());
  return PatchFacts{false, patch.residual, patch.sensitivity};
}

store::PutOptions KvStore::kv_put_options(double recompute_tokens, bool pin) const {
  store::PutOptions po;
  po.tier = core_.options().device_tier_bytes > 0 ? StoreTier::kDevice : StoreTier::kHost;
  po.pin = pin;
  po.recompute_cost = recompute_tokens;
  return po;
}

void KvStore::put_patch(const std::string& chunk_key, const std::vector<std::string>& keys,
                        const runtime::Patch& patch) {
  for (const std::string& k : keys) {
    store::PutOptions opt;
    opt.recompute_cost = static_cast<double>(patch.length);
    (void)store().put(k, store::patch_value(patch_to(patch, c10::Device(c10::kCPU))), opt);
  }
  catalog_.set_formed(chunk_key, keys, patch.residual, patch.sensitivity);
  write_directory(chunk_key);
}

std::vector<PatchRecord> KvStore::stored_directory(const std::string& chunk_key) const {
  if (core_.options().store_dir.empty()) return {};  // memory only: nothing outlives this engine
  check_held();
  store::GetOptions disk;
  disk.promote = false;  // read from disk each time: other engines on the store write it there
  disk.remote = false;   // planning does not wait on the network
  disk.internal = true;  // the engine's own read: not a user's hit or miss
  Result<store::ValuePtr> hit = store_->get(patch_directory_key(chunk_key), disk);
  return hit.is_ok() ? decode_patch_directory(*hit.value(), chunk_key) : std::vector<PatchRecord>{};
}

void KvStore::learn_directory(const std::string& chunk_key, std::vector<PatchRecord> records) const {
  for (PatchRecord& r : records) {
    // Its sensitivity counts in the chunk's mean as a patch's read from the store does (first: add() would make
    // it look formed here, counted already).
    catalog_.note_read(chunk_key, r.key, r.sensitivity);
    catalog_.add(chunk_key, std::move(r), {});
  }
}

void KvStore::read_directory(const std::string& chunk_key) const {
  // Memory only: no directory outlives an engine, and a claim would make a catalog entry per chunk and turn asked.
  if (core_.options().store_dir.empty()) return;
  if (catalog_.claim_directory(chunk_key)) learn_directory(chunk_key, stored_directory(chunk_key));
}

void KvStore::write_directory(const std::string& chunk_key) {
  if (core_.options().store_dir.empty()) return;
  (void)catalog_.claim_directory(chunk_key);  // read below, as it is now
  // What the store lists now (other engines on it may have written since this one read it), then this engine's
  // formed patches, its newest last: the newest kPatchDirectoryRecords of those.
  const std::vector<PatchRecord> mine = catalog_.formed_records(chunk_key, kPatchDirectoryRecords);
  if (mine.empty()) return;
  std::vector<PatchRecord> stored = stored_directory(chunk_key);
  std::vector<PatchRecord> records;
  for (const PatchRecord& r : stored) {
    const bool known = std::any_of(mine.begin(), mine.end(), [&](const PatchRecord& m) { return m.key == r.key; });
    if (!known) records.push_back(r);
  }
  records.insert(records.end(), mine.begin(), mine.end());
  if (records.size() > kPatchDirectoryRecords) records.erase(records.begin(), records.end() - kPatchDirectoryRecords);
  store::PutOptions po;
  po.tier = StoreTier::kDisk;  // not cached in memory: the next read sees other engines' writes
  po.replace = true;
  po.remote = false;  // read from the local tiers only
  // Losing it loses only stale lookups of another engine; nothing is forwarded to rebuild it.
  po.recompute_cost = 0.5;
  (void)store().put(patch_directory_key(chunk_key), patch_directory_value(chunk_key, records), po);
  learn_directory(chunk_key, std::move(stored));
}

void KvStore::note_turn_sensitivity(const std::string& key, double sensitivity) {
  catalog_.record_measured_sensitivity(key, sensitivity);
}

void KvStore::close() {
  if (store_) (void)store_->flush();
  store_.reset();
}

}  // namespace orbit::detail
