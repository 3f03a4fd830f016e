// A differentiable, batched re-implementation of the runtime's forward (runtime/src/model.cpp,
// attention.cpp, attention_mla.cpp) for training the binding models with autograd.
//
// Same computation, term by term: RMSNorm x·rsqrt(mean(x²)+eps)·g with the config's rms_norm_eps (the MLA
// latent norm uses 1e-6); SwiGLU; GQA head h reads kv head h / (H/H_kv); RoPE angles from the runtime's
// rope_angles() (one source of truth) and rotation in the config's layout (half-split for llama/qwen2,
// interleaved for the MLA k_pe/q_pe); softmax scale 1/sqrt(head_dim). tests/cpp/test_binding.cpp checks
// logits against Model::forward. What differs is only the batching: a [B, T] token batch with an
// explicit boolean attention mask [B, T, T] (true = may attend), so several questions can share one
// context (each question block sees the context and itself, at the same positions).
//
// Weights live in the runtime's ModelWeights (float32 CPU tensors with requires_grad), named by the
// runtime's weight table, so a checkpoint is written with exactly the names the HF loader reads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/runtime/config.h"
#include "orbit/runtime/model.h"

namespace orbit::binding {

// The two architectures trained here (small, CPU-trainable): hidden 64, 4 heads, SwiGLU 128, 4 layers.
// Content widths D: GQA (4 query heads, 2 kv heads of 32) keys/values H_kv·d = 64; MLA (4 heads,
// d_nope = d_rope = d_v = 16, no q low-rank) k_pe 16, latent c_KV 64.
runtime::ModelConfig gqa_config(int64_t layers = 4);
runtime::ModelConfig mla_config(int64_t layers = 4);
runtime::ModelConfig config_by_name(const std::string& name);  // "gqa" or "mla"

// Fresh weights (deterministic for `seed`), requires_grad set on every tensor.
runtime::ModelWeights init_weights(const runtime::ModelConfig& config, uint64_t seed);
// Every trainable tensor, in weight-table order (lm_head excluded when tied).
std::vector<at::Tensor> parameters(const runtime::ModelWeights& weights, const runtime::ModelConfig& config);

// Returns logits for the rows `rows` (int64 [N],
// flat indices b·T + t) as float32 [N, vocab]. tokens/positions: int64 [B, T]; mask: bool [B, T, T].
//
// Deep supervision (training only): when `aux` is given, *aux receives the "logit lens" of the residual
// stream after `aux_layer` layers at the rows `aux_rows`: lm_head(final_norm(x_aux_layer)) [M, vocab].
at::Tensor train_forward(const runtime::ModelConfig& config, const runtime::ModelWeights& weights,
                         const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& mask,
                         const at::Tensor& rows, int64_t aux_layer = 0, const at::Tensor& aux_rows = {},
                         at::Tensor* aux = nullptr);

// Detached copies (no grad) suitable for runtime::Model.
runtime::ModelWeights detached(const runtime::ModelWeights& weights);

// Writes config.json + model.safetensors (float32) into `dir` (created), the layout load_hf() reads.
void write_checkpoint(const runtime::ModelConfig& config, const runtime::ModelWeights& weights, const std::string& dir);

}  // namespace orbit::binding
