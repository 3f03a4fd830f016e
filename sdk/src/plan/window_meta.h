// What planning sees of a window and its chunks (docs/ARCHITECTURE.md §3, §5): plain metadata, no tensors
// and no KV. This header, plan_env.h and the planner's sources (layout_*.cpp, actions_plan.cpp) form the
// torch-free planning library `orbit_plan`: the planner's decision tests link it with a fake PlanEnv and
// no model.
//
//   ChunkRecord     a registered chunk: its reference and tokens (an embedding chunk's tensors are opaque
//                   here: ChunkTensors, defined in engine_core.h)
//   EntryMeta       one instance of a window apart from its KV: how its KV was formed and what it carries
//   WindowSnapshot  the window as planning reads it: its entries' metadata in window order, its id and
//                   version, its options and its page geometry
//   Slot, Layout    an operation's result before planning: the instances after it, in order, and what leaves
//
// Invariants of a WindowSnapshot: entries are in window order and non-null; an instance's positions are the
// sum of the extents before it (positions are never stored); every EntryMeta::id is unique in the window.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/plan.h"
#include "orbit/window.h"
#include "plan/kv_state.h"

namespace orbit::detail {

struct ChunkTensors;  // an embedding chunk's tensors (engine_core.h)

struct ChunkRecord {
  ChunkRef ref;
  std::vector<int64_t> tokens;            // kTokens
  std::shared_ptr<ChunkTensors> tensors;  // kEmbeddings: embeddings and grid; null for token chunks
  bool pinned = false;
};
// Records are shared by whatever uses them (chunk_registry.h).
using ChunkPtr = std::shared_ptr<const ChunkRecord>;

// A context as a multiset of keys weighted by their tokens (a key's hash → its tokens, summed over
// repeats): what a stale patch's divergence compares. The planner grows one with its context, so each
// comparison costs the stored patch's context, not both.
// A key's hash there: FNV-1a over its bytes, the same in every process and build (a chunk's patch directory in
// the store keeps its patches' contexts as these hashes, engine/patch_directory.h).
uint64_t context_key_hash(const std::string& key);

struct ContextWeights {
  std::unordered_map<uint64_t, double> tokens;
  double total = 0;
  void push(const std::string& key, double length);
};

struct ContextItem {
  std::string key;
  uint64_t version = 0;
  friend bool operator==(const ContextItem& a, const ContextItem& b) {
    return a.key == b.key && a.version == b.version;
  }
};

// Order-sensitive running hash of a context: h' = context_hash(h, key, version), starting from 0.
uint64_t context_hash(uint64_t h, const std::string& key, uint64_t version);

// What a window knows about one instance, apart from its KV: plain, copyable data (a fork or a kept
// instance copies it whole).
struct EntryMeta {
  InstanceId id = 0;
  bool is_turn = false;
  std::string key;                   // content key (chunks and turns alike)
  ChunkPtr chunk;                    // chunks only (shared with the engine's registry)
  std::vector<int64_t> turn_tokens;  // turns only
  int64_t length = 0;
  int64_t extent = 0;
  uint64_t version = 0;            // content version (changes whenever the KV is re-formed)
  uint64_t formed_on = 0;          // context_hash of the antecedents (key, version) it was formed on
  uint64_t formed_on_keys = 0;     // context_hash of their keys alone (version 0)
  int64_t formed_on_tokens = 0;    // their tokens
  double drift_tokens = 0;         // tokens removed or inserted before it since it was formed
  bool exact_when_formed = false;  // formed exactly over an exact context
  double predicted_kl = 0;         // the fidelity model's KL this instance carries (0 when exact)
  double keep_change = 0;          // the keep feature accumulated since formed (fidelity_model.h)
  bool permuted = false;           // its antecedents were reordered since formed (kept over a reorder)
  double kl_per_weight = 0;        // of which its serving action's own loss, per unit recency weight
  // Dynamic-NTK RoPE (ModelLimits::dynamic_ntk): the window length whose rotary base its content carries (the
  // length the forward that made it ran at, a canonical's own length; apply's formed_window), and of predicted_kl what
  // the last plan priced for reading it at another length (PlanStep::shortfall_kl). 0 for every other model.
  int64_t formed_window = 0;
  double shortfall_kl = 0;
  StepAction formed_by = StepAction::kKeep;
  PatchMatch match = PatchMatch::kNone;
  std::string patch_key;
  bool deferred = false;  // an edit left its repair to the next read (WindowPolicy::defer_repairs)
  // The share of the attention the last generate's query put on it (its first forward's last token, averaged
  // over heads and layers; runtime::ForwardOptions::key_attention), or -1 before a generate saw it. What the
  // next query reads, whatever the instance's distance: the planner weighs its losses by it (layout_choose).
  double attention = -1;
  // The share of the attention the read being planned puts on it (WindowPolicy::read_attention_weight: the
  // read's query forwarded over the window as it stands, before the read's plan), or -1 outside that plan.
  double read_attention = -1;
  KvState state;  // what its KV is (kv_state.h): equal states, equal KV

  ChunkRef ref() const;
};

// The window as planning reads it (see the invariants above). The window's state makes one per plan
// (snapshot() in window_state.h): the entries are pointers into it, valid while it does not change.
struct WindowSnapshot {
  uint64_t id = 0;
  uint64_t version = 0;                    // the state a plan made from it is tied to
  const WindowOptions* options = nullptr;  // its policy and max_bytes
  std::vector<const EntryMeta*> entries;   // window order
  int64_t page_size = 1;                   // tokens per KV page
  int64_t page_bytes = 0;                  // bytes per KV page
  // The rows its last read kept for exact reuse (the tentative tail, window_state.h): the store key they are
  // under, the state chain they were computed behind (the window's, from the empty chain), and the window
  // length their first row was formed at (the read's window after its query); tail_formed 0: none. A plan
  // with a rope window looks them up apart (dynamic-NTK RoPE: its chain starts from its length's mark).
  std::string tail_key;
  KvState tail_behind;
  int64_t tail_formed = 0;

  int64_t pages_for(int64_t tokens) const { return (tokens + page_size - 1) / page_size; }
};

struct Slot {
  int64_t existing = -1;  // index into the window's entries, or -1 for a new instance
  InstanceId id = 0;
  ChunkPtr chunk;                    // new chunk instances
  std::vector<int64_t> turn_tokens;  // new turns
  bool is_turn = false;
  bool force = false;  // re-condition even when survivors are kept (cascade, reorder)
  // Serve again even when formed on this very context (heal: a formation there may have been approximate, a
  // stale or orbit patch or a truncated one); with force.
  bool reform = false;
  std::string reason;
};

struct Layout {
  Operation op = Operation::kAdmit;
  std::vector<Slot> slots;
  std::vector<int64_t> evict;  // indices into the window's entries
  std::vector<InstanceId> cascade;
  std::string change_reason;             // why survivors' context changed ("chunk 'a' evicted")
  bool reorder_relookup = false;         // reorder: every instance whose key context changed re-looks up
  const WindowPolicy* policy = nullptr;  // plan under this policy instead of the window's (heal)
};

}  // namespace orbit::detail
