#include "orbit/store/device_tier.h"

#include <ATen/ATen.h>

#include "orbit/common/error.h"

namespace orbit::store {

namespace rt = orbit::runtime;

std::string layer_tensor_name(int64_t layer, const std::string& kind) {
  return "layer." + std::to_string(layer) + "." + kind;
}

// ---- DeviceLease ---------------------------------------------------------------------------------

DeviceLease::DeviceLease(std::shared_ptr<SharedPool> pool, std::vector<rt::PageId> pages, int64_t length)
    : pool_(std::move(pool)), pages_(std::move(pages)), length_(length) {}

DeviceLease::~DeviceLease() { release(); }

DeviceLease::DeviceLease(DeviceLease&& other) noexcept
    : pool_(std::move(other.pool_)), pages_(std::move(other.pages_)), length_(other.length_) {
  other.pool_.reset();
  other.pages_.clear();
}

DeviceLease& DeviceLease::operator=(DeviceLease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    pages_ = std::move(other.pages_);
    length_ = other.length_;
    other.pool_.reset();
    other.pages_.clear();
  }
  return *this;
}

void DeviceLease::release() noexcept {
  if (!pool_) return;
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (rt::PageId p : pages_) {
    try {
      pool_->pool.release(p);
    } catch (...) {  // a double release is a bug in the pool's owner; never throw from a destructor
    }
  }
  pool_.reset();
  pages_.clear();
}

DeviceLease DeviceLease::share() const {
  ORBIT_CHECK(valid(), "DeviceLease::share: the lease is empty");
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (rt::PageId p : pages_) pool_->pool.retain(p);
  return DeviceLease(pool_, pages_, length_);
}

at::Tensor DeviceLease::gather(int64_t kind) const {
  ORBIT_CHECK(valid(), "DeviceLease::gather: the lease is empty");
  std::lock_guard<std::mutex> lock(pool_->mutex);
  const at::Tensor& storage = pool_->pool.storage(kind);  // [L, P, page_size, width]
  const at::Tensor ids = at::tensor(std::vector<int64_t>(pages_.begin(), pages_.end()), at::kLong).to(storage.device());
  const at::Tensor rows = storage.index_select(1, ids);  // [L, pages, page_size, width]
  return rows.reshape({rows.size(0), -1, rows.size(3)}).narrow(1, 0, length_).contiguous();
}

std::vector<int32_t> DeviceLease::ref_counts() const {
  std::vector<int32_t> out;
  if (!pool_) return out;
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (rt::PageId p : pages_) out.push_back(pool_->pool.ref_count(p));
  return out;
}

// ---- DeviceTier ----------------------------------------------------------------------------------

DeviceTier::DeviceTier(const DeviceTierOptions& options) : options_(options) {
  const DevicePageLayout& l = options.layout;
  ORBIT_CHECK(!l.kinds.empty() && l.kinds.size() == l.widths.size(), "device tier: layout needs one width per kind ("
                                                                         << l.kinds.size() << " kinds, "
                                                                         << l.widths.size() << " widths)");
  rt::KVPoolOptions pool;
  pool.num_layers = l.num_layers;
  pool.num_pages = options.num_pages;
  pool.page_size = l.page_size;
  pool.widths = l.widths;
  pool.dtype = l.dtype;
  pool.device = l.device;
  pool_ = std::make_shared<SharedPool>(pool);  // validates the options (throws naming the field)
  page_bytes_ = pool_->pool.page_bytes();
}

DeviceTier::~DeviceTier() {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (auto& [key, entry] : entries_) {
    for (rt::PageId p : entry.pages) pool_->pool.release(p);
  }
}

int64_t DeviceTier::budget_bytes() const { return options_.num_pages * page_bytes_; }

int64_t DeviceTier::pages_for(int64_t tokens) const {
  return (tokens + options_.layout.page_size - 1) / options_.layout.page_size;
}

bool DeviceTier::accepts(const StoredValue& value) const {
  const DevicePageLayout& l = options_.layout;
  if (static_cast<int64_t>(value.tensors.size()) != l.num_layers * static_cast<int64_t>(l.kinds.size())) return false;
  int64_t n = -1;
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    for (size_t s = 0; s < l.kinds.size(); ++s) {
      const at::Tensor* t = value.find(layer_tensor_name(layer, l.kinds[s]));
      if (t == nullptr || t->scalar_type() != l.dtype || t->dim() < 1 || t->size(0) < 1) return false;
      if (n < 0) n = t->size(0);
      if (t->size(0) != n || t->numel() != n * l.widths[s]) return false;
    }
  }
  return n > 0;
}

int64_t DeviceTier::charge(const StoredValue& value) const {
  if (!accepts(value)) return 0;
  const std::string first = layer_tensor_name(0, options_.layout.kinds[0]);
  return pages_for(value.at(first).size(0)) * page_bytes_;
}

