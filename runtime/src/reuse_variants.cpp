// Variants of the reuse patch (reuse.h): the orbit patch (mean deficit over orderings of a fixed
// antecedent set), deep-only layer selection, and the shared per-layer basis (U = Δ·V, one GEMM).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "orbit/common/error.h"
#include "orbit/runtime/reuse.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

// Portable seeded generator (SplitMix64): same orderings on every standard library and platform,
// unlike std::shuffle / std::uniform_int_distribution whose outputs are implementation-defined.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t bound) { return next() % bound; }  // bias negligible for the small bounds used

 private:
  uint64_t state_;
};

// K! capped at `cap` (no overflow).
int64_t factorial_capped(int64_t k, int64_t cap) {
  int64_t f = 1;
  for (int64_t i = 2; i <= k && f < cap; ++i) f = std::min(cap, f * i);
  return f;
}

std::vector<std::vector<int64_t>> orbit_orderings(int64_t k, const OrbitOptions& o) {
  std::vector<int64_t> perm(static_cast<std::size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<std::vector<int64_t>> out;
  if (k <= o.exhaustive_up_to) {
    do out.push_back(perm);
    while (std::next_permutation(perm.begin(), perm.end()));
    return out;
  }
  ORBIT_CHECK(o.sampled_orderings >= 1,
              "form_orbit_patch: orbit_options.sampled_orderings must be >= 1, got " << o.sampled_orderings);
  const int64_t want = std::min(o.sampled_orderings, factorial_capped(k, o.sampled_orderings));
  SplitMix rng(o.seed);
  std::set<std::vector<int64_t>> seen;
  // Rejection of repeats terminates quickly: want ≤ K! and K > exhaustive_up_to keeps collisions rare.
  while (static_cast<int64_t>(out.size()) < want) {
    for (int64_t i = k - 1; i > 0; --i) {  // Fisher–Yates
      std::swap(perm[static_cast<std::size_t>(i)], perm[rng.below(static_cast<uint64_t>(i) + 1)]);
    }
    if (seen.insert(perm).second) out.push_back(perm);
  }
  return out;
}

// Per-layer stacked matrices [Σn, D] of one tensor (K or V) of every deficit.
at::Tensor stacked_rows(const std::vector<Content>& deltas, std::size_t layer, bool keys, int64_t D) {
  std::vector<at::Tensor> rows;
  rows.reserve(deltas.size());
  for (const Content& d : deltas) {
    const at::Tensor& t = keys ? d[layer].k : d[layer].v;
    rows.push_back(t.reshape({t.size(0), D}));
  }
  return at::cat(rows, 0);
}

void check_delta_shapes(const ModelConfig& c, const Content& delta, const std::string& what) {
  ORBIT_CHECK(static_cast<int64_t>(delta.size()) == c.num_layers,
              what << " has " << delta.size() << " layers, the model has " << c.num_layers);
  const ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  for (std::size_t l = 0; l < delta.size(); ++l) {
    for (const bool keys : {true, false}) {
      const at::Tensor& t = keys ? delta[l].k : delta[l].v;
      const ContentShape shape = keys ? ks : vs;
      ORBIT_CHECK(t.defined() && t.dim() == 3 && t.size(0) == delta[0].k.size(0) && t.size(1) == shape.heads &&
                      t.size(2) == shape.dim,
                  what << ": layers[" << l << "]." << (keys ? "k" : "v") << " must be [n, " << shape.heads << ", "
                       << shape.dim << "] with one n for all layers");
    }
  }
}

double squared_norm(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.to(at::kDouble).pow(2).sum().item<double>() : 0.0;
}

}  // namespace

Content mean_deficit(const Model& model, const ChunkInput& chunk, const Content& canonical_content,
                     const std::vector<ChunkInput>& prefix, const std::vector<ChunkInput>& antecedents,
                     const std::vector<std::vector<int64_t>>& orderings) {
  ORBIT_CHECK(!orderings.empty(), "mean_deficit: no orderings to average over");
  c10::InferenceMode guard;
  Content mean;
  for (const std::vector<int64_t>& order : orderings) {
    std::vector<ChunkInput> window = prefix;
    for (int64_t j : order) {
      ORBIT_CHECK(j >= 0 && j < static_cast<int64_t>(antecedents.size()),
                  "mean_deficit: ordering index " << j << " outside the " << antecedents.size() << " antecedents");
      window.push_back(antecedents[static_cast<std::size_t>(j)]);
    }
    const Content delta = deficit(conditioned(model, chunk, assemble_context(model, window)), canonical_content);
    if (mean.empty()) {
      for (const LayerKV& layer : delta) mean.push_back({layer.k.to(at::kDouble), layer.v.to(at::kDouble)});
    } else {
      for (std::size_t l = 0; l < delta.size(); ++l) {
        mean[l].k.add_(delta[l].k);
        mean[l].v.add_(delta[l].v);
      }
    }
  }
  const double inv = 1.0 / static_cast<double>(orderings.size());
  for (LayerKV& layer : mean) {
    layer.k = layer.k.mul(inv).to(at::kFloat);
    layer.v = layer.v.mul(inv).to(at::kFloat);
  }
  return mean;
}

