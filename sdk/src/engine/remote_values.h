// What the engine accepts from the remote tier: a value another process (or anyone who can write to the
// shared server) wrote is checked against this engine's model, and against the chunk its key names,
// before the store returns it or copies it into the local tiers (RemoteOptions::validate).
//
//   canonical   attrs num_layers = L and length = n (the chunk's token count when the key names a chunk
//               registered here); exactly "layer.<l>.k" [n, H_k, d_k] and "layer.<l>.v" [n, H_v, d_v]
//               for l in [0, L), ModelConfig::content_k_shape / content_v_shape
//   patch       attrs fingerprint = the model's, num_layers = L, num_kv_heads, head_dim = the model's,
//               length n; per layer and kind at most one factor pair "….u" [n, m], "….vt" [m, D] with
//               1 <= m <= min(n, D) (D the content width), nothing else
//   embedding   "embeddings" [n, hidden] (+ "grid" int64 [n, dims]), length = n
//   other       the fidelity calibration only (attr content = "fidelity-calibration"), as
//               decode_fidelity_calibration (stored_calibration.h) reads it: this model's fingerprint and
//               the measurement's version
//
// Every floating tensor is float32 (embeddings: any floating dtype) and finite. Any other kind, tensor
// name, dtype, shape or attribute is refused with a reason naming it.
// Thread-safety: check_remote_value is pure; `chunk_length` must be safe to call from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "orbit/common/status.h"
#include "orbit/runtime/config.h"
#include "orbit/store/value.h"

namespace orbit::detail {

struct RemoteValueExpectations {
  runtime::ModelConfig config;
  std::string fingerprint;  // the model's (runtime::Model::fingerprint())
  // The token count of the chunk whose canonical `key` names, or nullopt when `key` names no chunk
  // registered here (a patch, conditioned KV, embeddings, or a chunk of another process).
  std::function<std::optional<int64_t>(const std::string& key)> chunk_length;
};

// ok, or refused naming what of `value` does not fit.
Status check_remote_value(const RemoteValueExpectations& expect, const std::string& key,
                          const store::StoredValue& value);

}  // namespace orbit::detail
