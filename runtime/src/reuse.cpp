// The reuse operator's core (reuse.h): canonical / conditioned prefills, relocation, the deficit, the
// truncated factorisation (exact LAPACK SVD or Halko–Martinsson–Tropp randomized SVD), and forming and
// applying a patch. The variants (orbit, deep-only, shared basis) live in reuse_variants.cpp.
#include "orbit/runtime/reuse.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "ops/svd_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

// First characters of a fingerprint, enough to tell models apart in a message.
std::string fingerprint_prefix(const std::string& fingerprint) {
  return fingerprint.substr(0, std::min<std::size_t>(12, fingerprint.size())) + "...";
}

// Checks `content` against the model (one LayerKV per layer, k [n, content_k_shape] and
// v [n, content_v_shape], one n for all) and returns n. `what` names the argument in errors.
int64_t checked_length(const ModelConfig& c, const Content& content, const std::string& what) {
  ORBIT_CHECK(static_cast<int64_t>(content.size()) == c.num_layers,
              what << " has " << content.size() << " layers, the model has " << c.num_layers);
  int64_t n = -1;
  for (std::size_t l = 0; l < content.size(); ++l) {
    for (const bool keys : {true, false}) {
      const at::Tensor& t = keys ? content[l].k : content[l].v;
      const ContentShape shape = keys ? c.content_k_shape() : c.content_v_shape();
      const char* name = keys ? "k" : "v";
      ORBIT_CHECK(t.defined() && t.dim() == 3 && t.size(1) == shape.heads && t.size(2) == shape.dim,
                  what << ": layers[" << l << "]." << name << " must be [n, " << shape.heads << ", " << shape.dim
                       << "], got " << (t.defined() ? shape_string(t.sizes()) : std::string("an undefined tensor")));
      if (n < 0) n = t.size(0);
      ORBIT_CHECK(t.size(0) == n,
                  what << ": layers[" << l << "]." << name << " has " << t.size(0) << " tokens, layers[0].k has " << n);
    }
  }
  return std::max<int64_t>(n, 0);
}

// The per-layer rank: the override when given (>= 0), else the default.
int64_t layer_rank(const std::vector<int64_t>& overrides, int64_t fallback, int64_t layer) {
  if (overrides.empty()) return fallback;
  const int64_t r = overrides[static_cast<std::size_t>(layer)];
  return r >= 0 ? r : fallback;
}

// splitmix64: decorrelated per-(layer, tensor) seeds for the randomized SVD's test matrices.
uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

at::Tensor orthonormal_basis(const at::Tensor& columns) { return std::get<0>(at::linalg_qr(columns, "reduced")); }

// Concatenates chunks into one forward input (token ids when every chunk has them, else embeddings).
ForwardInput concatenated(const Model& model, const std::vector<ChunkInput>& chunks, const char* what) {
  bool all_tokens = true;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const ChunkInput& ch = chunks[i];
    const bool has_tokens = !ch.tokens.empty(), has_embeddings = ch.embeddings.defined();
    ORBIT_CHECK(has_tokens != has_embeddings,
                what << ": chunks[" << i << "] must set exactly one of tokens and embeddings");
    if (has_embeddings) {
      ORBIT_CHECK(
          ch.embeddings.dim() == 2 && ch.embeddings.size(0) > 0 && ch.embeddings.size(1) == model.config().hidden_size,
          what << ": chunks[" << i << "].embeddings must be [n > 0, hidden_size=" << model.config().hidden_size
               << "], got " << shape_string(ch.embeddings.sizes()));
      all_tokens = false;
    }
  }
  ForwardInput input;
  if (all_tokens) {
    for (const ChunkInput& ch : chunks) input.tokens.insert(input.tokens.end(), ch.tokens.begin(), ch.tokens.end());
    return input;
  }
  std::vector<at::Tensor> parts;
  parts.reserve(chunks.size());
  for (const ChunkInput& ch : chunks) {
    parts.push_back(ch.embeddings.defined() ? ch.embeddings.to(model.device(), model.dtype()) : model.embed(ch.tokens));
  }
  input.embeddings = at::cat(parts, 0);
  return input;
}

