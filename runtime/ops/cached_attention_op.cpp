// Cached decode attention op: tensor checks and dispatch (ops/cached_attention_op.h).
#include "ops/cached_attention_op.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "kernels/cpu/cached_attention.h"
#include "ops/cpu_features.h"
#if defined(ORBIT_CPU_AVX2_KERNELS)
#include "kernels/cpu/cached_attention_avx2.h"
#endif
#include "orbit/common/error.h"

namespace orbit::runtime::ops {

namespace kcpu = orbit::kernels::cpu;

bool cached_attention_available(const c10::Device& device, at::ScalarType t) {
  return device.is_cpu() && (t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf);
}

namespace {

// The float32 members through the AVX2/FMA kernel, each thread with its own scratch.
void run_avx2(const kcpu::CachedAttentionArgs<float>& a, const kcpu::CachedAttentionDims& d,
              const std::vector<int64_t>& lengths) {
#if defined(ORBIT_CPU_AVX2_KERNELS)
  const int64_t most_seen =
      a.last_key != nullptr ? d.capacity : *std::max_element(lengths.begin(), lengths.end()) + d.queries;
  at::parallel_for(0, d.items(), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(kcpu::cached_attention_avx2_scratch(d, most_seen)));
    kcpu::cached_attention_avx2(a, d, begin, end, scratch.data());
  });
#else
  (void)a, (void)d, (void)lengths;
#endif
}

// A buffer's [slot, head, row] element strides.
kcpu::CachedAttentionStrides strides_of(const at::Tensor& buffer) {
  return {buffer.stride(0), buffer.stride(1), buffer.stride(2)};
}

}  // namespace

bool cached_attention_vectorised(at::ScalarType dtype, int64_t dk, int64_t dv) {
  return dtype == at::kFloat && dk > 0 && dk % 8 == 0 && dv > 0 && dv % 8 == 0 && avx2_kernels_run();
}

void cached_attention(const CachedAttentionInputs& in, at::Tensor& out) {
  ORBIT_CHECK(cached_attention_available(in.q.device(), in.q.scalar_type()),
              "cached_attention: q must be a CPU floating tensor");
  ORBIT_CHECK(in.q.dim() == 3 && in.keys.dim() == 4 && in.values.dim() == 4,
              "cached_attention: q must be [N, H, d_k], keys and values [slots, H_a, capacity, d]");
  ORBIT_CHECK(in.keys.stride(3) == 1 && in.values.stride(3) == 1 && out.is_contiguous(),
              "cached_attention: keys' and values' rows must be contiguous, and out");
  ORBIT_CHECK(in.keys.scalar_type() == in.q.scalar_type() && in.values.scalar_type() == in.q.scalar_type() &&
                  out.scalar_type() == in.q.scalar_type(),
              "cached_attention: q, keys, values and out must share a dtype");
  kcpu::CachedAttentionDims d;
  d.members = static_cast<int64_t>(in.slots.size());
  d.queries = in.queries;
  d.heads = in.q.size(1);
  d.kv_heads = in.keys.size(1);
  d.dk = in.q.size(2);
  d.dv = in.values.size(3);
  d.capacity = in.keys.size(2);
  d.scale = static_cast<float>(in.scale);
  ORBIT_CHECK(in.lengths.size() == in.slots.size() && in.first_row.size() == in.slots.size(),
              "cached_attention: slots, lengths and first_row must have one entry per member");
  ORBIT_CHECK(d.kv_heads > 0 && d.heads % d.kv_heads == 0 && in.keys.size(3) == d.dk &&
                  in.values.size(2) == d.capacity && in.values.size(1) == d.kv_heads,
              "cached_attention: keys [" << in.keys.sizes() << "] and values [" << in.values.sizes()
                                         << "] do not fit q [" << in.q.sizes() << "]");
  ORBIT_CHECK(out.dim() == 2 && out.size(0) == in.q.size(0) && out.size(1) == d.heads * d.dv,
              "cached_attention: out must be [N, H·d_v]");
  for (std::size_t b = 0; b < in.slots.size(); ++b) {
    ORBIT_CHECK(in.slots[b] >= 0 && in.slots[b] < in.keys.size(0) && in.lengths[b] >= 0 &&
                    in.lengths[b] + d.queries <= d.capacity && in.first_row[b] >= 0 &&
                    in.first_row[b] + d.queries <= in.q.size(0),
                "cached_attention: member " << b << " (slot " << in.slots[b] << ", " << in.lengths[b]
                                            << " rows, first row " << in.first_row[b] << ") is outside the buffers");
  }
  ORBIT_CHECK(
      in.last_key.empty() || static_cast<int64_t>(in.last_key.size()) == d.members * d.queries,
      "cached_attention: last_key must be empty or hold one entry per query row (" << d.members * d.queries << ")");
  for (const int64_t last : in.last_key) {
    ORBIT_CHECK(last >= 0 && last < d.capacity,
                "cached_attention: last_key " << last << " is outside the " << d.capacity << " rows of a slot");
  }
  const int64_t* last_key = in.last_key.empty() ? nullptr : in.last_key.data();
  const at::Tensor q = in.q.contiguous();
  if (d.members == 0) return;
  if (cached_attention_vectorised(q.scalar_type(), d.dk, d.dv)) {
    kcpu::CachedAttentionArgs<float> a{
        q.data_ptr<float>(), in.keys.data_ptr<float>(), in.values.data_ptr<float>(), in.slots.data(),
        in.lengths.data(),   in.first_row.data(),       out.data_ptr<float>(),       last_key,
        strides_of(in.keys), strides_of(in.values)};
    run_avx2(a, d, in.lengths);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "cached_attention", [&] {
    kcpu::CachedAttentionArgs<scalar_t> a;
    a.q = q.data_ptr<scalar_t>();
    a.keys = in.keys.data_ptr<scalar_t>();
    a.values = in.values.data_ptr<scalar_t>();
    a.slots = in.slots.data();
    a.lengths = in.lengths.data();
    a.first_row = in.first_row.data();
    a.out = out.data_ptr<scalar_t>();
    a.key_strides = strides_of(in.keys);
    a.value_strides = strides_of(in.values);
    a.last_key = last_key;
    at::parallel_for(0, d.items(), 1,
                     [&](int64_t begin, int64_t end) { kcpu::cached_attention_cpu(a, d, begin, end); });
  });
}

}  // namespace orbit::runtime::ops
