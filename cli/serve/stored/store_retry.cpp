#include "serve/stored/store_retry.h"

#include <cstdio>
#include <exception>

namespace orbit::serve {

StoreRetryThread::StoreRetryThread(std::vector<std::function<void()>> retries, std::chrono::milliseconds period)
    : retries_(std::move(retries)), period_(period) {
  thread_ = std::thread([this] { loop(); });
}

void StoreRetryThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StoreRetryThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    for (const std::function<void()>& retry : retries_) {
      try {
        retry();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "orbit serve: retrying a store's held writes failed: %s\n", e.what());
      }
    }
    lock.lock();
  }
}

}  // namespace orbit::serve
