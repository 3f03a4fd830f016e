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

void check_layer_tensor(const at::Tensor& t, const char* name, size_t layer, int64_t tokens, ContentShape shape) {
  ORBIT_CHECK(t.defined(), "PagedSequence::append: content[" << layer << "]." << name << " is undefined");
  ORBIT_CHECK(at::isFloatingType(t.scalar_type()), "PagedSequence::append: content[" << layer << "]." << name
                                                                                     << " must be floating, got "
                                                                                     << t.scalar_type());
  ORBIT_CHECK(t.dim() == 3 && t.size(0) == tokens && t.size(1) == shape.heads && t.size(2) == shape.dim,
              "PagedSequence::append: content[" << layer << "]." << name << " has shape " << t.sizes() << ", expected ["
                                                << tokens << ", " << shape.heads << ", " << shape.dim << "]");
}

// The GQA/MHA shape [num_kv_heads, head_dim], checked with the shorthand constructor's argument names.
ContentShape gqa_shape(int64_t num_kv_heads, int64_t head_dim) {
  ORBIT_CHECK(num_kv_heads > 0, "PagedSequence: num_kv_heads must be > 0, got " << num_kv_heads);
  ORBIT_CHECK(head_dim > 0, "PagedSequence: head_dim must be > 0, got " << head_dim);
  return {num_kv_heads, head_dim};
}

}  // namespace

PagedSequence::PagedSequence(KVPool& pool, ContentShape k, ContentShape v, int64_t position_rows)
    : pool_(&pool), k_shape_(k), v_shape_(v), position_rows_(position_rows) {
  ORBIT_CHECK(k.heads > 0 && k.dim > 0,
              "PagedSequence: k shape must be positive, got [" << k.heads << ", " << k.dim << "]");
  ORBIT_CHECK(v.heads > 0 && v.dim > 0,
              "PagedSequence: v shape must be positive, got [" << v.heads << ", " << v.dim << "]");
  ORBIT_CHECK(position_rows == 1 || position_rows == 3,
              "PagedSequence: position_rows must be 1 or 3 (M-RoPE), got " << position_rows);
  const auto& widths = pool.options().widths;
  ORBIT_CHECK(widths.size() == 2 && widths[0] == k.width() && widths[1] == v.width(),
              "PagedSequence: pool widths must be {k width, v width} = {"
                  << k.width() << ", " << v.width() << "} (K then V), got " << at::IntArrayRef(widths));
}

PagedSequence::PagedSequence(KVPool& pool, const ModelConfig& config)
    : PagedSequence(pool, config.content_k_shape(), config.content_v_shape(), config.position_rows()) {}

PagedSequence::PagedSequence(KVPool& pool, int64_t num_kv_heads, int64_t head_dim)
    : PagedSequence(pool, gqa_shape(num_kv_heads, head_dim), gqa_shape(num_kv_heads, head_dim), 1) {}

PagedSequence::~PagedSequence() { release_all(); }

PagedSequence::PagedSequence(PagedSequence&& other) noexcept
    : pool_(other.pool_),
      k_shape_(other.k_shape_),
      v_shape_(other.v_shape_),
      position_rows_(other.position_rows_),
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
  k_shape_ = other.k_shape_;
  v_shape_ = other.v_shape_;
  position_rows_ = other.position_rows_;
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
  const bool grid = position_rows_ == 3 && positions.dim() == 2;
  ORBIT_CHECK(positions.scalar_type() == at::kLong && (positions.dim() == 1 || (grid && positions.size(0) == 3)),
              "PagedSequence::append: positions must be int64 [T]" << (position_rows_ == 3 ? " or [3, T]" : "")
                                                                   << ", got " << positions.scalar_type() << " "
                                                                   << positions.sizes());
  const int64_t count = positions.size(-1);
  for (size_t l = 0; l < content.size(); ++l) {
    check_layer_tensor(content[l].k, "k", l, count, k_shape_);
    check_layer_tensor(content[l].v, "v", l, count, v_shape_);
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
    return Status::out_of_capacity("PagedSequence::append of " + std::to_string(count) + " tokens: " + status.reason());
  }

  // The pages the new tokens land in: the tail (or its private copy) when it has room, then the fresh
  // pages. Token length_ + i goes to slot (offset + i) of this window. O(count) metadata, no table copy.
  std::vector<PageId> window;
  window.reserve(allocated.size() + 1);
  if (tail_room > 0 && !copy_tail) window.push_back(pages_.back());
  window.insert(window.end(), allocated.begin(), allocated.end());
  const int64_t offset = tail_room > 0 ? length_ % page_size : 0;

  try {
    const at::Tensor index = slot_indices(window, page_size, offset, count).to(pool_->device());
    for (int64_t kind : {kKindK, kKindV}) {
      const int64_t width = (kind == kKindK ? k_shape_ : v_shape_).width();
      const at::Tensor& storage = pool_->storage(kind);
      if (copy_tail) storage.select(1, window[0]).copy_(storage.select(1, pages_.back()));  // all layers at once
      std::vector<at::Tensor> per_layer;
      per_layer.reserve(content.size());
      for (const LayerKV& layer : content) {
        per_layer.push_back((kind == kKindK ? layer.k : layer.v).reshape({count, width}));
      }
      const at::Tensor source = at::stack(per_layer).to(storage.device(), storage.scalar_type());  // [L, T, W]
      flat_storage(*pool_, kind).index_copy_(1, index, source);
    }
    // Token-major rows: [T] -> [T, 1]; [3, T] -> [T, 3]; [T] with 3 rows -> t = h = w.
    at::Tensor pos = positions.to(at::kCPU);
    pos = grid ? pos.t() : pos.unsqueeze(1).expand({count, position_rows_});
    pos = pos.contiguous();
    const int64_t* pos_data = pos.data_ptr<int64_t>();
    positions_.reserve(positions_.size() + static_cast<size_t>(count * position_rows_));
    pages_.reserve(pages_.size() + allocated.size());  // so the commit below cannot throw
    positions_.insert(positions_.end(), pos_data, pos_data + count * position_rows_);
  } catch (...) {
    // Nothing visible changed: the new pages go back, and the only slots written in old pages lie past
    // length_ in a page this sequence holds alone.
    positions_.resize(static_cast<size_t>(length_ * position_rows_));
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
  positions_.resize(static_cast<size_t>(new_length * position_rows_));
  length_ = new_length;
}

