#include "orbit/runtime/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention.h"
#include "ops/paged_attention_op.h"
#include "ops/past_attention_op.h"
#include "ops/rope_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/fingerprint.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

using detail::dense;
using detail::rms_norm;

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

int64_t PastKV::length() const { return positions.defined() && positions.dim() > 0 ? positions.size(-1) : 0; }

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
  const int64_t lo = positions.min().item<int64_t>();
  const int64_t hi = positions.max().item<int64_t>();
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

// Checks one layer's content tensors against the config's content shapes with `rows` tokens.
void check_content(const ModelConfig& c, const LayerKV& kv, int64_t rows, const std::string& what) {
  const ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  const std::vector<int64_t> k_expected{rows, ks.heads, ks.dim}, v_expected{rows, vs.heads, vs.dim};
  ORBIT_CHECK(kv.k.defined() && kv.k.sizes() == at::IntArrayRef(k_expected) && kv.v.defined() &&
                  kv.v.sizes() == at::IntArrayRef(v_expected),
              what << " k/v must be " << shape_string(k_expected) << " / " << shape_string(v_expected)
                   << " (content form of " << arch_name(c.arch) << "), got "
                   << (kv.k.defined() ? shape_string(kv.k.sizes()) : "undefined") << " / "
                   << (kv.v.defined() ? shape_string(kv.v.sizes()) : "undefined"));
}

// Input positions as given or defaulted, shape-checked against T tokens.
at::Tensor input_positions(const ModelConfig& c, const at::Tensor& given, int64_t past_len, int64_t T) {
  if (!given.defined()) return at::arange(past_len, past_len + T, at::kLong);
  if (c.rope.is_mrope() && given.dim() == 2) {
    ORBIT_CHECK(given.size(0) == 3, "forward: input.positions: a position grid must have 3 rows (t, h, w), got "
                                        << shape_string(given.sizes()));
    ORBIT_CHECK(given.size(1) == T,
                "forward: input.positions: position grid has " << given.size(1) << " columns for " << T << " tokens");
  } else {
    ORBIT_CHECK(given.dim() == 1 && given.size(0) == T,
                "forward: input.positions must be [T=" << T << "]" << (c.rope.is_mrope() ? " or [3, T]" : "")
                                                       << ", got " << shape_string(given.sizes()));
  }
  return given;
}

}  // namespace

