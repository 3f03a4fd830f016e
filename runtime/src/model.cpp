#include "orbit/runtime/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention.h"
#include "forward_sequence.h"
#include "host_memory.h"
#include "ops/paged_attention_op.h"
#include "ops/past_attention_op.h"
#include "ops/rope_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/decode_cache.h"
#include "orbit/runtime/fingerprint.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"
#include "rope_table.h"

namespace orbit::runtime {

namespace {

void check_shape(const at::Tensor& t, at::IntArrayRef expected, const std::string& origin, const std::string& name,
                 const at::TensorOptions& where) {
  ORBIT_CHECK(t.defined(), origin << ": missing tensor '" << name << "'");
  ORBIT_CHECK(t.sizes() == expected, origin << ": tensor '" << name << "' has shape " << shape_string(t.sizes())
                                            << " but the config implies " << shape_string(expected));
  ORBIT_CHECK(t.scalar_type() == where.dtype().toScalarType() && t.device() == where.device(),
              origin << ": tensor '" << name << "' is " << dtype_name(t.scalar_type()) << " on "
                     << device_name(t.device()) << " but the model's embedding is "
                     << dtype_name(where.dtype().toScalarType()) << " on " << device_name(where.device())
                     << " (every weight must share one device and dtype)");
  // A NaN or infinite weight makes every output NaN: refuse the model rather than answer nonsense.
  ORBIT_CHECK(at::isfinite(t).all().item<bool>(),
              origin << ": tensor '" << name << "' contains NaN or infinite values");
}

}  // namespace

int64_t PastKV::length() const {
  if (cache != nullptr) return cache->length(cache_slot);
  return positions.defined() && positions.dim() > 0 ? positions.size(-1) : 0;
}

void check_positions(const ModelConfig& config, const at::Tensor& positions, const char* what) {
  const bool grid = config.rope.is_mrope() && positions.dim() == 2;
  if (config.rope.is_mrope()) {
    ORBIT_CHECK((positions.dim() == 1 || (grid && positions.size(0) == 3)) && positions.scalar_type() == at::kLong,
                what << ": positions must be int64 [T] or an int64 position grid [3, T] (rows t, h, w), got "
                     << shape_string(positions.sizes()) << " " << positions.scalar_type());
  } else {
    ORBIT_CHECK(
        positions.dim() == 1 && positions.scalar_type() == at::kLong,
        what << ": positions must be a 1-D int64 tensor, got " << positions.dim() << "-D " << positions.scalar_type());
  }
  if (positions.numel() == 0) return;
  int64_t lo = 0, hi = 0;
  if (positions.is_cpu() && positions.is_contiguous()) {
    // Read in place: a decode step's one position per sequence costs no reduction ops.
    const int64_t* p = positions.data_ptr<int64_t>();
    const auto [min, max] = std::minmax_element(p, p + positions.numel());
    lo = *min;
    hi = *max;
  } else {
    lo = positions.min().item<int64_t>();
    hi = positions.max().item<int64_t>();
  }
  ORBIT_CHECK(lo >= 0, what << ": position " << lo << " is negative");
  // Dynamic NTK exists to run past the trained limit; every other RoPE type stops at it.
  if (config.rope.scaling != RopeScaling::kDynamicNtk) {
    ORBIT_CHECK(hi < config.max_position_embeddings, what << ": position " << hi
                                                          << " is past the model's limit (max_position_embeddings = "
                                                          << config.max_position_embeddings << ")");
  }
}

Model::Model(ModelConfig config, ModelWeights weights, std::string origin)
    : config_(std::move(config)), weights_(std::move(weights)), origin_(std::move(origin)) {
  config_.validate(origin_);
  ORBIT_CHECK(
      static_cast<int64_t>(weights_.layers.size()) == config_.num_layers,
      origin_ << ": " << weights_.layers.size() << " layers of weights but num_hidden_layers = " << config_.num_layers);
  if (config_.tie_word_embeddings) weights_.lm_head = weights_.embed;
  ORBIT_CHECK(weights_.embed.defined(), origin_ << ": missing tensor 'model.embed_tokens.weight'");
  device_ = weights_.embed.device();
  dtype_ = weights_.embed.scalar_type();
  // A forward on the CPU frees megabytes the next one allocates again: keep them mapped (host_memory.h).
  if (device_.is_cpu()) detail::keep_freed_host_memory();
  rope_table_ = std::make_shared<detail::RopeTableCache>();
  ORBIT_CHECK(dtype_ == at::kFloat || dtype_ == at::kBFloat16 || dtype_ == at::kHalf,
              origin_ << ": weights are " << dtype_ << "; the compute dtype must be float32, bfloat16 or float16");
  const at::TensorOptions where = at::TensorOptions().dtype(dtype_).device(device_);
  for (const WeightSpec& spec : weight_specs(config_)) {
    check_shape(weight_slot(weights_, config_, spec.name), spec.shape, origin_, spec.name, where);
  }
  check_shape(weights_.lm_head, {config_.vocab_size, config_.hidden_size}, origin_, "lm_head.weight", where);
  if (!config_.attention_bias) {
    for (const LayerWeights& layer : weights_.layers) {
      ORBIT_CHECK(!layer.bq.defined() && !layer.bk.defined() && !layer.bv.defined(),
                  origin_ << ": attention biases given but the config has attention_bias = false");
    }
  }
  fingerprint_ = compute_fingerprint(config_, weights_);
}

int64_t Model::parameter_count() const {
  int64_t total = 0;
  for (const WeightSpec& spec : weight_specs(config_)) total += weight_slot(weights_, config_, spec.name).numel();
  return total;
}

at::Tensor Model::embed(const std::vector<int64_t>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size, "tokens[" << i << "] = " << tokens[i]
                                                                            << " is outside the vocabulary [0, "
                                                                            << config_.vocab_size << ")");
  }
  c10::InferenceMode guard;
  at::Tensor ids = at::tensor(at::ArrayRef<int64_t>(tokens), at::kLong).to(device_);
  return weights_.embed.index_select(0, ids);
}

