#include "engine/shared_pool.h"

#include <utility>

namespace orbit::detail {

SharedPool::SharedPool(const runtime::KVPoolOptions& options) : pool_(options) {}

int64_t SharedPool::num_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.num_free();
}

SharedPool::Usage SharedPool::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  Usage u;
  u.pages = pool_.num_pages();
  u.free = pool_.num_free();
  u.live = pool_.num_live();
  return u;
}

std::unique_ptr<runtime::PagedSequence> SharedPool::create(const runtime::ModelConfig& config,
                                                           const std::vector<runtime::LayerKV>& content,
                                                           const at::Tensor& positions, Usage* refused) {
  std::lock_guard<std::mutex> lock(mu_);
  auto seq = std::make_unique<runtime::PagedSequence>(pool_, config);
  if (seq->append(content, positions).is_ok()) return seq;
  seq.reset();
  if (refused != nullptr) *refused = {pool_.num_pages(), pool_.num_free(), pool_.num_live()};
  return nullptr;
}

std::unique_ptr<runtime::PagedSequence> SharedPool::fork(const runtime::PagedSequence& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::make_unique<runtime::PagedSequence>(seq.fork());
}

void SharedPool::destroy(std::unique_ptr<runtime::PagedSequence>& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  seq.reset();
}

runtime::PastKV SharedPool::gather(const runtime::PagedSequence& seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq.gather();
}

std::vector<at::Tensor> SharedPool::slots(const std::vector<const runtime::PagedSequence*>& seqs) const {
  std::vector<at::Tensor> out;
  out.reserve(seqs.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (const runtime::PagedSequence* s : seqs) out.push_back(s->slots());
  return out;
}

std::vector<runtime::PageId> SharedPool::pages(const runtime::PagedSequence& seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq.pages();
}

int64_t SharedPool::shared_pages(const std::vector<const runtime::PagedSequence*>& seqs) const {
  int64_t shared = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const runtime::PagedSequence* s : seqs) {
    for (runtime::PageId p : s->pages()) shared += pool_.ref_count(p) > 1 ? 1 : 0;
  }
  return shared;
}

}  // namespace orbit::detail
