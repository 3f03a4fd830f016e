// Whether the client of an HTTP connection has gone away, seen from outside the connection: the server's
// socket for it is in CLOSE_WAIT (the client closed its end) or no longer listed (reset), per the kernel's
// /proc/net/tcp and /proc/net/tcp6. Linux only; elsewhere (or when /proc cannot be read) it never says
// gone, and a streamed response still notices a client that left when a write fails.
#pragma once

#include <chrono>

namespace orbit::serve {

// True when the connection from `remote_port` to `local_port` is closing or gone.
bool peer_closed(int local_port, int remote_port);

// peer_closed, asked at most every `period` (cheap to call between forwards).
class PeerWatch {
 public:
  PeerWatch(int local_port, int remote_port, std::chrono::milliseconds period = std::chrono::milliseconds(100))
      : local_port_(local_port), remote_port_(remote_port), period_(period) {}
  bool gone();

 private:
  int local_port_;
  int remote_port_;
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point last_{};
  bool gone_ = false;
};

}  // namespace orbit::serve
