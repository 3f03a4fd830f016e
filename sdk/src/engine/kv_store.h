// KvStore: the engine's facade over its chunk store (EngineCore, engine_core.h) for the KV it keeps:
// canonicals (read, or encoded and stored), patches, conditioned KV, the KV forwards computed for exact
// reuse (with the reuse index that finds their leading runs), and the patch catalog (what each chunk's
// patches were formed under, their residuals and sensitivities).
//
// The store holds float32 host tensors whatever the model's device and dtype; this facade converts at its
// boundary. The store may only be used inside an engine operation (an OpHold): close() destroys it once
// none is in flight. The store, the catalog and the reuse index each lock on their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/chunk_store.h"
#include "plan/kv_state.h"
#include "plan/patch_catalog.h"
#include "plan/window_meta.h"

namespace orbit::detail {

class EngineCore;

class KvStore {
 public:
  KvStore(EngineCore& core, const store::ChunkStoreOptions& options);
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // The store itself; only inside an engine operation (throws an internal error otherwise).
  store::ChunkStore& store();
  // Where the canonical is stored (nullopt: it must be encoded).
  std::optional<StoreTier> canonical_residence(const std::string& key) const;
  // What a read of `key` brings back short of what was written (store::ChunkStore::quantization_error).
  double quantization_error(const std::string& key) const;
  // The canonical (from the store, else encoded and stored). *encoded = true when it was not in the store
  // and was made here. Making it loads the longest leading run of its tokens that the reuse index holds
  // under the empty chain (another canonical, or a forward at the front of a window: the same rows a
  // forward behind nothing computes) and forwards only the rest; *forwarded = the tokens forwarded (0 for a
  // store hit), *bytes_read = what the read moved (the stored canonical, or the loaded leading rows).
  // Every canonical it stores or reads is indexed there in turn (token chunks only). The encode's forward
  // has an interruption point before each layer (orbit/interrupt.h): Interrupted thrown there stores nothing.
  runtime::Content canonical(const ChunkRecord& chunk, bool* encoded = nullptr, int64_t* bytes_read = nullptr,
                             int64_t* forwarded = nullptr);
  bool contains(const std::string& store_key) const;
  // Stored, or queued/being formed in the background (get_patch then waits for that one job).
  bool available(const std::string& store_key) const;
  std::optional<runtime::Patch> get_patch(const std::string& key);
  std::optional<runtime::Content> get_conditioned(const std::string& key);
  void put_conditioned(const runtime::Content& content, const std::string& chunk_key, PatchRecord record);
  // A patch formed in the background, stored under each of `keys` (the catalog learns its residual and
  // sensitivity).
  void put_patch(const std::string& chunk_key, const std::vector<std::string>& keys, const runtime::Patch& patch);
  // Exact reuse (kv_state.h): the KV a forward computed, stored under its reuse key (no catalog entry; read
  // back with get_conditioned). A store that refuses it (budgets full of pinned entries) only loses the reuse.
  // `tokens` (the instance's token ids; empty for embeddings) go to reuse_index() under `chain` and
  // `content_chain`, the states and the content before it, so a later forward behind either can load a
  // matching leading run.
  void put_reusable(const std::string& reuse_key, const runtime::Content& content, const KvState& chain,
                    const KvState& content_chain, const std::vector<int64_t>& tokens);
  const ReuseIndex& reuse_index() const { return reuse_index_; }