OrbitPatch form_orbit_patch(const Model& model, const ChunkInput& chunk, const std::vector<ChunkInput>& prefix,
                            const std::vector<ChunkInput>& antecedents, const PatchOptions& patch_options,
                            const OrbitOptions& orbit_options) {
  const int64_t k = static_cast<int64_t>(antecedents.size());
  ORBIT_CHECK(k >= 1, "form_orbit_patch: needs at least one antecedent");
  OrbitPatch result;
  std::vector<std::vector<int64_t>> orderings = orbit_orderings(k, orbit_options);
  if (orbit_options.hold_out) {
    ORBIT_CHECK(orderings.size() >= 2, "form_orbit_patch: hold_out needs at least 2 orderings, got "
                                           << orderings.size() << " (" << k << " antecedent(s))");
    // A stream apart from the sampler's, so the held-out pick does not shift the sampled set.
    SplitMix pick(orbit_options.seed ^ 0xD1B54A32D192ED03ull);
    const auto index = static_cast<std::ptrdiff_t>(pick.below(orderings.size()));
    result.held_out = orderings[static_cast<std::size_t>(index)];
    orderings.erase(orderings.begin() + index);
  }

  c10::InferenceMode guard;
  const Content mean = mean_deficit(model, chunk, canonical(model, chunk), prefix, antecedents, orderings);
  result.patch = form_patch(model, mean, patch_options);
  result.orderings = std::move(orderings);
  return result;
}

std::vector<double> layer_contributions(const Content& delta, const Content& conditioned_content) {
  ORBIT_CHECK(delta.size() == conditioned_content.size(), "layer_contributions: delta has "
                                                              << delta.size() << " layers, conditioned has "
                                                              << conditioned_content.size());
  c10::InferenceMode guard;
  std::vector<double> out;
  out.reserve(delta.size());
  for (std::size_t l = 0; l < delta.size(); ++l) {
    ORBIT_CHECK(delta[l].k.defined() && conditioned_content[l].k.defined() &&
                    delta[l].k.sizes() == conditioned_content[l].k.sizes() &&
                    delta[l].v.sizes() == conditioned_content[l].v.sizes(),
                "layer_contributions: layers[" << l << "] shapes of delta and conditioned differ");
    const double num = squared_norm(delta[l].k) + squared_norm(delta[l].v);
    const double den = squared_norm(conditioned_content[l].k) + squared_norm(conditioned_content[l].v);
    out.push_back(den > 0 ? std::sqrt(num / den) : 0.0);
  }
  return out;
}

int64_t choose_first_layer(const Content& delta, double energy) {
  ORBIT_CHECK(energy > 0.0 && energy <= 1.0, "choose_first_layer: energy must be in (0, 1], got " << energy);
  ORBIT_CHECK(!delta.empty(), "choose_first_layer: delta has no layers");
  c10::InferenceMode guard;
  const auto num_layers = static_cast<int64_t>(delta.size());
  std::vector<double> e(delta.size());
  for (std::size_t l = 0; l < delta.size(); ++l) e[l] = squared_norm(delta[l].k) + squared_norm(delta[l].v);
  // Sum from the deepest layer in the same order as the search below, so energy = 1 reaches the total
  // exactly at layer 0.
  double total = 0.0;
  for (int64_t l = num_layers - 1; l >= 0; --l) total += e[static_cast<std::size_t>(l)];
  if (total <= 0.0) return num_layers;
  double suffix = 0.0;
  for (int64_t l = num_layers - 1; l >= 0; --l) {
    suffix += e[static_cast<std::size_t>(l)];
    if (suffix >= energy * total) return l;
  }
  return 0;
}

