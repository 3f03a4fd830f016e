#include "orbit/store/value.h"

#include <ATen/ATen.h>

#include <set>

#include "orbit/common/error.h"
#include "orbit/store/blob_format.h"

namespace orbit::store {

int64_t StoredValue::bytes() const {
  int64_t total = 0;
  for (const NamedTensor& t : tensors) total += static_cast<int64_t>(t.tensor.nbytes());
  return total;
}

const at::Tensor* StoredValue::find(const std::string& name) const {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return &t.tensor;
  }
  return nullptr;
}

const at::Tensor& StoredValue::at(const std::string& name) const {
  const at::Tensor* t = find(name);
  ORBIT_CHECK(t != nullptr, "stored " << entry_kind_name(kind) << " value has no tensor '" << name << "'");
  return *t;
}

ValuePtr make_value(EntryKind kind, std::vector<NamedTensor> tensors, std::map<std::string, std::string> attrs,
                    bool copy) {
  std::set<std::string> names;
  for (NamedTensor& t : tensors) {
    ORBIT_CHECK(!t.name.empty() && t.name.size() <= 1024,
                "store value: tensor name '" << t.name << "' must be 1 to 1024 bytes");
    ORBIT_CHECK(names.insert(t.name).second, "store value: tensor '" << t.name << "' is given twice");
    ORBIT_CHECK(t.tensor.defined(), "store value: tensor '" << t.name << "' is undefined");
    ORBIT_CHECK(t.tensor.dim() <= kMaxBlobDims, "store value: tensor '" << t.name << "' has " << t.tensor.dim()
                                                                        << " dims (at most " << kMaxBlobDims << ")");
    ORBIT_CHECK(blob_dtype_supported(t.tensor.scalar_type()), "store value: tensor '"
                                                                  << t.name << "' has dtype " << t.tensor.scalar_type()
                                                                  << ", which the store cannot hold");
    at::Tensor cpu = t.tensor.detach().to(at::kCPU).contiguous();
    // .to/.contiguous alias the input when nothing changes: clone so the store owns its bytes.
    if (copy && cpu.is_alias_of(t.tensor)) cpu = cpu.clone();
    t.tensor = std::move(cpu);
  }
  for (const auto& [k, v] : attrs) {
    ORBIT_CHECK(!k.empty() && k.size() <= 1024 && v.size() <= 65536,
                "store value: attribute '" << k << "' must have a 1..1024-byte name and a value <= 64 KiB");
  }
  auto value = std::make_shared<StoredValue>();
  value->kind = kind;
  value->tensors = std::move(tensors);
  value->attrs = std::move(attrs);
  return value;
}

ValuePtr host_copy(const ValuePtr& value) {
  bool on_host = true;
  for (const NamedTensor& t : value->tensors) on_host = on_host && t.tensor.device().is_cpu();
  if (on_host) return value;
  return make_value(value->kind, value->tensors, value->attrs, /*copy=*/false);  // .to(kCPU) copies
}

ValuePtr pinned_copy(const StoredValue& value) {
  ORBIT_CHECK(at::hasCUDA(), "store: pinned host memory needs a CUDA build of libtorch with a device");
  auto out = std::make_shared<StoredValue>();
  out->kind = value.kind;
  out->attrs = value.attrs;
  out->tensors.reserve(value.tensors.size());
  for (const NamedTensor& t : value.tensors) {
    if (t.tensor.device().is_cpu() && t.tensor.is_pinned()) {
      out->tensors.push_back(t);
      continue;
    }
    at::Tensor pinned = at::empty(t.tensor.sizes(), t.tensor.options().device(at::kCPU).pinned_memory(true));
    pinned.copy_(t.tensor);
    out->tensors.push_back({t.name, std::move(pinned)});
  }
  return out;
}

bool values_equal(const StoredValue& a, const StoredValue& b) {
  if (a.kind != b.kind || a.attrs != b.attrs || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const NamedTensor& x = a.tensors[i];
    const NamedTensor& y = b.tensors[i];
    if (x.name != y.name || x.tensor.scalar_type() != y.tensor.scalar_type() || x.tensor.sizes() != y.tensor.sizes()) {
      return false;
    }
    if (!at::equal(x.tensor, y.tensor)) return false;
  }
  return true;
}

}  // namespace orbit::store