Status DeviceTier::insert(const std::string& key, const ValuePtr& value) {
  ORBIT_CHECK(value != nullptr && accepts(*value),
              "device tier: value for key " << key << " does not match the page layout");
  const DevicePageLayout& l = options_.layout;
  Entry entry;
  entry.length = value->at(layer_tensor_name(0, l.kinds[0])).size(0);
  entry.kind = value->kind;
  entry.attrs = value->attrs;
  const int64_t num = pages_for(entry.length);
  std::lock_guard<std::mutex> lock(pool_->mutex);
  Status allocated = pool_->pool.allocate(num, entry.pages);
  if (!allocated) return Status::out_of_capacity("device tier: " + allocated.reason());
  // The copies below may throw (a device out of memory): the pages go back to the pool then.
  struct Unplaced {
    rt::KVPool& pool;
    std::vector<rt::PageId>* pages;
    ~Unplaced() {
      if (pages == nullptr) return;
      try {
        for (rt::PageId p : *pages) pool.release(p);
      } catch (...) {  // never from a destructor
      }
    }
  } unplaced{pool_->pool, &entry.pages};
  // One copy per (layer, kind): whole pages by index_copy_, the tail into the last page (rest zeroed).
  const c10::Device device = pool_->pool.device();
  const at::Tensor ids = at::tensor(std::vector<int64_t>(entry.pages.begin(), entry.pages.end()), at::kLong).to(device);
  const int64_t ps = l.page_size, full = entry.length / ps, tail = entry.length % ps;
  for (size_t s = 0; s < l.kinds.size(); ++s) {
    const at::Tensor& storage = pool_->pool.storage(static_cast<int64_t>(s));  // [L, P, page_size, width]
    for (int64_t layer = 0; layer < l.num_layers; ++layer) {
      const at::Tensor& t = value->at(layer_tensor_name(layer, l.kinds[s]));
      if (layer == 0) entry.trailing.emplace_back(t.sizes().begin() + 1, t.sizes().end());
      const at::Tensor src = t.reshape({entry.length, l.widths[s]}).to(device);  // host → device once
      const at::Tensor dst = storage.select(0, layer);
      if (full > 0)
        dst.index_copy_(0, ids.narrow(0, 0, full), src.narrow(0, 0, full * ps).view({full, ps, l.widths[s]}));
      if (tail > 0) {
        const at::Tensor last = dst.select(0, entry.pages[static_cast<size_t>(full)]);
        last.narrow(0, 0, tail).copy_(src.narrow(0, full * ps, tail));
        last.narrow(0, tail, ps - tail).zero_();
      }
    }
  }
  auto old = entries_.find(key);
  if (old != entries_.end()) {
    for (rt::PageId p : old->second.pages) pool_->pool.release(p);
    used_pages_ -= static_cast<int64_t>(old->second.pages.size());
  }
  used_pages_ += num;
  unplaced.pages = nullptr;  // placed: the entry holds them
  entries_[key] = std::move(entry);
  return Status::ok();
}

Result<ValuePtr> DeviceTier::read(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::not_found("device tier: no entry " + key);
  const Entry& e = it->second;
  const DevicePageLayout& l = options_.layout;
  // One gather per (layer, kind); the result is contiguous, so the reshapes below are views.
  std::vector<NamedTensor> ordered;
  std::lock_guard<std::mutex> lock(pool_->mutex);
  const at::Tensor ids =
      at::tensor(std::vector<int64_t>(e.pages.begin(), e.pages.end()), at::kLong).to(pool_->pool.device());
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    for (size_t s = 0; s < l.kinds.size(); ++s) {
      const at::Tensor rows = pool_->pool.storage(static_cast<int64_t>(s)).select(0, layer).index_select(0, ids);
      std::vector<int64_t> shape{e.length};
      shape.insert(shape.end(), e.trailing[s].begin(), e.trailing[s].end());
      ordered.push_back(
          {layer_tensor_name(layer, l.kinds[s]), rows.view({-1, l.widths[s]}).narrow(0, 0, e.length).view(shape)});
    }
  }
  // Not make_value (which copies to host memory): a read from device pages stays on the device. The
  // tensors are fresh gathers, owned by the value alone, and were validated when they were inserted.
  auto value = std::make_shared<StoredValue>();
  value->kind = e.kind;
  value->tensors = std::move(ordered);
  value->attrs = e.attrs;
  return ValuePtr(std::move(value));
}

std::string DeviceTier::attribute(const std::string& key, const std::string& name) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return {};
  auto a = it->second.attrs.find(name);
  return a == it->second.attrs.end() ? std::string() : a->second;
}

void DeviceTier::remove(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    for (rt::PageId p : it->second.pages) pool_->pool.release(p);
  }
  used_pages_ -= static_cast<int64_t>(it->second.pages.size());
  entries_.erase(it);
}

int64_t DeviceTier::charged(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : static_cast<int64_t>(it->second.pages.size()) * page_bytes_;
}

bool DeviceTier::evictable(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (rt::PageId p : it->second.pages) {
    if (pool_->pool.ref_count(p) > 1) return false;  // a window or fork still holds it
  }
  return true;
}

Result<DeviceLease> DeviceTier::lease(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::not_found("device tier: no entry " + key);
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (rt::PageId p : it->second.pages) pool_->pool.retain(p);
  return DeviceLease(pool_, it->second.pages, it->second.length);
}

void DeviceTier::verify_integrity() const {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  pool_->pool.verify_integrity();
  int64_t pages = 0;
  for (const auto& [key, e] : entries_) {
    ORBIT_CHECK(static_cast<int64_t>(e.pages.size()) == pages_for(e.length),
                "device tier integrity: entry " << key << " holds " << e.pages.size() << " pages for " << e.length
                                                << " tokens");
    for (rt::PageId p : e.pages) {
      ORBIT_CHECK(pool_->pool.ref_count(p) >= 1, "device tier integrity: entry " << key << " page " << p << " is free");
    }
    pages += static_cast<int64_t>(e.pages.size());
  }
  ORBIT_CHECK(pages == used_pages_,
              "device tier integrity: entries hold " << pages << " pages, accounted " << used_pages_);
  ORBIT_CHECK(used_pages_ <= options_.num_pages,
              "device tier integrity: " << used_pages_ << " pages used of " << options_.num_pages);
}

}  // namespace orbit::store
