// Repair strategies behind one interface (docs/ARCHITECTURE.md §4).
//
// A scenario is one window with a reused chunk B between exact context and a live query:
//
//     positions  0 ............ n_C-1 | n_C ....... n_C+n_B-1 | n_C+n_B ... n_C+n_B+n_Q-1
//     window     C_1 · C_2 · … · C_K  |  B (reused chunk)      |  Q (query, live tokens)
//                exact prefill         |  repaired by the arm  |  decoded over [C, B]
//
// (Positions as drawn for a token context; in general B starts at the context's last position + 1, as
// conditioned() places it, and Q follows B.) C's KV is exact (one prefill of the concatenated context
// chunks). B's KV is what a RepairStrategy produces, in content form (keys before RoPE; the forward
// relocates it to B's positions on the fly). Q is then decoded over [C exact, B repaired] and its
// next-token logits ([n_Q, vocab], row i after Q[0..i]) are compared with those over [C exact, B exact]
// (fidelity.h).
//
// The work every arm shares (the context prefill, B's canonical KV(B|∅), B's exact KV(B|C), and the
// query's logits over exact and over blind B) is computed once by prepare_scenario(), so all arms run
// side by side on identical inputs.
//
// Accounting, per arm (RepairCost):
//   forward_tokens   per-reuse forward work on B, in token-forwards through the whole model: a token
//                    through l of the L layers counts l/L. Re-prefill costs n_B.
//   forming_tokens   one-time forward work to build what is stored (a patch's conditioned forward), in the
//                    same unit; amortised over every later reuse, which then costs forward_tokens.
//   patch_bytes      bytes stored besides the canonical (patch factors, float32).
//   seconds          wall seconds of the per-reuse repair (not the query decode, not forming).
//   forming_seconds  wall seconds of forming (for patch arms: the shared conditioned prefill plus the SVD).
//   exact            the arm's B equals re-prefill by construction (up to float rounding).
//
// Strategy specs (make_strategy):
//   reprefill        B prefilled in context. n_B forward tokens; exact. The ceiling.
//   blind            canonical relocated, no repair. 0 forwards; exact only when the context is empty.
//   prefix           a prefix/radix cache: B's cached KV was computed behind the empty prefix, so it hits
//                    only when the context is empty (0 forwards); otherwise B is re-prefilled (n_B). Exact.
//   cacheblend:R     CacheBlend with recompute ratio R in [0, 1]. Selection: B's first two layers run in
//                    context (layer 0's KV depends only on each token's embedding, so the deviation first
//                    shows at layer 1), tokens are ranked by ‖KV₁(ctx) − KV₁(canonical)‖² (K and V
//                    together), and the top ⌈R·n_B⌉ are recomputed through every layer over the
//                    canonical KV of the others (ForwardOptions::recompute/cached). Cost: 2·n_B/L +
//                    ⌈R·n_B⌉ forward tokens; the selection pass is skipped (0 cost) when ⌈R·n_B⌉ is 0 or n_B.
//                    For a 1-layer model the deviation cannot be seen before the layer, and the first
//                    tokens are taken.
//   firstk:K         EPIC/MPIC: the first min(K, n_B) tokens of B recomputed in context, the rest canonical.
//                    min(K, n_B) forward tokens; exact when K ≥ n_B.
//   patch:M          rank-M patch (keys and values) formed from this very context (exact signature), then
//                    applied to the canonical. 0 forwards per reuse; forming costs n_B; exact-SVD.
//   patch:MK/MV      separate key and value ranks. Every rank must be ≤ min(n_B, D), D = the stored row
//                    width (H_kv·d for GQA/MHA keys and values); check() refuses others.
//     modifiers      `:deep` — patch only layers ≥ ℓ₀ = choose_first_layer(Δ, 0.9) (reuse.h);
//                    `:rand` — randomized SVD instead of the exact one. E.g. patch:32:deep:rand.
//   orbit:M          orbit patch (also orbit:MK/MV[:rand]): rank-M factors of the mean deficit over orderings
//                    of the context chunks (the antecedent set; all K! orderings for K ≤ 4, else 24 distinct
//                    seeded shuffles, as OrbitOptions' defaults in reuse.h), applied on the scenario's order.
//                    With ≥ 2 context chunks the scenario's own order is held out of the mean (the paper's
//                    protocol: the patch never saw the ordering it is tested on); `:all` keeps it in. With
//                    0 or 1 chunks the orbit is that one order, so the arm equals patch:M. Forming costs
//                    (n_C + n_B) forward tokens per ordering averaged.
//
// Threading: strategies are immutable after construction and may be used from several threads; a
// PreparedScenario is read-only once built. Everything here is float32 on CPU (the runtime's CPU path).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"

