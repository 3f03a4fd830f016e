// FairGate: one model forward at a time, handed out round-robin over lanes (sessions).
//
// Every forward the server runs (a request's sync, one decode step, a slice of background work) happens
// while its thread holds the gate. Waiters queue per lane; lanes with waiters are served in rotation, and
// a lane that was just served goes to the back of the rotation. So while lane B waits, lane A gets at most
// one forward before B does: no session blocks another for longer than one forward (one quantum: a sync's
// operations, or one decode step). Within a lane, waiters are served in arrival order.
//
//   lanes with waiters:  [B, C, A]   A just ran and queued again: it is served after B and C
//
// Idle work (the engine's background jobs, windows' heals and prepared recalls) takes the gate only
// through try_enter_idle(), which succeeds only when nobody waits and nobody holds idle work off (the decode
// batch does while it has sequences to step, between its steps too, but not while all of them are held for
// clients that have not read), so it never delays a request by more than the slice it is running.
//
// A holder in the middle of a long quantum (a sync's prefill between two of its pieces, forward_pieces.h) may
// hand the gate to one lane's oldest waiter and take it back right after that waiter leaves (yield_to): no
// other lane and no idle work runs in between, so the holder's forward is split but nothing else of the
// rotation changes.
//
//   sync A holds ── yield_to("~decode") ──► the decode step runs ── leave() ──► A holds again, then B's turn
//
// A waiter may also offer to run as a guest there (enter's `guest_tokens`: the tokens its quantum forwards, as
// its caller estimates; a sync's new tokens): yield_to_guest hands the gate to the oldest waiter of the first
// lane in rotation, other than the holder's own, that offered at most the holder's bound, and moves that lane to
// the rotation's back, as a turn of its own would. So a short request of another session does not wait for a
// long one's whole prefill (head-of-line blocking), and the long one still gets one piece between two guests:
// guests take turns round robin and never starve it. A lane's own waiters stay in arrival order (only a lane's
// oldest waiter is let in), and a waiter that offered nothing (an audit, a step) is never a guest.
//
//   sync A holds ── yield_to_guest("A", 256) ──► B's 12-token sync runs ── leave() ──► A holds again
//
// Yields nest: the waiter let in may yield in turn (a guest sync to a decode step between its own pieces), and
// the gate comes back innermost first (the step, then the guest, then the holder). A guest never lets a guest
// in (yield_to_guest returns false inside another holder's yield), so at most one guest runs in a yield.
//
// Thread-safety: every member may be called from any thread. A thread must not enter twice.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace orbit::serve {

class FairGate {
 public:
  // A waiter that offers nothing: never let in as a guest.
  static constexpr int64_t kNoGuest = -1;

  // Waits for the gate on `lane`. Returns true holding it, or false without it when `cancelled()` became
  // true (polled every `poll_ms`) or the gate was closed. `guest_tokens` >= 0 offers the waiter as a guest of
  // a holder whose bound is at least that (yield_to_guest); it still takes its own turn when none lets it in.
  bool enter(const std::string& lane, const std::function<bool()>& cancelled = {}, int poll_ms = 50,
             int64_t guest_tokens = kNoGuest);
  // Takes the gate only if it is free, nobody waits and nobody holds idle work off; returns whether it did.
  bool try_enter_idle();
  // Holds idle work off (true) or lets it go again (false); holds nest (a count).
  void hold_idle(bool hold);
  void leave();
  // Holding the gate: when `lane` has a waiter, hands the gate to its oldest and waits until that waiter
  // leaves, then holds it again before any other waiter or idle work, and returns true; returns false at once
  // (still holding) when `lane` has no waiter or the gate is closed. Returns holding the gate in every case
  // (a close while it waits too: the waiter's quantum ends, and the gate comes back here). The waiter it lets
  // in may yield in turn; it gets the gate back before this holder does.
  bool yield_to(const std::string& lane);
  // Holding the gate on lane `own`: as yield_to, to the oldest waiter of the first lane in rotation (not `own`)
  // whose oldest waiter offered 0..`max_tokens` guest tokens; that lane then goes to the rotation's back. False
  // at once (still holding) when none did, the gate is closed, or the caller holds it inside another holder's
  // yield (a guest, a step: nested()).
  bool yield_to_guest(const std::string& own, int64_t max_tokens);
  // Whether the gate is held inside a yield: by the waiter a holder handed it to, the holder waiting for it
  // back (so a guest sync knows the compute thread is blocked in that holder's yield).
  bool nested() const;
  // After close(), enter() returns false at once (waiters too); a holder keeps the gate until it leaves.
  void close();

  int64_t waiting() const;  // threads queued now
  bool busy() const;        // held now
  int64_t grants() const;   // forwards granted so far (idle slices included)
  int64_t yields() const;   // times yield_to handed the gate over
  int64_t guests() const;   // times yield_to_guest handed the gate over

 private:
  struct Waiter {
    uint64_t ticket = 0;
    int64_t guest_tokens = kNoGuest;
  };
  void grant_next();  // under mutex_: hand the free gate to the next lane in rotation
  // Under mutex_, holding the gate: hands it to `lane`'s oldest waiter, the caller's ticket on the resume stack,
  // and waits until the gate comes back to it.
  void hand_over(std::unique_lock<std::mutex>& lock, const std::string& lane);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  bool closed_ = false;
  uint64_t next_ticket_ = 1;
  uint64_t granted_ = 0;  // the ticket the gate was just handed to (0: none)
  int64_t grants_ = 0;
  int64_t idle_holds_ = 0;
  // The tickets of holders that yielded, innermost last: the gate's next grant is to the last.
  std::vector<uint64_t> resume_;
  int64_t yields_ = 0;
  int64_t guests_ = 0;
  std::map<std::string, std::deque<Waiter>> lanes_;  // lane -> its waiters, oldest first
  std::deque<std::string> rotation_;                 // lanes with waiters, next served first
};

// Holds the gate for a scope (released on destruction).
class GateHold {
 public:
  explicit GateHold(FairGate& gate) : gate_(gate) {}
  ~GateHold() { gate_.leave(); }
  GateHold(const GateHold&) = delete;
  GateHold& operator=(const GateHold&) = delete;

 private:
  FairGate& gate_;
};

}  // namespace orbit::serve
