// Internal to the runtime: ForwardOptions::key_attention (model.h), the attention the last computed token of a
// sequence puts on each of its keys, averaged over heads and layers. It is computed beside the attention
// proper (one query row against the keys, in float32), so every path of forward_batch.cpp gives the same
// figure, except the two whose keys never exist in attention form on the host side of the forward: a paged
// past read in place by the CUDA kernel, and a decode cache whose keys are rotated when read (dynamic-NTK
// RoPE). There ForwardResult::key_attention stays undefined.
#pragma once

#include <cstdint>
#include <vector>

#include "forward_batch.h"

namespace orbit::runtime::detail {

// Layer l's share for every sequence that asks for it, added to its result. Runs after layer l's attention
// (a cached sequence's new rows are in its slot by then). q: every computed token's queries [N, H, d_k].
void add_key_attention(const BatchPass& b, int64_t l, const LayerWeights& w, const std::vector<LayerKV>& contents,
                       const at::Tensor& q, std::vector<ForwardResult>& results);

// After the last layer: the sums turned into means over the layers run, on the host.
void finish_key_attention(const BatchPass& b, std::vector<ForwardResult>& results);

}  // namespace orbit::runtime::detail