namespace orbit::runtime {

// The window's pieces. Every chunk and the query must be non-empty token lists (the context may hold
// no chunks at all).
struct Scenario {
  std::vector<ChunkInput> context;  // C_1..C_K
  ChunkInput chunk;                 // B
  std::vector<int64_t> query;       // Q
};

// The shared per-scenario work. Holds a non-owning pointer to the model, which must outlive it.
struct PreparedScenario {
  const Model* model = nullptr;
  Scenario scenario;
  int64_t context_length = 0;  // n_C: total tokens of the context chunks
  int64_t chunk_length = 0;    // n_B
  PastKV context;              // C's exact KV at positions 0..n_C-1 (num_layers entries, empty when n_C = 0)
  at::Tensor chunk_positions;  // int64 [n_B]: B's positions, from the context's last position + 1 (as
                               // conditioned() places B); n_C.. for a plain text context
  at::Tensor query_positions;  // int64 [n_Q]: right after B
  Content canonical;           // KV(B|∅)
  Content exact;               // KV(B|C) (B at n_C..n_C+n_B-1)
  double exact_seconds = 0;    // wall seconds of the conditioned prefill that produced `exact`
  at::Tensor exact_logits;     // [n_Q, vocab] query logits over [C, B exact]
  at::Tensor blind_logits;     // [n_Q, vocab] query logits over [C, B canonical]
};

// Runs the shared work: one context prefill, B alone, B in context, two query decodes. Throws
// orbit::Error naming the piece ("context chunk 2", "chunk", "query") that is empty, holds an id outside
// the vocabulary, or runs the window past the model's position limit. `context`, when given, is C's
// exact KV already computed by assemble_context(model, scenario.context) (one context shared by many
// chunks, as in a benchmark); it is copied by handle, and only its length is checked against C.
PreparedScenario prepare_scenario(const Model& model, Scenario scenario, const PastKV* context = nullptr);

// Query logits [n_Q, vocab] (float32) with `chunk` (content form, n_B tokens) as B.
at::Tensor decode_query(const PreparedScenario& prepared, const Content& chunk);

struct RepairCost {
  double forward_tokens = 0;
  double forming_tokens = 0;
  int64_t patch_bytes = 0;
  double seconds = 0;
  double forming_seconds = 0;
  bool exact = false;
};

struct Repair {
  Content content;  // B's content channel in the window: per layer k, v [n_B, H_kv, d]
  RepairCost cost;
};

class RepairStrategy {
 public:
  virtual ~RepairStrategy() = default;
  // The spec in canonical form, e.g. "patch:32", "cacheblend:0.15".
  virtual std::string name() const = 0;
  // Throws orbit::Error starting "strategy '<name>': " when the arm cannot run on this scenario (a rank
  // larger than min(n_B, D), say). Cheap: no forward.
  virtual void check(const PreparedScenario& prepared) const = 0;
  // B's content for this scenario plus accounting. Calls check() first.
  virtual Repair repair(const PreparedScenario& prepared) const = 0;
};

// Parses a spec (see the list above). Throws orbit::Error quoting the spec and listing the valid forms.
std::unique_ptr<RepairStrategy> make_strategy(const std::string& spec);
// The valid spec forms, one per line, for usage messages.
std::string strategy_spec_help();

// One arm run end to end: repair, query decode, fidelity against the prepared exact and blind logits.
struct ArmResult {
  std::string name;
  Repair repair;
  at::Tensor query_logits;  // [n_Q, vocab]
  double decode_seconds = 0;
  Fidelity fidelity;
  double patch_fraction = 0;  // patch_bytes / bytes of B's content (K and V, all layers, float32)
};
ArmResult run_arm(const PreparedScenario& prepared, const RepairStrategy& strategy);

// ---- token-selective recompute on explicit inputs (the cacheblend/firstk arms and the window manager) --

// B's KV in context (`input` with its positions set, after `context`) with only the tokens at `indices`
// (int64, strictly ascending, into B) computed through every layer, over `canonical` for the others.
// `before_layer` (empty: none) is the forward's ForwardOptions::before_layer: it may throw to stop it.
// `window_len` is its ForwardOptions::rope_window_len (dynamic-NTK RoPE: the window length the recomputed
// tokens are formed at; 0: B's own end).
Content recompute_tokens(const Model& model, const ForwardInput& input, const PastKV& context, const Content& canonical,
                         const at::Tensor& indices, const std::function<void(int64_t layer)>& before_layer = {},
                         int64_t window_len = 0);

// CacheBlend's selection: the `count` tokens of B whose layer-1 KV (layer 0 for a 1-layer model) in
// context deviates most from the canonical (K and V together), ascending. count = 0 or n needs no probe.
// *probe_forward_tokens (optional) receives the probe's cost in token-forwards (2·n/L, or 0). `before_layer`
// (empty: none) is the probe forward's ForwardOptions::before_layer: it may throw to stop it. `window_len`:
// the probe's ForwardOptions::rope_window_len, as recompute_tokens'.
at::Tensor cacheblend_select(const Model& model, const ForwardInput& input, const PastKV& context,
                             const Content& canonical, int64_t count, double* probe_forward_tokens = nullptr,
                             const std::function<void(int64_t layer)>& before_layer = {}, int64_t window_len = 0);

}  // namespace orbit::runtime
