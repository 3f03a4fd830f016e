// Device tier: canonicals held in a paged KV pool (runtime/kv_pool.h), page-aligned, so windows and forks
// share a chunk's pages by reference count instead of copying them.
//
//   a value {"layer.<l>.<kind>": [n, ...] for l < num_layers, kind in layout.kinds} with n tokens
//   occupies ceil(n / page_size) pages; token t of the chunk lives in page t / page_size, slot
//   t % page_size, in every layer and kind (the chunk starts at a page boundary; the tail of its last
//   page is unused).
//
// The pool lives where DevicePageLayout::device says: device memory for "cuda:N" (values are copied in
// on insert and gathered into device tensors on read, so a hit needs no host-to-device copy), host
// memory for "cpu" (the same layout; what the CPU tests exercise).
// A DeviceLease retains a chunk's pages for a holder (a window, a fork). While any lease is alive the
// tier will not evict the chunk; the pages return to the pool when the tier and every lease let go.
// Thread-safety: DeviceTier none (the ChunkStore serialises it); leases may be used and destroyed on
// any thread and may outlive the store (they share the pool, which has its own mutex).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/runtime/kv_pool.h"
#include "orbit/store/tier.h"

namespace orbit::store {

struct DevicePageLayout {
  int64_t num_layers = 0;
  int64_t page_size = 16;          // tokens per page
  std::vector<std::string> kinds;  // tensor name suffixes, e.g. {"k", "v"} (GQA) or {"ckv", "kpe"} (MLA)
  std::vector<int64_t> widths;     // elements per token of each kind, e.g. {H_kv·d, H_kv·d}
  at::ScalarType dtype = at::kFloat;
  std::string device = "cpu";  // where the pages live: "cpu", "cuda" or "cuda:N" (runtime/device.h)
};

struct DeviceTierOptions {
  DevicePageLayout layout;
  int64_t num_pages = 0;  // budget = num_pages × page bytes
};

// The pool and its lock, shared by the tier and its leases.
struct SharedPool {
  explicit SharedPool(const runtime::KVPoolOptions& options) : pool(options) {}
  std::mutex mutex;
  runtime::KVPool pool;
};

// Pages of one chunk retained for a holder. Move-only; releases its references on destruction.
class DeviceLease {
 public:
  DeviceLease() = default;
  DeviceLease(std::shared_ptr<SharedPool> pool, std::vector<runtime::PageId> pages, int64_t length);
  ~DeviceLease();
  DeviceLease(DeviceLease&& other) noexcept;
  DeviceLease& operator=(DeviceLease&& other) noexcept;
  DeviceLease(const DeviceLease&) = delete;
  DeviceLease& operator=(const DeviceLease&) = delete;

  bool valid() const { return pool_ != nullptr; }
  const std::vector<runtime::PageId>& pages() const { return pages_; }
  int64_t length() const { return length_; }  // tokens
  // A second lease on the same pages (a fork): one more reference per page.
  DeviceLease share() const;
  // Contiguous copy of kind `kind` of every layer: [num_layers, length, width].
  at::Tensor gather(int64_t kind) const;
  // Reference count of each page (for tests and dumps).
  std::vector<int32_t> ref_counts() const;

 private:
  void release() noexcept;
  std::shared_ptr<SharedPool> pool_;
  std::vector<runtime::PageId> pages_;
  int64_t length_ = 0;
};

class DeviceTier final : public Tier {
 public:
  explicit DeviceTier(const DeviceTierOptions& options);
  ~DeviceTier() override;

  StoreTier id() const override { return StoreTier::kDevice; }
  int64_t budget_bytes() const override;
  int64_t used_bytes() const override { return used_pages_ * page_bytes_; }
  int64_t num_entries() const override { return static_cast<int64_t>(entries_.size()); }
  bool accepts(const StoredValue& value) const override;
  int64_t charge(const StoredValue& value) const override;
  Status insert(const std::string& key, const ValuePtr& value) override;
  // A contiguous copy gathered from the pages (the pages stay where they are), on the tier's device.
  Result<ValuePtr> read(const std::string& key) override;
  void remove(const std::string& key) override;
  bool contains(const std::string& key) const override { return entries_.count(key) > 0; }
  std::string attribute(const std::string& key, const std::string& name) const override;
  int64_t charged(const std::string& key) const override;
  bool evictable(const std::string& key) const override;

  // Retains the chunk's pages for a holder; not_found when absent.
  Result<DeviceLease> lease(const std::string& key);
  const DevicePageLayout& layout() const { return options_.layout; }
  // Pool invariants plus the tier's page accounting; throws orbit::Error on a violation.
  void verify_integrity() const;

 private:
  struct Entry {
    std::vector<runtime::PageId> pages;
    int64_t length = 0;
    std::vector<std::vector<int64_t>> trailing;  // per kind: shape after the token dimension
    EntryKind kind = EntryKind::kCanonical;
    std::map<std::string, std::string> attrs;
  };
  int64_t pages_for(int64_t tokens) const;

  DeviceTierOptions options_;
  std::shared_ptr<SharedPool> pool_;
  int64_t page_bytes_ = 0;
  int64_t used_pages_ = 0;
  std::unordered_map<std::string, Entry> entries_;
};

// The tensor name the device layout expects for (layer, kind): "layer.<l>.<kind>".
std::string layer_tensor_name(int64_t layer, const std::string& kind);

}  // namespace orbit::store
