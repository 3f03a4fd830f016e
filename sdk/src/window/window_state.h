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
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "orbit/planner/dependency_graph.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/reuse.h"
#include "orbit/window.h"
#include "plan/kv_state.h"
#include "plan/window_meta.h"
#include "window/list_memory.h"
#include "window/window_past.h"

namespace orbit::detail {

// One instance of a window: its metadata and its KV pages (owned; a fork shares the pages copy-on-write).
struct Entry : EntryMeta {
  std::unique_ptr<runtime::PagedSequence> kv;
};

// A chunk instance evicted from a window (recall reinstates it).
// Not held: an evicted chunk is one no window holds, kept registered as long as the engine keeps such chunks
// (EngineOptions::max_idle_chunks; the eviction counts as a use), so that windows' evictions do not hold records
// past that bound. One the engine let go of is forgotten here too (live() null; recall then refuses it, sync
// admits it anew, its KV found in the store by its key).
struct EvictedInstance {
  InstanceId id = 0;
  uint64_t when = 0;  // WindowState::eviction_clock when it was evicted (later = more recent)
  std::weak_ptr<const ChunkRecord> chunk;
  ChunkPtr live() const { return chunk.lock(); }
};

// The window's evicted chunks the engine still keeps (EvictedInstance), by key; those it let go of are dropped
// from `s.evicted` first.
std::map<std::string, ChunkPtr> live_evictions(WindowState& s);

// The window's tentative tail: what its last generate forwarded after it and kept for exact reuse (the query,
// typically the chat template's generation prompt, then the answer), behind the KV states it was computed
// behind. Not an instance: its KV is the store's (keep_read_for_reuse, decode_parts.h), and the next sync or
// append reuses it token by token through the ReuseIndex as far as the new content starts with it. The window
// tracks it so that a heal, which changes the states before it, carries it along (carry_tail, window_ops.h)
// instead of leaving it to be prefilled again on the next read's critical path, when the window's answers
// come back (WindowState::answers_return). The next operation that adds content (a sync, an admit, a turn, a
// recall) settles it: the tail is dropped, and whether it came back is remembered.
struct TentativeTail {
  std::vector<int64_t> tokens;  // the query, then the answer tokens whose KV was kept (non-empty)
  KvState behind;               // the window's state chain they were computed behind
  // The window length their first row was formed at: the window's before them plus the query (each forward
  // runs at its own end; the answer's rows at longer lengths). Read by dynamic-NTK plans (WindowSnapshot).
  int64_t formed_window = 0;
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
  double query_forward_tokens = 0;     // the decoding reads' query forwards (WindowStats::query_forward_tokens)
  double logits_forward_tokens = 0;    // logits()'s query forwards
  // plan_read already ran for the read about to start (generate_n, before it forks the window): the query
  // tokens its look forwarded, for the decode's own add to count (Generation::prompt_forward_tokens) instead
  // of planning the read again; it resets this to -1.
  int64_t read_planned = -1;
  int64_t operations = 0;
  // The stamp of the window's next eviction (EvictedInstance::when), one per evicted chunk; a fork copies it, so
  // the child's own evictions stay more recent than those it inherited.
  uint64_t eviction_clock = 0;
  // Every live instance's conditioning leads only to instances before it (apply_plan.cpp, conditioning_in_order):
  // no reorder or recall has put an instance in front of one it depends on since every instance was last formed.
  bool conditioning_in_order = true;
  int64_t reorders = 0;               // reorders applied (Window::idle prepares moves only for a window that reorders)
  int64_t unchecked_idles = 0;        // idle calls since the last self-check that found the window below heal_min_kl
  ListMemory lists;                   // the lists it was synced to, and how they lost messages (Window::idle)
  InstanceMemory seen;                // its instances at each Window::idle call, and which left between them
  HintWatch hints;                    // the agent's own prepare_sync lists, and whether they made the learned ones idle
  bool preparing_learned = false;     // Window::idle is preparing learned lists: prepare_sync's lists are not hints
  std::optional<TentativeTail> tail;  // set by generate, carried by a heal, settled by what is added next
  // Whether the last tail settled came back (its tokens started an instance the next addition made: the agent
  // sends its answers back, as chat clients do); a heal carries the tail only then. True until one did not.
  bool answers_return = true;
  // Whether it came back as a turn of its own (a turn whose tokens are exactly the tail's, as an agent that
  // appends its answer as a note sends it, rather than inside a longer rendered message): the instance is then
  // served by exact reuse and never forwarded, so a heal's carry also measures the tail's sensitivity as that
  // turn (carry_tail). False until one did.
  bool answers_return_as_turns = false;
  // Its KV as one contiguous past, kept between reads on the CPU (window_past.h; EngineOptions::window_past); a fork
  // starts with its parent's rows. Null: each read gathers the whole window.
  std::shared_ptr<WindowPast> past;