namespace {

// Why the paged kernel cannot run this model or input ("" when it can).
std::string paged_kernel_gap(const ModelConfig& c, const c10::Device& device, int64_t queries, bool partial) {
  if (!device.is_cuda()) return "the model runs on CPU";
  if (c.attention() == AttentionKind::kMla) return "MLA has no paged kernel";
  if (c.rope.rotary_dim != c.head_dim) return "partial rotary has no paged kernel";
  if (!ops::paged_attention_available(device, c.num_heads, c.num_kv_heads, c.head_dim)) {
    return "the paged kernel covers head_dim 64/128 with H/H_kv <= 8 (or this build has no CUDA kernels)";
  }
  if (partial) return "partial recompute reads contiguous keys";
  if (queries > kPagedMaxQueries) return "prefill-sized input (> " + std::to_string(kPagedMaxQueries) + " tokens)";
  return "";
}

// Positions as token-major int64 [S, rows] on `device` ([S] means every row equals it).
at::Tensor token_major(const at::Tensor& positions, int64_t rows, const c10::Device& device) {
  at::Tensor p = positions.to(device, at::kLong);
  p = p.dim() == 1 ? p.unsqueeze(1).expand({p.size(0), rows}) : p.t();
  return p.contiguous();
}

// The per-forward part of the paged kernel's inputs (slots, positions, frequencies, patch tables).
struct PagedPlan {
  ops::PagedAttentionInputs base;
  std::vector<at::Tensor> segment_tables;  // per layer
  std::vector<at::Tensor> keep_alive;      // factors moved to the device
  const KVPool* pool = nullptr;
  int64_t rows = 0;
};

PagedPlan plan_paged(const ModelConfig& c, const PastKV& past, const at::Tensor& input_positions, int64_t window_len,
                     const c10::Device& device, c10::ScalarType dtype) {
  const PagedPast& paged = *past.paged;
  ORBIT_CHECK(paged.pool != nullptr, "forward: the paged past has no pool");
  const KVPool& pool = *paged.pool;
  ORBIT_CHECK(pool.device() == device && pool.options().dtype == dtype,
              "forward: the paged past's pool is " << dtype_name(pool.options().dtype) << " on "
                                                   << device_name(pool.device()) << ", the model " << dtype_name(dtype)
                                                   << " on " << device_name(device));
  ORBIT_CHECK(pool.options().num_layers == c.num_layers && pool.num_kinds() == 2 &&
                  pool.options().widths[0] == c.content_k_shape().width() &&
                  pool.options().widths[1] == c.content_v_shape().width(),
              "forward: the paged past's pool does not hold this model's content channel");
  PagedPlan plan;
  plan.pool = &pool;
  plan.rows = pool.num_pages() * pool.page_size();
  const int64_t n = paged.length();
  const at::Tensor slots = paged.slots.to(at::kCPU, at::kLong);
  if (n > 0) {
    ORBIT_CHECK(slots.min().item<int64_t>() >= 0 && slots.max().item<int64_t>() < plan.rows,
                "forward: a paged past slot lies outside the pool's " << plan.rows << " rows");
  }
  ops::PagedAttentionInputs& b = plan.base;
  b.slots = slots.to(at::kInt).to(device);
  const int64_t rows = c.position_rows();
  b.positions = at::cat({token_major(past.positions, rows, device), token_major(input_positions, rows, device)}, 0);
  b.inv_freq = rope_inv_freq(c.rope, window_len).to(device);
  if (c.rope.is_mrope()) {
    std::vector<int8_t> row_of;
    for (int64_t r = 0; r < 3; ++r)
      row_of.insert(row_of.end(), static_cast<size_t>(c.rope.mrope_section[r]), static_cast<int8_t>(r));
    b.row_of_freq = at::tensor(at::ArrayRef<int8_t>(row_of), at::kChar).to(device);
  }
  b.interleaved = c.rope.layout == RopeLayout::kInterleaved;
  if (!paged.patches.empty()) {
    at::Tensor patch_of = at::full({n}, -1, at::kInt);
    std::vector<std::vector<kernels::cpu::PatchSegment>> per_layer(static_cast<size_t>(c.num_layers));
    int32_t index = 0;
    check_placed_patches(c, paged, "forward");
    for (const PlacedPatch& placed : paged.patches) {
      const Patch& p = *placed.patch;
      patch_of.narrow(0, placed.first, p.length).fill_(index++);
      for (int64_t l = 0; l < c.num_layers; ++l) {
        kernels::cpu::PatchSegment seg;
        seg.first = placed.first;
        seg.length = p.length;
        auto bind = [&](const LowRank& f, int64_t* rank, const float** u, const float** vt) {
          *rank = f.rank();
          if (*rank == 0) return;
          plan.keep_alive.push_back(f.u.to(device, at::kFloat).contiguous());
          *u = plan.keep_alive.back().data_ptr<float>();
          plan.keep_alive.push_back(f.vt.to(device, at::kFloat).contiguous());
          *vt = plan.keep_alive.back().data_ptr<float>();
        };
        bind(p.k[static_cast<size_t>(l)], &seg.rank_k, &seg.u_k, &seg.vt_k);
        bind(p.v[static_cast<size_t>(l)], &seg.rank_v, &seg.u_v, &seg.vt_v);
        per_layer[static_cast<size_t>(l)].push_back(seg);
      }
    }
    b.patch_of = patch_of.to(device);
    for (const auto& segs : per_layer) plan.segment_tables.push_back(ops::make_segment_table(segs, device));
  }
  return plan;
}

}  // namespace

std::string Model::attention_path(int64_t queries, bool paged) const {
  const std::string gap = paged_kernel_gap(config_, device_, queries, false);
  std::string dense_path =
      device_.is_cuda()
          ? (detail::fused_attention_available() ? "PyTorch SDPA on CUDA" : "blocked PyTorch attention on CUDA")
          : "blocked PyTorch attention on CPU";
  // A query of 2+ tokens after a past (queries < keys, as every paged past has keys) in 16-bit on CUDA:
  // GEMMs (detail::attend).
  if (queries >= 2 && queries <= ops::kPastAttentionMaxQueries && ops::past_attention_available(device_, dtype_))
    dense_path = "cuBLAS GEMM attention on CUDA (float32 scores and softmax)";
  if (!paged) return "contiguous past: " + dense_path;
  if (gap.empty()) return "paged CUDA kernel (pages read in place, fused relocation + patch rows)";
  return "gathered past + " + dense_path + " (fallback: " + gap + ")";
}