PastKV empty_past(const ModelConfig& c) {
  PastKV past;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    past.layers.push_back({at::empty({0, ks.heads, ks.dim}, opts), at::empty({0, vs.heads, vs.dim}, opts)});
  }
  past.positions = at::empty({0}, at::kLong);
  return past;
}

void check_patch_options(const ModelConfig& c, const PatchOptions& o, const char* what) {
  ORBIT_CHECK(o.first_layer >= 0 && o.first_layer <= c.num_layers,
              what << ": options.first_layer must be in [0, " << c.num_layers << "], got " << o.first_layer);
  ORBIT_CHECK(o.rank_k >= 0 && o.rank_v >= 0,
              what << ": options.rank_k and rank_v must be >= 0, got " << o.rank_k << " and " << o.rank_v);
  for (const auto* overrides : {&o.layer_rank_k, &o.layer_rank_v}) {
    const char* name = overrides == &o.layer_rank_k ? "layer_rank_k" : "layer_rank_v";
    ORBIT_CHECK(overrides->empty() || static_cast<int64_t>(overrides->size()) == c.num_layers,
                what << ": options." << name << " must be empty or hold one rank per layer (" << c.num_layers
                     << "), got " << overrides->size());
  }
  ORBIT_CHECK(o.oversample >= 0 && o.power_iterations >= 0,
              what << ": options.oversample and power_iterations must be >= 0");
}

}  // namespace

int64_t ChunkInput::length() const {
  if (!tokens.empty()) return static_cast<int64_t>(tokens.size());
  return embeddings.defined() ? embeddings.size(0) : 0;
}

PastKV assemble_context(const Model& model, const std::vector<ChunkInput>& chunks, int64_t first_position) {
  ORBIT_CHECK(first_position >= 0, "assemble_context: first_position must be >= 0, got " << first_position);
  c10::InferenceMode guard;
  if (chunks.empty()) return empty_past(model.config());
  ForwardInput input = concatenated(model, chunks, "assemble_context");
  const int64_t total =
      input.embeddings.defined() ? input.embeddings.size(0) : static_cast<int64_t>(input.tokens.size());
  input.positions = at::arange(first_position, first_position + total, at::kLong);
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  ForwardResult result = model.forward(input, nullptr, options);
  return PastKV{std::move(result.content), input.positions};
}

Content canonical(const Model& model, const ChunkInput& chunk) {
  c10::InferenceMode guard;
  ForwardInput input = concatenated(model, {chunk}, "canonical");
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  return model.forward(input, nullptr, options).content;
}

Content conditioned(const Model& model, const ChunkInput& chunk, const PastKV& context, at::Tensor* last_logits) {
  c10::InferenceMode guard;
  ForwardInput input = concatenated(model, {chunk}, "conditioned");
  const int64_t n = chunk.length();
  const int64_t context_len = context.length();
  const int64_t context_end = context_len > 0 ? context.positions.max().item<int64_t>() + 1 : 0;
  input.positions = at::arange(context_end, context_end + n, at::kLong);
  ForwardOptions options;
  options.logits = last_logits ? LogitsMode::kLast : LogitsMode::kNone;
  ForwardResult result = model.forward(input, context_len > 0 ? &context : nullptr, options);
  if (last_logits) *last_logits = result.logits;
  return std::move(result.content);
}

std::vector<at::Tensor> relocate_keys(const Model& model, const Content& content, const at::Tensor& positions,
                                      int64_t window_len) {
  const ModelConfig& c = model.config();
  const int64_t n = checked_length(c, content, "relocate_keys: content");
  ORBIT_CHECK(
      positions.defined() && positions.dim() >= 1 && positions.size(-1) == n,
      "relocate_keys: positions must be [n=" << n << "] (or an M-RoPE grid [3, n]), got "
                                             << (positions.defined() ? shape_string(positions.sizes()) : "undefined"));
  check_positions(c, positions, "relocate_keys: positions");
  c10::InferenceMode guard;
  const at::Tensor angles = rope_angles(c.rope, positions, window_len);  // once, shared by every layer
  std::vector<at::Tensor> keys;
  keys.reserve(content.size());
  for (const LayerKV& layer : content) keys.push_back(rope_rotate(c.rope, layer.k, angles));
  return keys;
}

