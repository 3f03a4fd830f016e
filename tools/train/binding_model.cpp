#include "binding_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "binding_task.h"
#include "orbit/common/atomic_file.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/safetensors.h"
#include "orbit/runtime/weights.h"

namespace orbit::binding {

namespace rt = orbit::runtime;

namespace {

rt::ModelConfig base(rt::Arch arch, int64_t layers) {
  rt::ModelConfig c;
  c.arch = arch;
  c.source_format = "hf";
  c.weight_dtype = "float32";
  c.vocab_size = tok::kVocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = layers;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = false;
  c.rope.theta = 10000.0;
  c.rope.max_position_embeddings = c.max_position_embeddings;
  return c;
}

}  // namespace

rt::ModelConfig gqa_config(int64_t layers) {
  rt::ModelConfig c = base(rt::Arch::kLlama, layers);
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rope.layout = rt::RopeLayout::kHalfSplit;
  c.rope.head_dim = c.rope.rotary_dim = 32;
  c.validate("binding gqa config");
  return c;
}

rt::ModelConfig mla_config(int64_t layers) {
  rt::ModelConfig c = base(rt::Arch::kDeepseekV2, layers);
  c.rms_norm_eps = 1e-6;
  c.mla = rt::MlaConfig{0, 64, 16, 16, 16};
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
  c.rope.layout = rt::RopeLayout::kInterleaved;
  c.rope.head_dim = c.rope.rotary_dim = c.mla.qk_rope_head_dim;
  c.validate("binding mla config");
  return c;
}

rt::ModelConfig config_by_name(const std::string& name) {
  if (name == "gqa") return gqa_config();
  if (name == "mla") return mla_config();
  ORBIT_FAIL("binding: unknown model kind '" << name << "' (gqa or mla)");
}

rt::ModelWeights init_weights(const rt::ModelConfig& config, uint64_t seed) {
  rt::ModelWeights w;
  rt::prepare_weights(w, config);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double depth_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  for (const rt::WeightSpec& spec : rt::weight_specs(config)) {
    at::Tensor t;
    if (spec.is_norm) {
      t = at::ones(spec.shape, at::kFloat);
    } else {
      t = at::randn(spec.shape, gen, at::TensorOptions().dtype(at::kFloat));
      if (spec.name == "model.embed_tokens.weight") {
        t.mul_(1.0);
      } else {
        double std = 1.0 / std::sqrt(static_cast<double>(spec.shape.back()));
        if (spec.name.find("o_proj") != std::string::npos || spec.name.find("down_proj") != std::string::npos) {
          std *= depth_scale;
        }
        t.mul_(std);
      }
    }
    t.requires_grad_(true);
    rt::weight_slot(w, config, spec.name) = t;
  }
  if (config.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

std::vector<at::Tensor> parameters(const rt::ModelWeights& weights, const rt::ModelConfig& config) {
  std::vector<at::Tensor> out;
  for (const rt::WeightSpec& spec : rt::weight_specs(config))
    out.push_back(rt::weight_slot(weights, config, spec.name));
  return out;
}

namespace {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * gain;
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  return at::linear(x, w, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt);
}

// x: [B, T, H, d]; cos/sin: [B, T, 1, r/2] float32. Rotates the first r dims in the given layout.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, rt::RopeLayout layout,
                  int64_t rotary_dim) {
  const int64_t d = x.size(-1), half = rotary_dim / 2;
  const at::Tensor rot = x.narrow(-1, 0, rotary_dim);
  at::Tensor a, b;
  if (layout == rt::RopeLayout::kHalfSplit) {
    a = rot.narrow(-1, 0, half);
    b = rot.narrow(-1, half, half);
  } else {
    const at::Tensor pairs = rot.reshape({x.size(0), x.size(1), x.size(2), half, 2});
    a = pairs.select(-1, 0);
    b = pairs.select(-1, 1);
  }
  const at::Tensor ra = a * cos - b * sin;
  const at::Tensor rb = a * sin + b * cos;
  at::Tensor out = layout == rt::RopeLayout::kHalfSplit
                       ? at::cat({ra, rb}, -1)
                       : at::stack({ra, rb}, -1).reshape({x.size(0), x.size(1), x.size(2), rotary_dim});
  if (rotary_dim < d) out = at::cat({out, x.narrow(-1, rotary_dim, d - rotary_dim)}, -1);
  return out;
}

// q: [B, T, H, dk], k: [B, T, Hkv, dk], v: [B, T, Hkv, dv] -> [B, T, H·dv].
// bias: float [B, 1, T, T], 0 where attending is allowed and −inf elsewhere.
at::Tensor attend(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& bias, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), Hkv = k.size(2), dv = v.size(3);
  if (Hkv != H) {
    k = k.repeat_interleave(H / Hkv, 2);
    v = v.repeat_interleave(H / Hkv, 2);
  }
  const at::Tensor qh = q.permute({0, 2, 1, 3});  // [B, H, T, dk]
  const at::Tensor kh = k.permute({0, 2, 3, 1});  // [B, H, dk, T]
  const at::Tensor vh = v.permute({0, 2, 1, 3});  // [B, H, T, dv]
  const at::Tensor probs = at::softmax(at::baddbmm(bias.expand({B, H, T, T}).reshape({B * H, T, T}),
                                                   qh.reshape({B * H, T, -1}), kh.reshape({B * H, -1, T}), 1.0, scale)
                                           .view({B, H, T, T}),
                                       -1);
  return at::matmul(probs, vh).permute({0, 2, 1, 3}).reshape({B, T, H * dv});
}

}  // namespace

