// The patches a policy's plans demand, logged per step, and the offline bound over them
// (trace_replay_parts.h; planner/offline.h): how many formations a clairvoyant store would have needed.
#include <algorithm>
#include <set>

#include "orbit/store.h"
#include "trace_replay_parts.h"

namespace orbit {

bool forms_patches(const WindowPolicy& p) {
  return p.on_miss == MissAction::kForm && p.reuse_stored && !p.store_conditioned;
}

}  // namespace orbit

namespace orbit::trace_detail {

namespace {

// Estimated bytes of a rank-(m_k, m_v) patch of an n-token chunk: per layer U (n×m) and Vᵀ (m×D) for keys
// and values, float32, with D = kv_bytes_per_token / (8 · layers) (keys and values of equal width).
int64_t patch_bytes(const ModelInfo& info, const WindowPolicy& p, int64_t n) {
  const int64_t layers = std::max<int64_t>(info.num_layers, 1);
  const int64_t d = std::max<int64_t>(info.kv_bytes_per_token / (8 * layers), 1);
  auto rank = [&](int64_t r) { return std::min(r < 0 ? d : r, std::min(n, d)); };
  return 4 * layers * (rank(p.rank_k) + rank(p.rank_v)) * (n + d);
}

}  // namespace

void log_demands(const Plan& plan, const WindowPolicy& p, const ModelInfo& info, std::size_t step, DemandLog* log) {
  std::vector<std::string> context;
  std::size_t prefix = 0;
  bool leading = true;
  for (const PlanStep& s : plan.steps) {
    if (s.action == StepAction::kEvict) continue;
    if (s.action == StepAction::kForm || s.action == StepAction::kApplyPatch) {
      const std::vector<std::string> pre(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(prefix));
      const std::vector<std::string> ante(context.begin() + static_cast<std::ptrdiff_t>(prefix), context.end());
      const std::string sig = p.use_orbit_patches ? orbit_signature(pre, ante) : exact_signature(context);
      planner::Demand d;
      d.step = static_cast<int64_t>(step);
      d.key = s.chunk.key + "/" + sig;
      d.bytes = patch_bytes(info, p, s.chunk.length);
      d.form_cost = static_cast<double>(s.chunk.length);
      log->demands.push_back(d);
      if (s.action == StepAction::kForm) {
        ++log->formations;
        log->form_tokens += static_cast<double>(s.chunk.length);
      }
    }
    if (leading && s.is_turn)
      ++prefix;
    else
      leading = false;
    context.push_back(s.chunk.key);
  }
}

OfflineReport offline_report(const DemandLog& log, int64_t capacity) {
  OfflineReport o;
  o.capacity_bytes = capacity;
  o.demands = static_cast<int64_t>(log.demands.size());
  std::set<std::string> keys;
  for (const auto& d : log.demands) keys.insert(d.key);
  o.distinct_patches = static_cast<int64_t>(keys.size());
  o.online_formations = log.formations;
  o.online_form_tokens = log.form_tokens;
  const planner::OfflineBound b = planner::optimise_offline(log.demands, capacity);
  o.compulsory_formations = b.compulsory_misses;
  o.compulsory_form_tokens = b.compulsory_cost;
  o.belady_formations = b.belady_misses;
  o.belady_form_tokens = b.belady_cost;
  const planner::PolicyCost lru = planner::simulate_lru(log.demands, capacity);
  o.lru_formations = lru.misses;
  o.lru_form_tokens = lru.cost;
  return o;
}

}  // namespace orbit::trace_detail
