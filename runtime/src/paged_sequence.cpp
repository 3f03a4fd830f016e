#include "orbit/runtime/paged_sequence.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <utility>

#include "orbit/common/error.h"

namespace orbit::runtime {

namespace {

constexpr int64_t kKindK = 0;
constexpr int64_t kKindV = 1;

// Flat slot index (page * page_size + slot) of tokens [first, first + count) under `pages`, as an
// int64 tensor for index_copy_/index_select over storage viewed as [layers, pages * page_size, width].
at::Tensor slot_indices(const std::vector<PageId>& pages, int64_t page_size, int64_t first, int64_t count) {
  at::Tensor index = at::empty({count}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = index.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = first + i;
    out[i] = static_cast<int64_t>(pages[static_cast<size_t>(t / page_size)]) * page_size + t % page_size;
  }
  return index;
}

// Storage of one kind viewed as [layers, pages * page_size, width] (a view: storage is contiguous).
at::Tensor flat_storage(const KVPool& pool, int64_t kind) {
  const at::Tensor& s = pool.storage(kind);
  return s.view({s.size(0), s.size(1) * s.size(2), s.size(3)});
}

void check_layer_tensor(const at::Tensor& t, const char* name, size_t layer, int64_t tokens, int64_t heads,
                        int64_t head_dim) {
  ORBIT_CHECK(t.defined(), "PagedSequence::append: content[" << layer << "]." << name << " is undefined");
  ORBIT_CHECK(at::isFloatingType(t.scalar_type()), "PagedSequence::append: content[" << layer << "]." << name
                                                       << " must be floating, got " << t.scalar_type());
  ORBIT_CHECK(t.dim() == 3 && t.size(0) == tokens && t.size(1) == heads && t.size(2) == head_dim,
              "PagedSequence::append: content[" << layer << "]." << name << " has shape " << t.sizes()
                                                << ", expected [" << tokens << ", " << heads << ", " << head_dim
                                                << "]");
}

}  // namespace

PagedSequence::PagedSequence(KVPool& pool, int64_t num_kv_heads, int64_t head_dim)
    : pool_(&pool), num_kv_heads_(num_kv_heads), head_dim_(head_dim) {
  ORBIT_CHECK(num_kv_heads > 0, "PagedSequence: num_kv_heads must be > 0, got " << num_kv_heads);
  ORBIT_CHECK(head_dim > 0, "PagedSequence: head_dim must be > 0, got " << head_dim);
  const int64_t kv_dim = num_kv_heads * head_dim;
  const auto& widths = pool.options().widths;
  ORBIT_CHECK(widths.size() == 2 && widths[0] == kv_dim && widths[1] == kv_dim,
              "PagedSequence: pool widths must be {kv_dim, kv_dim} = {" << kv_dim << ", " << kv_dim
                                                                        << "} (K then V), got "
                                                                        << at::IntArrayRef(widths));
}

PagedSequence::~PagedSequence() { release_all(); }

PagedSequence::PagedSequence(PagedSequence&& other) noexcept
    : pool_(other.pool_),
      num_kv_heads_(other.num_kv_heads_),
      head_dim_(other.head_dim_),
      pages_(std::move(other.pages_)),
      positions_(std::move(other.positions_)),
      length_(other.length_) {
  other.pages_.clear();
  other.positions_.clear();
  other.length_ = 0;
}

PagedSequence& PagedSequence::operator=(PagedSequence&& other) noexcept {
  if (this == &other) return *this;
  release_all();
  pool_ = other.pool_;
  num_kv_heads_ = other.num_kv_heads_;
  head_dim_ = other.head_dim_;
  pages_ = std::move(other.pages_);
  positions_ = std::move(other.positions_);
  length_ = other.length_;
  other.pages_.clear();
  other.positions_.clear();
  other.length_ = 0;
  return *this;
}

// A release that throws here means the pool was corrupted behind our back (our pages were freed by
// someone else). That is a bug to report, not to swallow: the exception reaches this noexcept
// boundary and terminates with its message.
void PagedSequence::release_all() noexcept {
  for (PageId page : pages_) pool_->release(page);
  pages_.clear();
  positions_.clear();
  length_ = 0;
}

Status PagedSequence::append(const std::vector<LayerKV>& content, const at::Tensor& positions) {
  const int64_t num_layers = pool_->options().num_layers;
  ORBIT_CHECK(static_cast<int64_t>(content.size()) == num_layers,
              "PagedSequence::append: content has " << content.size() << " layers, the pool has " << num_layers);
  ORBIT_CHECK(positions.defined(), "PagedSequence::append: positions is undefined");
  ORBIT_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 1,
              "PagedSequence::append: positions must be int64 [T], got " << positions.scalar_type() << " "
                                                                         << positions.sizes());
  const int64_t count = positions.size(0);
  for (size_t l = 0; l < content.size(); ++l) {
    check_layer_tensor(content[l].k, "k", l, count, num_kv_heads_, head_dim_);
    check_layer_tensor(content[l].v, "v", l, count, num_kv_heads_, head_dim_);
  }
  if (count == 0) return Status::ok();

