#include "serve/compute/fair_gate.h"

#include <algorithm>
#include <chrono>

namespace orbit::serve {

void FairGate::grant_next() {
  if (held_) return;
  if (resume_ != 0) {  // a holder that yielded takes it back first
    granted_ = resume_;
    resume_ = 0;
    held_ = true;
    ++grants_;
    cv_.notify_all();
    return;
  }
  if (rotation_.empty()) return;
  const std::string lane = rotation_.front();
  rotation_.pop_front();
  std::deque<uint64_t>& queue = lanes_[lane];
  granted_ = queue.front();
  queue.pop_front();
  if (queue.empty()) {
    lanes_.erase(lane);
  } else {
    rotation_.push_back(lane);
  }
  held_ = true;
  ++grants_;
  cv_.notify_all();
}

bool FairGate::enter(const std::string& lane, const std::function<bool()>& cancelled, int poll_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) return false;
  const uint64_t ticket = next_ticket_++;
  std::deque<uint64_t>& queue = lanes_[lane];
  if (queue.empty()) rotation_.push_back(lane);
  queue.push_back(ticket);
  grant_next();
  while (granted_ != ticket) {
    const bool stop = closed_ || (cancelled && cancelled());
    if (stop) {
      auto it = lanes_.find(lane);
      if (it != lanes_.end()) {
        it->second.erase(std::remove(it->second.begin(), it->second.end(), ticket), it->second.end());
        if (it->second.empty()) {
          lanes_.erase(it);
          rotation_.erase(std::remove(rotation_.begin(), rotation_.end(), lane), rotation_.end());
        }
      }
      return false;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(poll_ms));
  }
  granted_ = 0;
  return true;
}

bool FairGate::try_enter_idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (held_ || closed_ || resume_ != 0 || !rotation_.empty() || idle_holds_ > 0) return false;
  held_ = true;
  ++grants_;
  return true;
}

void FairGate::hold_idle(bool hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_holds_ += hold ? 1 : -1;
}

void FairGate::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ = false;
  grant_next();
}

// The gate stays held throughout (handed from the yielder to the waiter and back), so nobody else can take it.
bool FairGate::yield_to(const std::string& lane) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = lanes_.find(lane);
  if (it == lanes_.end() || closed_) return false;
  granted_ = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) {
    lanes_.erase(it);
    rotation_.erase(std::remove(rotation_.begin(), rotation_.end(), lane), rotation_.end());
  }
  ++grants_;
  ++yields_;
  const uint64_t ticket = next_ticket_++;
  resume_ = ticket;
  cv_.notify_all();
  cv_.wait(lock, [&] { return granted_ == ticket; });  // closing too: the waiter's one quantum, then back here
  granted_ = 0;
  return true;
}

void FairGate::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  cv_.notify_all();
}

int64_t FairGate::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& [lane, queue] : lanes_) n += static_cast<int64_t>(queue.size());
  return n;
}

bool FairGate::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

int64_t FairGate::yields() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return yields_;
}

int64_t FairGate::grants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return grants_;
}

}  // namespace orbit::serve
