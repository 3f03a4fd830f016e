// The idle work of `orbit serve`, on a thread of its own, only while no request waits for the gate
// (FairGate::try_enter_idle). One slice at a time, each one of:
//   - a slice of the engine's deferred background jobs (canonicals and patches of first sights; about 20 ms);
//   - one session's window: its answer prefilled as its next request will send it back
//     (ServeOptions::anticipate: the messages and answer SessionTable::record kept, synced now and its
//     deferred repairs run, counted as idle forwards, not critical ones; a sync refused for capacity, the KV
//     pool or the window's own bound, is skipped: optional work, which makes no room. Counted in /metrics and
//     said once per cause on stderr, in the server's words), then Window::idle() (heals,
//     prepared recalls and moves; stopped when a request waits for the gate or for this session's window: a heal
//     within a layer, leaving the window as it was; a preparation after the one under way); then the session
//     budget again, since a release meanwhile may have skipped this window;
//   - when no session waits for idle work, one fidelity audit (audit.h): two reads of a sampled request's
//     forked window, as served and re-prefilled, stopped (the audit waits again) when a request comes for the
//     gate meanwhile. One that idle time does not reach in time is owed and run by a later request instead
//     (AuditOptions::owed_after).
// A release wakes the worker (notify), also one that comes while a slice runs (the next wait ends at once);
// otherwise it looks again every 50 ms. stop() ends the wait at once.
// Between slices, after requests or idle work, it hands the heap's free pages back to the system
// (malloc_trim, glibc only; it holds no gate, and takes about 3 ms over a full 1 GiB host tier) once the server
// has been quiet for 5 s, or 30 s after the last trim on a server never quiet that long (heap_trim.h: a
// trim a second made every burst of requests fault its working memory back in). glibc keeps the pages of
// freed blocks inside its heaps, and the holes that the store's evicted tensors leave among longer-lived
// blocks are not all reused: without it a server's resident memory kept growing, by tens of MiB per thousand
// requests, after its host tier was full.
//
// Thread-safety: every member may be called from any thread; slices never overlap (the worker's and
// run_now's take turns).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "orbit/capacity.h"
#include "serve/compute/heap_trim.h"
#include "serve/serve_context.h"
#include "serve/sessions/session_table.h"

namespace orbit::serve {

class IdleWorker {
 public:
  IdleWorker(ServeContext& context, SessionTable& sessions) : context_(context), sessions_(sessions) {}
  ~IdleWorker() { stop(); }
  IdleWorker(const IdleWorker&) = delete;
  IdleWorker& operator=(const IdleWorker&) = delete;

  void start();   // the thread; once
  void notify();  // work may be there (a request let its window go)
  // Runs the idle work there is now on this thread, until none is left or a request waits; returns the
  // slices run. The deterministic flush for tests and benchmarks.
  int64_t run_now();
  void stop();  // ends the thread after its slice; idempotent
  // orbit_heap_trims_total: the heap trims done (malloc_trim, when heap_trim.h's schedule says), a Prometheus
  // counter; the schedule's trace, which tests read. orbit_idle_prefills_skipped_total{cause}: anticipated
  // answers not prefilled because the sync was refused for capacity (cause "kv_pool": the pool had no room beside
  // the other windows; "window_bytes": the window's own bound), or stopped, or not begun, because a request came for
  // the model or the session (cause "request").
  std::string render_metrics() const;

 private:
  void loop();
  bool slice();                          // one slice; false when there was nothing to do or a request waits
  void prefill_anticipated(Session& s);  // holding the gate and s.run
  void mark_active();                    // requests or idle work now
  void trim_heap();                      // malloc_trim when due (above)
  // A prefill_anticipated the pool or the window's bound refused: counted, said once per cause.
  void skip_refused_prefill(const CapacityRefused& e);
  void wait_for_request(const std::function<bool()>& wanted);  // test_fault "idle_prefill_waits"

  ServeContext& context_;
  SessionTable& sessions_;
  std::mutex slice_mutex_;  // one slice at a time (the worker's or run_now's)
  std::mutex wake_mutex_;   // held to set stopping_ and woken_ and across the worker's wait for them
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  bool woken_ = false;                      // notify() since the worker last waited (under wake_mutex_)
  std::atomic<bool> used_{false};           // requests or idle work since the last trim
  std::atomic<int64_t> last_active_ns_{0};  // the last request or idle work (steady_clock, since its epoch)
  std::atomic<int64_t> trims_{0};           // heap trims done
  // The gate's grants that were this worker's own slices, and the others' count when trim_heap last looked: a
  // request that took the gate since (one that uses no window, as /v1/completions, notifies nobody) is activity.
  std::atomic<int64_t> own_grants_{0};  // slice() runs on the worker and, deterministic, request threads
  int64_t others_seen_ = 0;             // the worker thread's
  // Anticipated answers skipped for capacity, by CapacityRefused::Bound (kPool, kWindowBytes).
  std::atomic<int64_t> skipped_pool_{0}, skipped_window_{0};
  // Anticipated answers a request stopped (or came before): cause "request".
  std::atomic<int64_t> interrupted_{0};
  HeapTrimSchedule trim_schedule_{HeapTrimSchedule::Clock::now()};  // the worker's thread only
  std::thread thread_;
};

}  // namespace orbit::serve
