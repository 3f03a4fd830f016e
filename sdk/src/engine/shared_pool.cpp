#include "engine/shared_pool.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>
#include <utility>

#include "orbit/common/error.h"

namespace orbit::detail {

namespace {

// Placeholder positions for pages written here: positions are the owner's metadata (window entries place
// their instances by order), never read from a pooled sequence.
at::Tensor placeholder_positions(const runtime::ModelConfig& config, int64_t rows) {
  const int64_t r = config.position_rows();
  return r == 1 ? at::zeros({rows}, at::kLong) : at::zeros({r, rows}, at::kLong);
}

// Throws unless `patch` fits the first rows of `seq`: at most its length, one factor pair per layer, each
// u [n, m] and vt [m, width] of the pool's kind.
void check_fits(const runtime::KVPool& pool, const runtime::PagedSequence& seq, const runtime::Patch& patch) {
  const int64_t layers = pool.options().num_layers;
  ORBIT_CHECK(patch.length >= 0 && patch.length <= seq.length(),
              "SharedPool::place: the patch covers " << patch.length << " rows, the canonical has " << seq.length());
  ORBIT_CHECK(static_cast<int64_t>(patch.k.size()) == layers && static_cast<int64_t>(patch.v.size()) == layers,
              "SharedPool::place: the patch has " << patch.k.size() << "/" << patch.v.size() << " K/V layers, the pool "
                                                  << layers);
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      const runtime::LowRank& f = (kind == 0 ? patch.k : patch.v)[static_cast<std::size_t>(l)];
      if (f.rank() == 0) continue;
      const int64_t width = pool.options().widths[static_cast<std::size_t>(kind)];
      ORBIT_CHECK(f.vt.defined() && f.u.dim() == 2 && f.u.size(0) == patch.length && f.vt.dim() == 2 &&
                      f.vt.size(0) == f.rank() && f.vt.size(1) == width,
                  "SharedPool::place: layer " << l << (kind == 0 ? " K" : " V") << " factors must be u ["
                                              << patch.length << ", m] and vt [m, " << width << "]");
    }
  }
}

// rows[0, n) += U·Vᵀ as runtime::apply_patch computes it (addmm in float32, rounded once to the rows'
// dtype), so a placement reads what its private copy would hold, up to its factors' rounding to a 16-bit
// pool's type (factor_type). `rows` [T, heads, dim] is a fresh copy.
void add_factors(const at::Tensor& rows, const runtime::LowRank& f) {
  if (f.rank() == 0) return;
  const int64_t n = f.u.size(0);
  const at::Tensor head = rows.narrow(0, 0, n).view({n, -1});
  head.copy_(at::addmm(head.to(at::kFloat), f.u.to(head.device(), at::kFloat), f.vt.to(head.device(), at::kFloat)));
}

// The type a placement's factors are kept in on a pool of `dtype`: the pool's own where it is 16-bit
// (bfloat16, float16: half the bytes of float32, and the products are still summed in float32 by every
// read), else float32.
c10::ScalarType factor_type(c10::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf ? dtype : at::kFloat;
}

// The bytes `patch`'s factors take as held (their own element size).
int64_t held_bytes(const runtime::Patch& patch) {
  int64_t bytes = 0;
  for (const auto* factors : {&patch.k, &patch.v}) {
    for (const runtime::LowRank& f : *factors) {
      if (f.rank() > 0) bytes += static_cast<int64_t>(f.u.nbytes() + f.vt.nbytes());
    }
  }
  return bytes;
}

// `patch` with every factor of `type` and contiguous on `device`: the patch itself when it is so already,
// else a copy (made once, at placement, rather than by every paged read).
std::shared_ptr<const runtime::Patch> on_device(std::shared_ptr<const runtime::Patch> patch, const c10::Device& device,
                                                c10::ScalarType type) {
  const auto in_place = [&](const runtime::LowRank& f) {
    return f.rank() == 0 || (f.u.device() == device && f.vt.device() == device && f.u.scalar_type() == type &&
                             f.vt.scalar_type() == type && f.u.is_contiguous() && f.vt.is_contiguous());
  };
  const bool all = std::all_of(patch->k.begin(), patch->k.end(), in_place) &&
                   std::all_of(patch->v.begin(), patch->v.end(), in_place);
  if (all) return patch;
  auto copy = std::make_shared<runtime::Patch>(*patch);
  for (auto* factors : {&copy->k, &copy->v}) {
    for (runtime::LowRank& f : *factors) {
      if (f.rank() == 0) continue;
      f.u = f.u.to(device, type).contiguous();
      f.vt = f.vt.to(device, type).contiguous();
    }
  }
  return copy;
}

}  // namespace

