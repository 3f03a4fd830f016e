#include "serve/compute/idle_worker.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "orbit/common/error.h"
#include "orbit/interrupt.h"

namespace orbit::serve {

void IdleWorker::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void IdleWorker::notify() {
  mark_active();
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

int64_t IdleWorker::run_now() {
  std::lock_guard<std::mutex> lock(slice_mutex_);
  int64_t slices = 0;
  while (slice()) ++slices;
  return slices;
}

void IdleWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IdleWorker::loop() {
  while (!stopping_ && !context_.closing) {
    bool worked = false;
    try {
      std::lock_guard<std::mutex> lock(slice_mutex_);
      worked = slice();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "orbit serve: idle work failed: %s\n", e.what());
    }
    if (worked) mark_active();
    trim_heap();
    if (worked) continue;
    // The flags are set under wake_mutex_ and read here under it, so a notify() or stop() that comes after
    // the checks above still ends this wait at once (one between them and the wait is not lost).
    std::unique_lock<std::mutex> lock(wake_mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_ || woken_; });
    woken_ = false;
  }
}

void IdleWorker::mark_active() {
  last_active_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(HeapTrimSchedule::Clock::now().time_since_epoch()).count();
  used_ = true;
}

void IdleWorker::trim_heap() {
  // A request holding or awaiting the gate (a long prefill or decode) is activity as much as one that ended, and
  // so is one that took it since the last look (a completion, which releases no window).
  const int64_t others = context_.gate.grants() - own_grants_;
  if (others != others_seen_ || context_.gate.busy() || context_.gate.waiting() > 0) mark_active();
  others_seen_ = others;
  if (!used_) return;
  const HeapTrimSchedule::Clock::time_point last_active{std::chrono::nanoseconds(last_active_ns_.load())};
  if (!trim_schedule_.due(HeapTrimSchedule::Clock::now(), last_active)) return;
  used_ = false;
#if defined(__GLIBC__)
  malloc_trim(0);
  ++trims_;
#endif
}

std::string IdleWorker::render_metrics() const {
  return "# HELP orbit_heap_trims_total Heap trims (malloc_trim) done once the server was quiet or the longest "
         "interval passed.\n# TYPE orbit_heap_trims_total counter\norbit_heap_trims_total " +
         std::to_string(trims_.load()) +
         "\n# HELP orbit_idle_prefills_skipped_total Answers not prefilled in idle time because the KV pool (cause "
         "kv_pool) or the window's own bound (cause window_bytes) had no room for them, or a request came (cause "
         "request).\n# TYPE "
         "orbit_idle_prefills_skipped_total counter\norbit_idle_prefills_skipped_total{cause=\"kv_pool\"} " +
         std::to_string(skipped_pool_.load()) + "\norbit_idle_prefills_skipped_total{cause=\"window_bytes\"} " +
         std::to_string(skipped_window_.load()) + "\norbit_idle_prefills_skipped_total{cause=\"request\"} " +
         std::to_string(interrupted_.load()) + "\n";
}

bool IdleWorker::slice() {
  if (!context_.gate.try_enter_idle()) return false;
  ++own_grants_;
  GateHold hold(context_.gate);
  // Queued background work first (a check costs nothing when there is none, unlike the engine's stats, which
  // count every entry of the store).
  if (context_.engine->run_background(0.02) > 0) return true;
  const std::shared_ptr<Session> target = sessions_.take_idle_target();
  if (!target) {
    // A request that comes for the gate during the audit's reads stops them within a layer: the audit waits
    // again, and that request runs it after its answer if it is owed by then (audit.h), instead of waiting for
    // both reads before its own sync.
    return sessions_.audit_one(false, [this] { return context_.gate.waiting() > 0; });
  }
  {
    std::unique_lock<std::mutex> run(target->run, std::try_to_lock);
    if (!run.owns_lock() || !target->window) return false;
    prefill_anticipated(*target);
    // A request that queued meanwhile gets the model after the preparation under way, not after them all: one
    // waiting for the gate, or one of this session, which waits for `run` (held here) before it can queue there.
    target->window->idle([this, &target] { return context_.gate.waiting() > 0 || target->holders > 0; });
  }
  sessions_.enforce_budget(false);  // a release meanwhile may have skipped this session's window
  return true;
}

