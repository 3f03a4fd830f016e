// The thread of `orbit serve` that retries its stores' held writes (pending_writes.h: answers given whose
// write failed), so that they land once the store takes writes again even while no request comes: every
// `period` it calls each store's retry (ChatStore::retry_pending(false), ResponseStore's: the held ones
// whose backoff has passed, after one check that the store takes a write; nothing while none is held).
// Under traffic a store's own puts retry first (a put that committed retries what is due before it
// returns), so this thread is what catches up a store that recovered while idle. It needs no model: it does
// not wait for the gate the idle worker runs under.
//
// Thread-safety: stop() may be called from any thread; the retries run on this class's thread only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace orbit::serve {

class StoreRetryThread {
 public:
  // `retries`: one per store, each retrying what is due (an exception is reported on stderr, and the next
  // period tries again). Starts the thread.
  StoreRetryThread(std::vector<std::function<void()>> retries, std::chrono::milliseconds period);
  ~StoreRetryThread() { stop(); }
  StoreRetryThread(const StoreRetryThread&) = delete;
  StoreRetryThread& operator=(const StoreRetryThread&) = delete;

  void stop();  // ends the thread after the retry under way; idempotent

 private:
  void loop();

  const std::vector<std::function<void()>> retries_;
  const std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // under mutex_
  std::thread thread_;
};

}  // namespace orbit::serve
