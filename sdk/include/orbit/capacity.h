// orbit::CapacityRefused — the orbit::Error Window::sync (and prepare_sync) throws when an operation is refused
// for capacity (the apply's Status out_of_capacity: the KV pool, or the window's WindowOptions::max_bytes, cannot
// hold the window the sync would leave), so a caller that can make room (close or let go other windows) tells
// this refusal from the others by its type, not by its message. What was applied before the refused operation
// stays applied (the message says how much), as for any sync refusal; nothing of the refused one is.
#pragma once

#include <string>

#include "orbit/common/error.h"

namespace orbit {

class CapacityRefused : public Error {
 public:
  CapacityRefused(const std::string& message, const char* source_file, int source_line)
      : Error(message, source_file, source_line) {}
};

}  // namespace orbit