Content deficit(const Content& conditioned_content, const Content& canonical_content) {
  ORBIT_CHECK(conditioned_content.size() == canonical_content.size(),
              "deficit: conditioned has " << conditioned_content.size() << " layers, canonical has "
                                          << canonical_content.size());
  c10::InferenceMode guard;
  Content delta;
  delta.reserve(conditioned_content.size());
  for (std::size_t l = 0; l < conditioned_content.size(); ++l) {
    const LayerKV& a = conditioned_content[l];
    const LayerKV& b = canonical_content[l];
    ORBIT_CHECK(a.k.defined() && a.v.defined() && b.k.defined() && b.v.defined(),
                "deficit: layers[" << l << "] has an undefined k or v");
    ORBIT_CHECK(a.k.sizes() == b.k.sizes() && a.v.sizes() == b.v.sizes(),
                "deficit: layers[" << l << "] shapes differ: conditioned k " << shape_string(a.k.sizes())
                                   << " vs canonical k " << shape_string(b.k.sizes())
                                   << " (the chunk lengths must agree)");
    delta.push_back({a.k - b.k.to(a.k.scalar_type()), a.v - b.v.to(a.v.scalar_type())});
  }
  return delta;
}

int64_t content_bytes(const Content& content, int64_t bytes_per_value) {
  int64_t values = 0;
  for (const LayerKV& layer : content) {
    if (layer.k.defined()) values += layer.k.numel();
    if (layer.v.defined()) values += layer.v.numel();
  }
  return values * bytes_per_value;
}

int64_t Patch::bytes(int64_t bytes_per_value) const {
  int64_t values = 0;
  for (const auto* factors : {&k, &v}) {
    for (const LowRank& f : *factors) {
      if (f.rank() == 0) continue;
      values += f.u.numel() + f.vt.numel();
    }
  }
  return values * bytes_per_value;
}

LowRank factorize(const at::Tensor& matrix, int64_t rank, const PatchOptions& options, const std::string& what) {
  ORBIT_CHECK(matrix.defined() && matrix.dim() == 2,
              what << ": expected a 2-D [n, D] matrix, got "
                   << (matrix.defined() ? shape_string(matrix.sizes()) : std::string("an undefined tensor")));
  const int64_t n = matrix.size(0), D = matrix.size(1), limit = std::min(n, D);
  ORBIT_CHECK(rank >= 0, what << ": rank must be >= 0, got " << rank);
  ORBIT_CHECK(rank <= limit,
              what << ": rank " << rank << " exceeds the limit min(n, D) = min(" << n << ", " << D << ") = " << limit);
  if (rank == 0) return {};
  ORBIT_CHECK(options.oversample >= 0 && options.power_iterations >= 0,
              what << ": oversample and power_iterations must be >= 0");
  c10::InferenceMode guard;
  ORBIT_CHECK(at::isfinite(matrix).all().item<bool>(), what << ": the matrix holds NaN or infinite values");
  // Exact on CUDA: orbit's cuSOLVER kernel (float32). Where this build has none, or it fails or does not
  // converge, LAPACK on CPU in float64 below, the factors moved back to the matrix's device.
  if (options.method == SvdMethod::kExact && matrix.is_cuda()) {
    if (ops::have_cuda_svd()) {
      ops::SvdFactorsResult device = ops::truncated_svd_cuda(matrix, rank);
      if (device.ok) return LowRank{std::move(device.u), std::move(device.vt)};
    }
    LowRank host = factorize(matrix.cpu(), rank, options, what);
    return LowRank{host.u.to(matrix.device()), host.vt.to(matrix.device())};
  }
  // float64 on CPU (these matrices are small); float32 elsewhere, where float64 is slow.
  const at::ScalarType work = matrix.device().is_cpu() ? at::kDouble : at::kFloat;
  const at::Tensor a = matrix.to(work);

  at::Tensor u, s, vt;
  if (options.method == SvdMethod::kExact) {
    std::tie(u, s, vt) = at::linalg_svd(a, /*full_matrices=*/false);
  } else {
    // Range finder: Y = A·Ω with l = rank + oversample Gaussian probes; power iterations sharpen the
    // spectrum (re-orthonormalised each half-step); then the small SVD of B = QᵀA gives U = Q·U_B.
    const int64_t l = std::min(rank + options.oversample, limit);
    at::Generator gen = at::detail::createCPUGenerator(options.seed);
    const at::Tensor omega = at::randn({D, l}, gen, at::TensorOptions().dtype(at::kDouble)).to(a.options());
    at::Tensor q = orthonormal_basis(at::mm(a, omega));
    for (int64_t i = 0; i < options.power_iterations; ++i) {
      q = orthonormal_basis(at::mm(a, orthonormal_basis(at::mm(a.t(), q))));
    }
    at::Tensor ub;
    std::tie(ub, s, vt) = at::linalg_svd(at::mm(q.t(), a), /*full_matrices=*/false);
    u = at::mm(q, ub);
  }
  LowRank out;
  out.u = (u.narrow(1, 0, rank) * s.narrow(0, 0, rank)).to(at::kFloat).contiguous();
  out.vt = vt.narrow(0, 0, rank).to(at::kFloat).contiguous();
  return out;
}

