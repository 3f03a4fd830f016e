// The engine's chunk store options: EngineOptions' tier settings (budgets, eviction, cold tier, device
// tier, remote) turned into the store's, each refusal naming the option at fault.
#include <cstdlib>

#include "engine/engine_core.h"
#include "engine/kv_store.h"
#include "engine/remote_values.h"
#include "orbit/common/error.h"
#include "orbit/runtime/device.h"
#include "orbit/store/codec.h"

namespace orbit::detail {

store::ChunkStoreOptions engine_store_options(const EngineCore& core) {
  const EngineOptions& o = core.options();
  const runtime::Model& m = core.model();
  store::ChunkStoreOptions so;
  so.model_fingerprint = m.fingerprint();
  so.dir = o.store_dir;
  so.host_budget_bytes = o.host_budget_bytes;
  if (o.disk_budget_bytes > 0) so.disk_budget_bytes = o.disk_budget_bytes;
  ORBIT_CHECK(o.disk_budget_bytes == 0 || !o.store_dir.empty(),
              "EngineOptions::disk_budget_bytes = " << o.disk_budget_bytes
                                                    << " bounds the disk tier, which needs a store_dir (none given: "
                                                    << "memory only); give store_dir or disk_budget_bytes=0");
  ORBIT_CHECK(o.remote_ttl_seconds >= 0, "EngineOptions::remote_ttl_seconds must be >= 0 (0 = never expire)");
  ORBIT_CHECK(o.remote_ttl_seconds == 0 || !o.remote.empty(),
              "EngineOptions::remote_ttl_seconds = " << o.remote_ttl_seconds
                                                     << " applies to the remote tier, and remote is empty (none)");
  ORBIT_CHECK(o.remote_secret.empty() || !o.remote.empty(),
              "EngineOptions::remote_secret is given, but remote is empty (no remote tier to authenticate)");
  so.remote.url = o.remote;
  ORBIT_CHECK(o.remote_max_held_fraction >= 0.0 && o.remote_max_held_fraction <= 1.0,
              "EngineOptions::remote_max_held_fraction = " << o.remote_max_held_fraction
                                                           << " is outside 0..1 (the share of the disk budget held "
                                                           << "for undelivered remote writes)");
  ORBIT_CHECK(o.remote_max_held_fraction == EngineOptions{}.remote_max_held_fraction || !o.remote.empty(),
              "EngineOptions::remote_max_held_fraction = "
                  << o.remote_max_held_fraction << " applies to the remote tier, and remote is empty (none)");
  ORBIT_CHECK(o.remote_max_held_fraction == EngineOptions{}.remote_max_held_fraction ||
                  (!o.store_dir.empty() && o.disk_budget_bytes > 0),
              "EngineOptions::remote_max_held_fraction = "
                  << o.remote_max_held_fraction << " is a share of the disk tier's budget, and "
                  << (o.store_dir.empty() ? "store_dir is empty (no disk tier)"
                                          : "disk_budget_bytes is 0 (the disk is unlimited)"));
  so.remote.ttl_seconds = o.remote_ttl_seconds;
  so.remote.max_held_fraction = o.remote_max_held_fraction;
  so.remote.secret = o.remote_secret;
  if (so.remote.secret.empty()) {
    const char* env = std::getenv("ORBIT_REMOTE_SECRET");
    if (env != nullptr) so.remote.secret = env;
  }
  RemoteValueExpectations expect;
  expect.config = m.config();
  expect.fingerprint = m.fingerprint();
  // The engine outlives its store, so the lookup may use its registry, whose lock guards only short
  // sections that never reach the store: taking it here (on a reading thread, inside the store's get)
  // cannot deadlock.
  const ChunkRegistry* registry = &core.registry();
  expect.chunk_length = [registry](const std::string& key) { return registry->chunk_length(key); };
  so.remote.validate = [expect](const std::string& key, const store::StoredValue& value) {
    return check_remote_value(expect, key, value);
  };

  std::shared_ptr<const store::EvictionPolicy> policy;
  try {
    policy = store::make_eviction_policy(o.eviction);
  } catch (const Error& e) {
    ORBIT_FAIL("EngineOptions::eviction: " << e.what());
  }
  so.device_policy = so.host_policy = so.disk_policy = policy;

  ORBIT_CHECK(o.cold_tier == "exact" || o.cold_tier == "int8",
              "EngineOptions::cold_tier = '" << o.cold_tier << "' is unknown (known: exact, int8)");
  so.int8_cold_tier = o.cold_tier == "int8";
  ORBIT_CHECK(!so.int8_cold_tier || !o.store_dir.empty(),
              "EngineOptions::cold_tier = 'int8' encodes the disk tier, which needs a store_dir (none given: "
              "memory only); give store_dir or cold_tier='exact'");

  const bool cuda = m.device().is_cuda();
  ORBIT_CHECK(o.device_tier_bytes >= 0,
              "EngineOptions::device_tier_bytes must be >= 0 (0 = no device tier), got " << o.device_tier_bytes);
  if (o.device_tier_bytes > 0) {
    ORBIT_CHECK(cuda, "EngineOptions::device_tier_bytes = " << o.device_tier_bytes << " asks for a device tier, which "
                                                            << "needs a CUDA engine (EngineOptions::device is '"
                                                            << o.device
                                                            << "'); use device='cuda' or device_tier_bytes=0");
    store::DeviceTierOptions device;
    device.layout = store::device_layout_for(m.config(), o.page_size);
    device.layout.device = runtime::device_name(m.device());
    int64_t page_bytes = 0;
    for (int64_t w : device.layout.widths) page_bytes += w * o.page_size * m.config().num_layers * 4;  // float32
    device.num_pages = o.device_tier_bytes / page_bytes;
    ORBIT_CHECK(device.num_pages >= 1, "EngineOptions::device_tier_bytes = "
                                           << o.device_tier_bytes << " holds no page (one page of this model is "
                                           << page_bytes << " bytes)");
    so.device = device;
  }
  so.pinned_host = cuda;  // recalls from the host tier to the device are DMA copies
  return so;
}

}  // namespace orbit::detail
