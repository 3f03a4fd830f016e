// DecodeScheduler: continuous batching for `orbit serve`. Every run's decode (decode.h) is one sequence of
// one orbit::DecodeBatch (orbit/decode_batch.h), stepped by a thread of its own: each step holds the fair
// gate once, on its own lane ("~decode"), and runs one model forward over every sequence with a pending token
// (runtime::Model::forward_batch). Sequences join between steps as runs arrive and leave as they end.
//
//   request threads           scheduler thread (one)                   the gate (FairGate)
//   decode(): submit(jobs) ─► joining ─► batch.add ─┐                  ~decode: one step = one quantum
//   wait: events, done   ◄─── on_token posts ◄── batch.step() ◄────────┘ sessions' syncs take turns with it
//         ▲                                         │
//         └──── StepSignal::raise, once per step ◄──┘ (after the gate is released)
//
// Hand-off: a token's event is posted into its job without a wake; the request threads sleep on the
// scheduler's one StepSignal, which the thread raises once after each step: one futex wake for every
// request thread waiting, instead of one wake (and often one preemption of the scheduler's thread) per token.
// A request thread still busy with earlier tokens when the step ends is not woken; it finds the new events
// in its next take().
//
// Fairness: within the batch every sequence gets one token per step; between the batch and the sessions'
// syncs (their own lanes) the gate rotates, so a sync waits at most one batch step. Idle work waits while
// sequences run (FairGate::hold_idle), between steps too. Cancellation: a job's
// `cancel` ends its sequence at its next token (its GenerateOptions::on_token returns false), or before it
// joins. Close: once the gate is closed the scheduler cannot enter it again; every sequence and every job
// still queued ends as "cancelled" without touching its window again (the windows stay their owners').
//
// Thread-safety: every member may be called from any thread. A job's window must stay alive and untouched by
// others until the job is done (the request thread that submitted it waits for that).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "orbit/decode_batch.h"

namespace orbit::serve {

struct ServeContext;

// A generation counter request threads sleep on until the scheduler's next step (or a job's end) raises it.
// Thread-safety: any thread; raise() costs no system call while no thread waits.
class StepSignal {
 public:
  StepSignal() = default;
  StepSignal(const StepSignal&) = delete;
  StepSignal& operator=(const StepSignal&) = delete;

  // The generation now: read it before checking what the wait is for, then wait(seen, ...).
  uint32_t seen() const { return generation_.load(); }
  // Returns once the generation is no longer `seen` (at once if it already moved), after `wait_ms`
  // milliseconds, or spuriously: the caller checks again.
  void wait(uint32_t seen, int wait_ms);
  // Moves the generation on and wakes every thread waiting (on Linux the raising thread wakes one, which wakes
  // the others as it returns from wait()).
  void raise();
  // Threads in wait() now (a test's way to know a thread waits).
  int waiting() const { return waiters_.load(); }

 private:
  std::atomic<uint32_t> generation_{0};  // a futex word on Linux
  std::atomic<int> waiters_{0};          // threads in wait(): raise() makes no system call while there are none
#ifdef __linux__
  // A raise with several waiters wakes one and requeues the rest onto relay_ (a futex word never changed),
  // which every woken waiter wakes as it returns.
  std::atomic<uint32_t> relay_{0};
#endif
#ifndef __linux__
  std::mutex mutex_;
  std::condition_variable changed_;
#endif
};

// What a running sequence hands its request's thread after a token: the text it released (possibly "") and,
// when asked for, the token's log probabilities.
struct DecodeEvent {
  std::string delta;
  std::optional<StepLogprobs> logprobs;
};

// One sequence to decode and what comes back from it.
class DecodeJob {
 public:
  // `request.options`' callbacks run on the scheduler's thread. `signal`: the scheduler's
  // (DecodeScheduler::signal()), which must outlive the job.
  DecodeJob(GenerateRequest request, StepSignal& signal) : request_(std::move(request)), signal_(signal) {}