Patch form_patch(const Model& model, const Content& delta, const PatchOptions& options) {
  const ModelConfig& c = model.config();
  const int64_t n = checked_length(c, delta, "form_patch: delta");
  check_patch_options(c, options, "form_patch");
  c10::InferenceMode guard;
  Patch patch;
  patch.model_fingerprint = model.fingerprint();
  patch.length = n;
  patch.num_kv_heads = c.num_kv_heads;
  patch.head_dim = c.head_dim;
  patch.k.resize(static_cast<std::size_t>(c.num_layers));
  patch.v.resize(static_cast<std::size_t>(c.num_layers));
  const int64_t dk = c.content_k_shape().width(), dv = c.content_v_shape().width();
  for (int64_t l = options.first_layer; l < c.num_layers; ++l) {
    if (options.before_layer) options.before_layer(l);
    const auto i = static_cast<std::size_t>(l);
    PatchOptions layer_options = options;
    layer_options.seed = mix_seed(options.seed, 2 * static_cast<uint64_t>(l));
    patch.k[i] = factorize(delta[i].k.reshape({n, dk}), layer_rank(options.layer_rank_k, options.rank_k, l),
                           layer_options, "form_patch: layer " + std::to_string(l) + " keys (K)");
    layer_options.seed = mix_seed(options.seed, 2 * static_cast<uint64_t>(l) + 1);
    patch.v[i] = factorize(delta[i].v.reshape({n, dv}), layer_rank(options.layer_rank_v, options.rank_v, l),
                           layer_options, "form_patch: layer " + std::to_string(l) + " values (V)");
  }
  patch.residual = residual_share(delta, patch);
  return patch;
}

double residual_share(const Content& delta, const Patch& patch) {
  // U's columns carry the singular values and Vᵀ's rows are orthonormal, so ‖U·Vᵀ‖²_F = ‖U‖²_F, and U·Vᵀ
  // is Δ projected onto Vᵀ's row space (exact, randomized and shared-basis factors alike): the energy
  // left out is ‖Δ‖²_F − ‖U‖²_F. Summed as tensors, read once (one device sync on CUDA).
  at::Tensor total, kept;
  const auto add = [](at::Tensor& acc, const at::Tensor& t) {
    const at::Tensor e = t.to(at::kDouble).square().sum();
    acc = acc.defined() ? acc + e : e;
  };
  for (std::size_t l = 0; l < delta.size(); ++l) {
    add(total, delta[l].k);
    add(total, delta[l].v);
    for (const LowRank* f : {&patch.k[l], &patch.v[l]}) {
      if (f->rank() > 0) add(kept, f->u);
    }
  }
  const double t = total.defined() ? total.item<double>() : 0.0;
  const double k = kept.defined() ? kept.item<double>() : 0.0;
  if (!(t > 0)) return 0.0;
  return std::clamp((t - k) / t, 0.0, 1.0);
}