at::Tensor train_forward(const rt::ModelConfig& c, const rt::ModelWeights& w, const at::Tensor& tokens,
                         const at::Tensor& positions, const at::Tensor& mask, const at::Tensor& rows, int64_t aux_layer,
                         const at::Tensor& aux_rows, at::Tensor* aux) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  at::Tensor x = w.embed.index_select(0, tokens.reshape({-1})).view({B, T, c.hidden_size});
  const at::Tensor angles = rt::rope_angles(c.rope, positions.reshape({-1}));  // [B·T, r/2] float64
  const int64_t half = c.rope.rotary_dim / 2;
  const at::Tensor cos = at::cos(angles).to(at::kFloat).view({B, T, 1, half});
  const at::Tensor sin = at::sin(angles).to(at::kFloat).view({B, T, 1, half});
  const at::Tensor bias = at::zeros({B, 1, T, T}, at::kFloat)
                              .masked_fill_(mask.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  const bool mla = c.attention() == rt::AttentionKind::kMla;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  int64_t layer = 0;
  for (const rt::LayerWeights& lw : w.layers) {
    if (aux != nullptr && layer++ == aux_layer && aux_rows.defined()) {
      *aux = dense(rms_norm(x.reshape({B * T, c.hidden_size}).index_select(0, aux_rows), w.final_norm, c.rms_norm_eps),
                   w.lm_head);
    }
    const at::Tensor h = rms_norm(x, lw.attn_norm, c.rms_norm_eps);
    at::Tensor attn;
    if (!mla) {
      const at::Tensor q = dense(h, lw.wq, lw.bq).view({B, T, c.num_heads, c.head_dim});
      const at::Tensor k = dense(h, lw.wk, lw.bk).view({B, T, c.num_kv_heads, c.head_dim});
      const at::Tensor v = dense(h, lw.wv, lw.bv).view({B, T, c.num_kv_heads, c.head_dim});
      attn = attend(rotate(q, cos, sin, c.rope.layout, c.rope.rotary_dim),
                    rotate(k, cos, sin, c.rope.layout, c.rope.rotary_dim), v, bias, scale);
    } else {
      const rt::MlaConfig& m = c.mla;
      const int64_t H = c.num_heads;
      const at::Tensor q = dense(h, lw.wq).view({B, T, H, c.head_dim});
      const at::Tensor compressed = dense(h, lw.wkv_a);
      const at::Tensor latent = rms_norm(compressed.narrow(-1, 0, m.kv_lora_rank), lw.kv_a_norm, 1e-6);
      const at::Tensor k_pe =
          compressed.narrow(-1, m.kv_lora_rank, m.qk_rope_head_dim).reshape({B, T, 1, m.qk_rope_head_dim});
      const at::Tensor kv = dense(latent, lw.wkv_b).view({B, T, H, m.qk_nope_head_dim + m.v_head_dim});
      const at::Tensor k_nope = kv.narrow(-1, 0, m.qk_nope_head_dim);
      const at::Tensor v = kv.narrow(-1, m.qk_nope_head_dim, m.v_head_dim);
      const at::Tensor q_nope = q.narrow(-1, 0, m.qk_nope_head_dim);
      const at::Tensor q_pe =
          rotate(q.narrow(-1, m.qk_nope_head_dim, m.qk_rope_head_dim), cos, sin, c.rope.layout, m.qk_rope_head_dim);
      const at::Tensor k_rot =
          rotate(k_pe, cos, sin, c.rope.layout, m.qk_rope_head_dim).expand({B, T, H, m.qk_rope_head_dim});
      attn = attend(at::cat({q_nope, q_pe}, -1), at::cat({k_nope, k_rot}, -1), v, bias, scale);
    }
    x = x + dense(attn, lw.wo);
    const at::Tensor g = rms_norm(x, lw.ffn_norm, c.rms_norm_eps);
    x = x + dense(at::silu(dense(g, lw.w_gate)) * dense(g, lw.w_up), lw.w_down);
  }
  const at::Tensor selected = x.reshape({B * T, c.hidden_size}).index_select(0, rows);
  return dense(rms_norm(selected, w.final_norm, c.rms_norm_eps), w.lm_head);
}