SharedBasis fit_shared_basis(const Model& model, const std::vector<Content>& calibration_deltas,
                             const PatchOptions& options) {
  const ModelConfig& c = model.config();
  ORBIT_CHECK(!calibration_deltas.empty(), "fit_shared_basis: no calibration deltas");
  for (std::size_t i = 0; i < calibration_deltas.size(); ++i) {
    check_delta_shapes(c, calibration_deltas[i], "fit_shared_basis: calibration_deltas[" + std::to_string(i) + "]");
  }
  ORBIT_CHECK(
      options.first_layer >= 0 && options.first_layer <= c.num_layers,
      "fit_shared_basis: options.first_layer must be in [0, " << c.num_layers << "], got " << options.first_layer);
  for (const auto* overrides : {&options.layer_rank_k, &options.layer_rank_v}) {
    ORBIT_CHECK(overrides->empty() || static_cast<int64_t>(overrides->size()) == c.num_layers,
                "fit_shared_basis: per-layer ranks must be empty or hold one rank per layer (" << c.num_layers << ")");
  }
  c10::InferenceMode guard;
  SharedBasis basis;
  basis.model_fingerprint = model.fingerprint();
  basis.k.resize(static_cast<std::size_t>(c.num_layers));
  basis.v.resize(static_cast<std::size_t>(c.num_layers));
  for (int64_t l = options.first_layer; l < c.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    const std::string where = "fit_shared_basis: layer " + std::to_string(l);
    for (const bool keys : {true, false}) {
      const std::vector<int64_t>& overrides = keys ? options.layer_rank_k : options.layer_rank_v;
      const int64_t fallback = keys ? options.rank_k : options.rank_v;
      const int64_t rank = overrides.empty() || overrides[i] < 0 ? fallback : overrides[i];
      const int64_t width = (keys ? c.content_k_shape() : c.content_v_shape()).width();
      const LowRank f = factorize(stacked_rows(calibration_deltas, i, keys, width), rank, options,
                                  where + (keys ? " keys (K)" : " values (V)"));
      (keys ? basis.k : basis.v)[i] = f.vt;  // undefined at rank 0
    }
  }
  return basis;
}

Patch project_onto_basis(const Model& model, const Content& delta, const SharedBasis& basis) {
  const ModelConfig& c = model.config();
  ORBIT_CHECK(basis.model_fingerprint == model.fingerprint(), "project_onto_basis: basis was fitted for model "
                                                                  << basis.model_fingerprint.substr(0, 12)
                                                                  << "..., this model is "
                                                                  << model.fingerprint().substr(0, 12) << "...");
  ORBIT_CHECK(
      static_cast<int64_t>(basis.k.size()) == c.num_layers && static_cast<int64_t>(basis.v.size()) == c.num_layers,
      "project_onto_basis: basis has " << basis.k.size() << "/" << basis.v.size() << " K/V layers, the model has "
                                       << c.num_layers);
  check_delta_shapes(c, delta, "project_onto_basis: delta");
  c10::InferenceMode guard;
  const int64_t n = delta[0].k.size(0);
  Patch patch;
  patch.model_fingerprint = model.fingerprint();
  patch.length = n;
  patch.num_kv_heads = c.num_kv_heads;
  patch.head_dim = c.head_dim;
  patch.k.resize(basis.k.size());
  patch.v.resize(basis.v.size());
  for (std::size_t l = 0; l < basis.k.size(); ++l) {
    for (const bool keys : {true, false}) {
      const at::Tensor& vt = keys ? basis.k[l] : basis.v[l];
      if (!vt.defined() || vt.size(0) == 0) continue;
      const int64_t D = (keys ? c.content_k_shape() : c.content_v_shape()).width();
      ORBIT_CHECK(vt.dim() == 2 && vt.size(1) == D, "project_onto_basis: basis layer "
                                                        << l << (keys ? " K" : " V") << " must be [m, " << D
                                                        << "], got " << shape_string(vt.sizes()));
      const at::Tensor& d = keys ? delta[l].k : delta[l].v;
      LowRank f;
      f.u = at::mm(d.reshape({n, D}).to(vt.scalar_type()), vt.t());  // U = Δ·V: the one GEMM
      f.vt = vt;                                                     // aliases the basis
      (keys ? patch.k : patch.v)[l] = std::move(f);
    }
  }
  patch.residual = residual_share(delta, patch);
  return patch;
}

}  // namespace orbit::runtime
