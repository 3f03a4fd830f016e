#include "orbit/store/codec.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "orbit/common/error.h"

namespace orbit::store {

namespace rt = orbit::runtime;

namespace {

int64_t attr_int(const StoredValue& value, const std::string& name) {
  auto it = value.attrs.find(name);
  ORBIT_CHECK(it != value.attrs.end(),
              "stored " << entry_kind_name(value.kind) << " has no attribute '" << name << "'");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    ORBIT_FAIL("stored " << entry_kind_name(value.kind) << ": attribute '" << name << "' = '" << it->second
                         << "' is not an integer");
  }
}

}  // namespace

ValuePtr canonical_value(const rt::Content& content) {
  ORBIT_CHECK(!content.empty(), "canonical_value: content has no layers");
  std::vector<NamedTensor> tensors;
  const int64_t n = content[0].k.defined() ? content[0].k.size(0) : 0;
  for (size_t l = 0; l < content.size(); ++l) {
    ORBIT_CHECK(content[l].k.defined() && content[l].v.defined() && content[l].k.dim() == 3 &&
                    content[l].k.size(0) == n && content[l].v.size(0) == n,
                "canonical_value: layer " << l << " k and v must be [n, heads, dim] with n = " << n);
    tensors.push_back({layer_tensor_name(static_cast<int64_t>(l), "k"), content[l].k});
    tensors.push_back({layer_tensor_name(static_cast<int64_t>(l), "v"), content[l].v});
  }
  return make_value(EntryKind::kCanonical, std::move(tensors),
                    {{"length", std::to_string(n)}, {"num_layers", std::to_string(content.size())}});
}

rt::Content content_from_value(const StoredValue& value) {
  ORBIT_CHECK(value.kind == EntryKind::kCanonical,
              "content_from_value: the value is a " << entry_kind_name(value.kind) << ", not a canonical");
  const int64_t layers = attr_int(value, "num_layers");
  rt::Content content(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    content[static_cast<size_t>(l)].k = value.at(layer_tensor_name(l, "k"));
    content[static_cast<size_t>(l)].v = value.at(layer_tensor_name(l, "v"));
  }
  return content;
}

ValuePtr patch_value(const rt::Patch& patch) {
  ORBIT_CHECK(patch.k.size() == patch.v.size(),
              "patch_value: " << patch.k.size() << " key factors for " << patch.v.size() << " value factors");
  std::vector<NamedTensor> tensors;
  for (size_t l = 0; l < patch.k.size(); ++l) {
    for (const auto& [kind, factor] : {std::make_pair("k", &patch.k[l]), std::make_pair("v", &patch.v[l])}) {
      if (factor->rank() == 0) continue;
      const std::string base = layer_tensor_name(static_cast<int64_t>(l), kind);
      tensors.push_back({base + ".u", factor->u});
      tensors.push_back({base + ".vt", factor->vt});
    }
  }
  std::map<std::string, std::string> attrs{{"fingerprint", patch.model_fingerprint},
                                           {"length", std::to_string(patch.length)},
                                           {"num_kv_heads", std::to_string(patch.num_kv_heads)},
                                           {"head_dim", std::to_string(patch.head_dim)},
                                           {"num_layers", std::to_string(patch.k.size())}};
  for (const auto& [name, x] :
       {std::make_pair("residual", patch.residual), std::make_pair("sensitivity", patch.sensitivity)}) {
    if (x < 0) continue;  // unknown: not recorded
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    attrs[name] = buf;
  }
  return make_value(EntryKind::kPatch, std::move(tensors), std::move(attrs));
}

namespace {

// A finite number attribute in [0, max] (`range` says so in errors), or -1 when absent; orbit::Error naming
// the attribute otherwise.
double optional_number(const StoredValue& value, const char* name, double max, const char* range) {
  auto r = value.attrs.find(name);
  if (r == value.attrs.end()) return -1;
  char* end = nullptr;
  const double x = std::strtod(r->second.c_str(), &end);
  ORBIT_CHECK(end != r->second.c_str() && *end == '\0' && std::isfinite(x) && x >= 0 && x <= max,
              "stored patch: attribute '" << name << "' = '" << r->second << "' is not a number in " << range);
  return x;
}

}  // namespace

rt::Patch patch_from_value(const StoredValue& value) {
  ORBIT_CHECK(value.kind == EntryKind::kPatch,
              "patch_from_value: the value is a " << entry_kind_name(value.kind) << ", not a patch");
  rt::Patch patch;
  auto fp = value.attrs.find("fingerprint");
  ORBIT_CHECK(fp != value.attrs.end(), "stored patch has no attribute 'fingerprint'");
  patch.model_fingerprint = fp->second;
  patch.length = attr_int(value, "length");
  patch.num_kv_heads = attr_int(value, "num_kv_heads");
  patch.head_dim = attr_int(value, "head_dim");
  const int64_t layers = attr_int(value, "num_layers");
  // Optional: stores written before patches recorded their residual or sensitivity leave them unknown (-1).
  patch.residual = optional_number(value, "residual", 1.0, "[0, 1]");
  patch.sensitivity = optional_number(value, "sensitivity", std::numeric_limits<double>::max(), "[0, inf)");
  patch.k.resize(static_cast<size_t>(layers));
  patch.v.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    for (const auto& [kind, factor] : {std::make_pair("k", &patch.k[static_cast<size_t>(l)]),
                                       std::make_pair("v", &patch.v[static_cast<size_t>(l)])}) {
      const std::string base = layer_tensor_name(l, kind);
      const at::Tensor* u = value.find(base + ".u");
      if (u == nullptr) continue;
      factor->u = *u;
      factor->vt = value.at(base + ".vt");
    }
  }
  return patch;
}

ValuePtr embedding_value(const at::Tensor& embeddings, const at::Tensor& grid) {
  ORBIT_CHECK(embeddings.defined() && embeddings.dim() == 2, "embedding_value: embeddings must be [n, hidden]");
  std::vector<NamedTensor> tensors{{"embeddings", embeddings}};
  if (grid.defined()) {
    ORBIT_CHECK(grid.dim() == 2 && grid.size(0) == embeddings.size(0) && grid.scalar_type() == at::kLong,
                "embedding_value: grid must be int64 [n, dims] with n = " << embeddings.size(0));
    tensors.push_back({"grid", grid});
  }
  return make_value(EntryKind::kEmbedding, std::move(tensors), {{"length", std::to_string(embeddings.size(0))}});
}

DevicePageLayout device_layout_for(const rt::ModelConfig& config, int64_t page_size) {
  DevicePageLayout layout;
  layout.num_layers = config.num_layers;
  layout.page_size = page_size;
  layout.kinds = {"k", "v"};
  layout.widths = config.content_widths();
  layout.dtype = at::kFloat;
  return layout;
}

}  // namespace orbit::store