  // ---- the patch catalog ----
  // What the catalog knows of one of the chunk's patches: whether it was formed full-rank over an exact
  // context, its residual and sensitivity (-1 until formed, or unknown). A patch the catalog does not know
  // (formed by another process, before this engine opened the store, or forgotten) is read from the local
  // tiers for the residual and sensitivity stored with it (exact false); nullopt when none is stored.
  using PatchFacts = PatchCatalog::Facts;
  std::optional<PatchFacts> patch_facts(const std::string& chunk_key, const std::string& patch_key) const;
  // The stored patch of `chunk_key` (factors of `shape`'s variant at no lower ranks, not a conditioned KV)
  // formed under the context closest to `context`: 1 − Σ min / Σ max over the two multisets of keys weighted
  // by tokens (0 = the same set, 1 = disjoint), among its newest `max_records` such patches; nullopt when none
  // is available. Patches formed by another engine on the same store directory count too: their contexts are
  // read from the chunk's patch directory once (engine/patch_directory.h).
  using StaleMatch = PatchCatalog::Candidate;
  std::optional<StaleMatch> closest_patch(const std::string& chunk_key, const PatchShape& shape,
                                          const ContextWeights& context, std::size_t max_records) const;
  // The mean runtime::Patch::sensitivity over the chunk's patches this engine has formed or read from
  // the store, or found in the chunk's patch directory (a live turn's measured one, by its content key); -1
  // when it knows none.
  double chunk_sensitivity(const std::string& chunk_key) const;
  // The largest patch sensitivity this engine has recorded (PatchCatalog::worst_patch_sensitivity); -1: none.
  double worst_patch_sensitivity() const;
  // Remembers the sensitivity of a patch read from the store (formed by another process, or before this
  // engine opened the store); no-op when the patch did not record one.
  void note_read_patch(const std::string& chunk_key, const std::string& patch_key, const runtime::Patch& patch);
  // A live turn's measured sensitivity, recorded under its content key.
  void note_turn_sensitivity(const std::string& key, double sensitivity);
  // Adds `record` to the catalog with its context's token lengths (ChunkRegistry::key_length).
  void catalog_add(const std::string& chunk_key, PatchRecord record);
  // The catalog's records and bytes, against its bound (EngineStats::patch_catalog).
  TableUsage catalog_usage() const {
    return {static_cast<int64_t>(catalog_.records()), static_cast<int64_t>(catalog_.bytes()), 0,
            static_cast<int64_t>(catalog_.max_bytes())};
  }

  // Flushes and destroys the store (EngineCore::close, once no operation is in flight).
  void close();

 private:
  // Where canonical-shaped KV (canonicals, conditioned KV) is put: the device tier when there is one.
  store::PutOptions kv_put_options(double recompute_tokens, bool pin) const;
  void check_held() const;
  // The records of the chunk's patch directory (engine/patch_directory.h) as the disk holds it now; none for a
  // memory-only store (nothing outlives the engine) or when none decodes.
  std::vector<PatchRecord> stored_directory(const std::string& chunk_key) const;
  // Adds them to the catalog, their sensitivities counted as read patches' are.
  void learn_directory(const std::string& chunk_key, std::vector<PatchRecord> records) const;
  // Reads the chunk's directory into the catalog the first time it is asked for the chunk since the catalog
  // learned of it.
  void read_directory(const std::string& chunk_key) const;
  // Stores the chunk's directory: what the disk lists now (other engines' writes since) and this engine's
  // formed patches of the chunk after them, the newest kPatchDirectoryRecords; then learns what it read.
  void write_directory(const std::string& chunk_key);
  // The canonical's rows made here: its leading rows from the index's empty chain, the rest forwarded.
  runtime::Content encode_canonical(const ChunkRecord& chunk, int64_t* head_bytes, int64_t* forwarded);
  // The longest leading run of the chunk's tokens stored under the empty chain (empty: none usable).
  runtime::Content leading_rows_at_front(const ChunkRecord& chunk, int64_t* bytes_read);
  void index_canonical(const ChunkRecord& chunk);
  static bool matchable_by_tokens(const ChunkRecord& chunk);

  EngineCore& core_;
  std::unique_ptr<store::ChunkStore> store_;
  ReuseIndex reuse_index_;        // its own lock
  mutable PatchCatalog catalog_;  // its own lock; filled from patch directories as lookups need them
};

// The store's options from EngineOptions (tiers, budgets, eviction, cold tier, remote); throws orbit::Error
// naming the option at fault (store_options.cpp). `core` must have its model and chunk registry.
store::ChunkStoreOptions engine_store_options(const EngineCore& core);

}  // namespace orbit::detail