PagedSequence PagedSequence::fork() const {
  PagedSequence child(*pool_, k_shape_, v_shape_, position_rows_);
  child.pages_.reserve(pages_.size());
  for (PageId page : pages_) {
    pool_->retain(page);
    child.pages_.push_back(page);  // pushed after the retain: the child releases exactly what it holds
  }
  child.positions_ = positions_;
  child.length_ = length_;
  return child;
}

at::Tensor PagedSequence::slots() const { return slot_indices(pages_, pool_->page_size(), 0, length_); }

PastKV PagedSequence::gather() const {
  const at::Tensor index = slot_indices(pages_, pool_->page_size(), 0, length_).to(pool_->device());
  PastKV past;
  const int64_t num_layers = pool_->options().num_layers;
  past.layers.resize(static_cast<size_t>(num_layers));
  for (int64_t kind : {kKindK, kKindV}) {
    const at::Tensor all = flat_storage(*pool_, kind).index_select(1, index);  // [L, T, W], a fresh copy
    for (int64_t l = 0; l < num_layers; ++l) {
      const ContentShape shape = kind == kKindK ? k_shape_ : v_shape_;
      at::Tensor layer = all.select(0, l).view({length_, shape.heads, shape.dim});
      (kind == kKindK ? past.layers[static_cast<size_t>(l)].k : past.layers[static_cast<size_t>(l)].v) = layer;
    }
  }
  at::Tensor token_major = at::empty({length_, position_rows_}, at::TensorOptions().dtype(at::kLong));
  if (length_ > 0) {
    std::memcpy(token_major.data_ptr<int64_t>(), positions_.data(), sizeof(int64_t) * length_ * position_rows_);
  }
  past.positions = position_rows_ == 1 ? token_major.view({length_}) : token_major.t().contiguous();
  return past;
}

PastKV PagedSequence::gather_all(const std::vector<const PagedSequence*>& sequences) {
  PastKV past;
  if (sequences.empty()) return past;
  const PagedSequence& first = *sequences.front();
  const KVPool& pool = *first.pool_;
  int64_t total = 0;
  for (const PagedSequence* s : sequences) {
    ORBIT_CHECK(s->pool_ == first.pool_ && s->k_shape_.width() == first.k_shape_.width() &&
                    s->v_shape_.width() == first.v_shape_.width(),
                "PagedSequence::gather_all: the sequences are not on one pool with one content shape");
    total += s->length_;
  }
  at::Tensor index = at::empty({total}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = index.data_ptr<int64_t>();
  const int64_t page_size = pool.page_size();
  for (const PagedSequence* s : sequences) {
    for (int64_t t = 0; t < s->length_; ++t) {
      *out++ = static_cast<int64_t>(s->pages_[static_cast<size_t>(t / page_size)]) * page_size + t % page_size;
    }
  }
  index = index.to(pool.device());
  const int64_t num_layers = pool.options().num_layers;
  past.layers.resize(static_cast<size_t>(num_layers));
  for (int64_t kind : {kKindK, kKindV}) {
    const at::Tensor all = flat_storage(pool, kind).index_select(1, index);  // [L, T, W], a fresh copy
    const ContentShape shape = kind == kKindK ? first.k_shape_ : first.v_shape_;
    for (int64_t l = 0; l < num_layers; ++l) {
      at::Tensor layer = all.select(0, l).view({total, shape.heads, shape.dim});
      (kind == kKindK ? past.layers[static_cast<size_t>(l)].k : past.layers[static_cast<size_t>(l)].v) = layer;
    }
  }
  return past;
}

}  // namespace orbit::runtime
