#include "orbit/runtime/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention.h"
#include "orbit/common/error.h"
#include "orbit/runtime/fingerprint.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

using detail::dense;
using detail::rms_norm;

void check_shape(const at::Tensor& t, at::IntArrayRef expected, const std::string& origin, const std::string& name) {
  ORBIT_CHECK(t.defined(), origin << ": missing tensor '" << name << "'");
  ORBIT_CHECK(t.sizes() == expected, origin << ": tensor '" << name << "' has shape " << shape_string(t.sizes())
                                            << " but the config implies " << shape_string(expected));
  ORBIT_CHECK(t.scalar_type() == at::kFloat && t.device().is_cpu(),
              origin << ": tensor '" << name << "' must be float32 on CPU after loading");
  // A NaN or infinite weight makes every output NaN: refuse the model rather than answer nonsense.
  ORBIT_CHECK(at::isfinite(t).all().item<bool>(), origin << ": tensor '" << name << "' contains NaN or infinite values");
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
    ORBIT_CHECK(positions.dim() == 1 && positions.scalar_type() == at::kLong,
                what << ": positions must be a 1-D int64 tensor, got " << positions.dim() << "-D "
                     << positions.scalar_type());
  }
  if (positions.numel() == 0) return;
  const int64_t lo = positions.min().item<int64_t>();
  const int64_t hi = positions.max().item<int64_t>();
  ORBIT_CHECK(lo >= 0, what << ": position " << lo << " is negative");
  // Dynamic NTK exists to run past the trained limit; every other RoPE type stops at it.
  if (config.rope.scaling != RopeScaling::kDynamicNtk) {
    ORBIT_CHECK(hi < config.max_position_embeddings,
                what << ": position " << hi << " is past the model's limit (max_position_embeddings = "
                     << config.max_position_embeddings << ")");
  }
}

Model::Model(ModelConfig config, ModelWeights weights, std::string origin)
    : config_(std::move(config)), weights_(std::move(weights)), origin_(std::move(origin)) {
  config_.validate(origin_);
  ORBIT_CHECK(static_cast<int64_t>(weights_.layers.size()) == config_.num_layers,
              origin_ << ": " << weights_.layers.size() << " layers of weights but num_hidden_layers = "
                      << config_.num_layers);
  if (config_.tie_word_embeddings) weights_.lm_head = weights_.embed;
  for (const WeightSpec& spec : weight_specs(config_)) {
    check_shape(weight_slot(weights_, config_, spec.name), spec.shape, origin_, spec.name);
  }
  check_shape(weights_.lm_head, {config_.vocab_size, config_.hidden_size}, origin_, "lm_head.weight");
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
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
                "tokens[" << i << "] = " << tokens[i] << " is outside the vocabulary [0, " << config_.vocab_size << ")");
  }
  c10::InferenceMode guard;
  at::Tensor ids = at::tensor(at::ArrayRef<int64_t>(tokens), at::kLong);
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
    ORBIT_CHECK(given.size(1) == T, "forward: input.positions: position grid has " << given.size(1) << " columns for "
                                                                                   << T << " tokens");
  } else {
    ORBIT_CHECK(given.dim() == 1 && given.size(0) == T,
                "forward: input.positions must be [T=" << T << "]" << (c.rope.is_mrope() ? " or [3, T]" : "")
                                                       << ", got " << shape_string(given.sizes()));
  }
  return given;
}

}  // namespace

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
    x = input.embeddings.to(at::kFloat).contiguous();
  }
  const int64_t T = x.size(0);
  ORBIT_CHECK(T > 0, "forward: empty input");

  const int64_t past_len = past ? past->length() : 0;
  if (past) {
    ORBIT_CHECK(static_cast<int64_t>(past->layers.size()) == c.num_layers,
                "forward: past has " << past->layers.size() << " layers, the model has " << c.num_layers);
    if (past_len > 0) check_positions(c, past->positions, "forward: past.positions");
    for (std::size_t l = 0; l < past->layers.size() && past_len > 0; ++l) {
      check_content(c, past->layers[l], past_len, "forward: past.layers[" + std::to_string(l) + "]");
    }
  }

  const at::Tensor positions = input_positions(c, input.positions, past_len, T);
  check_positions(c, positions, "forward: input.positions");

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
    x = x.index_select(0, selected);
  } else {
    selected = at::arange(T, at::kLong);
  }
  const int64_t R = x.size(0);
  ORBIT_CHECK(R > 0 || options.logits == LogitsMode::kNone, "forward: logits asked for but no token is recomputed");
  const at::Tensor query_index = selected + past_len;

  // One angle function for the input and the (relocated) past; M-RoPE grids and 1-D positions alike.
  const int64_t window_len = options.rope_window_len > 0 ? options.rope_window_len : past_len + T;
  const at::Tensor angles = rope_angles(c.rope, positions, window_len);
  const at::Tensor query_angles = partial ? angles.index_select(0, selected) : angles;
  const at::Tensor key_angles =
      past_len > 0 ? at::cat({rope_angles(c.rope, past->positions, window_len), angles}, 0) : angles;

  const bool mla = c.attention() == AttentionKind::kMla;
  ForwardResult result;
  if (options.return_content) result.content.reserve(static_cast<std::size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(l)];
    const at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
    LayerKV content = mla ? detail::mla_content(c, w, h) : detail::gqa_content(c, w, h);
    if (partial) {
      const LayerKV& cached = options.cached[static_cast<std::size_t>(l)];
      content.k = cached.k.to(at::kFloat).clone().index_copy_(0, selected, content.k);
      content.v = cached.v.to(at::kFloat).clone().index_copy_(0, selected, content.v);
    }
    if (options.return_content) result.content.push_back(content);

    LayerKV keys = content;
    if (past_len > 0) {
      const LayerKV& p = past->layers[static_cast<std::size_t>(l)];
      keys = {at::cat({p.k.to(at::kFloat), content.k}, 0), at::cat({p.v.to(at::kFloat), content.v}, 0)};
    }
    const detail::AttentionStep step{c, w, h, query_angles, keys, key_angles, query_index};
    x = x + dense(mla ? detail::mla_attention(step) : detail::gqa_attention(step), w.wo);

    const at::Tensor g = rms_norm(x, w.ffn_norm, c.rms_norm_eps);
    x = x + dense(at::silu(dense(g, w.w_gate)) * dense(g, w.w_up), w.w_down);
  }

  if (options.logits != LogitsMode::kNone) {
    at::Tensor last = options.logits == LogitsMode::kLast ? x.narrow(0, x.size(0) - 1, 1) : x;
    result.logits = dense(rms_norm(last, weights_.final_norm, c.rms_norm_eps), weights_.lm_head);
  }
  return result;
}

}  // namespace orbit::runtime
