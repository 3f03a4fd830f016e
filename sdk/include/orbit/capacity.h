// orbit::CapacityRefused — the orbit::Error Window::sync (and prepare_sync) throws when an operation is refused
// for capacity (the apply's Status out_of_capacity), so a caller tells this refusal from the others by its type,
// not by its message, and by bound() which room would cure it:
//   kPool         the engine's KV pool cannot hold the window the sync would leave beside the other windows: room
//                 comes back as other windows are closed, let go or evicted from (a server may let idle windows go,
//                 or ask its client to retry once the windows in use are done)
//   kWindowBytes  the window would hold more KV than its own WindowOptions::max_bytes: no other window's room, and
//                 no waiting, cures it; only a smaller message list (or a larger max_bytes) does
// What was applied before the refused operation stays applied (the message says how much), as for any sync
// refusal; nothing of the refused one is.
#pragma once

#include <string>

#include "orbit/common/error.h"

namespace orbit {

class CapacityRefused : public Error {
 public:
  enum class Bound { kPool, kWindowBytes };

  CapacityRefused(const std::string& message, Bound bound, const char* source_file, int source_line)
      : Error(message, source_file, source_line), bound_(bound) {}

  Bound bound() const { return bound_; }

 private:
  Bound bound_;
};

}  // namespace orbit
