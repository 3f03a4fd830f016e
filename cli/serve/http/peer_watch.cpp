#include "serve/http/peer_watch.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <utility>

namespace orbit::serve {

namespace {

thread_local int connection_fd = -1;

// Whether poll reports `events` on fd now (POLLHUP and POLLERR are reported whatever was asked).
bool polled(int fd, short events, short wanted) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & wanted) != 0;
}

}  // namespace

ConnectionScope::ConnectionScope(int fd) : previous_(connection_fd) { connection_fd = fd; }
ConnectionScope::~ConnectionScope() { connection_fd = previous_; }
int current_connection() { return connection_fd; }

PeerWatch::PeerWatch() : fd_(connection_fd) {}

void PeerWatch::probe_with_continue() {
  const int fd = fd_;
  probe_ = [fd] {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    constexpr auto kSize = static_cast<ssize_t>(sizeof kContinue - 1);
    ssize_t n = -1;
    do {
      n = ::send(fd, kContinue, kSize, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n == kSize) return Sent::kWhole;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Sent::kNoRoom;
    // Part of it went out (a socket with room takes 25 bytes whole, so hardly ever): the answer written after
    // it would not parse, so the connection ends here and the answer's write fails.
    if (n > 0) ::shutdown(fd, SHUT_RDWR);
    return Sent::kFailed;
  };
}

void PeerWatch::probe_with_comment(std::function<bool(const std::string&)> write) {
  probe_ = [write = std::move(write)] { return write(": ping\n\n") ? Sent::kWhole : Sent::kFailed; };
}

void PeerWatch::no_probe() { probe_ = nullptr; }

bool PeerWatch::gone() {
  if (gone_ || fd_ < 0) return gone_;
  if (polled(fd_, 0, POLLHUP | POLLERR | POLLNVAL)) return gone_ = true;  // reset, or both directions closed
  if (probed_) return false;  // a client that closed answers the probe with a reset, seen above
  char c = 0;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return gone_ = true;  // reset
  if (n != 0) return false;  // data (a pipelined request), or none yet
  // End of stream: the client closed its socket, or only its sending side. Only a write tells which.
  if (!probe_) return gone_ = true;
  probe_now();
  return gone_;
}

void PeerWatch::probe_now() {
  if (!polled(fd_, POLLOUT, POLLOUT)) return;  // no room: the client is not reading (yet); the next look tries
  switch (probe_()) {
    case Sent::kWhole: probed_ = true; break;
    case Sent::kNoRoom: break;
    case Sent::kFailed: gone_ = true; break;
  }
}

}  // namespace orbit::serve
