// orbit::CapacityRefused — the orbit::Error Window::sync (and prepare_sync) throws when an operation is refused
// for capacity (the apply's Status out_of_capacity), so a caller tells this refusal from the others by its type,
// not by its message, and by bound() which room would cure it:
//   kPool         the engine's KV pool cannot hold the window the sync would leave beside the other windows: room
//                 comes back as other windows are closed, let go or evicted from (a server may let idle windows go,
//                 or ask its client to retry once the windows in use are done)
//   kWindowBytes  the window would hold more KV than its own WindowOptions::max_bytes: no other window's room, and
//                 no waiting, cures it; only a smaller message list (or a larger max_bytes) does
// pages_short(), for kPool: the pages the refused plan needed beyond those the pool had free when it was planned, so
// a caller making room can tell that closing some windows would not give enough (0: not known, as for a plan the
// pool refused only while it ran, the planned pages then taken by another window; always 0 for kWindowBytes).
// What was applied before the refused operation stays applied (the message says how much), as for any sync
// refusal; nothing of the refused one is.
#pragma once

#include <cstdint>
#include <string>

#include "orbit/common/error.h"

namespace orbit {

class CapacityRefused : public Error {
 public:
  enum class Bound { kPool, kWindowBytes };

  CapacityRefused(const std::string& message, Bound bound, const char* source_file, int source_line,
                  int64_t pages_short = 0)
      : Error(message, source_file, source_line), bound_(bound), pages_short_(pages_short) {}

  Bound bound() const { return bound_; }
  int64_t pages_short() const { return pages_short_; }

 private:
  Bound bound_;
  int64_t pages_short_;
};

}  // namespace orbit
