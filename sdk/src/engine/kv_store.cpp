// KvStore (kv_store.h): canonicals, patches, conditioned and reusable KV through the chunk store, and the
// patch catalog.
#include "engine/kv_store.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "engine/engine_core.h"
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

runtime::Content KvStore::canonical(const ChunkRecord& chunk, bool* encoded, int64_t* bytes_read) {
  if (encoded != nullptr) *encoded = false;
  if (bytes_read != nullptr) *bytes_read = 0;
  Result<store::ValuePtr> hit = store().get(chunk.ref.key);
  if (hit.is_ok()) {
    if (bytes_read != nullptr) *bytes_read = hit.value()->bytes();
    return content_to_model(core_.model(), store::content_from_value(*hit.value()));
  }
  c10::InferenceMode guard;
  runtime::ForwardInput in = core_.registry().input_for(chunk, 0);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  runtime::Content content = core_.model().forward(in, nullptr, fo).content;
  const store::PutOptions po = kv_put_options(static_cast<double>(chunk.ref.length), chunk.pinned);
  // A refusal (budgets full of pinned entries) or a disk error only means the canonical is not kept:
  // the window still holds its KV, and the next use encodes again.
  (void)store().put(chunk.ref.key, store::canonical_value(content_to_host(content)), po);
  if (encoded != nullptr) *encoded = true;
  Counters d;
  d.canonicals_encoded = 1;
  d.forward_tokens = static_cast<double>(chunk.ref.length);
  core_.usage().count(d);
  return content;
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

std::optional<KvStore::StaleMatch> KvStore::closest_patch(const std::string& chunk_key, const std::string& variant,
                                                          const ContextWeights& context,
                                                          std::size_t max_records) const {
  // Availability reads the store, outside the catalog's lock.
  for (StaleMatch& m : catalog_.closest(chunk_key, variant, context.tokens, context.total, max_records)) {
    if (available(m.key)) return std::move(m);
  }
  return std::nullopt;
}

double KvStore::chunk_sensitivity(const std::string& chunk_key) const { return catalog_.sensitivity(chunk_key); }

void KvStore::note_read_patch(const std::string& chunk_key, const std::string& patch_key, const runtime::Patch& patch) {
  catalog_.note_read(chunk_key, patch_key, patch.sensitivity);
}

std::optional<KvStore::PatchFacts> KvStore::patch_facts(const std::string& chunk_key,
                                                        const std::string& patch_key) const {
  return catalog_.facts(chunk_key, patch_key);
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
}

void KvStore::note_turn_sensitivity(const std::string& key, double sensitivity) {
  catalog_.record_measured_sensitivity(key, sensitivity);
}

void KvStore::close() {
  if (store_) (void)store_->flush();
  store_.reset();
}

}  // namespace orbit::detail
