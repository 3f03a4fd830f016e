#include "engine/usage_meter.h"

namespace orbit::detail {

UsageMeter::UsageMeter(int64_t radix_capacity_tokens) : radix_(planner::PrefixCacheOptions{radix_capacity_tokens}) {}

void UsageMeter::count(const Counters& d) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.canonicals_encoded += d.canonicals_encoded;
  counters_.patches_formed += d.patches_formed;
  counters_.patch_hits += d.patch_hits;
  counters_.forward_tokens += d.forward_tokens;
  counters_.background_forward_tokens += d.background_forward_tokens;
  counters_.query_forward_tokens += d.query_forward_tokens;
  counters_.logits_forward_tokens += d.logits_forward_tokens;
  counters_.critical_seconds += d.critical_seconds;
  counters_.background_seconds += d.background_seconds;
  counters_.background_jobs += d.background_jobs;
  counters_.media_found += d.media_found;
  counters_.media_missed += d.media_missed;
  counters_.prefix_cache_tokens += d.prefix_cache_tokens;
  counters_.radix_cache_tokens += d.radix_cache_tokens;
}

Counters UsageMeter::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

int64_t UsageMeter::prefix_cache_read(const std::vector<planner::PrefixSpan>& window) {
  std::lock_guard<std::mutex> lock(mu_);
  return prefix_ledger_.read(window);
}

int64_t UsageMeter::radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  return radix_.read(tokens, prompt_tokens).forwarded;
}

TableUsage UsageMeter::prefix_ledger_usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  TableUsage u;
  u.entries = static_cast<int64_t>(prefix_ledger_.size());
  u.max_entries = static_cast<int64_t>(prefix_ledger_.capacity());
  return u;
}

TableUsage UsageMeter::radix_usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  TableUsage u;
  u.entries = radix_.size();
  u.max_entries = radix_.capacity();
  return u;
}

}  // namespace orbit::detail
