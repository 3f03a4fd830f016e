// The reuse operator (docs/ARCHITECTURE.md §7).
//
//   canonical      KV(B|∅): chunk B's content channel computed alone (positions 0..n-1; position-free)
//   conditioned    KV(B|C): B prefilled after the context C (the exact answer)
//   deficit        Δ = conditioned − canonical, per layer and tensor, an n_B × D matrix
//   patch          rank-m factors Δ ≈ U·Vᵀ (U: n_B×m scaled by the singular values, Vᵀ: m×D)
//   apply          canonical + U·Vᵀ, then relocate (rotate the keys to the target positions)
//
// Content here is a std::vector<LayerKV> (one per layer, the same form the forward pass returns and
// accepts as PastKV, so a patched chunk goes straight into a window's past):
//
//   GQA/MHA   k [n, H_kv, d] keys before RoPE      v [n, H_kv, d] values        D_k = D_v = H_kv·d
//   MLA       k [n, 1, d_rope] k_pe before rotation v [n, 1, r_kv] latent c_KV   D_k = d_rope, D_v = r_kv
//
// (ModelConfig::content_k_shape()/content_v_shape()). Per layer and tensor, Δ is viewed as the row-major
// matrix [n, D] (token rows, D = heads·dim features), and that is what gets factorised.
//
// All tensors are float32 CPU unless stated. Functions are pure (no global state, every random choice
// from an explicit seed) and thread-compatible: a const Model may be shared across threads. Results own
// their tensors except where a function says it shares (apply_patch, project_onto_basis): tensors are
// treated as immutable values, never written in place. Misuse throws orbit::Error naming the argument.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orbit/runtime/model.h"

