#include "orbit/runtime/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "orbit/common/error.h"
#include "orbit/runtime/fingerprint.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

// Queries are processed in blocks of this many tokens so the score matrix stays bounded
// ([num_heads, kQueryBlock, past + T] floats) on long prefills.
constexpr int64_t kQueryBlock = 512;

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * gain;
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {}) {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

// Causal attention of T queries over S keys. q: [T, H, d] rotated; k, v: [S, H_kv, d] (k rotated).
// Query i sees keys [0, query_index[i]] (int64 [T]); for a plain prefill query_index = past + i.
// Returns [T, H·d].
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                     double scale) {
  const int64_t T = q.size(0), H = q.size(1), d = q.size(2), S = k.size(0), Hkv = k.size(1);
  const int64_t group = H / Hkv;
  // Head h uses kv head h / group: view q heads as [H_kv, group].
  at::Tensor kh = k.permute({1, 2, 0});  // [H_kv, d, S]
  at::Tensor vh = v.permute({1, 0, 2});  // [H_kv, S, d]
  at::Tensor out = at::empty({T, H * d}, q.options());
  const at::Tensor key_index = at::arange(S, at::kLong).unsqueeze(0);  // [1, S]
  for (int64_t start = 0; start < T; start += kQueryBlock) {
    const int64_t len = std::min(kQueryBlock, T - start);
    at::Tensor qb = q.narrow(0, start, len).reshape({len, Hkv, group, d}).permute({1, 2, 0, 3}).reshape(
        {Hkv, group * len, d});
    at::Tensor scores = at::bmm(qb, kh).mul_(scale).view({Hkv, group, len, S});
    at::Tensor hidden = key_index > query_index.narrow(0, start, len).unsqueeze(1);  // [len, S]
    scores.masked_fill_(hidden, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores, -1).view({Hkv, group * len, S});
    at::Tensor ob = at::bmm(probs, vh).view({Hkv, group, len, d}).permute({2, 0, 1, 3}).reshape({len, H * d});
    out.narrow(0, start, len).copy_(ob);
  }
  return out;
}

void check_shape(const at::Tensor& t, at::IntArrayRef expected, const std::string& origin, const std::string& name) {
  ORBIT_CHECK(t.defined(), origin << ": missing tensor '" << name << "'");
  ORBIT_CHECK(t.sizes() == expected, origin << ": tensor '" << name << "' has shape " << shape_string(t.sizes())
                                            << " but the config implies " << shape_string(expected));
  ORBIT_CHECK(t.scalar_type() == at::kFloat && t.device().is_cpu(),
              origin << ": tensor '" << name << "' must be float32 on CPU after loading");
}

}  // namespace

int64_t PastKV::length() const { return positions.defined() ? positions.size(0) : 0; }

void check_positions(const ModelConfig& config, const at::Tensor& positions, const char* what) {
  ORBIT_CHECK(positions.dim() == 1 && positions.scalar_type() == at::kLong,
              what << ": positions must be a 1-D int64 tensor, got " << positions.dim() << "-D "
                   << positions.scalar_type());
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
      const LayerKV& kv = past->layers[l];
      const std::vector<int64_t> expected{past_len, c.num_kv_heads, c.head_dim};
      ORBIT_CHECK(kv.k.defined() && kv.k.sizes() == at::IntArrayRef(expected) && kv.v.defined() &&
                      kv.v.sizes() == at::IntArrayRef(expected),
                  "forward: past.layers[" << l << "] k/v must be " << shape_string(expected));
    }
  }

  at::Tensor positions = input.positions;
  if (!positions.defined()) {
    positions = at::arange(past_len, past_len + T, at::kLong);
  } else {
    ORBIT_CHECK(positions.dim() == 1 && positions.size(0) == T,
                "forward: input.positions must be [T=" << T << "], got " << shape_string(positions.sizes()));
  }
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
      const LayerKV& kv = options.cached[static_cast<std::size_t>(l)];
      const std::vector<int64_t> expected{T, c.num_kv_heads, c.head_dim};
      ORBIT_CHECK(kv.k.defined() && kv.k.sizes() == at::IntArrayRef(expected) && kv.v.defined() &&
                      kv.v.sizes() == at::IntArrayRef(expected),
                  "forward: options.cached[" << l << "] k/v must be " << shape_string(expected));
    }
    x = x.index_select(0, selected);
  } else {
    selected = at::arange(T, at::kLong);
  }
  const int64_t R = x.size(0);
  ORBIT_CHECK(R > 0 || options.logits == LogitsMode::kNone, "forward: logits asked for but no token is recomputed");
  const at::Tensor query_index = selected + past_len;

  const int64_t window_len = options.rope_window_len > 0 ? options.rope_window_len : past_len + T;
  const at::Tensor angles = rope_angles(c.rope, positions, window_len);
  const at::Tensor query_angles = partial ? angles.index_select(0, selected) : angles;
  at::Tensor past_angles;
  if (past_len > 0) past_angles = rope_angles(c.rope, past->positions, window_len);
  const double mscale = rope_attention_scaling(c.rope);
  const double scale = mscale * mscale / std::sqrt(static_cast<double>(c.head_dim));

  ForwardResult result;
  if (options.return_content) result.content.reserve(static_cast<std::size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(l)];
    at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
    at::Tensor q = dense(h, w.wq, w.bq).view({R, c.num_heads, c.head_dim});
    at::Tensor k = dense(h, w.wk, w.bk).view({R, c.num_kv_heads, c.head_dim});
    at::Tensor v = dense(h, w.wv, w.bv).view({R, c.num_kv_heads, c.head_dim});
    if (partial) {
      const LayerKV& cached = options.cached[static_cast<std::size_t>(l)];
      k = cached.k.to(at::kFloat).clone().index_copy_(0, selected, k);
      v = cached.v.to(at::kFloat).clone().index_copy_(0, selected, v);
    }
    if (options.return_content) result.content.push_back({k, v});

    at::Tensor q_rot = rope_rotate(c.rope, q, query_angles);
    at::Tensor keys = rope_rotate(c.rope, k, angles);
    at::Tensor values = v;
    if (past_len > 0) {
      const LayerKV& p = past->layers[static_cast<std::size_t>(l)];
      // Relocation on the fly: past content is rotated to its positions here, never stored rotated.
      keys = at::cat({rope_rotate(c.rope, p.k.to(at::kFloat), past_angles), keys}, 0);
      values = at::cat({p.v.to(at::kFloat), values}, 0);
    }
    x = x + dense(attention(q_rot, keys, values, query_index, scale), w.wo);

    at::Tensor g = rms_norm(x, w.ffn_norm, c.rms_norm_eps);
    x = x + dense(at::silu(dense(g, w.w_gate)) * dense(g, w.w_up), w.w_down);
  }

  if (options.logits != LogitsMode::kNone) {
    at::Tensor last = options.logits == LogitsMode::kLast ? x.narrow(0, x.size(0) - 1, 1) : x;
    result.logits = dense(rms_norm(last, weights_.final_norm, c.rms_norm_eps), weights_.lm_head);
  }
  return result;
}

}  // namespace orbit::runtime
