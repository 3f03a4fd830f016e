// Helpers the remote-tier tests share (test_store_remote*.cpp, one executable).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "test_store_values.h"

namespace orbit::test {

// The store key of test entry i.
inline std::string remote_key(int64_t i) { return store_test_key(i); }

// Polls `done` every 20 ms until it holds or max_ms pass (whichever first); the caller checks what it needs.
inline void wait_until(const std::function<bool()>& done, int max_ms = 10000) {
  for (int waited = 0; waited < max_ms && !done(); waited += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace orbit::test
