// EnginePlanEnv (engine_plan_env.h), and plan_layout over a window's state (window_ops.h).
#include "engine/engine_plan_env.h"

#include "window/window_ops.h"

namespace orbit::detail {

ModelLimits model_limits(const EngineCore& core) {
  const runtime::ModelConfig& c = core.config();
  ModelLimits m;
  m.num_layers = c.num_layers;
  m.k_width = c.content_k_shape().width();
  m.v_width = c.content_v_shape().width();
  m.kv_bytes_per_token = core.model_info().kv_bytes_per_token;
  m.max_positions = core.max_positions();
  m.max_positions_source = window_position_limit_source(c);
  if (c.rope.scaling == runtime::RopeScaling::kDynamicNtk) {
    m.dynamic_ntk.anchor = c.rope.original_max_position_embeddings > 0 ? c.rope.original_max_position_embeddings
                                                                       : c.rope.max_position_embeddings;
    m.dynamic_ntk.factor = c.rope.factor;
  }
  return m;
}

EnginePlanEnv::EnginePlanEnv(const EngineCore& core) : core_(core), limits_(model_limits(core)) {}

std::string EnginePlanEnv::attention_path() const { return core_.model().attention_path(1, true); }

std::optional<PatchFacts> EnginePlanEnv::patch_facts(const std::string& chunk_key, const std::string& patch_key) const {
  const auto facts = core_.kv().patch_facts(chunk_key, patch_key);
  if (!facts.has_value()) return std::nullopt;
  return PatchFacts{facts->exact, facts->residual, facts->sensitivity};
}

std::optional<StaleMatch> EnginePlanEnv::closest_patch(const std::string& chunk_key, const PatchKeys& keys,
                                                       const ContextWeights& context, std::size_t max_records) const {
  const auto match =
      core_.kv().closest_patch(chunk_key, PatchShape{keys.variant, keys.rank_k, keys.rank_v}, context, max_records);
  if (!match.has_value()) return std::nullopt;
  return StaleMatch{match->key, match->divergence, match->rank_k, match->rank_v};
}

PoolPages EnginePlanEnv::pool_pages() const {
  const SharedPool::Usage u = core_.pool().usage();
  return {u.free, u.pages};
}

bool EnginePlanEnv::placement_shares(const std::string& chunk_key) const {
  return core_.pool().shares() && core_.pool().holds_set(chunk_key);
}

Plan plan_layout(const WindowState& state, const Layout& layout) {
  return plan_layout(snapshot(state), layout, EnginePlanEnv(*state.core));
}

}  // namespace orbit::detail