rt::ModelWeights detached(const rt::ModelWeights& weights) {
  auto copy = [](const at::Tensor& t) { return t.defined() ? t.detach().clone() : t; };
  rt::ModelWeights out;
  out.embed = copy(weights.embed);
  out.final_norm = copy(weights.final_norm);
  out.lm_head = copy(weights.lm_head);
  for (const rt::LayerWeights& l : weights.layers) {
    rt::LayerWeights d;
    d.attn_norm = copy(l.attn_norm);
    d.wq = copy(l.wq), d.wk = copy(l.wk), d.wv = copy(l.wv);
    d.bq = copy(l.bq), d.bk = copy(l.bk), d.bv = copy(l.bv);
    d.wq_a = copy(l.wq_a), d.q_a_norm = copy(l.q_a_norm), d.wq_b = copy(l.wq_b);
    d.wkv_a = copy(l.wkv_a), d.kv_a_norm = copy(l.kv_a_norm), d.wkv_b = copy(l.wkv_b);
    d.wo = copy(l.wo), d.ffn_norm = copy(l.ffn_norm);
    d.w_gate = copy(l.w_gate), d.w_up = copy(l.w_up), d.w_down = copy(l.w_down);
    out.layers.push_back(d);
  }
  return out;
}

void write_checkpoint(const rt::ModelConfig& config, const rt::ModelWeights& weights, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  ORBIT_CHECK(!ec && fs::is_directory(dir), dir << ": cannot create directory: " << ec.message());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const rt::WeightSpec& spec : rt::weight_specs(config)) {
    tensors.emplace_back(spec.name, rt::weight_slot(weights, config, spec.name).detach().contiguous());
  }
  rt::StWriteOptions options;
  options.metadata["format"] = "pt";
  rt::write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, options);
  rt::ModelConfig written = config;
  written.weight_dtype = "float32";
  write_file_atomically((fs::path(dir) / "config.json").string(), rt::hf_config_json(written).dump(2) + "\n",
                        "config.json");
}

}  // namespace orbit::binding
