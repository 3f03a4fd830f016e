#include "serve/compute/fair_gate.h"

#include <algorithm>
#include <chrono>

namespace orbit::serve {

void FairGate::grant_next() {
  if (held_) return;
  if (!resume_.empty()) {  // a holder that yielded takes it back first (the innermost)
    granted_ = resume_.back();
    resume_.pop_back();
    held_ = true;
    ++grants_;
    cv_.notify_all();
    return;
  }
  if (rotation_.empty()) return;
  const std::string lane = rotation_.front();
  rotation_.pop_front();
  std::deque<Waiter>& queue = lanes_[lane];
  granted_ = queue.front().ticket;
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

bool FairGate::enter(const std::string& lane, const std::function<bool()>& cancelled, int poll_ms,
                     int64_t guest_tokens) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) return false;
  const uint64_t ticket = next_ticket_++;
  std::deque<Waiter>& queue = lanes_[lane];
  if (queue.empty()) rotation_.push_back(lane);
  queue.push_back(Waiter{ticket, guest_tokens});
  grant_next();
  while (granted_ != ticket) {
    bool stop = closed_;
    if (!stop && cancelled) {
      // Asked outside the lock (it looks at the client's socket: every waiter asks at every wake, and the gate's
      // holders would wait on those calls); one that throws counts as cancelled, its ticket withdrawn below.
      lock.unlock();
      bool gone = true;
      try {
        gone = cancelled();
      } catch (...) {
      }
      lock.lock();
      if (granted_ == ticket) break;  // granted meanwhile: taken (the caller sees the cancel next)
      stop = gone || closed_;
    }
    if (stop) {
      auto it = lanes_.find(lane);
      if (it != lanes_.end()) {
        std::deque<Waiter>& q = it->second;
        q.erase(std::remove_if(q.begin(), q.end(), [&](const Waiter& w) { return w.ticket == ticket; }), q.end());
        if (q.empty()) {
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
  if (held_ || closed_ || !resume_.empty() || !rotation_.empty() || idle_holds_ > 0) return false;
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

// The gate stays held throughout (handed from the yielder to the waiter and back), so nobody else can take it
// but a waiter the one let in yields to in turn, whose ticket then goes above the yielder's on the stack.
void FairGate::hand_over(std::unique_lock<std::mutex>& lock, const std::string& lane) {
  auto it = lanes_.find(lane);
  granted_ = it->second.front().ticket;
  it->second.pop_front();
  if (it->second.empty()) {
    lanes_.erase(it);
    rotation_.erase(std::remove(rotation_.begin(), rotation_.end(), lane), rotation_.end());
  }
  ++grants_;
  const uint64_t ticket = next_ticket_++;
  resume_.push_back(ticket);
  cv_.notify_all();
  cv_.wait(lock, [&] { return granted_ == ticket; });  // closing too: the waiter's one quantum, then back here
  granted_ = 0;
}

bool FairGate::yield_to(const std::string& lane) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_ || lanes_.find(lane) == lanes_.end()) return false;
  ++yields_;
  hand_over(lock, lane);
  return true;
}

bool FairGate::yield_to_guest(const std::string& own, int64_t max_tokens) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_ || !resume_.empty()) return false;
  for (const std::string& lane : rotation_) {
    if (lane == own) continue;
    const Waiter& oldest = lanes_.at(lane).front();
    if (oldest.guest_tokens < 0 || oldest.guest_tokens > max_tokens) continue;
    const std::string chosen = lane;  // hand_over edits rotation_
    auto queued = lanes_.find(chosen);
    if (queued->second.size() > 1) {  // its next waiter: at the rotation's back, as after a turn of its own
      rotation_.erase(std::find(rotation_.begin(), rotation_.end(), chosen));
      rotation_.push_back(chosen);
    }
    ++guests_;
    hand_over(lock, chosen);
    return true;
  }
  return false;
}

bool FairGate::nested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !resume_.empty();
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

int64_t FairGate::guests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return guests_;
}

int64_t FairGate::grants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return grants_;
}

}  // namespace orbit::serve
