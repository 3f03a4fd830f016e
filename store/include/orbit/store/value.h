// What the store holds: an immutable, family-agnostic list of named tensors plus string attributes.
//
// A canonical of a GQA model is {"layer.0.k": [n, H_kv, d], "layer.0.v": ..., ...}; an MLA canonical or a
// patch is just other names and shapes (codec.h converts the runtime's types). The store never interprets
// tensors except where a tier says so (the device tier pages tensors named "layer.<l>.<kind>").
//
// Tensors live in host memory, except in a value read from a device tier whose pages are on a CUDA
// device (its tensors are on that device; host_copy() brings it back), and host-tier values of a store
// with pinned host memory (page-locked host tensors, so device copies from them are DMA transfers).
//
// Ownership and thread-safety: a StoredValue is shared (ValuePtr) between the store's tiers and every
// caller that read it, and is never modified after make_value(). Callers must treat its tensors as
// read-only (clone before writing in place). Reading one value from many threads is safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/store.h"

namespace orbit::store {

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

struct StoredValue {
  EntryKind kind = EntryKind::kOther;
  std::vector<NamedTensor> tensors;          // in a stable order (the order given to make_value)
  std::map<std::string, std::string> attrs;  // small metadata (a patch's fingerprint, lengths ...)

  // Sum of the tensors' bytes (numel × element size).
  int64_t bytes() const;
  // nullptr when absent.
  const at::Tensor* find(const std::string& name) const;
  // The tensor named `name`; throws orbit::Error naming it when absent.
  const at::Tensor& at(const std::string& name) const;
};

using ValuePtr = std::shared_ptr<const StoredValue>;

// Validates and freezes a value: names non-empty, unique and at most 1 KiB; tensors defined, CPU-copyable,
// of a dtype the blob format stores (float32/16, bfloat16, float64, int64/32/16/8, uint8, bool), at most 8
// dims. Tensors are copied to contiguous CPU memory so later writes by the caller cannot reach the store
// (`copy = false` skips the copy for tensors that are already contiguous CPU and private to the caller).
ValuePtr make_value(EntryKind kind, std::vector<NamedTensor> tensors, std::map<std::string, std::string> attrs = {},
                    bool copy = true);

// `value` itself when every tensor is in (pageable or pinned) host memory, else a host copy of it.
ValuePtr host_copy(const ValuePtr& value);

// A copy of `value` whose tensors are in pinned (page-locked) host memory. Throws orbit::Error when this
// build of libtorch has no CUDA (pinned memory is CUDA's host allocator).
ValuePtr pinned_copy(const StoredValue& value);

// True when two values hold the same kind, names, shapes, dtypes, attributes and bytes.
bool values_equal(const StoredValue& a, const StoredValue& b);

}  // namespace orbit::store
