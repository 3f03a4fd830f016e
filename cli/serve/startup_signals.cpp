// The signals taken while `orbit serve` starts (startup_signals.h).
#include "serve/startup_signals.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace orbit::serve {

StartupSignals::StartupSignals(const sigset_t& signals) : signals_(signals), thread_([this] { watch(); }) {}

StartupSignals::~StartupSignals() { finish(); }

void StartupSignals::watch() {
  // Polled so that finish() ends the wait within a tick; the signals are blocked here as in every thread.
  const timespec tick{0, 50'000'000};
  while (!done_.load()) {
    const int signal = sigtimedwait(&signals_, nullptr, &tick);
    if (signal <= 0) continue;  // the tick passed (EAGAIN) or another signal interrupted the wait (EINTR)
    if (received_.exchange(signal) != 0) {
      std::fprintf(stderr, "orbit serve: signal %d again: stopping now, before listening\n", signal);
      std::fflush(stderr);
      ::_exit(128 + signal);
    }
    std::fprintf(stderr,
                 "orbit serve: signal %d while starting: stopping at the next step of the start, without listening "
                 "(send it again to stop at once)\n",
                 signal);
    std::fflush(stderr);
  }
}

void StartupSignals::throw_if_received() const {
  if (received() != 0) throw StartupInterrupted();
}

void StartupSignals::finish() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

int StartupSignals::stopped() const {
  std::fprintf(stderr, "orbit serve: stopped before listening (signal %d)\n", received());
  return 128 + received();
}

}  // namespace orbit::serve
