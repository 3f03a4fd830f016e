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
// Chunked prefill: a session's sync forwards its new tokens in pieces of at most --prefill-chunk tokens
// (ServeOptions::prefill_chunk, orbit/forward_pieces.h), and between two pieces hands a step waiting on
// kDecodeLane the gate (FairGate::yield_to), so a long prompt stalls the running answers for one piece at a time,
// not for its whole prefill. A step never yields in turn. What the sync holds across a yield is safe from the
// step: its window is its request's own (WindowSlot holds it; the batch steps only the windows of runs that are
// decoding, never one whose sync is under way), its plan and the apply's build (fresh pool pages, the chunks it
// references) are the compute thread's; only the decode step runs meanwhile, and then at most one short sync
// of another session (FairGate::yield_to_guest: its plan's new tokens, and in exact mode its heal's, at most one
// piece, no evictions or reorder), which edits only its own session's window, on the guest compute thread
// (ServeContext::guest_compute), yielding to steps alone between its own pieces; the gate comes back to the sync before
// any other lane's waiter, and idle work cannot take it, so no heal or audit edits a window or asks the compute thread
// (blocked in the yield) for a forward. The step and the guest do touch the shared pool (the step's sequences' next
// rows, the guest's new KV, in their own windows' pages) and store (KV kept for exact reuse): a store value the
// sync planned on and finds gone falls back to a prefill, and a pool they filled refuses the sync for capacity
// with its window untouched, both as when the step or the guest ran just before the sync
// (orbit/forward_pieces.h).
//
// Fairness: within the batch every sequence gets one token per step; between the batch and the sessions'
// syncs (their own lanes) the gate rotates, so a sync waits at most one batch step. Idle work waits while
// sequences run (FairGate::hold_idle), between steps too, but not while every running sequence is held for
// its client and none waits to join: such a batch forwards nothing until a client reads. Cancellation: a job's
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

// The gate lane every batch step queues in (a sync between two pieces of its prefill yields to it).
inline constexpr const char* kDecodeLane = "~decode";

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
  int64_t bytes = 0;  // what it holds in memory (event_bytes), counted in its request's OutputBacklog
};

// The memory an event holds: its text, its log probabilities' entries and their tokens' bytes.
int64_t event_bytes(const DecodeEvent& event);

// One request's output that its client has not taken yet: the bytes of events its sequences posted that the
// request's thread has not handed on to the connection (or dropped). A request thread blocked in a write to a
// client that stopped reading hands nothing on, so the backlog grows; while it is over `bound` the scheduler
// holds the request's sequences (DecodeBatch::hold: no forward for them, the others decode on) until the
// request's thread hands enough on, except while another request waits for room in the batch (--max-batch):
// then it decodes on to its end, its output kept past the bound, so that it frees its slot. A client that takes nothing
// for the server's stall timeout is dropped by the write that waits for it (http_front.h), which cancels the run.
// Thread-safety: any thread (an atomic count).
class OutputBacklog {
 public:
  explicit OutputBacklog(int64_t bound) : bound_(bound) {}
  void add(int64_t bytes) { bytes_ += bytes; }  // the scheduler's thread: an event posted
  // The request's thread: an event handed on. True when that brought the backlog back within its bound (the
  // caller wakes the scheduler: DecodeScheduler::wake).
  bool sent(int64_t bytes) {
    const int64_t before = bytes_.fetch_sub(bytes);
    return before > bound_ && before - bytes <= bound_;
  }
  bool over() const { return bytes_.load() > bound_; }
  int64_t bytes() const { return bytes_.load(); }
  int64_t bound() const { return bound_; }

 private:
  const int64_t bound_;
  std::atomic<int64_t> bytes_{0};
};

// One sequence to decode and what comes back from it.
class DecodeJob {
 public:
  // `request.options`' callbacks run on the scheduler's thread. `signal`: the scheduler's
  // (DecodeScheduler::signal()), which must outlive the job.
  // `backlog`: the request's, shared by its choices' jobs; null: the job is never held.
  DecodeJob(GenerateRequest request, StepSignal& signal, std::shared_ptr<OutputBacklog> backlog = nullptr)
      : request_(std::move(request)), signal_(signal), backlog_(std::move(backlog)) {}

