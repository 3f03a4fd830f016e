// EnginePlanEnv: the PlanEnv (plan_env.h) of a real engine, answering from its EngineCore: the store, the
// patch catalog, the reuse index, the KV pool and the model's shape. One is made per plan; it holds no state
// of its own beyond the model's shape, read once.
#pragma once

#include "engine/engine_core.h"
#include "plan/plan_env.h"

namespace orbit::detail {

class EnginePlanEnv final : public PlanEnv {
 public:
  explicit EnginePlanEnv(const EngineCore& core);

  const ModelLimits& limits() const override { return limits_; }
  void check_open() const override { core_.life().check_open(); }
  std::string attention_path() const override;
  planner::CostModel cost_model() const override { return core_.cost_model(); }
  planner::FidelityModel fidelity_model() const override { return core_.fidelity_model(); }
  std::string turn_key(const std::vector<int64_t>& tokens) const override { return core_.registry().turn_key(tokens); }
  std::optional<StoreTier> canonical_residence(const std::string& chunk_key) const override {
    return core_.kv().canonical_residence(chunk_key);
  }
  double stored_quantization(const std::string& store_key) const override {
    return core_.kv().quantization_error(store_key);
  }
  bool contains(const std::string& store_key) const override { return core_.kv().contains(store_key); }
  bool available(const std::string& store_key) const override { return core_.kv().available(store_key); }
  std::optional<PatchFacts> patch_facts(const std::string& chunk_key, const std::string& patch_key) const override;
  std::optional<StaleMatch> closest_patch(const std::string& chunk_key, const PatchKeys& keys,
                                          const ContextWeights& context, std::size_t max_records) const override;
  double chunk_sensitivity(const std::string& chunk_key) const override {
    return core_.kv().chunk_sensitivity(chunk_key);
  }
  double sensitivity_prior() const override { return core_.kv().worst_patch_sensitivity(); }
  const ReuseIndex& reuse_index() const override { return core_.kv().reuse_index(); }
  PoolPages pool_pages() const override;
  bool placement_shares(const std::string& chunk_key) const override;

 private:
  const EngineCore& core_;
  ModelLimits limits_;
};

// The model's shape as planning uses it.
ModelLimits model_limits(const EngineCore& core);

}  // namespace orbit::detail