SharedPool::SharedPool(const runtime::KVPoolOptions& options, bool share_canonicals)
    : pool_(options), share_canonicals_(share_canonicals) {}

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
  release_unheld_sets();
  auto seq = std::make_unique<runtime::PagedSequence>(pool_, config);
  factors_.erase(seq.get());
  if (seq->append(content, positions).is_ok()) return seq;
  seq.reset();
  if (refused != nullptr) *refused = {pool_.num_pages(), pool_.num_free(), pool_.num_live()};
  return nullptr;
}

void SharedPool::release_unheld_sets() {
  for (auto it = sets_.begin(); it != sets_.end();) {
    const std::vector<runtime::PageId>& pages = it->second->pages();
    // Every placement holds every page of its set, so the first page's count is the set's.
    const bool unheld = pages.empty() || pool_.ref_count(pages.front()) <= 1;
    it = unheld ? sets_.erase(it) : std::next(it);
  }
}

runtime::PagedSequence* SharedPool::canonical_set(const runtime::ModelConfig& config, const std::string& key,
                                                  const runtime::Content& canonical) {
  const int64_t rows = canonical.empty() ? 0 : canonical.front().k.size(0);
  const auto held = sets_.find(key);
  if (held != sets_.end()) {
    ORBIT_CHECK(held->second->length() == rows, "SharedPool::place: chunk " << key.substr(0, 12) << "'s canonical has "
                                                                            << rows << " rows, its held set "
                                                                            << held->second->length());
    return held->second.get();
  }
  auto set = std::make_unique<runtime::PagedSequence>(pool_, config);
  factors_.erase(set.get());
  if (!set->append(canonical, placeholder_positions(config, rows)).is_ok()) return nullptr;
  runtime::PagedSequence* out = set.get();
  sets_.emplace(key, std::move(set));
  return out;
}

std::unique_ptr<runtime::PagedSequence> SharedPool::place(const runtime::ModelConfig& config, const std::string& key,
                                                          const runtime::Content& canonical,
                                                          std::shared_ptr<const runtime::Patch> patch, Usage* refused) {
  ORBIT_CHECK(shares(), "SharedPool::place: this pool does not share canonicals (use create)");
  std::lock_guard<std::mutex> lock(mu_);
  release_unheld_sets();
  runtime::PagedSequence* set = canonical_set(config, key, canonical);
  if (set == nullptr) {
    if (refused != nullptr) *refused = {pool_.num_pages(), pool_.num_free(), pool_.num_live()};
    return nullptr;
  }
  if (patch != nullptr) check_fits(pool_, *set, *patch);  // before anything is kept
  auto seq = std::make_unique<runtime::PagedSequence>(set->fork());
  if (patch != nullptr) {
    factors_[seq.get()] = on_device(std::move(patch), pool_.device(), factor_type(pool_.options().dtype));
  } else {
    factors_.erase(seq.get());
  }
  return seq;
}

bool SharedPool::holds_set(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto held = sets_.find(key);
  if (held == sets_.end() || held->second->pages().empty()) return false;
  return pool_.ref_count(held->second->pages().front()) > 1;
}

SharedPool::Sharing SharedPool::sharing() const {
  std::lock_guard<std::mutex> lock(mu_);
  Sharing s;
  for (const auto& [key, set] : sets_) {
    const std::vector<runtime::PageId>& pages = set->pages();
    if (pages.empty()) continue;
    ++s.canonical_sets;
    s.canonical_pages += static_cast<int64_t>(pages.size());
    s.placements += pool_.ref_count(pages.front()) - 1;
  }
  std::set<const runtime::Patch*> seen;
  for (const auto& [seq, p] : factors_) {
    if (!seen.insert(p.get()).second) continue;
    ++s.patches;
    s.patch_bytes += held_bytes(*p);
  }
  return s;
}