  const GenerateRequest& request() const { return request_; }
  // The request's thread: end the sequence at its next token (or before it joins).
  void cancel() { cancel_ = true; }
  bool cancelled() const { return cancel_; }

  // The scheduler's thread (from the options' callbacks): an event for the request's thread, which a take()
  // finds at once; one that waits wakes at the signal's next raise (the scheduler's, after the step).
  void post(DecodeEvent event);
  // The scheduler's thread: the sequence ended with `g`; or the engine failed (`error`); or it was dropped
  // before it could end (the server closing): neither. Raises the signal.
  void finish(std::optional<Generation> g, std::string error = "");

  // The request's thread: moves the events posted so far into `out`, in order; with none and the job not
  // done, first waits up to `wait_ms` for the signal's next raise. Returns whether the job is done (then
  // result() and error() hold). May return with no event before `wait_ms` (another job's step): the caller
  // asks again.
  bool take(std::vector<DecodeEvent>& out, int wait_ms);
  // Copies, read under the job's lock: whichever thread drops the job last (often the scheduler's) destroys
  // them after that lock, so the request thread's reads and the destruction are ordered.
  std::optional<Generation> result() const;
  std::string error() const;
  ~DecodeJob();

 private:
  bool drain(std::vector<DecodeEvent>& out);  // under mutex_: moves events_ out; whether done or any moved
  GenerateRequest request_;
  StepSignal& signal_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mutex_;
  std::vector<DecodeEvent> events_;
  bool done_ = false;
  std::optional<Generation> result_;
  std::string error_;
};

class DecodeScheduler {
 public:
  explicit DecodeScheduler(ServeContext& context) : context_(context) {}
  ~DecodeScheduler() { stop(); }
  DecodeScheduler(const DecodeScheduler&) = delete;
  DecodeScheduler& operator=(const DecodeScheduler&) = delete;

  // Queues jobs; they join the batch together at its next step (a window and its forks submitted together
  // share one read of the window and one forward of the query). Starts the thread on first use.
  void submit(const std::vector<std::shared_ptr<DecodeJob>>& jobs);
  // Ends the thread: what runs or waits ends as dropped (DecodeJob::finish with neither). Idempotent.
  void stop();
  // What the jobs' request threads wait on (DecodeJob's constructor); raised after every step.
  StepSignal& signal() { return signal_; }

  // orbit_decode_steps_total, orbit_decode_tokens_total, orbit_decode_batch_sequences (histogram of the
  // sequences per step's forward), orbit_decode_running and orbit_decode_waiting (gauges): Prometheus lines.
  std::string render_metrics() const;

 private:
  void loop();
  bool wait_for_work(std::vector<std::shared_ptr<DecodeJob>>& joining);  // false: stop
  // How a job ended, delivered once the gate is released (so a request that returns finds it free).
  struct Outcome {
    std::shared_ptr<DecodeJob> job;
    std::optional<Generation> generation;
    std::string error;
  };
  void drop_all(std::vector<std::shared_ptr<DecodeJob>>& joining);
  std::vector<Outcome> run_step(std::vector<std::shared_ptr<DecodeJob>>& joining);  // holding the gate
  void count_step(const DecodeStep& step);
  bool has_pending() const;

  ServeContext& context_;
  StepSignal signal_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<DecodeJob>> pending_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // The scheduler thread's own.
  DecodeBatch batch_;
  std::vector<std::pair<uint64_t, std::shared_ptr<DecodeJob>>> running_;
  bool holding_idle_ = false;  // the gate's idle work held off while sequences run (FairGate::hold_idle)
  // Metrics, under mutex_.
  int64_t steps_ = 0;
  int64_t tokens_ = 0;
  int64_t running_now_ = 0;
  std::vector<int64_t> batch_sizes_;  // counts per histogram bucket (kBatchBounds), not cumulative
  double batch_size_sum_ = 0;
};

}  // namespace orbit::serve