double deficit_share(const Content& delta, const Content& conditioned) {
  ORBIT_CHECK(delta.size() == conditioned.size(),
              "deficit_share: delta has " << delta.size() << " layers, conditioned has " << conditioned.size());
  at::Tensor num, den;
  const auto add = [](at::Tensor& acc, const at::Tensor& t) {
    const at::Tensor e = t.to(at::kDouble).square().sum();
    acc = acc.defined() ? acc + e : e;
  };
  for (std::size_t l = 0; l < delta.size(); ++l) {
    ORBIT_CHECK(delta[l].k.sizes() == conditioned[l].k.sizes() && delta[l].v.sizes() == conditioned[l].v.sizes(),
                "deficit_share: layers[" << l << "] shapes of delta and conditioned differ");
    add(num, delta[l].k);
    add(num, delta[l].v);
    add(den, conditioned[l].k);
    add(den, conditioned[l].v);
  }
  if (!den.defined()) return 0.0;
  const at::Tensor both = at::stack({num, den}).cpu();  // one sync
  const double n = both[0].item<double>(), d = both[1].item<double>();
  return d > 0 ? n / d : 0.0;
}

Content apply_patch(const Model& model, const Content& canonical_content, const Patch& patch) {
  const ModelConfig& c = model.config();
  ORBIT_CHECK(patch.model_fingerprint == model.fingerprint(), "apply_patch: patch was formed for model "
                                                                  << fingerprint_prefix(patch.model_fingerprint)
                                                                  << ", this model is "
                                                                  << fingerprint_prefix(model.fingerprint()));
  ORBIT_CHECK(patch.num_kv_heads == c.num_kv_heads && patch.head_dim == c.head_dim,
              "apply_patch: patch has " << patch.num_kv_heads << " kv heads of dim " << patch.head_dim
                                        << ", the model has " << c.num_kv_heads << " of dim " << c.head_dim);
  ORBIT_CHECK(
      static_cast<int64_t>(patch.k.size()) == c.num_layers && static_cast<int64_t>(patch.v.size()) == c.num_layers,
      "apply_patch: patch has " << patch.k.size() << "/" << patch.v.size() << " K/V layers, the model has "
                                << c.num_layers);
  const int64_t n = checked_length(c, canonical_content, "apply_patch: canonical");
  ORBIT_CHECK(patch.length == n,
              "apply_patch: patch was formed for a chunk of " << patch.length << " tokens, canonical has " << n);
  c10::InferenceMode guard;
  auto add = [&](const at::Tensor& base, const LowRank& f, int64_t layer, const char* name) -> at::Tensor {
    if (f.rank() == 0) return base;  // no patch here: shares the canonical's tensor
    const int64_t D = base.size(1) * base.size(2);
    ORBIT_CHECK(f.vt.defined() && f.u.dim() == 2 && f.u.size(0) == n && f.vt.dim() == 2 && f.vt.size(0) == f.rank() &&
                    f.vt.size(1) == D,
                "apply_patch: layer " << layer << " " << name << " factors must be u [" << n << ", m] and vt [m, " << D
                                      << "], got u " << shape_string(f.u.sizes()) << " and vt "
                                      << (f.vt.defined() ? shape_string(f.vt.sizes()) : std::string("undefined")));
    const at::Tensor flat = base.reshape({n, D});
    return at::addmm(flat, f.u.to(flat.options()), f.vt.to(flat.options())).view(base.sizes());
  };
  Content out;
  out.reserve(canonical_content.size());
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    out.push_back({add(canonical_content[i].k, patch.k[i], l, "K"), add(canonical_content[i].v, patch.v[i], l, "V")});
  }
  return out;
}

}  // namespace orbit::runtime
