// The thread `orbit serve` runs requests' forwards on (their syncs; the decode scheduler and the idle worker
// run theirs on their own threads). libtorch's CPU kernels parallelise with OpenMP, whose runtime keeps a
// team of threads for every thread that enters a parallel region: forwards run on each HTTP worker that
// happened to take a request left a team per worker (64 workers x (cores - 1) threads, each with its stack
// and allocator arena), though the gate lets only one forward run at a time. Requests hand their forwards to
// this thread instead, and wait (a round trip costs ~50 us here: once per request, not per decode step).
//
// Thread-safety: run() may be called from any thread; on the compute thread itself it runs `fn` in place.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

namespace orbit::serve {

class ComputeThread {
 public:
  ComputeThread();
  ~ComputeThread();  // finishes the jobs queued, then joins
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;

  // Runs `fn` on the compute thread and returns what it returns; what it throws is rethrown here.
  template <class F>
  std::invoke_result_t<F&> run(F&& fn) {
    using Result = std::invoke_result_t<F&>;
    if (std::this_thread::get_id() == thread_.get_id()) return fn();
    std::packaged_task<Result()> task([&fn]() -> Result { return fn(); });
    std::future<Result> done = task.get_future();
    post([&task] { task(); });
    return done.get();
  }

 private:
  void post(std::function<void()> job);
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace orbit::serve