  // Plan the pages: the tail of the last page if it has room (copied first when shared), then fresh ones.
  const int64_t page_size = pool_->page_size();
  const int64_t capacity = static_cast<int64_t>(pages_.size()) * page_size;
  const int64_t tail_room = capacity - length_;
  const bool copy_tail = tail_room > 0 && pool_->ref_count(pages_.back()) > 1;
  const int64_t fresh = count > tail_room ? (count - tail_room + page_size - 1) / page_size : 0;
  std::vector<PageId> allocated;
  Status status = pool_->allocate(fresh + (copy_tail ? 1 : 0), allocated);
  if (!status) {
    return Status::out_of_capacity("PagedSequence::append of " + std::to_string(count) +
                                   " tokens: " + status.reason());
  }

  // The pages the new tokens land in: the tail (or its private copy) when it has room, then the fresh
  // pages. Token length_ + i goes to slot (offset + i) of this window. O(count) metadata, no table copy.
  std::vector<PageId> window;
  window.reserve(allocated.size() + 1);
  if (tail_room > 0 && !copy_tail) window.push_back(pages_.back());
  window.insert(window.end(), allocated.begin(), allocated.end());
  const int64_t offset = tail_room > 0 ? length_ % page_size : 0;

  try {
    const at::Tensor index = slot_indices(window, page_size, offset, count);
    const int64_t kv_dim = num_kv_heads_ * head_dim_;
    for (int64_t kind : {kKindK, kKindV}) {
      const at::Tensor& storage = pool_->storage(kind);
      if (copy_tail) storage.select(1, window[0]).copy_(storage.select(1, pages_.back()));  // all layers at once
      std::vector<at::Tensor> per_layer;
      per_layer.reserve(content.size());
      for (const LayerKV& layer : content) {
        per_layer.push_back((kind == kKindK ? layer.k : layer.v).reshape({count, kv_dim}));
      }
      const at::Tensor source = at::stack(per_layer).to(storage.device(), storage.scalar_type());  // [L, T, W]
      flat_storage(*pool_, kind).index_copy_(1, index, source);
    }
    const at::Tensor pos = positions.to(at::kCPU).contiguous();
    const int64_t* pos_data = pos.data_ptr<int64_t>();
    positions_.reserve(positions_.size() + static_cast<size_t>(count));
    pages_.reserve(pages_.size() + allocated.size());  // so the commit below cannot throw
    positions_.insert(positions_.end(), pos_data, pos_data + count);
  } catch (...) {
    // Nothing visible changed: the new pages go back, and the only slots written in old pages lie past
    // length_ in a page this sequence holds alone.
    positions_.resize(static_cast<size_t>(length_));
    for (PageId page : allocated) pool_->release(page);
    throw;
  }
  // Commit. Nothing here throws: the old tail is live and held by us, and pages_ has the room.
  auto next = allocated.begin();
  if (copy_tail) {
    pool_->release(pages_.back());
    pages_.back() = *next++;
  }
  pages_.insert(pages_.end(), next, allocated.end());
  length_ += count;
  return Status::ok();
}

void PagedSequence::truncate(int64_t new_length) {
  ORBIT_CHECK(new_length >= 0 && new_length <= length_,
              "PagedSequence::truncate: new_length " << new_length << " outside [0, " << length_ << "]");
  const int64_t page_size = pool_->page_size();
  const size_t keep = static_cast<size_t>((new_length + page_size - 1) / page_size);
  while (pages_.size() > keep) {
    pool_->release(pages_.back());
    pages_.pop_back();
  }
  positions_.resize(static_cast<size_t>(new_length));
  length_ = new_length;
}

PagedSequence PagedSequence::fork() const {
  PagedSequence child(*pool_, num_kv_heads_, head_dim_);
  child.pages_.reserve(pages_.size());
  for (PageId page : pages_) {
    pool_->retain(page);
    child.pages_.push_back(page);  // pushed after the retain: the child releases exactly what it holds
  }
  child.positions_ = positions_;
  child.length_ = length_;
  return child;
}

PastKV PagedSequence::gather() const {
  const at::Tensor index = slot_indices(pages_, pool_->page_size(), 0, length_);
  PastKV past;
  const int64_t num_layers = pool_->options().num_layers;
  past.layers.resize(static_cast<size_t>(num_layers));
  for (int64_t kind : {kKindK, kKindV}) {
    const at::Tensor all = flat_storage(*pool_, kind).index_select(1, index);  // [L, T, W], a fresh copy
    for (int64_t l = 0; l < num_layers; ++l) {
      at::Tensor layer = all.select(0, l).view({length_, num_kv_heads_, head_dim_});
      (kind == kKindK ? past.layers[static_cast<size_t>(l)].k : past.layers[static_cast<size_t>(l)].v) = layer;
    }
  }
  past.positions = at::empty({length_}, at::TensorOptions().dtype(at::kLong));
  if (length_ > 0) std::memcpy(past.positions.data_ptr<int64_t>(), positions_.data(), sizeof(int64_t) * length_);
  return past;
}

}  // namespace orbit::runtime
