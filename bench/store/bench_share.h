// bench_store's sharing part: recall from the remote tier, and N processes on one store directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "orbit/store/value.h"

namespace orbit::bench {

// A redis-server this process starts on 127.0.0.1 (a free port, no persistence) and kills on destruction.
// Throws orbit::Error when redis-server is missing or does not answer.
class LocalRedis {
 public:
  explicit LocalRedis(const std::string& dir);
  ~LocalRedis();
  LocalRedis(const LocalRedis&) = delete;
  LocalRedis& operator=(const LocalRedis&) = delete;
  std::string url() const;

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

struct RemoteRecall {
  double save_s = 0;       // put + the remote write (encode, send)
  double load_s = 0;       // median: a fresh store's get (remote read, verify, decode) + content conversion
  int64_t blob_bytes = 0;  // bytes on the wire per value
  int64_t hits = 0, gets = 0;
};
// Writes `value` under `key` to the remote at `url`, then recalls it `reps` times from fresh stores.
RemoteRecall measure_remote_recall(const std::string& url, const std::string& fingerprint, const std::string& key,
                                   const store::ValuePtr& value, int reps);

struct ShareResult {
  int processes = 0;
  int64_t lookups = 0;      // processes × keys
  int64_t hits = 0;         // served by the shared directory (another process's put, or its own earlier one)
  int64_t puts = 0;         // misses that computed and stored the value
  int64_t bytes_read = 0;   // value bytes served by hits
  int64_t blob_bytes = 0;   // the directory's blob bytes at the end
  double seconds = 0;       // the slowest process's lookup loop (all run at once; process start excluded)
  double wall_seconds = 0;  // the whole run, process starts included
};
// Starts `processes` copies of `self` (bench_store --share-worker) on one fresh directory; each looks up
// `keys` keys in its own random order and puts the ones it misses (values of value_bytes bytes).
ShareResult measure_shared_directory(const std::string& self, const std::string& dir, int processes, int64_t keys,
                                     int64_t value_bytes);

// bench_store --share-worker DIR KEYS VALUE_BYTES SEED: one such process (prints "hits puts bytes seconds").
int run_share_worker(int argc, char** argv);

}  // namespace orbit::bench
