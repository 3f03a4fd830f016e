// Blob backends: places outside this process that hold whole blobs (the checksummed blob format of
// blob_format.h, as bytes) under store keys. The remote tier (remote_tier.h) sits on one of them.
//
//   MemoryBackend   a map in this process (tests, and a model of what a backend must do)
//   RedisBackend    Redis or Valkey, one server or a cluster (redis_backend.h)
//
// A backend moves bytes only: it does not decode or verify them (the remote tier does, on every load).
// What every backend guarantees:
//   - put() is all-or-nothing: a reader sees the previous bytes (or none) or the new ones, never a part;
//   - get() reports a value whose parts are inconsistent as kCorrupt, one whose parts the server evicted (its
//     manifest left) as kIncomplete, one sealed under another secret or none as kUnauthenticated, never as a hit;
//   - no call waits longer than the backend's timeouts; an unreachable backend answers kUnavailable.
// Thread-safety: every member is safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "orbit/common/status.h"

namespace orbit::store {

struct BackendRead {
  enum class Outcome { kHit, kMiss, kCorrupt, kIncomplete, kUnauthenticated, kUnavailable };
  Outcome outcome = Outcome::kMiss;
  std::string bytes;   // kHit: the whole blob
  std::string reason;  // other than kHit and kMiss: what went wrong, naming the backend and the key
};

class BlobBackend {
 public:
  virtual ~BlobBackend() = default;
  // "redis://127.0.0.1:6379/0", "memory", ...
  virtual std::string describe() const = 0;
  virtual BackendRead get(const std::string& key) = 0;
  // ok, or refused naming the backend and the cause (unreachable, timed out, rejected: e.g. OOM).
  virtual Status put(const std::string& key, const std::string& bytes) = 0;
  // Removes the key (no-op when absent); refused when unreachable.
  virtual Status remove(const std::string& key) = 0;
  // Whether the key is held; refused when unreachable.
  virtual Result<bool> exists(const std::string& key) = 0;
};

class MemoryBackend final : public BlobBackend {
 public:
  std::string describe() const override { return "memory"; }
  BackendRead get(const std::string& key) override;
  Status put(const std::string& key, const std::string& bytes) override;
  Status remove(const std::string& key) override;
  Result<bool> exists(const std::string& key) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::string> values_;
};

}  // namespace orbit::store
