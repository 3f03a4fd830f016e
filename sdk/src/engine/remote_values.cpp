#include "engine/remote_values.h"

#include <ATen/ATen.h>

#include <sstream>
#include <vector>

#include "engine/stored_calibration.h"
#include "orbit/common/error.h"
#include "orbit/store/codec.h"
#include "orbit/store/device_tier.h"

namespace orbit::detail {

namespace {

using store::StoredValue;

Status refuse(const StoredValue& value, const std::string& why) {
  return Status::refused(std::string("remote ") + entry_kind_name(value.kind) + " refused: " + why);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  return out.str() + ']';
}

// The attribute as an integer >= 0, or nullopt when absent or not one.
std::optional<int64_t> attr_int(const StoredValue& value, const std::string& name) {
  auto it = value.attrs.find(name);
  if (it == value.attrs.end() || it->second.empty() || it->second.size() > 18) return std::nullopt;
  for (char c : it->second) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(it->second);
}

// `name` present, of `dtype` (or any floating dtype when `dtype` is Undefined), of `shape`, finite.
Status check_tensor(const StoredValue& value, const std::string& name, at::ScalarType dtype,
                    const std::vector<int64_t>& shape) {
  const at::Tensor* t = value.find(name);
  if (t == nullptr) return refuse(value, "tensor '" + name + "' is missing");
  const bool dtype_ok =
      dtype == at::ScalarType::Undefined ? at::isFloatingType(t->scalar_type()) : t->scalar_type() == dtype;
  if (!dtype_ok) {
    return refuse(value, "tensor '" + name + "' is " + std::string(c10::toString(t->scalar_type())) + ", not " +
                             (dtype == at::ScalarType::Undefined ? "floating" : c10::toString(dtype)));
  }
  if (t->sizes().vec() != shape) {
    return refuse(value,
                  "tensor '" + name + "' is " + shape_text(t->sizes().vec()) + ", expected " + shape_text(shape));
  }
  if (at::isFloatingType(t->scalar_type()) && t->numel() > 0 && !at::isfinite(*t).all().item<bool>()) {
    return refuse(value, "tensor '" + name + "' holds NaN or infinite values");
  }
  return Status::ok();
}

Status check_canonical(const RemoteValueExpectations& expect, std::optional<int64_t> chunk, const StoredValue& value) {
  const runtime::ModelConfig& c = expect.config;
  const std::optional<int64_t> layers = attr_int(value, "num_layers"), n = attr_int(value, "length");
  if (layers != c.num_layers) return refuse(value, "num_layers is not the model's " + std::to_string(c.num_layers));
  if (!n || *n < 1) return refuse(value, "attribute 'length' is missing or not a positive integer");
  if (chunk && *chunk != *n) {
    return refuse(value, "length " + std::to_string(*n) + " differs from its chunk's " + std::to_string(*chunk));
  }
  if (static_cast<int64_t>(value.tensors.size()) != 2 * c.num_layers) {
    return refuse(value, std::to_string(value.tensors.size()) + " tensors, expected " +
                             std::to_string(2 * c.num_layers) + " (k and v per layer)");
  }
  const runtime::ContentShape ks = c.content_k_shape(), vs = c.content_v_shape();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Status k = check_tensor(value, store::layer_tensor_name(l, "k"), at::kFloat, {*n, ks.heads, ks.dim});
    if (!k) return k;
    Status v = check_tensor(value, store::layer_tensor_name(l, "v"), at::kFloat, {*n, vs.heads, vs.dim});
    if (!v) return v;
  }
  return Status::ok();
}

// One layer's factor pair of `kind` (width `width`), if stored; counts the tensors it accounts for.
Status check_factor(const StoredValue& value, const std::string& base, int64_t n, int64_t width, int64_t* seen) {
  const at::Tensor* u = value.find(base + ".u");
  const at::Tensor* vt = value.find(base + ".vt");
  if (u == nullptr && vt == nullptr) return Status::ok();
  if (u == nullptr || vt == nullptr) return refuse(value, "factor " + base + " lacks its .u or .vt tensor");
  const int64_t m = u->dim() == 2 ? u->size(1) : -1;
  if (m < 1 || m > std::min(n, width)) {
    return refuse(value, "factor " + base + " has rank " + std::to_string(m) + " outside 1.." +
                             std::to_string(std::min(n, width)));
  }
  *seen += 2;
  Status us = check_tensor(value, base + ".u", at::kFloat, {n, m});
  return us ? check_tensor(value, base + ".vt", at::kFloat, {m, width}) : us;
}

Status check_patch(const RemoteValueExpectations& expect, const StoredValue& value) {
  const runtime::ModelConfig& c = expect.config;
  auto fp = value.attrs.find("fingerprint");
  if (fp == value.attrs.end() || fp->second != expect.fingerprint) return refuse(value, "another model's patch");
  if (attr_int(value, "num_layers") != c.num_layers || attr_int(value, "num_kv_heads") != c.num_kv_heads ||
      attr_int(value, "head_dim") != c.head_dim) {
    return refuse(value, "num_layers, num_kv_heads or head_dim is not the model's");
  }
  const std::optional<int64_t> n = attr_int(value, "length");
  if (!n || *n < 1) return refuse(value, "attribute 'length' is missing or not a positive integer");
  const std::vector<int64_t> widths = c.content_widths();
  int64_t seen = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      const std::string base = store::layer_tensor_name(l, kind == 0 ? "k" : "v");
      Status s = check_factor(value, base, *n, widths[static_cast<std::size_t>(kind)], &seen);
      if (!s) return s;
    }
  }
  if (seen != static_cast<int64_t>(value.tensors.size())) return refuse(value, "it holds tensors of no factor");
  try {
    (void)store::patch_from_value(value);  // the optional attributes (residual, sensitivity)
  } catch (const Error& e) {
    return refuse(value, e.what());
  }
  return Status::ok();
}

