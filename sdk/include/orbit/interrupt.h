// Stopping a long SDK call from the thread that runs it: an InterruptScope installs a check that the window's
// operations call between units of work, and a check that answers true ends the call by throwing Interrupted.
//
// Where the checks are (interruption points):
//   - before each instance a plan serves: Window::apply and every call built on it (add_turn, admit, sync,
//     flush, heal, idle's heals and preparations, and the repairs earlier edits deferred that a read runs
//     first: logits, generate, generate_n, generate_many);
//   - before each layer of the forwards that serve an instance (its prefill in context, the rest after a
//     reused head, a token-selective recompute and CacheBlend's probe, a chunk's canonical encode, Engine::
//     precompute's too), so one long instance (a document of thousands of tokens) stops within one layer;
//   - in Engine::run_background: before each job it takes, and before each layer of a job's forward (the
//     canonical encode, a live turn's sensitivity) and of its patch's SVD (one factorization per layer); a
//     plan that reads a patch still queued runs that job on the spot, with the same points;
//   - before each layer of a read's query forward (the query's tokens after the window: Window::logits, and
//     the first forward of generate, generate_n, generate_many and a DecodeBatch's sequence), so a query of
//     thousands of tokens stops within one layer;
//   - before each layer of the measuring reads' forwards: disposable's two greedy decodes (each step's),
//     reference_logits' and loss_by_instance's re-prefill of the whole window, and loss_by_instance's read of
//     each instance; one stopped returns nothing (the window as it was, nothing counted).
//   - in Engine::calibrate_fidelity, before each arm of each seed's measurement (a handful of small forwards), and in
//     Engine::calibrate between its timings too; one stopped fits and stores nothing ("calibrate_fidelity:
//     interrupted", "calibrate: interrupted").
// Not points: a decode's token steps (GenerateOptions::on_token stops those); a store write
// (one value is written whole: stopping inside it could only drop the value, and the points before and after
// it bound it); the jobs BackgroundMode::kInline runs after apply has committed (run with the scope hidden) and those
// Engine::close drains (run under CloseOptions' own check, not the caller's scope); idle's carry of the tentative tail
// (its forward runs after the heal that moved the window's KV has committed: a throw there would leave the heal done
// and its report lost); the background worker thread (no scope).
//
// Nothing is committed when one throws: the window is unchanged (apply builds in fresh pages and writes the
// window only after the last step; a forward stopped between layers returns nothing), as for a plan refused
// for capacity. A read's query forward stopped between layers keeps nothing of the read (no attention
// recorded, no tentative tail, no KV stored for exact reuse); a DecodeBatch step that throws drops the
// batch's sequences, as on any error; generate's prefix-cache yardstick charge for the window
// (WindowStats::prefix_cache_tokens), made before the forward, stays. What the steps before the point stored
// (KV kept for exact reuse, queued background forms, a canonical encoded whole) stays stored and is keyed by
// content, so a later call reuses it. An operation that applies several plans (a sync that evicts then
// reorders) keeps the plans applied before the point, as it does when a later plan is refused. run_background
// loses no job: one not taken stays queued, and one stopped inside its forward goes back to the front of the
// queue to run whole later. The Interrupted names the operation ("sync: interrupted", "run_background:
// interrupted"; a read's query forward: "forward: interrupted").
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace orbit {

// Thrown at an interruption point when the calling thread's InterruptScope check answered true. Not an
// orbit::Error (no bad input, no broken contract): code that catches orbit::Error lets it through.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& where) : std::runtime_error(where + ": interrupted") {}
};

// While alive, the interruption points on the thread that made it call `stop` (on that thread, with whatever
// locks the operation holds: `stop` must not call into the SDK) and throw Interrupted when it returns true.
// Scopes nest: the innermost one is checked. A null `stop` installs no check (an inner scope then hides an
// outer one's). Not copyable or movable; destroyed on the thread that made it.
class InterruptScope {
 public:
  explicit InterruptScope(std::function<bool()> stop);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  std::function<bool()> stop_;
  InterruptScope* outer_;
  friend void interruption_point(const char* where);
  friend std::function<bool()> current_interrupt_check();
};

// The check of the calling thread's innermost InterruptScope, or null (no scope, or one that installed none). A
// call that installs a scope of its own for part of its work can ask this one from its check too, so an outer
// scope (a Python caller's Ctrl-C) still stops that part: Window::idle(stop) does, around its heal.
std::function<bool()> current_interrupt_check();

// An interruption point: throws Interrupted ("<where>: interrupted") when the calling thread's innermost
// InterruptScope has a check and it returns true; otherwise (and without a scope) returns at once.
void interruption_point(const char* where);

}  // namespace orbit
