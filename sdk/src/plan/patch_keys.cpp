// Patch keys and the limit refusal (plan_env.h): torch-free.
#include <algorithm>
#include <sstream>

#include "orbit/common/error.h"
#include "plan/plan_env.h"

namespace orbit::detail {

namespace {

int64_t full_rank(int64_t n, int64_t width) { return std::min(n, width); }

PatchKeys keys_from(const ModelLimits& model, const WindowPolicy& policy, const ChunkRecord& chunk,
                    const std::string& exact_sig, const std::string& orbit_sig) {
  const int64_t n = chunk.ref.length;
  const int64_t dk = model.k_width;
  const int64_t dv = model.v_width;
  PatchKeys k;
  k.rank_k = policy.rank_k < 0 ? full_rank(n, dk) : std::min(policy.rank_k, full_rank(n, dk));
  k.rank_v = policy.rank_v < 0 ? full_rank(n, dv) : std::min(policy.rank_v, full_rank(n, dv));
  k.full_rank = !policy.deep_only && k.rank_k == full_rank(n, dk) && k.rank_v == full_rank(n, dv);
  std::ostringstream variant;
  variant << (policy.deep_only ? "deep" : "full");
  if (policy.deep_only) variant << "@" << policy.deep_energy;
  k.variant = variant.str();
  k.exact = patch_key({chunk.ref.key, exact_sig, k.variant, k.rank_k, k.rank_v});
  k.orbit = patch_key({chunk.ref.key, orbit_sig, k.variant, k.rank_k, k.rank_v});
  k.conditioned = patch_key({chunk.ref.key, exact_sig, "conditioned", 0, 0});
  return k;
}

}  // namespace

PatchKeys patch_keys(const ModelLimits& model, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const std::vector<std::string>& context, std::size_t prefix) {
  ContextSigner signer(std::min(prefix, context.size()));
  for (const std::string& key : context) signer.push(key);
  return keys_from(model, policy, chunk, signer.exact(), signer.orbit());
}

PatchKeys patch_keys(const ModelLimits& model, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const ContextSigner& signer) {
  return keys_from(model, policy, chunk, signer.exact(), signer.orbit());
}

std::string limit_refusal(Operation op, int64_t extent, int64_t device_bytes, int64_t max_positions,
                          const char* max_positions_source, int64_t max_bytes, bool* capacity) {
  *capacity = false;
  std::ostringstream why;
  if (max_positions > 0 && extent > max_positions) {
    why << operation_name(op) << " refused: the window would span " << extent
        << " positions, past the model's limit of " << max_positions;
    if (max_positions_source != nullptr) why << " from " << max_positions_source;
    why << " (evict or slide first)";
    return why.str();
  }
  if (max_bytes > 0 && device_bytes > max_bytes) {
    *capacity = true;
    why << operation_name(op) << " refused: the window would hold " << device_bytes
        << " KV bytes, over its max_bytes budget of " << max_bytes << " (evict or slide first)";
    return why.str();
  }
  return {};
}

}  // namespace orbit::detail