std::unique_ptr<runtime::PagedSequence> SharedPool::fork(const runtime::PagedSequence& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  auto child = std::make_unique<runtime::PagedSequence>(seq.fork());
  const auto parent = factors_.find(&seq);
  if (parent != factors_.end()) {
    factors_[child.get()] = parent->second;
  } else {
    factors_.erase(child.get());
  }
  return child;
}

void SharedPool::destroy(std::unique_ptr<runtime::PagedSequence>& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  factors_.erase(seq.get());
  seq.reset();
  release_unheld_sets();
}

runtime::PastKV SharedPool::gather(const runtime::PagedSequence& seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  runtime::PastKV past = seq.gather();
  const auto placed = factors_.find(&seq);
  if (placed == factors_.end()) return past;
  const runtime::Patch& p = *placed->second;
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    add_factors(past.layers[l].k, p.k[l]);
    add_factors(past.layers[l].v, p.v[l]);
  }
  return past;
}

runtime::PastKV SharedPool::gather_all(const std::vector<const runtime::PagedSequence*>& seqs) const {
  std::lock_guard<std::mutex> lock(mu_);
  runtime::PastKV past = runtime::PagedSequence::gather_all(seqs);
  int64_t first = 0;
  for (const runtime::PagedSequence* s : seqs) {
    const auto placed = factors_.find(s);
    if (placed != factors_.end()) {
      const runtime::Patch& p = *placed->second;
      for (std::size_t l = 0; l < past.layers.size(); ++l) {
        add_factors(past.layers[l].k.narrow(0, first, s->length()), p.k[l]);
        add_factors(past.layers[l].v.narrow(0, first, s->length()), p.v[l]);
      }
    }
    first += s->length();
  }
  return past;
}

std::shared_ptr<runtime::PagedPast> SharedPool::paged(const std::vector<const runtime::PagedSequence*>& seqs) const {
  auto past = std::make_shared<runtime::PagedPast>();
  past->pool = &pool_;
  std::vector<at::Tensor> slots;
  slots.reserve(seqs.size());
  int64_t first = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const runtime::PagedSequence* s : seqs) {
    slots.push_back(s->slots());
    const auto placed = factors_.find(s);
    if (placed != factors_.end() && placed->second->length > 0) past->patches.push_back({first, placed->second});
    first += s->length();
  }
  past->slots = slots.empty() ? at::zeros({0}, at::kLong) : at::cat(slots, 0);
  return past;
}

std::vector<runtime::PageId> SharedPool::pages(const runtime::PagedSequence& seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq.pages();
}

int64_t SharedPool::shared_pages(const std::vector<const runtime::PagedSequence*>& seqs) const {
  int64_t shared = 0;
  std::lock_guard<std::mutex> lock(mu_);
  std::set<runtime::PageId> canonical;  // pages of a canonical set: that holder is not another window
  for (const auto& [key, set] : sets_) canonical.insert(set->pages().begin(), set->pages().end());
  for (const runtime::PagedSequence* s : seqs) {
    for (runtime::PageId p : s->pages()) shared += pool_.ref_count(p) > (canonical.count(p) > 0 ? 2 : 1) ? 1 : 0;
  }
  return shared;
}

int64_t SharedPool::freed_by(const std::vector<const runtime::PagedSequence*>& seqs,
                             const std::set<std::string>& kept_sets) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<runtime::PageId, int64_t> holders;  // page -> how many of `seqs` hold it
  for (const runtime::PagedSequence* s : seqs) {
    for (runtime::PageId p : s->pages()) ++holders[p];
  }
  std::map<runtime::PageId, bool> canonical;  // a canonical set's page -> whether its set is kept
  for (const auto& [key, set] : sets_) {
    for (runtime::PageId p : set->pages()) canonical[p] = kept_sets.count(key) > 0;
  }
  int64_t freed = 0;
  for (const auto& [page, held] : holders) {
    const auto set = canonical.find(page);
    if (set != canonical.end() && set->second) continue;
    // Every holder one of `seqs` (the set itself aside, destroyed with its last placement).
    freed += pool_.ref_count(page) == held + (set != canonical.end() ? 1 : 0) ? 1 : 0;
  }
  return freed;
}

}  // namespace orbit::detail