namespace {

// An MLA model's form on the CPU under MlaForm::kAuto (forward_sequence.cpp mla_form_absorbed): absorbed over a
// contiguous or gathered past where mla_absorbed_cheaper says so; over a decode cache's, absorbed over its latent
// rows (k_pe rotated when read with dynamic-NTK RoPE, decode_cache.h).
std::string mla_cpu_forms(const ModelConfig& c, int64_t queries) {
  const MlaConfig& mla = c.mla;
  const int64_t past = detail::mla_absorbed_min_past(mla, queries);
  const std::string n = std::to_string(queries) + (queries == 1 ? " query" : " queries");
  const std::string forms =
      past < 0
          ? "; MLA: the naive form (the absorbed one takes more multiply-adds for " + n + " over any past)"
          : "; MLA: the absorbed form over a past of " + std::to_string(past) + "+ tokens (mla_absorbed_cheaper for " +
                n + ": decode steps and short queries), else the naive form";
  return forms + (c.rope.scaling == RopeScaling::kDynamicNtk
                      ? "; a decode cache's past: the absorbed form over its latent rows (k_pe rotated when read: "
                        "dynamic-NTK RoPE)"
                      : "; a decode cache's past: the absorbed form over its latent rows");
}

}  // namespace

std::string Model::attention_path(int64_t queries, bool paged) const {
  const std::string gap = detail::paged_kernel_gap(config_, device_, queries, false);
  std::string dense_path =
      device_.is_cuda()
          ? (detail::fused_attention_available() ? "PyTorch SDPA on CUDA" : "blocked PyTorch attention on CUDA")
          : (detail::cpu_attention_kernel_takes(config_.head_dim, config_.v_head_dim(), dtype_)
                 ? "orbit's CPU attention kernel (each query over the keys it sees)"
                 : "blocked PyTorch attention on CPU");
  // A query of 2+ tokens after a past (queries < keys, as every paged past has keys) in 16-bit on CUDA:
  // GEMMs (detail::attend).
  if (queries >= 2 && queries <= ops::kPastAttentionMaxQueries && ops::past_attention_available(device_, dtype_))
    dense_path = "cuBLAS GEMM attention on CUDA (float32 scores and softmax)";
  const std::string mla =
      config_.attention() == AttentionKind::kMla && device_.is_cpu() ? mla_cpu_forms(config_, queries) : "";
  if (!paged) return "contiguous past: " + dense_path + mla;
  if (gap.empty()) return "paged CUDA kernel (pages read in place, fused relocation + patch rows)";
  return "gathered past + " + dense_path + " (fallback: " + gap + ")" + mla;
}

}  // namespace orbit::runtime
