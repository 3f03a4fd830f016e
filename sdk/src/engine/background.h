// Background work (docs/ARCHITECTURE.md §3): what a chunk's first sight leaves to do
// after its exact in-context prefill — encode its canonical (the chunk alone) if the store lacks it, form
// the patch (the SVD of the difference) and store it under the plan's keys. None of it is on the
// critical path: a window operation never waits for it, except to read a patch that is still queued or
// being formed (await), which then runs or finishes first.
//
// Modes (EngineOptions::background):
//   kThread    one worker thread runs jobs as they are queued (the default)
//   kDeferred  jobs wait for run(): idle time the caller chooses (e.g. while an agent waits on a tool);
//              replay uses this, so critical-path and background time are measured apart
//   kInline    jobs run at the end of the apply() that queued them (on its thread, after its timing)
//
// Thread-safety: every member may be called from any thread. stop() cancels queued jobs (nothing was
// committed for them: they are simply not formed), lets a running job finish, and joins the worker;
// later queue() calls run nothing. Jobs must not call back into this queue.
//
// Budget (max_bytes > 0): the bytes the queued jobs hold (Job::bytes: the KV a patch is formed from) stay within
// max_bytes. Queuing a job past it drops the oldest queued jobs until the rest fit (never the job just queued,
// never one running): a dropped job forms nothing, as one that failed, and its keys read as not pending, so a
// read finds its patch missing, as an evicted one. Without it, kDeferred work that never finds idle time (a
// server under sustained load) holds every first sight's KV until it does. dropped() counts them.
//
// Interruption (orbit/interrupt.h): run() has an interruption point before it takes each job, and a job's
// forwards have one before each layer (engine/interruptible.h) wherever it runs under an InterruptScope (run()
// and await() on the caller's thread; the worker thread has none). Nothing is lost when one throws: a job not
// taken stays queued, and a job stopped inside its forward is put back at the front of the queue, its keys
// queued again, to run whole later (what it stored before the point, a canonical, is keyed by content and
// found then). A job's own throw of Interrupted is therefore never counted as a failure.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "orbit/engine.h"

namespace orbit::detail {

class BackgroundQueue {
 public:
  struct Job {
    std::vector<std::string> keys;           // store keys it writes (await() looks them up)
    std::function<void(bool critical)> run;  // critical = run on the critical path by await()
    int64_t bytes = 0;                       // memory it holds while queued (the budget counts it)
  };

  // max_bytes: the queued jobs' bytes at most (0 = no bound; see Budget above).
  explicit BackgroundQueue(BackgroundMode mode, int64_t max_bytes = 0);
  ~BackgroundQueue();  // stop()

  BackgroundMode mode() const { return mode_; }
  void queue(Job job);
  bool pending(const std::string& key) const;  // queued or running
  // A job writing `key` is queued: run it here; running: wait for it. Returns at once otherwise. A job run
  // here and interrupted inside its forward is put back and the Interrupted passed on.
  void await(const std::string& key);
  // Runs queued jobs on this thread until none is left or `max_seconds` passed (the job in hand
  // finishes); then, in kThread mode, waits for the worker's job in flight. Returns the jobs run here.
  // At most `max_jobs` jobs are taken (close() drains only what was queued when it began, so operations
  // still queuing on other threads cannot keep it running). Throws Interrupted("run_background: interrupted")
  // at an interruption point (above): the jobs run before it stay done, the rest stay queued.
  int64_t run(double max_seconds, int64_t max_jobs = INT64_MAX);
  int64_t queued() const;
  int64_t queued_bytes() const;  // Σ Job::bytes of the queued jobs
  int64_t dropped() const;       // jobs dropped past max_bytes (Budget above), in all
  // Jobs that threw (their patch is simply not stored), and the last one's message.
  int64_t failed(std::string* last_error = nullptr) const;
  void stop();
  // From now on run() (on any thread) returns before taking another job, and the worker takes none: close(), once
  // it has finished what it would, so a run_background on another thread does not hold it up job after job. The
  // queued jobs stay queued for stop().
  void stop_taking();

 private:
  void worker();
  void run_one(Job& job, bool critical);
  // Pops the front job and marks its keys running. Call with mu_ held and jobs_ not empty.
  std::shared_ptr<Job> take_front_locked();
  // Runs a job taken by take_front_locked() off the critical path, then clears its keys and wakes waiters.
  // An Interrupted from the job passes through with its keys still running (the caller puts it back).
  void run_taken(Job& job);
  // A taken job that was interrupted: its keys leave the running set and, unless stop() began, it goes back
  // to the front of the queue, its keys queued again. Takes mu_.
  void put_back(const std::shared_ptr<Job>& job);
  // Under mu_: the oldest queued jobs but the newest, moved out until the queued bytes fit max_bytes_ (the
  // caller destroys them after the lock: they hold tensors).
  std::vector<std::shared_ptr<Job>> drop_over_budget_locked();

  const BackgroundMode mode_;
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // worker wake-up
  std::condition_variable done_cv_;  // a job finished
  std::deque<std::shared_ptr<Job>> jobs_;
  std::multiset<std::string> queued_keys_;  // the keys of jobs_, so pending() is a lookup, not a scan
  std::multiset<std::string> running_keys_;
  int64_t running_jobs_ = 0;  // taken and not finished (or put back), whatever their keys
  bool stopping_ = false;
  bool not_taking_ = false;  // stop_taking(): run() and the worker take no more jobs
  int64_t failed_ = 0;
  std::string last_error_;
  int64_t bytes_ = 0;  // Σ Job::bytes of jobs_
  int64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace orbit::detail
