// Internal to the runtime: ForwardOptions::key_attention (model.h), the attention the last computed token of a
// sequence puts on each of its keys, averaged over heads and layers. It is computed beside the attention
// proper (one query row against the keys, in float32), so every path of forward_batch.cpp gives the same
// figure. A decode cache whose keys are rotated when read (dynamic-NTK RoPE) gives its slot's rows rotated by
// the cached group's read tables, the keys its attention read (read_rotated_keys, forward_batch.h). A paged
// past is never read in place when key_attention is asked (ForwardPast gathers it, as where the paged CUDA
// kernel cannot run), so every path has its keys in attention form.
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
