#include "plan/patch_catalog.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "orbit/common/error.h"
#include "plan/window_meta.h"

namespace orbit::detail {

namespace {

// The bytes a heap block asked for `n` bytes takes under glibc's malloc: an 8-byte header, rounded up to 16, 32
// at least (0: no block).
std::size_t block(std::size_t n) { return n == 0 ? 0 : std::max<std::size_t>(32, (n + 8 + 15) & ~std::size_t{15}); }

// What a string holds on the heap (none while it fits in the string itself) and a vector's elements' block.
std::size_t heap(const std::string& s) { return s.capacity() > std::string().capacity() ? block(s.capacity() + 1) : 0; }
template <class T>
std::size_t heap(const std::vector<T>& v) {
  return block(v.capacity() * sizeof(T));
}

// What a record holds on the heap beyond itself (its slot in the chunk's vector): its strings, its context's
// keys and weights.
std::size_t record_bytes(const PatchRecord& r) {
  std::size_t n = heap(r.key) + heap(r.variant) + heap(r.context) + heap(r.context_tokens);
  for (const std::string& k : r.context) n += heap(k);
  return n;
}

}  // namespace

PatchCatalog::PatchCatalog(std::size_t max_bytes, std::size_t max_per_chunk)
    : max_bytes_(max_bytes), max_per_chunk_(max_per_chunk) {
  ORBIT_CHECK(max_bytes >= 1, "PatchCatalog: max_bytes must be >= 1");
  ORBIT_CHECK(max_per_chunk >= 1, "PatchCatalog: max_per_chunk must be >= 1");
}

PatchCatalog::Chunk* PatchCatalog::use(const std::string& chunk_key, bool create) const {
  auto it = chunks_.find(chunk_key);
  if (it == chunks_.end()) {
    if (!create) return nullptr;
    it = chunks_.emplace(chunk_key, Chunk{}).first;
    recency_.push_front(chunk_key);
    it->second.at = recency_.begin();
    return &it->second;
  }
  recency_.splice(recency_.begin(), recency_, it->second.at);
  return &it->second;
}

void PatchCatalog::settle(Chunk& keep) {
  // The chunk's map node (its key, the Chunk, the next link and the cached hash) and bucket, its recency list
  // node (the key again and two links), both keys' heap, then its records' and sensitivities' vectors.
  const std::string& key = *keep.at;
  std::size_t now = block(sizeof(std::pair<const std::string, Chunk>) + 2 * sizeof(void*)) + sizeof(void*) +
                    block(sizeof(std::string) + 2 * sizeof(void*)) + 2 * heap(key);
  now += heap(keep.records) + heap(keep.sensitivities);
  for (const PatchRecord& r : keep.records) now += record_bytes(r);
  for (const auto& [patch, s] : keep.sensitivities) now += heap(patch);
  bytes_ = bytes_ - keep.bytes + now;
  keep.bytes = now;
  // `keep` is the most recently used: the back of recency_ is another chunk while there are two.
  while (bytes_ > max_bytes_ && recency_.size() > 1) {
    auto victim = chunks_.find(recency_.back());
    bytes_ -= victim->second.bytes;
    records_ -= victim->second.records.size();
    chunks_.erase(victim);
    recency_.pop_back();
  }
}

void PatchCatalog::add(const std::string& chunk_key, PatchRecord record, const std::vector<double>& context_lengths) {
  if (!record.context.empty() || record.context_tokens.empty()) {
    std::unordered_map<uint64_t, double> weights;
    record.context_total = 0;
    for (std::size_t i = 0; i < record.context.size(); ++i) {
      const double length = i < context_lengths.size() ? context_lengths[i] : 1.0;
      weights[context_key_hash(record.context[i])] += length;
      record.context_total += length;
    }
    record.context_tokens.assign(weights.begin(), weights.end());
  }
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& chunk = *use(chunk_key, true);
  for (const auto& r : chunk.records) {
    if (r.key == record.key) return;
  }
  chunk.records.push_back(std::move(record));
  ++records_;
  if (chunk.records.size() > max_per_chunk_) {  // the oldest goes
    chunk.records.erase(chunk.records.begin());
    --records_;
  }
  settle(chunk);
}

void PatchCatalog::set_formed(const std::string& chunk_key, const std::vector<std::string>& keys, double residual,
                              double sensitivity) {
  std::lock_guard<std::mutex> lock(mu_);
  Chunk* chunk = use(chunk_key, false);
  if (chunk == nullptr) return;
  for (PatchRecord& r : chunk->records) {
    if (std::find(keys.begin(), keys.end(), r.key) != keys.end()) {
      r.residual = residual;
      r.sensitivity = sensitivity;
    }
  }
  // One formation, however many keys it is stored under.
  if (sensitivity >= 0 && !keys.empty()) {
    record_sensitivity(*chunk, keys.front(), sensitivity);
    worst_patch_ = std::max(worst_patch_, sensitivity);
  }
  settle(*chunk);
}

void PatchCatalog::note_read(const std::string& chunk_key, const std::string& patch_key, double sensitivity) {
  if (!(sensitivity >= 0) || !std::isfinite(sensitivity)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& chunk = *use(chunk_key, true);
  for (const PatchRecord& r : chunk.records) {
    if (r.key == patch_key && r.sensitivity >= 0) return;  // formed here: counted once, when formed
  }
  record_sensitivity(chunk, patch_key, sensitivity);
  worst_patch_ = std::max(worst_patch_, sensitivity);
  settle(chunk);
}

std::optional<PatchCatalog::Facts> PatchCatalog::facts(const std::string& chunk_key,
                                                       const std::string& patch_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Chunk* chunk = use(chunk_key, false);
  if (chunk == nullptr) return std::nullopt;
  for (const PatchRecord& r : chunk->records) {
    if (r.key == patch_key) return Facts{r.exact, r.residual, r.sensitivity};
  }
  return std::nullopt;
}

std::vector<PatchCatalog::Candidate> PatchCatalog::closest(const std::string& chunk_key, const PatchShape& shape,
                                                           const std::unordered_map<uint64_t, double>& context,
                                                           double context_total, std::size_t max_records) const {
  std::vector<Candidate> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Chunk* chunk = use(chunk_key, false);
    if (chunk == nullptr) return candidates;
    for (auto r = chunk->records.rbegin(); r != chunk->records.rend() && candidates.size() < max_records; ++r) {
      if (r->conditioned || r->alias || r->variant != shape.variant) continue;
      if (r->rank_k < shape.rank_k || r->rank_v < shape.rank_v) continue;
      double common = 0;  // Σ min over the keys both hold; Σ max = both totals − Σ min
      for (const auto& [hash, tokens] : r->context_tokens) {
        if (auto c = context.find(hash); c != context.end()) common += std::min(tokens, c->second);
      }
      const double all = r->context_total + context_total - common;
      candidates.push_back({r->key, all > 0 ? 1.0 - common / all : 0.0, r->rank_k, r->rank_v});
    }
  }
  // Closest first; the newest on a tie (they were pushed newest first).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.divergence < b.divergence; });
  return candidates;
}

std::vector<PatchRecord> PatchCatalog::formed_records(const std::string& chunk_key, std::size_t newest) const {
  std::vector<PatchRecord> out;
  std::lock_guard<std::mutex> lock(mu_);
  const Chunk* chunk = use(chunk_key, false);
  if (chunk == nullptr) return out;
  for (auto r = chunk->records.rbegin(); r != chunk->records.rend() && out.size() < newest; ++r) {
    if (!r->conditioned && !r->alias && r->residual >= 0) out.push_back(*r);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

bool PatchCatalog::claim_directory(const std::string& chunk_key) {
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& chunk = *use(chunk_key, true);
  const bool first = !chunk.directory_claimed;
  chunk.directory_claimed = true;
  if (first) settle(chunk);  // a chunk just made is charged; one claimed before is as it was (planning asks often)
  return first;
}

double PatchCatalog::sensitivity(const std::string& chunk_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Chunk* chunk = use(chunk_key, false);
  return chunk == nullptr ? -1 : chunk->mean;
}

double PatchCatalog::worst_patch_sensitivity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worst_patch_;
}

void PatchCatalog::record_measured_sensitivity(const std::string& key, double sensitivity) {
  if (!(sensitivity >= 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& chunk = *use(key, true);
  record_sensitivity(chunk, "measured", sensitivity);
  settle(chunk);
}

void PatchCatalog::record_sensitivity(Chunk& chunk, const std::string& patch_key, double s) {
  auto& kept = chunk.sensitivities;
  auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& e) { return e.first == patch_key; });
  if (it != kept.end()) {
    it->second = s;
  } else {
    kept.emplace_back(patch_key, s);
    if (kept.size() > max_per_chunk_) kept.erase(kept.begin());  // the oldest goes
  }
  double sum = 0;
  for (const auto& [key, x] : kept) sum += x;
  chunk.mean = sum / static_cast<double>(kept.size());
}

std::size_t PatchCatalog::chunks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_.size();
}

std::size_t PatchCatalog::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

std::size_t PatchCatalog::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace orbit::detail