namespace {

// Whether Window::sync refused a list because its rendering is longer than the model's positions (the check in
// window_sync_render.cpp, or Engine::check_text_fits before tokenizing).
bool next_turn_cannot_fit(const Error& e) {
  const std::string_view what = e.what();
  return what.find("more than the model's") != std::string_view::npos ||
         what.find("positions can hold") != std::string_view::npos;
}

}  // namespace

void IdleWorker::prefill_anticipated(Session& s) {
  const auto next = sessions_.take_anticipated(s);
  if (!next) return;
  // The answer as the next request will render it: prefilled now, in idle time, so that request keeps it
  // (a radix cache keeps the KV its decode computed). A client that sends something else evicts it.
  Window& window = *s.window;
  // A request that comes meanwhile, for the model (it waits at the gate) or for this session (it waits for `run`,
  // held here, as the client that sends the list back at once does), stops the prefill at the sync's next
  // interruption point (orbit/interrupt.h: nothing of it committed) rather than waiting for the whole sync: that
  // request syncs the answer itself, on a window as the last answer left it. Not under --deterministic, whose idle
  // work runs whole before the answer ends.
  const auto wanted = [this, &s] { return context_.gate.waiting() > 0 || s.holders > 0; };
  if (!context_.options.deterministic && wanted()) {
    ++interrupted_;
    return;
  }
  const double before = window.stats().critical_forward_tokens;
  try {
    InterruptScope scope(context_.options.deterministic ? std::function<bool()>() : std::function<bool()>(wanted));
    const SyncPlan plan = window.plan_sync(next->first, next->second);  // rendering and planning: no points inside
    if (context_.options.test_fault == "idle_prefill_waits") wait_for_request(wanted);
    interruption_point("sync");
    window.sync(next->first, plan);
    window.flush();
  } catch (const Interrupted&) {
    ++interrupted_;
  } catch (const CapacityRefused& e) {
    skip_refused_prefill(e);
  } catch (const Error& e) {
    // A conversation whose answer filled the context has no next turn to prepare: its next request is refused
    // (context_length_exceeded) whatever is prefilled, so that is no failure to report.
    if (!next_turn_cannot_fit(e)) {
      const std::string who = s.id.empty() ? std::string("an anonymous window") : "session '" + s.id + "'";
      std::fprintf(stderr, "orbit serve: prefilling the answer of %s failed: %s\n", who.c_str(), e.what());
    }
  }
  const double spent = window.stats().critical_forward_tokens - before;
  context_.metrics.count_idle_forward(spent);
  sessions_.add_idle_forward(s, spent);
}

// ServeOptions::test_fault "idle_prefill_waits" (tests only): the prefill, planned, waits (a minute at most) for a
// request to come, so that the request meets it under way whatever the machine's speed.
void IdleWorker::wait_for_request(const std::function<bool()>& wanted) {
  std::fprintf(stderr, "orbit serve: test fault idle_prefill_waits: an anticipated prefill waits for a request\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!wanted() && !stopping_ && !context_.closing && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A prefill of an answer the KV pool (or the window's bound) had no room for: optional work, skipped, with nothing
// let go for it (a request makes room; idle work does not). The SDK's message advises its caller to evict, slide or
// close windows, which is the server's business and no failure: counted, and said once per cause, in the server's
// words.
void IdleWorker::skip_refused_prefill(const CapacityRefused& e) {
  const bool pool = e.bound() == CapacityRefused::Bound::kPool;
  if ((pool ? skipped_pool_ : skipped_window_)++ > 0) return;
  std::fprintf(stderr,
               "orbit serve: an answer was not prefilled in idle time: %s (skipped; its next request syncs it; "
               "counted in orbit_idle_prefills_skipped_total{cause=\"%s\"}, and said here only once)\n",
               pool ? "the KV pool had no room for it beside the other windows" : "its window is at its own bound",
               pool ? "kv_pool" : "window_bytes");
}

}  // namespace orbit::serve