  const GenerateRequest& request() const { return request_; }
  OutputBacklog* backlog() const { return backlog_.get(); }
  // Whether the scheduler holds the sequence: its request's backlog is over its bound and it was not
  // cancelled (a cancelled one is released, so that its next step ends it).
  bool wants_hold() const { return backlog_ && !cancel_ && backlog_->over(); }
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
  // take_result() and error() hold). May return with no event before `wait_ms` (another job's step): the caller
  // asks again.
  bool take(std::vector<DecodeEvent>& out, int wait_ms);
  // Read under the job's lock: whichever thread drops the job last (often the scheduler's) destroys what is
  // left after that lock, so the request thread's reads and the destruction are ordered. take_result() moves the
  // generation out (a later call: nullopt), so an answer's log probabilities are not copied (n 64 x 480 tokens x
  // 21 entries are tens of MB); ended() says whether the sequence ended with one, taken or not.
  std::optional<Generation> take_result();
  bool ended() const;
  std::string error() const;
  ~DecodeJob();

 private:
  bool drain(std::vector<DecodeEvent>& out);  // under mutex_: moves events_ out; whether done or any moved
  GenerateRequest request_;
  StepSignal& signal_;
  std::shared_ptr<OutputBacklog> backlog_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mutex_;
  std::vector<DecodeEvent> events_;
  bool done_ = false;
  std::optional<Generation> result_;
  bool ended_ = false;  // finish() was given a generation
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
  // Has the thread look at its held sequences again: a request's thread calls it when its backlog came back
  // within its bound (OutputBacklog::sent) or it cancelled its jobs.
  void wake();
  // What the jobs' request threads wait on (DecodeJob's constructor); raised after every step.
  StepSignal& signal() { return signal_; }

  // orbit_decode_steps_total, orbit_decode_tokens_total, orbit_decode_prefill_yields_total (steps run between
  // two pieces of a sync's prefill: FairGate::yields), orbit_prefill_guests_total (other sessions' short syncs
  // run there: FairGate::guests), orbit_decode_batch_sequences (histogram of the
  // sequences per step's forward), orbit_decode_running, orbit_decode_held (sequences held for their
  // clients) and orbit_decode_waiting (gauges), orbit_decode_holds_total (times a sequence was held):
  // Prometheus lines.
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
  void end_cancelled(std::vector<std::shared_ptr<DecodeJob>>& joining);  // finishes and takes out the cancelled
  std::vector<Outcome> run_step(std::vector<std::shared_ptr<DecodeJob>>& joining);  // holding the gate
  void count_step(const DecodeStep& step);
  bool has_pending() const;  // a queued group could join at the next step
  // Under mutex_: whether the first queued group fits beside the running sequences (--max-batch), or some
  // queued group's runs were all cancelled (they end without joining).
  bool joinable() const;
  // Under mutex_: moves into `joining` the queued groups that end or join at the next step.
  void take_joinable(std::vector<std::shared_ptr<DecodeJob>>& joining);
  bool room_wanted() const;          // under mutex_: a queued group waits for room (no sequence is then held)
  bool steppable() const;            // under mutex_: a running sequence not to be held
  bool steppable_now() const;        // steppable(), taking mutex_
  void apply_holds();                // holds and releases the running sequences as their jobs want
  void release_idle_if_held_only();  // lets idle work go while every running sequence is held, none joining

  ServeContext& context_;
  StepSignal signal_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // The jobs submitted and not yet joined, a group per submit() (a window and its forks join together), in
  // order: the first group joins once it fits under --max-batch (ServeOptions::max_batch) beside the running
  // sequences; the later ones wait behind it.
  std::deque<std::vector<std::shared_ptr<DecodeJob>>> pending_;
  int64_t pending_jobs_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // The scheduler thread's own.
  DecodeBatch batch_;
  struct Running {
    uint64_t id = 0;  // in batch_
    std::shared_ptr<DecodeJob> job;
    bool held = false;  // held in batch_ (DecodeBatch::hold)
  };
  std::vector<Running> running_;
  // The gate's idle work held off while sequences run, not all held, or wait to join (FairGate::hold_idle).
  bool holding_idle_ = false;
  // Metrics, under mutex_.
  int64_t steps_ = 0;
  int64_t tokens_ = 0;
  int64_t running_now_ = 0;
  int64_t held_now_ = 0;
  int64_t holds_ = 0;
  std::vector<int64_t> batch_sizes_;  // counts per histogram bucket (kBatchBounds), not cumulative
  double batch_size_sum_ = 0;
};

}  // namespace orbit::serve
