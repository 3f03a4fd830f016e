// SIGINT and SIGTERM while `orbit serve` starts (the model's load, the remote's check, a fidelity calibration),
// before the signal thread that drains a listening server takes them.
#pragma once

#include <signal.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace orbit::serve {

// Thrown by StartupSignals::throw_if_received (from a calibration's progress, which stops the calibration:
// nothing fitted or stored); run_serve catches it and stops before listening.
struct StartupInterrupted : std::runtime_error {
  StartupInterrupted() : std::runtime_error("orbit serve: interrupted while starting") {}
};

// A thread that waits for `signals` (blocked in every thread, block_stop_signals) until finish(): the first
// is said on stderr and kept, for the start to stop at its next check (after the model's load; in a calibration,
// its interruption points, through an InterruptScope) instead of listening; a second ends the process at once
// (exit status 128 + signal), as a second signal cuts a drain short. What the store wrote stays whole either way
// (it survives a kill).
class StartupSignals {
 public:
  explicit StartupSignals(const sigset_t& signals);
  ~StartupSignals();
  StartupSignals(const StartupSignals&) = delete;
  StartupSignals& operator=(const StartupSignals&) = delete;

  int received() const { return received_.load(); }  // the first signal taken, or 0
  void throw_if_received() const;
  // Stops the thread; a signal that comes later stays pending for the listening server's signal thread.
  void finish();
  // Says the server stopped before listening; returns the exit status, 128 + the signal (130 for SIGINT).
  int stopped() const;

 private:
  void watch();

  const sigset_t signals_;
  std::atomic<int> received_{0};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace orbit::serve
