#include "orbit/store/memory_tier.h"

#include <ATen/Context.h>

#include "orbit/common/error.h"

namespace orbit::store {

MemoryTier::MemoryTier(int64_t budget_bytes, bool pinned) : budget_(budget_bytes), pinned_(pinned) {
  ORBIT_CHECK(budget_bytes >= 0, "host tier: budget must be >= 0 bytes, got " << budget_bytes);
  ORBIT_CHECK(!pinned || at::hasCUDA(),
              "host tier: pinned host memory (ChunkStoreOptions::pinned_host) needs CUDA, which this process lacks");
}

Status MemoryTier::insert(const std::string& key, const ValuePtr& value) {
  ORBIT_CHECK(value != nullptr, "host tier: null value for key " << key);
  remove(key);
  const int64_t bytes = value->bytes();
  Held held{pinned_ ? pinned_copy(*host_copy(value)) : host_copy(value), bytes};  // may throw: nothing charged yet
  values_[key] = std::move(held);
  used_ += bytes;
  return Status::ok();
}

Result<ValuePtr> MemoryTier::read(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return Status::not_found("host tier: no entry " + key);
  return it->second.value;
}

std::string MemoryTier::attribute(const std::string& key, const std::string& name) const {
  auto it = values_.find(key);
  if (it == values_.end()) return {};
  auto a = it->second.value->attrs.find(name);
  return a == it->second.value->attrs.end() ? std::string() : a->second;
}

void MemoryTier::remove(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return;
  used_ -= it->second.bytes;
  values_.erase(it);
}

int64_t MemoryTier::charged(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? 0 : it->second.bytes;
}

}  // namespace orbit::store
