#include "orbit/runtime/kv_pool.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>

#include "orbit/common/error.h"
#include "orbit/runtime/device.h"

namespace orbit::runtime {

namespace {

void validate(const KVPoolOptions& o) {
  ORBIT_CHECK(o.num_layers > 0, "KVPoolOptions: num_layers must be > 0, got " << o.num_layers);
  ORBIT_CHECK(o.num_pages > 0, "KVPoolOptions: num_pages must be > 0, got " << o.num_pages);
  ORBIT_CHECK(o.num_pages <= std::numeric_limits<PageId>::max(), "KVPoolOptions: num_pages "
                                                                     << o.num_pages << " exceeds the PageId range ("
                                                                     << std::numeric_limits<PageId>::max() << ")");
  ORBIT_CHECK(o.page_size > 0, "KVPoolOptions: page_size must be > 0, got " << o.page_size);
  ORBIT_CHECK(!o.widths.empty(), "KVPoolOptions: widths must name at least one stored kind");
  for (size_t s = 0; s < o.widths.size(); ++s) {
    ORBIT_CHECK(o.widths[s] > 0, "KVPoolOptions: widths[" << s << "] must be > 0, got " << o.widths[s]);
  }
  ORBIT_CHECK(at::isFloatingType(o.dtype),
              "KVPoolOptions: dtype must be a floating type, got " << c10::toString(o.dtype));
}

}  // namespace

KVPool::KVPool(const KVPoolOptions& options) : options_(options) {
  validate(options_);
  const c10::Device device = parse_device(options_.device, "KVPoolOptions::device");
  const auto tensor_options = at::TensorOptions().dtype(options_.dtype).device(device);
  storage_.reserve(options_.widths.size());
  // On the CPU the storage is left as allocated (a large one is mapped, not yet backed by memory) and each
  // page is zeroed when first handed out; on a device one fill is cheaper than a launch per page.
  const bool lazy_zero = device.is_cpu();
  try {
    for (int64_t width : options_.widths) {
      const std::vector<int64_t> shape = {options_.num_layers, options_.num_pages, options_.page_size, width};
      storage_.push_back(lazy_zero ? at::empty(shape, tensor_options) : at::zeros(shape, tensor_options));
    }
  } catch (const c10::Error& e) {
    ORBIT_FAIL("KVPool: cannot allocate " << options_.num_pages << " pages (" << page_bytes() * options_.num_pages
                                          << " bytes) on " << device_name(device) << ": "
                                          << e.what_without_backtrace());
  }
  ref_counts_.assign(static_cast<size_t>(options_.num_pages), 0);
  if (lazy_zero) unzeroed_.assign(static_cast<size_t>(options_.num_pages), true);
  // Pushed in reverse so that a fresh pool hands out pages 0, 1, 2, ... (readable in tests and dumps).
  free_list_.reserve(static_cast<size_t>(options_.num_pages));
  for (int64_t p = options_.num_pages - 1; p >= 0; --p) free_list_.push_back(static_cast<PageId>(p));
}

int64_t KVPool::page_bytes() const {
  int64_t width_sum = 0;
  for (int64_t w : options_.widths) width_sum += w;
  return options_.num_layers * options_.page_size * width_sum * static_cast<int64_t>(c10::elementSize(options_.dtype));
}

std::optional<PageId> KVPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  const PageId page = free_list_.back();
  free_list_.pop_back();
  ref_counts_[static_cast<size_t>(page)] = 1;
  if (!unzeroed_.empty() && unzeroed_[static_cast<size_t>(page)]) {
    for (at::Tensor& s : storage_) s.select(1, page).zero_();
    unzeroed_[static_cast<size_t>(page)] = false;
  }
  return page;
}