namespace orbit::runtime {

using Content = std::vector<LayerKV>;

// A chunk: token ids or input embeddings [n, hidden] (any floating dtype); exactly one is set and n > 0.
// Chunks sit at consecutive 1-D positions (t = h = w on M-RoPE models); position grids for image chunks
// are not modelled here yet.
struct ChunkInput {
  std::vector<int64_t> tokens;
  at::Tensor embeddings;
  int64_t length() const;  // n (0 when neither is set)
};

// The KV of the window before B: content per layer and the positions it sits at (as PastKV).
// assemble_context() builds it from chunks by an exact prefill of their concatenation at positions
// first_position, first_position+1, ... (one forward). No chunks: a PastKV of length 0 (one empty
// [0, heads, dim] LayerKV per layer, positions int64 [0]).
PastKV assemble_context(const Model& model, const std::vector<ChunkInput>& chunks, int64_t first_position = 0);

// KV(B|∅) at positions 0..n-1 (one forward of the chunk alone).
Content canonical(const Model& model, const ChunkInput& chunk);

// KV(B|C): B prefilled after `context` at positions context_end..context_end+n-1 (context_end = the
// largest context position + 1, or 0 for an empty context). When `last_logits` is given it receives
// that prefill's logits for B's last token, float32 [1, vocab]. One forward of B's tokens.
Content conditioned(const Model& model, const ChunkInput& chunk, const PastKV& context,
                    at::Tensor* last_logits = nullptr);

// Relocation: keys of `content` rotated to `positions` (int64 [n], or an M-RoPE grid [3, n]) with the
// model's RoPE: one tensor shaped like content[l].k per layer (content's dtype). The angles are computed
// once and shared by every layer. Exact: relocate(canonical at p) == keys of the chunk computed alone at
// p. `window_len` matters only for dynamic-NTK RoPE (see rope.h; 0 = no enlargement, which is what a
// forward over a window no longer than max_position_embeddings uses). Values need no relocation.
// Throws when positions are not [n] or are past the model's limit.
std::vector<at::Tensor> relocate_keys(const Model& model, const Content& content, const at::Tensor& positions,
                                      int64_t window_len = 0);

// Δ = conditioned − canonical (same shapes, conditioned's dtype). Throws when lengths or layer counts
// disagree.
Content deficit(const Content& conditioned, const Content& canonical);

enum class SvdMethod {
  kExact,       // full SVD through LAPACK (at::linalg_svd), truncated to the rank
  kRandomized,  // Halko–Martinsson–Tropp range finder with oversampling and power iterations
};

struct PatchOptions {
  int64_t rank_k = 16;                // rank kept for keys in every patched layer (>= 0)
  int64_t rank_v = 16;                // rank kept for values
  std::vector<int64_t> layer_rank_k;  // optional per-layer override (size num_layers; -1 = use rank_k)
  std::vector<int64_t> layer_rank_v;
  int64_t first_layer = 0;  // deep-only: layers below this carry no patch; in [0, num_layers]
  SvdMethod method = SvdMethod::kExact;
  int64_t oversample = 8;        // randomized SVD: extra probe columns (capped at min(n, D))
  int64_t power_iterations = 2;  // randomized SVD: subspace iterations, QR-re-orthonormalised
  uint64_t seed = 0;             // randomized SVD: form_patch derives one seed per (layer, tensor)
  // form_patch calls it with l = first_layer, first_layer + 1, ... before it factorizes layer l, on the calling
  // thread. It may throw (the SDK's interruption points, orbit/interrupt.h, stop a long patch's SVD between two
  // layers): form_patch then ends with that exception and returns nothing. Empty: not called.
  std::function<void(int64_t layer)> before_layer;
};

// One (layer, tensor) factor pair. Empty (undefined u) means "no patch here".
struct LowRank {
  at::Tensor u;   // [n, m], columns scaled by the singular values (descending)
  at::Tensor vt;  // [m, D], orthonormal rows
  int64_t rank() const { return u.defined() ? u.size(1) : 0; }
};

// A chunk's patch: per layer, K and V factors of Δ (empty below first_layer or at rank 0).
struct Patch {
  std::string model_fingerprint;  // the model it was formed for; apply refuses any other
  int64_t length = 0;             // n_B
  int64_t num_kv_heads = 0;       // the model's config at forming (a shape check on apply; the factor
  int64_t head_dim = 0;           //   widths are the content widths D_k, D_v above)
  std::vector<LowRank> k;         // one per layer
  std::vector<LowRank> v;
  // The share of the deficit's energy the factors leave out: ‖Δ − U·Vᵀ‖²_F / ‖Δ‖²_F summed over every
  // layer and tensor (layers without factors count whole), in [0, 1]; 0 for a zero deficit and -1 when
  // unknown (a patch read from a store that did not record it). The planner predicts a truncated
  // patch's fidelity loss from it (planner/fidelity_model.h).
  double residual = -1;
  // How much the chunk's KV depends on the context the deficit was measured in: ‖Δ‖²_F / ‖conditioned‖²_F
  // over every layer and tensor (deficit_share below), >= 0; -1 when unknown (form_patch sees only Δ, so
  // its caller sets it; a store that did not record it). Text that starts afresh ("Once upon a time...")
  // shows about 1e-3 on stories260K, text that continues its context about 1e-2, uniform random ids 3e-2;
  // the planner scales a chunk's predicted fidelity loss by it (planner/fidelity_model.h).
  double sensitivity = -1;
  // Bytes of all factors at `bytes_per_value` (4 = float32, 2 = bf16 storage): Σ (n + D)·m.
  int64_t bytes(int64_t bytes_per_value = 4) const;
};

// Bytes of a chunk's content channel (K and V, every layer) at `bytes_per_value`.
int64_t content_bytes(const Content& content, int64_t bytes_per_value = 4);

// Truncated factorisation of one [n, D] matrix at `rank` (no clamping: rank must be in [0, min(n, D)],
// else orbit::Error naming `what` and the limit; also refused: NaN/Inf entries). rank 0 gives an empty
// LowRank. Computes in float64 on CPU (float32 on other devices) and returns float32 on the matrix's
// device. Exact: ‖A − U·Vᵀ‖_F equals the norm of the discarded singular values; on CUDA it runs orbit's
// cuSOLVER kernel (ops/svd_op.h: gesvdj in float32, within a few·max(n, D)·2⁻²⁴·‖A‖ of that), falling
// back to LAPACK in float64 on CPU (factors moved back to the device) when the build has no CUDA SVD or
// the solver fails or does not converge. Randomized: seeded by options.seed, never better than exact,
// close to it with the default oversampling and iterations.
LowRank factorize(const at::Tensor& matrix, int64_t rank, const PatchOptions& options, const std::string& what);

// Patch from a deficit: factorize() per layer ≥ first_layer and tensor with the per-layer rank, and the
// residual share it leaves. Throws on a rank larger than min(n_B, D) (naming the layer and tensor, e.g.
// "layer 3 keys (K)", and the limit).
Patch form_patch(const Model& model, const Content& delta, const PatchOptions& options);

// Patch::residual of `patch` as factors of `delta` (same layer count; no shape check beyond that).
double residual_share(const Content& delta, const Patch& patch);

// ‖Δ‖²_F / ‖conditioned‖²_F summed over every layer and tensor (0 when conditioned is zero): Patch::
// sensitivity. One device sync on CUDA. Throws when the layer counts or shapes differ.
double deficit_share(const Content& delta, const Content& conditioned);

// canonical + U·Vᵀ per layer and tensor (one fused GEMM each). Where a layer/tensor has no factors the
// result shares the canonical's tensor. Throws when the patch was formed for another model
// (fingerprint), or its length/shape disagrees with `canonical`. Keys stay pre-RoPE: relocate after.
Content apply_patch(const Model& model, const Content& canonical, const Patch& patch);

// ---- variants ----------------------------------------------------------------------------------

struct OrbitOptions {
  int64_t exhaustive_up_to = 4;    // all K! orderings (lexicographic) for K ≤ this
  int64_t sampled_orderings = 24;  // beyond: this many distinct orderings drawn from `seed` (at most K!);
                                   // the held-out one, if any, is one of them
  bool hold_out = true;            // keep one ordering out of the mean, for evaluation (needs ≥ 2)
  uint64_t seed = 0;               // sampling and the held-out pick (portable: same on every platform)
};

struct OrbitPatch {
  Patch patch;                                  // factors of the mean Δ over the used orderings
  std::vector<std::vector<int64_t>> orderings;  // orderings averaged (indices into the antecedents)
  std::vector<int64_t> held_out;                // the held-out ordering (empty when hold_out = false)
};

// Mean of Δ = conditioned − `canonical_content` over `orderings` (index lists into `antecedents`; each
// ordering: exact prefill of prefix · antecedents in that order, then B conditioned on it), accumulated
// in float64 and returned as float32. An empty window gives the empty context. Throws on no orderings.
Content mean_deficit(const Model& model, const ChunkInput& chunk, const Content& canonical_content,
                     const std::vector<ChunkInput>& prefix, const std::vector<ChunkInput>& antecedents,
                     const std::vector<std::vector<int64_t>>& orderings);

// Orbit patch for chunk B whose antecedent *set* is fixed but whose order varies: mean of Δ over
// orderings of `antecedents` (each ordering: exact prefill of prefix · antecedents in that order, then
// B conditioned on it), accumulated in float64, then truncated by form_patch. Costs one canonical
// plus two forwards per used ordering. Throws on an empty antecedent set.
OrbitPatch form_orbit_patch(const Model& model, const ChunkInput& chunk, const std::vector<ChunkInput>& prefix,
                            const std::vector<ChunkInput>& antecedents, const PatchOptions& patch_options,
                            const OrbitOptions& orbit_options);

// Deep-only: relative contribution of each layer's deficit, ‖Δ_l‖_F / ‖conditioned_l‖_F for K and V
// together (0 where conditioned_l is zero), one value per layer.
// choose_first_layer: the deepest ℓ₀ (fewest patched layers) such that layers ≥ ℓ₀ still hold at least
// `energy` (in (0, 1]) of Σ_l ‖Δ_l‖²_F; in [0, num_layers), or num_layers when Δ is zero everywhere.
std::vector<double> layer_contributions(const Content& delta, const Content& conditioned);
int64_t choose_first_layer(const Content& delta, double energy = 0.9);

// Shared basis: per layer and tensor an orthonormal Vᵀ [m, D] fitted once on calibration deficits
// (top right-singular vectors of their stacked rows [Σn, D], through factorize() with the options'
// method, ranks and first_layer). A chunk's patch is then U = Δ·V, one GEMM, no SVD.
struct SharedBasis {
  std::string model_fingerprint;
  std::vector<at::Tensor> k;  // per layer [m_k, D_k]; undefined below first_layer or at rank 0
  std::vector<at::Tensor> v;  // per layer [m_v, D_v]
};
SharedBasis fit_shared_basis(const Model& model, const std::vector<Content>& calibration_deltas,
                             const PatchOptions& options);
// The patch's vt tensors share the basis's tensors (no copy); u = Δ·V is the chunk's own; its residual
// is the energy of Δ outside the basis.
Patch project_onto_basis(const Model& model, const Content& delta, const SharedBasis& basis);

}  // namespace orbit::runtime
