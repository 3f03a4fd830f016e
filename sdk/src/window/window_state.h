// A window's private state (window.h is its public face) and the helpers planning and applying share.
//
//   entries    the instances in window order; each holds its KV (content channel, pre-RoPE) in pool
//              pages (a PagedSequence) and how that KV was formed: a hash of the antecedents it saw, with
//              their content versions, so a change of context is detected exactly (up to a 64-bit hash)
//              in O(1) per instance, and how many tokens were removed or inserted before it since
//   graph      the planner's dependency graph: antecedent instance -> patch -> conditioned instance
//   evicted    chunk key -> the evicted instance and when (recall reinstates it)
//
// Positions are never stored with the KV: an instance's positions follow from the order (extents of
// the instances before it), and the forward pass rotates keys on the fly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/planner/dependency_graph.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/reuse.h"
#include "orbit/window.h"
#include "window/engine_core.h"
#include "window/kv_state.h"

namespace orbit::detail {

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
  std::string key;                     // content key (chunks and turns alike)
  const ChunkRecord* chunk = nullptr;  // chunks only (owned by the engine)
  std::vector<int64_t> turn_tokens;    // turns only
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
  double kl_per_weight = 0;        // of which its serving action's own loss, per unit recency weight
  StepAction formed_by = StepAction::kKeep;
  PatchMatch match = PatchMatch::kNone;
  std::string patch_key;
  bool deferred = false;  // an edit left its repair to the next read (WindowPolicy::defer_repairs)
  KvState state;          // what its KV is (kv_state.h): equal states, equal KV

  ChunkRef ref() const;
};

// One instance of a window: its metadata and its KV pages (owned; a fork shares the pages copy-on-write).
struct Entry : EntryMeta {
  std::unique_ptr<runtime::PagedSequence> kv;
};

// A chunk instance evicted from a window (recall reinstates it).
struct EvictedInstance {
  InstanceId id = 0;
  uint64_t when = 0;  // the window's operation count when it was evicted (later = more recent)
};

struct WindowState {
  std::shared_ptr<EngineCore> core;
  uint64_t id = 0;
  WindowOptions options;
  uint64_t version = 0;
  std::vector<Entry> entries;
  planner::DependencyGraph graph;
  std::map<std::string, EvictedInstance> evicted;  // chunk key -> evicted instance
  double forward_tokens = 0;
  double critical_forward_tokens = 0;  // of which on the critical path (not heals, not idle-time preparation)
  double prefix_cache_tokens = 0;      // what a prefix cache would have forwarded for the same reads
  double radix_cache_tokens = 0;       // what a radix cache would have forwarded for the same model calls
  int64_t operations = 0;
  int64_t reorders = 0;  // reorders applied (Window::idle prepares moves only for a window that reorders)

  ~WindowState();                           // releases pages under the engine's pool lock
  bool has_deferred() const;                // an instance's repair waits (WindowPolicy::defer_repairs)
  int64_t index_of(InstanceId id) const;    // -1 when absent
  const Entry& entry(InstanceId id) const;  // throws naming the id
  int64_t tokens() const;
  int64_t page_bytes() const;  // bytes of one pool page
  int64_t pages_for(int64_t tokens) const;
  int64_t device_bytes() const;  // pages held × page bytes
  // context_hash of every entry's current antecedents, in window order (one O(n) sweep).
  std::vector<uint64_t> context_hashes() const;
  // The KV-state chain over every entry (kv_state.h): what a forward after the window is formed behind.
  KvState state_chain() const;
  KvState content_chain() const;  // the same over the entries' content keys
  // The token ids the window holds, in order (a turn's, a token chunk's; an embedding chunk's stand-ins):
  // what a radix cache reading the window sees.
  std::vector<int64_t> token_ids() const;
};

// Row r of the embedding chunk with content key `key` (64 hex): −1 − (int(key[0:8], 16) · 2^20 + r mod 2^20).
// Negative, so never a vocabulary id, and below 2^53 in magnitude, so exact in any JSON reader; two chunks
// whose keys share their first 8 hex digits would share stand-ins (a yardstick slightly too strong).
std::vector<int64_t> stand_in_tokens(const std::string& key, int64_t rows);

// A copy-on-write copy of a window's state (Window::fork): a fresh id, every entry's pages shared.
std::unique_ptr<WindowState> fork_state(const WindowState& s);

// Concatenates per-entry contents (one Content each, in window order) and their positions into a past.
runtime::PastKV concat_past(int64_t num_layers, const std::vector<runtime::Content>& contents,
                            const std::vector<at::Tensor>& positions);
// Content of entries [0, end) gathered with their window positions, ready as a forward's past.
runtime::PastKV gather_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position);
// The same past for reading (logits, generate): on a CUDA engine the entries' pages are read in place by
// the paged kernel (runtime/paged_past.h), elsewhere gather_past's copy.
runtime::PastKV read_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position);
// The KV of one entry as a Content (copied out of its pages).
runtime::Content entry_content(EngineCore& core, const Entry& entry);

}  // namespace orbit::detail
