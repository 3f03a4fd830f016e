// One interface for every place the store keeps bytes (docs/ARCHITECTURE.md §6): device pool, host memory, disk.
//
// A tier is mechanism only: it holds values under keys and charges bytes against a budget. Which entry
// to evict, where a victim goes (demotion device → host → disk) and when to promote are decided by the
// ChunkStore with an EvictionPolicy (eviction.h). The budget is enforced by the caller: insert() is
// called only when used_bytes() + charge(value) <= budget_bytes().
//
// Thread-safety: none unless a tier says otherwise; the ChunkStore serialises calls under its mutex.
#pragma once

#include <cstdint>
#include <string>

#include "orbit/common/status.h"
#include "orbit/store.h"
#include "orbit/store/value.h"

namespace orbit::store {

class Tier {
 public:
  virtual ~Tier() = default;

  virtual StoreTier id() const = 0;
  virtual int64_t budget_bytes() const = 0;
  virtual int64_t used_bytes() const = 0;
  virtual int64_t num_entries() const = 0;

  // Whether this tier can hold `value` at all (the device tier holds only values matching its page layout).
  virtual bool accepts(const StoredValue& value) const = 0;
  // Bytes `value` would be charged here (whole pages on the device, encoded blob bytes on disk).
  virtual int64_t charge(const StoredValue& value) const = 0;

  // Stores `value` under `key`, replacing any previous value. Errors (disk full, a permission problem)
  // are Status values and leave the tier unchanged.
  virtual Status insert(const std::string& key, const ValuePtr& value) = 0;
  // The value, or not_found (a miss; for the disk tier also a corrupt or missing blob, with the reason).
  virtual Result<ValuePtr> read(const std::string& key) = 0;
  // Drops `key` (no-op when absent).
  virtual void remove(const std::string& key) = 0;
  virtual bool contains(const std::string& key) const = 0;
  // Bytes charged for `key` (0 when absent).
  virtual int64_t charged(const std::string& key) const = 0;
  // The attribute `name` of the value held under `key` (empty when absent, or for a tier that does not keep
  // values in memory), read without counting an access.
  virtual std::string attribute(const std::string& key, const std::string& name) const {
    (void)key;
    (void)name;
    return {};
  }
  // Whether `key` may be evicted now (the device tier refuses pages that windows still hold).
  virtual bool evictable(const std::string& key) const { return contains(key); }
};

}  // namespace orbit::store