Status check_embedding(const RemoteValueExpectations& expect, const StoredValue& value) {
  const at::Tensor* e = value.find("embeddings");
  if (e == nullptr || e->dim() != 2) return refuse(value, "tensor 'embeddings' is missing or not [n, hidden]");
  const int64_t n = e->size(0);
  if (n < 1 || attr_int(value, "length") != n) return refuse(value, "attribute 'length' is not its row count");
  Status s = check_tensor(value, "embeddings", at::ScalarType::Undefined, {n, expect.config.hidden_size});
  if (!s) return s;
  const at::Tensor* grid = value.find("grid");
  if (grid != nullptr) {
    if (grid->dim() != 2 || grid->size(1) < 1 || grid->size(1) > 3)
      return refuse(value, "tensor 'grid' is not [n, dims]");
    s = check_tensor(value, "grid", at::kLong, {n, grid->size(1)});
    if (!s) return s;
  }
  if (value.tensors.size() != (grid ? 2u : 1u)) return refuse(value, "it holds tensors other than embeddings and grid");
  return Status::ok();
}

}  // namespace

Status check_remote_value(const RemoteValueExpectations& expect, const std::string& key, const StoredValue& value) {
  const std::optional<int64_t> chunk = expect.chunk_length ? expect.chunk_length(key) : std::nullopt;
  if (chunk && value.kind != EntryKind::kCanonical) return refuse(value, "its key names a chunk's canonical");
  switch (value.kind) {
    case EntryKind::kCanonical: return check_canonical(expect, chunk, value);
    case EntryKind::kPatch: return check_patch(expect, value);
    case EntryKind::kEmbedding: return check_embedding(expect, value);
    case EntryKind::kOther:
      // The one value of kind other an engine writes: its fidelity calibration (stored_calibration.h).
      if (is_fidelity_calibration(value)) return decode_fidelity_calibration(value, expect.fingerprint).status();
      break;
    default: break;
  }
  return refuse(value, "the engine stores no such values");
}

}  // namespace orbit::detail
