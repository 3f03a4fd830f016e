// A past read in place from a KVPool: which pool row holds each past token, and the low-rank patches of
// the chunks placed there. Model::forward attends over it without gathering it (PastKV::paged):
//
//   past token s    content row slots[s] of the pool (kind 0 = k, kind 1 = v, every layer)
//                   + U·Vᵀ row (s − first) of the patch placed at [first, first + n), if any
//                   rotated to positions[s] as it is read (fused relocation)
//
// So one canonical page set per chunk serves every window and fork that places it, each adding only its
// own patch factors (Σ (n + D)·m floats per layer) instead of a patched copy of the chunk.
//
// On CUDA with a GQA/MHA model (head_dim 64 or 128, H/H_kv <= 8, full rotary) and decode- or query-sized
// inputs (R <= kPagedMaxQueries tokens), the forward runs orbit's paged-attention kernel
// (kernels/cuda/paged_attention.cuh). Everything else (CPU, MLA, partial rotary, longer inputs), and a
// forward that asks for ForwardOptions::key_attention (the kernel does not return its weights), gathers
// and patches the rows first (materialize()) and runs the ordinary path; Model::attention_path() says
// which one a forward without key_attention takes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"

namespace orbit::runtime {

// Inputs longer than this take the gather path (prefill-sized attention belongs to the fused PyTorch
// kernels, which read contiguous keys). Up to this many, the tensor-core kernel stages each key once for
// all query rows of its kv head, which beats gathering and patching a copy of the whole past: a 16-token
// query over 32,768 tokens with every chunk patched, Qwen2.5-7B on an H200, 22 ms against 31 ms
// (bench_gpu's TTFT section, bench/REPORT-gpu.md).
constexpr int64_t kPagedMaxQueries = 64;

struct PlacedPatch {
  int64_t first = 0;                   // first past token the patch's rows apply to
  std::shared_ptr<const Patch> patch;  // factors float32 (moved to the pool's device when used)
};

struct PagedPast {
  const KVPool* pool = nullptr;      // must outlive every forward that reads this past
  at::Tensor slots;                  // int64 [S_p] (any device): pool row = page · page_size + offset
  std::vector<PlacedPatch> patches;  // disjoint ranges inside [0, S_p)
  int64_t length() const { return slots.defined() ? slots.numel() : 0; }
};

// PastKV whose first paged->length() tokens are read from the pool and whose remaining tokens (none when
// `extra` is empty) come from `extra` in content form; positions cover both ([S] or [3, S]).
PastKV make_paged_past(std::shared_ptr<const PagedPast> paged, at::Tensor positions, std::vector<LayerKV> extra = {});

// Throws orbit::Error (message prefixed with `what`) unless every placed patch is non-null, lies inside
// [0, paged.length()) and has one factor pair per layer of `config`.
void check_placed_patches(const ModelConfig& config, const PagedPast& paged, const std::string& what);

// The paged tokens' content, gathered from the pool and patched, on `device` in `dtype`: one LayerKV
// per layer with S_p rows (the fallback path, and the oracle the kernel is tested against). Throws on
// slots outside the pool or patches outside [0, S_p) or of the wrong width.
std::vector<LayerKV> materialize(const ModelConfig& config, const PagedPast& paged, const c10::Device& device,
                                 c10::ScalarType dtype);

// The same past with every paged token gathered (and patched) into `layers`: an ordinary PastKV.
PastKV materialize_past(const ModelConfig& config, const PastKV& past, const c10::Device& device,
                        c10::ScalarType dtype);

}  // namespace orbit::runtime