  ~WindowState();                         // releases pages under the engine's pool lock
  bool has_deferred() const;              // an instance's repair waits (WindowPolicy::defer_repairs)
  int64_t index_of(InstanceId id) const;  // -1 when absent
  // Throws naming the caller and the id ("kv: window 1 holds no instance 9").
  const Entry& entry(InstanceId id, const char* what) const;
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

// Marks `w`'s generate callbacks (GenerateOptions::on_token, on_text, on_logprobs) as running on this thread for the
// scope's life, so that the window's operations refuse to run from inside them (refuse_in_callback).
class InCallback {
 public:
  explicit InCallback(const WindowState& w);
  ~InCallback();
  InCallback(const InCallback&) = delete;
  InCallback& operator=(const InCallback&) = delete;
};

// Throws orbit::Error naming `what` (the operation called) when a generate callback of `w` runs on this thread:
// the decode reads the window's KV and appends to it between its steps, so the callback must not change it or
// start another read of it.
void refuse_in_callback(const WindowState& w, const char* what);

// The window as planning reads it (window_meta.h): pointers to its entries' metadata, valid while `s` does
// not change.
WindowSnapshot snapshot(const WindowState& s);

// Row r of the embedding chunk with content key `key` (64 hex): −1 − (int(key[0:8], 16) · 2^20 + r mod 2^20).
// Negative, so never a vocabulary id, and below 2^53 in magnitude, so exact in any JSON reader; two chunks
// whose keys share their first 8 hex digits would share stand-ins (a yardstick slightly too strong).
std::vector<int64_t> stand_in_tokens(const std::string& key, int64_t rows);

// A copy-on-write copy of a window's state (Window::fork): a fresh id, every entry's pages shared.
std::unique_ptr<WindowState> fork_state(const WindowState& s);

// Concatenates per-entry contents (one Content each, in window order) and their positions into a past.
runtime::PastKV concat_past(int64_t num_layers, const std::vector<runtime::Content>& contents,
                            const std::vector<at::Tensor>& positions);
// The window positions of `entries`' rows, placed one after another from `first_position` (each entry's extent
// apart): [T], or [3, T] for M-RoPE models; *next_position (when given) is where the next entry would start.
// 1-D positions are written straight into one tensor (a window of many short chunks would otherwise cost a few
// small tensors per chunk); grids are read per entry.
at::Tensor entry_positions(EngineCore& core, const std::vector<const Entry*>& entries, int64_t first_position,
                           int64_t* next_position = nullptr);
// The pool sequences holding `entries`' KV, in order.
std::vector<const runtime::PagedSequence*> entry_sequences(const std::vector<const Entry*>& entries);
// Content of entries [0, end) gathered with their window positions, ready as a forward's past: one copy of the
// rows (SharedPool::gather_all), however many entries.
runtime::PastKV gather_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position);
// The same past for reading (logits, generate): on a CUDA engine the entries' pages are read in place by
// the paged kernel (runtime/paged_past.h), placements' patch factors added as the kernel reads their rows
// (SharedPool::paged); elsewhere gather_past's copy.
runtime::PastKV read_past(EngineCore& core, const std::vector<const Entry*>& entries, int64_t* next_position);
// Each entry's key in a past of the window (WindowPast::Key: content version, first position, length), in window
// order; *next_position (when given) is where the next entry would start.
std::vector<WindowPast::Key> past_keys(const WindowState& s, int64_t* next_position = nullptr);
// The same over every entry of `s`; where the window keeps its past (WindowState::past), from it, gathering only
// the entries it does not hold as they are, and keeping the result for the next read.
runtime::PastKV read_past(const WindowState& s, int64_t* next_position);
// The KV of one entry as a Content (copied out of its pages).
runtime::Content entry_content(EngineCore& core, const Entry& entry);

}  // namespace orbit::detail
