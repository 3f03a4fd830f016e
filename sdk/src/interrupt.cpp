// orbit::InterruptScope and interruption_point (orbit/interrupt.h): one thread-local pointer to the innermost
// scope.
#include "orbit/interrupt.h"

#include <utility>

namespace orbit {

namespace {
thread_local InterruptScope* innermost = nullptr;
}  // namespace

InterruptScope::InterruptScope(std::function<bool()> stop) : stop_(std::move(stop)), outer_(innermost) {
  innermost = this;
}

InterruptScope::~InterruptScope() { innermost = outer_; }

std::function<bool()> current_interrupt_check() { return innermost != nullptr ? innermost->stop_ : nullptr; }

void interruption_point(const char* where) {
  const InterruptScope* scope = innermost;
  if (scope != nullptr && scope->stop_ && scope->stop_()) throw Interrupted(where);
}

}  // namespace orbit
