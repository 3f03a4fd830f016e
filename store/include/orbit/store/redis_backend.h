// The Redis (or Valkey) blob backend: one server or a cluster, through redis_client.h.
//
// Layout of one entry with store key K (64 hex) split into n parts of at most part_bytes each:
//
//   orbit:{K}        manifest: "orbit-remote 1 <n> <total bytes> <sha256 hex of the whole blob> <part bytes>"
//                    followed, with a secret, by " <hex HMAC-SHA256 of the manifest under it>" (remote_auth.h)
//   orbit:{K}:<i>    part i, i = 0..n-1 (raw bytes)
//
// The {K} hash tag puts an entry's keys in one cluster slot, so a put is one MULTI/EXEC transaction:
// the parts and the manifest become visible together or not at all (also when the server is killed
// mid-write: Redis persists and replays transactions whole). A reader takes the manifest, then MGETs the
// parts; a missing part, a size or checksum that differs from the manifest is kCorrupt (the caller
// removes the entry; the next put replaces it). A manifest is checked before any part is asked for: with
// a secret its tag must verify (a manifest another party wrote is refused), and its part count must be
// one its size allows (at most 4096 parts, none under 1 KiB but a lone one, and the count its part size
// gives), so a forged manifest never makes a read fetch more keys than a real entry of its size has. Both
// refusals are kCorrupt, naming the key. Manifests without a part size (older writers) are read too. With ttl_seconds >
// 0 every key expires after that long (PX on every SET): run the server with `maxmemory-policy allkeys-lru` (or
// volatile-lru with a TTL) so a full server evicts old entries instead of refusing writes; an evicted part makes its
// entry kCorrupt, never a wrong hit. Thread-safety: every member may be called from any thread (two connections: reads
// and writes, each under its own mutex, so a large write never delays a read on another thread).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "orbit/store/backend.h"
#include "orbit/store/redis_client.h"

namespace orbit::store {

struct RedisBackendOptions {
  std::string url;                        // redis://host:port[/db] or redis-cluster://h:p[,h:p...]
  int64_t ttl_seconds = 0;                // 0 = entries never expire
  int64_t part_bytes = int64_t{4} << 20;  // largest single value written (>= 1 KiB); at most 4096 parts
  // The remote secret ("" = none): manifests are sealed under it and must verify when read. The parts are
  // the caller's: RemoteTier seals the value they hold.
  std::string secret;
  RedisClientOptions client;  // connect and reply timeouts
};

class RedisBackend final : public BlobBackend {
 public:
  // Parses the URL (throws orbit::Error naming it when malformed); connects lazily.
  explicit RedisBackend(RedisBackendOptions options);
  ~RedisBackend() override;

  std::string describe() const override { return options_.url; }
  BackendRead get(const std::string& key) override;
  Status put(const std::string& key, const std::string& bytes) override;
  Status remove(const std::string& key) override;
  Result<bool> exists(const std::string& key) override;

  static std::string manifest_key(const std::string& key) { return "orbit:{" + key + "}"; }
  static std::string part_key(const std::string& key, int64_t i) { return manifest_key(key) + ":" + std::to_string(i); }

 private:
  RedisBackendOptions options_;
  std::mutex read_mu_, write_mu_;
  std::unique_ptr<RedisClient> reader_, writer_;
};

}  // namespace orbit::store