ForwardResult Model::forward(const ForwardInput& input, const PastKV* past, const ForwardOptions& options) const {
  c10::InferenceMode guard;
  const ModelConfig& c = config_;
  const bool has_tokens = !input.tokens.empty();
  const bool has_embeddings = input.embeddings.defined();
  ORBIT_CHECK(has_tokens != has_embeddings, "forward: give exactly one of input.tokens and input.embeddings");

  at::Tensor x;
  if (has_tokens) {
    x = embed(input.tokens);
  } else {
    ORBIT_CHECK(input.embeddings.dim() == 2 && input.embeddings.size(1) == c.hidden_size,
                "forward: input.embeddings must be [T, hidden_size=" << c.hidden_size << "], got "
                                                                     << shape_string(input.embeddings.sizes()));
    ORBIT_CHECK(at::isFloatingType(input.embeddings.scalar_type()),
                "forward: input.embeddings must be floating point, got " << input.embeddings.scalar_type());
    x = input.embeddings.to(device_, dtype_).contiguous();
  }
  const int64_t T = x.size(0);
  ORBIT_CHECK(T > 0, "forward: empty input");

  // A paged past is read in place by the paged kernel where it applies; otherwise it is gathered here.
  PastKV gathered;
  const PastKV* paged_past = nullptr;
  bool announced = false;  // before_layer already called for every layer
  if (past != nullptr && past->paged) {
    if (paged_kernel_gap(c, device_, T, options.recompute.defined()).empty()) {
      paged_past = past;
    } else {
      // Gathering reads every layer now, so every layer's wait comes first.
      if (options.before_layer) {
        for (int64_t l = 0; l < c.num_layers; ++l) options.before_layer(l);
      }
      gathered = materialize_past(c, *past, device_, dtype_);
      past = &gathered;
      announced = true;
    }
  }
  const int64_t past_len = past ? past->length() : 0;
  const int64_t paged_len = paged_past ? paged_past->paged->length() : 0;
  if (past) {
    const bool no_extra = paged_past != nullptr && past->layers.empty();
    ORBIT_CHECK(no_extra || static_cast<int64_t>(past->layers.size()) == c.num_layers,
                "forward: past has " << past->layers.size() << " layers, the model has " << c.num_layers);
    ORBIT_CHECK(!no_extra || past_len == paged_len, "forward: past.positions cover " << past_len << " tokens but "
                                                                                     << paged_len
                                                                                     << " are paged and no "
                                                                                        "layers follow");
    if (past_len > 0) check_positions(c, past->positions, "forward: past.positions");
    for (std::size_t l = 0; l < past->layers.size() && past_len > paged_len; ++l) {
      check_content(c, past->layers[l], past_len - paged_len, "forward: past.layers[" + std::to_string(l) + "]");
    }
  }

  const at::Tensor positions = input_positions(c, input.positions, past_len, T);
  check_positions(c, positions, "forward: input.positions");
  const at::TensorOptions index_options = at::TensorOptions().dtype(at::kLong).device(device_);

  const int64_t num_layers = options.max_layers > 0 ? std::min(options.max_layers, c.num_layers) : c.num_layers;
  ORBIT_CHECK(options.max_layers >= 0, "forward: options.max_layers must be >= 0, got " << options.max_layers);
  ORBIT_CHECK(num_layers == c.num_layers || options.logits == LogitsMode::kNone,
              "forward: logits need every layer; use LogitsMode::kNone with options.max_layers");

  // Partial recompute: x holds only the recomputed tokens; the others come from options.cached.
  const bool partial = options.recompute.defined();
  at::Tensor selected;  // int64 [R]
  if (partial) {
    selected = options.recompute;
    ORBIT_CHECK(selected.dim() == 1 && selected.scalar_type() == at::kLong,
                "forward: options.recompute must be a 1-D int64 tensor of input indices");
    if (selected.numel() > 0) {
      ORBIT_CHECK(selected.min().item<int64_t>() >= 0 && selected.max().item<int64_t>() < T,
                  "forward: options.recompute holds an index outside the input [0, " << T << ")");
      ORBIT_CHECK(selected.numel() == 1 || (selected.slice(0, 1) > selected.slice(0, 0, -1)).all().item<bool>(),
                  "forward: options.recompute must be strictly ascending");
    }
    ORBIT_CHECK(static_cast<int64_t>(options.cached.size()) >= num_layers,
                "forward: options.cached has " << options.cached.size() << " layers, " << num_layers << " are run");
    for (int64_t l = 0; l < num_layers; ++l) {
      check_content(c, options.cached[static_cast<std::size_t>(l)], T,
                    "forward: options.cached[" + std::to_string(l) + "]");
    }
    selected = selected.to(device_);
    x = x.index_select(0, selected);
  } else {
    selected = at::arange(T, index_options);
  }
  const int64_t R = x.size(0);
  ORBIT_CHECK(R > 0 || options.logits == LogitsMode::kNone, "forward: logits asked for but no token is recomputed");
  const at::Tensor query_index = selected + past_len;

  // One angle function for the input and the (relocated) past; M-RoPE grids and 1-D positions alike.
  const int64_t window_len = options.rope_window_len > 0 ? options.rope_window_len : past_len + T;
  // Angles are computed where the model runs (float64 there), never shipped per token from the host.
  const at::Tensor angles = rope_angles(c.rope, positions.to(device_), window_len);
  const at::Tensor query_angles = partial ? angles.index_select(0, selected) : angles;
  const at::Tensor key_angles = past_len > 0 && paged_past == nullptr
                                    ? at::cat({rope_angles(c.rope, past->positions.to(device_), window_len), angles}, 0)
                                    : angles;
  // cos/sin once per forward: every layer rotates by the same angles.
  const at::ScalarType table_dtype = ops::rope_table_dtype(dtype_);
  const ops::RopeTables query_tables = ops::rope_tables(query_angles, table_dtype, device_);
  const ops::RopeTables key_tables =
      paged_past == nullptr ? ops::rope_tables(key_angles, table_dtype, device_) : ops::RopeTables{};
  PagedPlan paged_plan;
  if (paged_past != nullptr) paged_plan = plan_paged(c, *paged_past, positions, window_len, device_, dtype_);

  const bool mla = c.attention() == AttentionKind::kMla;
  ForwardResult result;
  if (options.return_content) result.content.reserve(static_cast<std::size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(l)];
    if (options.before_layer && !announced) options.before_layer(l);
    const at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
    LayerKV content = mla ? detail::mla_content(c, w, h) : detail::gqa_content(c, w, h);
    if (partial) {
      const LayerKV& cached = options.cached[static_cast<std::size_t>(l)];
      content.k = cached.k.to(device_, dtype_).clone().index_copy_(0, selected, content.k);
      content.v = cached.v.to(device_, dtype_).clone().index_copy_(0, selected, content.v);
    }
    if (options.return_content) result.content.push_back(content);

    LayerKV keys = content;
    if (past_len > paged_len) {
      const LayerKV& p = past->layers[static_cast<std::size_t>(l)];
      keys = {at::cat({p.k.to(device_, dtype_), content.k}, 0), at::cat({p.v.to(device_, dtype_), content.v}, 0)};
    }
    detail::AttentionStep step{c, w, h, query_tables, keys, key_tables, query_index, !partial};
    ops::PagedAttentionInputs paged_layer;
    if (paged_past != nullptr) {
      paged_layer = paged_plan.base;
      const at::Tensor& ks = paged_plan.pool->storage(0);
      const at::Tensor& vs = paged_plan.pool->storage(1);
      paged_layer.k_pages = ks.select(0, l).view({paged_plan.rows, ks.size(3)});
      paged_layer.v_pages = vs.select(0, l).view({paged_plan.rows, vs.size(3)});
      if (!paged_plan.segment_tables.empty())
        paged_layer.segments = paged_plan.segment_tables[static_cast<std::size_t>(l)];
      step.paged = &paged_layer;
    }
    x = x + dense(mla ? detail::mla_attention(step) : detail::gqa_attention(step), w.wo);

    const at::Tensor g = rms_norm(x, w.ffn_norm, c.rms_norm_eps);
    x = x + dense(at::silu(dense(g, w.w_gate)) * dense(g, w.w_up), w.w_down);
  }

  if (options.logits != LogitsMode::kNone) {
    at::Tensor last = options.logits == LogitsMode::kLast ? x.narrow(0, x.size(0) - 1, 1) : x;
    result.logits = dense(rms_norm(last, weights_.final_norm, c.rms_norm_eps), weights_.lm_head).to(at::kFloat);
  }
  return result;
}

}  // namespace orbit::runtime
