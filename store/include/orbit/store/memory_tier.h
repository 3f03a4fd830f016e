// Host-memory tier: values kept as shared, immutable tensors; charge = the tensors' bytes. With `pinned`
// (a store serving a CUDA engine) every value is copied into pinned (page-locked) host memory on insert,
// so that a recall to the device is a DMA transfer that can overlap compute; the charge is unchanged.
// Thread-safety: none (see tier.h).
#pragma once

#include <unordered_map>

#include "orbit/store/tier.h"

namespace orbit::store {

class MemoryTier final : public Tier {
 public:
  // Throws orbit::Error on a negative budget, or `pinned` without CUDA (pinned_copy in value.h).
  explicit MemoryTier(int64_t budget_bytes, bool pinned = false);
  bool pinned() const { return pinned_; }

  StoreTier id() const override { return StoreTier::kHost; }
  int64_t budget_bytes() const override { return budget_; }
  int64_t used_bytes() const override { return used_; }
  int64_t num_entries() const override { return static_cast<int64_t>(values_.size()); }
  bool accepts(const StoredValue&) const override { return true; }
  int64_t charge(const StoredValue& value) const override { return value.bytes(); }
  Status insert(const std::string& key, const ValuePtr& value) override;
  Result<ValuePtr> read(const std::string& key) override;
  void remove(const std::string& key) override;
  bool contains(const std::string& key) const override { return values_.count(key) > 0; }
  std::string attribute(const std::string& key, const std::string& name) const override;
  int64_t charged(const std::string& key) const override;

 private:
  int64_t budget_;
  bool pinned_ = false;
  int64_t used_ = 0;
  // Each value with its charge, summed once: eviction reads the charge of every entry a full tier holds.
  struct Held {
    ValuePtr value;
    int64_t bytes = 0;
  };
  std::unordered_map<std::string, Held> values_;
};

}  // namespace orbit::store
