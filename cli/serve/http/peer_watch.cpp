#include "serve/http/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace orbit::serve {

namespace {

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

bool ports_match(int fd, int local_port, int remote_port) {
  sockaddr_storage peer{}, self{};
  socklen_t n = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &n) != 0 || port_of(peer) != remote_port) return false;
  n = sizeof self;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&self), &n) == 0 && port_of(self) == local_port;
}

}  // namespace

PeerWatch::PeerWatch(int local_port, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return;
  rlimit limit{};
  const rlim_t most = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  const int last = static_cast<int>(std::min<rlim_t>(most, 65536));
  for (int fd = 3; fd < last; ++fd) {
    if (ports_match(fd, local_port, remote_port)) {
      fd_ = fd;
      return;
    }
  }
}

bool PeerWatch::gone() {
  if (gone_ || fd_ < 0) return gone_;
  char c = 0;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) gone_ = true;                                                              // the client closed its end
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) gone_ = true;  // reset
  return gone_;
}

}  // namespace orbit::serve
