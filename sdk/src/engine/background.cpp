#include "engine/background.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "orbit/interrupt.h"

namespace orbit::detail {

BackgroundQueue::BackgroundQueue(BackgroundMode mode, int64_t max_bytes) : mode_(mode), max_bytes_(max_bytes) {}

BackgroundQueue::~BackgroundQueue() { stop(); }

void BackgroundQueue::run_one(Job& job, bool critical) {
  // A job that cannot complete (a store refusal, the engine closing) forms nothing; nothing committed
  // depends on it. It is counted, and the last reason kept, for stats(). An interrupted one is no failure:
  // its caller puts it back (put_back) and passes the Interrupted on.
  try {
    job.run(critical);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++failed_;
    last_error_ = e.what();
  }
}

int64_t BackgroundQueue::failed(std::string* last_error) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_error != nullptr) *last_error = last_error_;
  return failed_;
}

void BackgroundQueue::queue(Job job) {
  std::vector<std::shared_ptr<Job>> dropped;  // destroyed after the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    for (const auto& k : job.keys) queued_keys_.insert(k);
    bytes_ += job.bytes;
    jobs_.push_back(std::make_shared<Job>(std::move(job)));
    dropped = drop_over_budget_locked();
    if (mode_ == BackgroundMode::kThread && !thread_.joinable()) thread_ = std::thread([this] { worker(); });
  }
  cv_.notify_one();
}

std::vector<std::shared_ptr<BackgroundQueue::Job>> BackgroundQueue::drop_over_budget_locked() {
  std::vector<std::shared_ptr<Job>> dropped;
  while (max_bytes_ > 0 && bytes_ > max_bytes_ && jobs_.size() > 1) {
    std::shared_ptr<Job> oldest = jobs_.front();
    jobs_.pop_front();
    for (const auto& k : oldest->keys) queued_keys_.erase(queued_keys_.find(k));
    bytes_ -= oldest->bytes;
    ++dropped_;
    dropped.push_back(std::move(oldest));
  }
  return dropped;
}

bool BackgroundQueue::pending(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_keys_.count(key) > 0 || queued_keys_.count(key) > 0;
}

int64_t BackgroundQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(jobs_.size());
}

int64_t BackgroundQueue::queued_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t BackgroundQueue::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void BackgroundQueue::await(const std::string& key) {
  std::shared_ptr<Job> mine;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (queued_keys_.count(key) > 0) {
      const auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const std::shared_ptr<Job>& job) {
        return std::find(job->keys.begin(), job->keys.end(), key) != job->keys.end();
      });
      if (it != jobs_.end()) {
        mine = *it;
        jobs_.erase(it);  // the iterator is not used after this
        bytes_ -= mine->bytes;
      }
    }
    if (!mine) {
      done_cv_.wait(lock, [&] { return running_keys_.count(key) == 0; });
      return;
    }
    for (const auto& k : mine->keys) {
      queued_keys_.erase(queued_keys_.find(k));
      running_keys_.insert(k);
    }
    ++running_jobs_;
  }
  try {
    run_one(*mine, true);
  } catch (const Interrupted&) {
    put_back(mine);  // the read that awaited it stops; the job stays queued, as before
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : mine->keys) running_keys_.erase(running_keys_.find(k));
    --running_jobs_;
  }
  done_cv_.notify_all();
}

void BackgroundQueue::put_back(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : job->keys) running_keys_.erase(running_keys_.find(k));
    --running_jobs_;
    if (!stopping_) {
      for (const auto& k : job->keys) queued_keys_.insert(k);
      bytes_ += job->bytes;
      jobs_.push_front(job);  // back within the budget it left: nothing is dropped for it
    }
  }
  cv_.notify_one();
  done_cv_.notify_all();
}

int64_t BackgroundQueue::run(double max_seconds, int64_t max_jobs) {
  const auto start = std::chrono::steady_clock::now();
  int64_t ran = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.empty() || stopping_ || not_taking_ || ran >= max_jobs) break;
    }
    interruption_point("run_background");  // before a job is taken: it stays queued
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.empty() || stopping_ || not_taking_) break;
      job = take_front_locked();
    }
    try {
      run_taken(*job);
    } catch (const Interrupted&) {
      put_back(job);  // stopped inside its forward: queued again, at the front, to run whole later
      throw Interrupted("run_background");
    }
    ++ran;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= max_seconds) break;
  }
  // Jobs other threads took run to their end too (a turn's sensitivity measurement writes no key: the keys alone
  // would let this return while it runs, and the stats read after it change).
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return running_jobs_ == 0 || stopping_; });
  return ran;
}

void BackgroundQueue::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (!jobs_.empty() && !not_taking_); });
      if (stopping_) return;
      job = take_front_locked();
    }
    run_taken(*job);
  }
}

std::shared_ptr<BackgroundQueue::Job> BackgroundQueue::take_front_locked() {
  std::shared_ptr<Job> job = jobs_.front();
  jobs_.pop_front();
  bytes_ -= job->bytes;
  for (const auto& k : job->keys) {
    queued_keys_.erase(queued_keys_.find(k));
    running_keys_.insert(k);
  }
  ++running_jobs_;
  return job;
}

void BackgroundQueue::run_taken(Job& job) {
  run_one(job, false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : job.keys) running_keys_.erase(running_keys_.find(k));
    --running_jobs_;
  }
  done_cv_.notify_all();
}

void BackgroundQueue::stop_taking() {
  std::lock_guard<std::mutex> lock(mu_);
  not_taking_ = true;
}

void BackgroundQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    jobs_.clear();
    queued_keys_.clear();
    bytes_ = 0;
  }
  cv_.notify_all();
  done_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace orbit::detail
