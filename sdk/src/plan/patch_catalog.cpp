#include "plan/patch_catalog.h"

#include <algorithm>
#include <functional>

namespace orbit::detail {

void PatchCatalog::add(const std::string& chunk_key, PatchRecord record, const std::vector<double>& context_lengths) {
  std::unordered_map<uint64_t, double> weights;
  for (std::size_t i = 0; i < record.context.size(); ++i) {
    const double length = i < context_lengths.size() ? context_lengths[i] : 1.0;
    weights[std::hash<std::string>{}(record.context[i])] += length;
    record.context_total += length;
  }
  record.context_tokens.assign(weights.begin(), weights.end());
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = records_[chunk_key];
  for (const auto& r : list) {
    if (r.key == record.key) return;
  }
  list.push_back(std::move(record));
}

void PatchCatalog::set_formed(const std::string& chunk_key, const std::vector<std::string>& keys, double residual,
                              double sensitivity) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(chunk_key);
  if (it == records_.end()) return;
  for (PatchRecord& r : it->second) {
    if (std::find(keys.begin(), keys.end(), r.key) != keys.end()) {
      r.residual = residual;
      r.sensitivity = sensitivity;
    }
  }
  // One formation, however many keys it is stored under.
  if (sensitivity >= 0 && !keys.empty()) record_sensitivity(chunk_key, keys.front(), sensitivity);
}

void PatchCatalog::note_read(const std::string& chunk_key, const std::string& patch_key, double sensitivity) {
  if (sensitivity < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = records_.find(chunk_key); it != records_.end()) {
    for (const PatchRecord& r : it->second) {
      if (r.key == patch_key && r.sensitivity >= 0) return;  // formed here: counted once, when formed
    }
  }
  record_sensitivity(chunk_key, patch_key, sensitivity);
}

std::optional<PatchCatalog::Facts> PatchCatalog::facts(const std::string& chunk_key,
                                                       const std::string& patch_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(chunk_key);
  if (it == records_.end()) return std::nullopt;
  for (const PatchRecord& r : it->second) {
    if (r.key == patch_key) return Facts{r.exact, r.residual};
  }
  return std::nullopt;
}

std::vector<PatchCatalog::Candidate> PatchCatalog::closest(const std::string& chunk_key, const std::string& variant,
                                                           const std::unordered_map<uint64_t, double>& context,
                                                           double context_total, std::size_t max_records) const {
  std::vector<Candidate> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(chunk_key);
    if (it == records_.end()) return candidates;
    for (auto r = it->second.rbegin(); r != it->second.rend() && candidates.size() < max_records; ++r) {
      if (r->conditioned || r->variant != variant) continue;
      double common = 0;  // Σ min over the keys both hold; Σ max = both totals − Σ min
      for (const auto& [hash, tokens] : r->context_tokens) {
        if (auto c = context.find(hash); c != context.end()) common += std::min(tokens, c->second);
      }
      const double all = r->context_total + context_total - common;
      candidates.push_back({r->key, all > 0 ? 1.0 - common / all : 0.0});
    }
  }
  // Closest first; the newest on a tie (they were pushed newest first).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.divergence < b.divergence; });
  return candidates;
}

double PatchCatalog::sensitivity(const std::string& chunk_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sensitivity_.find(chunk_key);
  return it == sensitivity_.end() ? -1 : it->second.mean;
}

void PatchCatalog::record_measured_sensitivity(const std::string& key, double sensitivity) {
  if (!(sensitivity >= 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (sensitivity_.count(key) == 0) {
    measured_order_.push_back(key);
    if (measured_order_.size() > kMaxMeasured) {
      sensitivity_.erase(measured_order_.front());
      measured_order_.pop_front();
    }
  }
  record_sensitivity(key, "measured", sensitivity);
}

void PatchCatalog::record_sensitivity(const std::string& chunk_key, const std::string& patch_key, double s) {
  Sensitivity& rec = sensitivity_[chunk_key];
  rec.by_patch[patch_key] = s;
  double sum = 0;
  for (const auto& [key, x] : rec.by_patch) sum += x;
  rec.mean = sum / static_cast<double>(rec.by_patch.size());
}

}  // namespace orbit::detail
