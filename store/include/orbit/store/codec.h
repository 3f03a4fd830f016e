// Conversions between the runtime's types and stored values (value.h). The store itself is
// family-agnostic; these fix the names a family's tensors get:
//
//   canonical            "layer.<l>.k", "layer.<l>.v": [n, heads, dim] as LayerKV holds them for any family
//                        (GQA/MHA: keys and values; MLA: k_pe [n, 1, d_rope] and c_KV [n, 1, r_kv]);
//                        attrs length, num_layers
//   patch                "layer.<l>.k.u" [n, m], "layer.<l>.k.vt" [m, H_kv·d] (and .v.), only for
//                        layers that carry a factor; attrs fingerprint, length, num_kv_heads, head_dim,
//                        num_layers
//   embedding            "embeddings": [n, hidden] (+ "grid": int64 [n, dims] when given)
//
// Decoders throw orbit::Error naming the missing tensor or attribute (a value of the wrong kind).
// Encoders copy (make_value); decoders return tensors that share the stored value's memory (read-only).
// All functions are pure and thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include "orbit/runtime/config.h"
#include "orbit/runtime/reuse.h"
#include "orbit/store/device_tier.h"
#include "orbit/store/value.h"

namespace orbit::store {

ValuePtr canonical_value(const runtime::Content& content);
runtime::Content content_from_value(const StoredValue& value);

ValuePtr patch_value(const runtime::Patch& patch);
runtime::Patch patch_from_value(const StoredValue& value);

// `grid` may be undefined (no position grid).
ValuePtr embedding_value(const at::Tensor& embeddings, const at::Tensor& grid = at::Tensor());

// The device page layout holding canonicals of `config` (kinds k and v, ModelConfig::content_widths()).
DevicePageLayout device_layout_for(const runtime::ModelConfig& config, int64_t page_size = 16);

}  // namespace orbit::store
