// seconds_since: wall time elapsed on the steady clock, in seconds, for the reports' timing fields.
// Header-only and torch-free.
#pragma once

#include <chrono>

namespace orbit {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace orbit
