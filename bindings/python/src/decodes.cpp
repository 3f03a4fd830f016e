// EngineDecodes (decodes.h): the decodes Engine.close() stops and waits for before the engine closes.
#include "decodes.h"

#include "orbit/common/error.h"

namespace orbit_py {

void EngineDecodes::enter(const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  ORBIT_CHECK(!closing_.is_set(), what << ": engine is closed");
  ++running_;
}

void EngineDecodes::leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  cv_.notify_all();
}

void EngineDecodes::stop_all() {
  std::unique_lock<std::mutex> lock(mu_);
  closing_.set();  // under the lock: a decode enters before it (and is waited for) or is refused after it
  cv_.wait(lock, [this] { return running_ == 0; });
}

}  // namespace orbit_py
