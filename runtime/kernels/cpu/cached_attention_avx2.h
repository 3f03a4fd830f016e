// The float32 decode-attention kernel of cached_attention.h in AVX2 and FMA instructions
// (cached_attention_avx2.cpp, the one file of the runtime compiled for them). Same arguments, items and
// result as cached_attention_cpu<float>, to float32 rounding: each score is one 8-lane FMA chain per key with
// eight keys' sums reduced together, e^x the same polynomial eight lanes at a time, the weighted values summed
// eight lanes at a time (narrow values of several query rows side by side, each row's sum in the same order).
//
// Only for x86-64 CPUs that have both instruction sets (cached_attention_op.cpp checks at run time), and only
// where d_k and d_v are multiples of 8. Built where ORBIT_CACHED_ATTENTION_AVX2 is defined (x86-64, GCC or
// Clang).
#pragma once

#include <cstdint>

#include "kernels/cpu/cached_attention.h"

namespace orbit::kernels::cpu {

// Query rows whose weighted values the kernel sums together where d_v is 8 or 16 (one row's sum alone is one
// or two FMA chains, each step waiting on the last).
constexpr int kCachedAttentionValueRows = 4;

// Floats of scratch one call needs: the scaled query and the scores of kCachedAttentionValueRows rows of the
// longest seen.
inline int64_t cached_attention_avx2_scratch(const CachedAttentionDims& d, int64_t most_seen) {
  return d.dk + kCachedAttentionValueRows * (most_seen + 8);
}

// Items [begin, end) of d.items() (member i / H, query head i % H), as cached_attention_cpu<float>.
// `scratch` holds cached_attention_avx2_scratch(d, most rows a member sees) floats.
void cached_attention_avx2(const CachedAttentionArgs<float>& a, const CachedAttentionDims& d, int64_t begin,
                           int64_t end, float* scratch);

}  // namespace orbit::kernels::cpu
