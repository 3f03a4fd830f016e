#include "serve/peer_watch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace orbit::serve {

namespace {

// The port of an address field "0100007F:1F90" (hex), or -1.
int port_of(const std::string& field) {
  const auto colon = field.rfind(':');
  if (colon == std::string::npos) return -1;
  char* end = nullptr;
  const long port = std::strtol(field.c_str() + colon + 1, &end, 16);
  return end && *end == '\0' ? static_cast<int>(port) : -1;
}

struct Scan {
  bool listener = false;  // a socket on local_port was listed (the table was readable)
  bool found = false;     // the connection was listed
  bool closing = false;   // ... in CLOSE_WAIT (the client closed its end)
};

void scan(const char* path, int local_port, int remote_port, Scan& s) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    char local[128], remote[128], state[8];
    if (std::sscanf(line.c_str(), " %*s %127s %127s %7s", local, remote, state) != 3) continue;
    if (port_of(local) != local_port) continue;
    s.listener = true;
    if (port_of(remote) != remote_port) continue;
    s.found = true;
    if (std::strcmp(state, "08") == 0) s.closing = true;  // TCP_CLOSE_WAIT
  }
}

}  // namespace

bool peer_closed(int local_port, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return false;
  Scan s;
  scan("/proc/net/tcp", local_port, remote_port, s);
  scan("/proc/net/tcp6", local_port, remote_port, s);
  return s.closing || (s.listener && !s.found);
}

bool PeerWatch::gone() {
  if (gone_) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < period_) return false;
  last_ = now;
  gone_ = peer_closed(local_port_, remote_port_);
  return gone_;
}

}  // namespace orbit::serve