Status KVPool::allocate(int64_t count, std::vector<PageId>& out) {
  ORBIT_CHECK(count >= 0, "KVPool::allocate: count must be >= 0, got " << count);
  if (count > num_free()) {
    return Status::out_of_capacity("KV pool: " + std::to_string(count) + " pages requested, " +
                                   std::to_string(num_free()) + " free of " + std::to_string(num_pages()));
  }
  out.reserve(out.size() + static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(*allocate());
  return Status::ok();
}

void KVPool::check_id(PageId page, const char* what) const {
  ORBIT_CHECK(page >= 0 && page < num_pages(),
              "KVPool::" << what << ": page id " << page << " out of range [0, " << num_pages() << ")");
}

void KVPool::retain(PageId page) {
  check_id(page, "retain");
  int32_t& count = ref_counts_[static_cast<size_t>(page)];
  ORBIT_CHECK(count > 0, "KVPool::retain: page " << page << " is free (retain needs a live page)");
  ORBIT_CHECK(count < std::numeric_limits<int32_t>::max(), "KVPool::retain: page " << page << " ref_count overflow");
  ++count;
}

void KVPool::release(PageId page) {
  check_id(page, "release");
  int32_t& count = ref_counts_[static_cast<size_t>(page)];
  ORBIT_CHECK(count > 0, "KVPool::release: page " << page << " is already free (double free)");
  if (--count == 0) free_list_.push_back(page);
}

int32_t KVPool::ref_count(PageId page) const {
  check_id(page, "ref_count");
  return ref_counts_[static_cast<size_t>(page)];
}

at::Tensor KVPool::page(int64_t kind, int64_t layer, PageId page) const {
  ORBIT_CHECK(kind >= 0 && kind < num_kinds(),
              "KVPool::page: kind " << kind << " out of range [0, " << num_kinds() << ")");
  ORBIT_CHECK(layer >= 0 && layer < options_.num_layers,
              "KVPool::page: layer " << layer << " out of range [0, " << options_.num_layers << ")");
  check_id(page, "page");
  return storage_[static_cast<size_t>(kind)].select(0, layer).select(0, page);
}

void KVPool::verify_integrity() const {
  const int64_t n = num_pages();
  ORBIT_CHECK(static_cast<int64_t>(ref_counts_.size()) == n,
              "KVPool integrity: " << ref_counts_.size() << " reference counts for " << n << " pages");
  ORBIT_CHECK(storage_.size() == options_.widths.size(),
              "KVPool integrity: " << storage_.size() << " storage tensors for " << options_.widths.size() << " kinds");
  for (size_t s = 0; s < storage_.size(); ++s) {
    const auto sizes = storage_[s].sizes();
    ORBIT_CHECK(sizes.size() == 4 && sizes[0] == options_.num_layers && sizes[1] == n &&
                    sizes[2] == options_.page_size && sizes[3] == options_.widths[s],
                "KVPool integrity: storage[" << s << "] has shape " << sizes << ", expected [" << options_.num_layers
                                             << ", " << n << ", " << options_.page_size << ", " << options_.widths[s]
                                             << "]");
  }
  ORBIT_CHECK(static_cast<int64_t>(free_list_.size()) <= n,
              "KVPool integrity: free list holds " << free_list_.size() << " entries for " << n << " pages");

  std::vector<bool> on_free_list(static_cast<size_t>(n), false);
  for (size_t i = 0; i < free_list_.size(); ++i) {
    const PageId page = free_list_[i];
    ORBIT_CHECK(page >= 0 && page < n,
                "KVPool integrity: free list entry " << i << " is page " << page << ", out of range [0, " << n << ")");
    ORBIT_CHECK(!on_free_list[static_cast<size_t>(page)],
                "KVPool integrity: page " << page << " appears twice on the free list (entry " << i << ")");
    on_free_list[static_cast<size_t>(page)] = true;
    ORBIT_CHECK(ref_counts_[static_cast<size_t>(page)] == 0, "KVPool integrity: page "
                                                                 << page << " is on the free list with ref_count "
                                                                 << ref_counts_[static_cast<size_t>(page)]);
  }
  for (int64_t p = 0; p < n; ++p) {
    if (on_free_list[static_cast<size_t>(p)]) continue;
    const int32_t count = ref_counts_[static_cast<size_t>(p)];
    ORBIT_CHECK(count >= 1, "KVPool integrity: page " << p << " is off the free list with ref_count " << count
                                                      << " (leaked or corrupted)");
  }
  // Every page is now known to be either on the free list (ref 0) or live (ref >= 1), exactly once,
  // so free + live == num_pages holds.
}

}  // namespace orbit::runtime
