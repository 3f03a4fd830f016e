// PlanEnv: everything the planner may ask of the engine behind a window (docs/ARCHITECTURE.md §3). Planning
// reads a WindowSnapshot (window_meta.h), a Layout and a PlanEnv, and nothing else; it changes none of them.
// The engine's implementation is EnginePlanEnv (engine_plan_env.h); the planner's decision tests use a fake
// with no model and no torch.
//
// Every method is const and must be safe to call while other windows of the same engine plan or apply:
// the answers may change between two plans (the store fills, the pool drains), never within a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "orbit/store.h"
#include "plan/kv_state.h"
#include "plan/window_meta.h"

namespace orbit::detail {

// The model's shape as planning uses it.
struct ModelLimits {
  int64_t num_layers = 0;
  int64_t k_width = 0;             // width of a layer's content K rows (a patch's full rank is min(n, this))
  int64_t v_width = 0;             // ... and of V
  int64_t kv_bytes_per_token = 0;  // KV bytes one token holds in the pool
  int64_t max_positions = 0;       // the model's position limit; 0: none
  // Where max_positions comes from, for refusals (window_position_limit_source: a static string); null: unsaid.
  const char* max_positions_source = nullptr;
  // Dynamic-NTK RoPE's anchor and factor (not active for any other model): the planner prices content read
  // in a window of another length than it was formed in (planner::shortfall_feature).
  planner::DynamicNtk dynamic_ntk;
};

// What the catalog knows of one stored patch: formed full-rank over an exact context, its residual (the
// share of the deficit's energy its factors leave out) and its sensitivity (runtime::Patch::sensitivity: a
// measurement of its chunk); each -1 until formed, or unknown.
struct PatchFacts {
  bool exact = false;
  double residual = -1;
  double sensitivity = -1;
};

// The stored patch closest to a context, and how far its own context was (0: the same set of keys).
struct StaleMatch {
  std::string key;
  double divergence = 1;
  int64_t rank_k = 0;  // the ranks the patch's factors keep (0: unknown, the plan's are reported)
  int64_t rank_v = 0;
};

// Patch keys of a chunk behind a context under a policy.
struct PatchKeys {
  std::string exact;
  std::string orbit;
  std::string conditioned;
  std::string variant;
  int64_t rank_k = 0;
  int64_t rank_v = 0;
  bool full_rank = false;
};

struct PoolPages {
  int64_t free = 0;
  int64_t total = 0;
};

class PlanEnv {
 public:
  virtual ~PlanEnv() = default;

  virtual const ModelLimits& limits() const = 0;
  // Throws orbit::Error "engine is closed" once the engine is closing.
  virtual void check_open() const = 0;
  // How reads of the window will attend over its KV (Plan::attention).
  virtual std::string attention_path() const = 0;
  virtual planner::CostModel cost_model() const = 0;
  virtual planner::FidelityModel fidelity_model() const = 0;
  // The content key of a live turn's tokens (the same hash as a token chunk's).
  virtual std::string turn_key(const std::vector<int64_t>& tokens) const = 0;

  // ---- the store and the patch catalog ----
  // Where the chunk's canonical is stored; nullopt: it must be encoded.
  virtual std::optional<StoreTier> canonical_residence(const std::string& chunk_key) const = 0;
  // What reading the stored KV under `store_key` brings back short of what was written, as a share of its energy
  // (store::ChunkStore::quantization_error: > 0 for KV read back from int8 rows); 0 for exact KV.
  virtual double stored_quantization(const std::string& store_key) const {
    (void)store_key;
    return 0.0;
  }
  virtual bool contains(const std::string& store_key) const = 0;
  // Stored, or being formed in the background (applying it waits for that job).
  virtual bool available(const std::string& store_key) const = 0;
  // A stored patch the catalog does not know (formed by another process, or before the store was opened)
  // answers with what the store recorded with it (exact false: its context is not stored).
  virtual std::optional<PatchFacts> patch_facts(const std::string& chunk_key, const std::string& patch_key) const = 0;
  // The chunk's stored patch of `keys.variant`, at ranks no lower than `keys.rank_k` / `keys.rank_v`, formed
  // under the context closest to `context`, among its newest `max_records` such patches; nullopt when none.
  virtual std::optional<StaleMatch> closest_patch(const std::string& chunk_key, const PatchKeys& keys,
                                                  const ContextWeights& context, std::size_t max_records) const = 0;
  // The mean measured sensitivity of the chunk's patches, or of a live turn by its content key (measured
  // after its first prefill, EngineCore::queue_turn_sensitivity); -1 when none is known.
  virtual double chunk_sensitivity(const std::string& chunk_key) const = 0;
  // The sensitivity a chunk nothing has measured is priced at (a window's first chunk, formed at position 0,
  // is never patched): the largest patch sensitivity measured on this engine, the model's worst case seen
  // (planner/fidelity_model.h); -1 (the model's reference) before any, and for environments that keep none.
  virtual double sensitivity_prior() const { return -1; }
  // Exact reuse: what forwards stored, by the KV states before them (kv_state.h).
  virtual const ReuseIndex& reuse_index() const = 0;

  // ---- the KV pool the engine's windows share ----
  virtual PoolPages pool_pages() const = 0;
  // Whether a placement of the chunk (a step served from its canonical: canonical, stored-patch, blind)
  // reads a canonical page set another placement holds already, so it takes no page of its own
  // (SharedPool::place). False when the engine writes placements as copies, or no set is held.
  virtual bool placement_shares(const std::string& chunk_key) const = 0;
};

// `context`: ordered content keys; the first `prefix` of them are the window's leading turns (fixed under
// reorder).
PatchKeys patch_keys(const ModelLimits& model, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const std::vector<std::string>& context, std::size_t prefix);
// The same from a signer holding that context (and constructed with that prefix): O(1) in its length.
PatchKeys patch_keys(const ModelLimits& model, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const ContextSigner& signer);

// The refusal apply() gives a result spanning `extent` positions and holding `device_bytes` (empty: it fits):
// past the model's position limit (naming `max_positions_source` where non-null, as ModelLimits does), or
// (*capacity = true) over the window's max_bytes.
std::string limit_refusal(Operation op, int64_t extent, int64_t device_bytes, int64_t max_positions,
                          const char* max_positions_source, int64_t max_bytes, bool* capacity);

// Plans one operation: per instance of `layout`, the serving action that makes its KV (layout_planner.h).
Plan plan_layout(const WindowSnapshot& window, const Layout& layout, const PlanEnv& env);

}  // namespace orbit::detail
