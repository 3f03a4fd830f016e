// The workers of HttpFront (http_front.h): each takes a complete request the reception read and has
// cpp-httplib route and answer it over a stream that reads the request from memory and writes to the
// socket.
#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#ifdef __linux__
#include <linux/sockios.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>

#include "serve/http/drain_rate.h"
#include "serve/http/http_front.h"
#include "serve/http/http_front_connection.h"
#include "serve/http/peer_watch.h"

namespace orbit::serve {

namespace {

// The request as bytes in memory (its rewritten head, then its body), and the connection's socket for the
// answer. Reads never wait; a write waits up to write_seconds for room (less once the stall limit, in ms, is
// set: HttpFront::limit_stalled_writes), then fails; it also fails once the client took less than
// min_drain_rate over a window of that limit spent waiting (drain_rate.h).
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(int fd, const ReadRequest& request, const FrontOptions& options, const std::atomic<int64_t>& stall_ms)
      : fd_(fd),
        head_(request.head),
        body_(request.body),
        write_ms_(int64_t{options.write_seconds} * 1000),
        stall_ms_(stall_ms),
        drain_(options.min_drain_rate) {}

  bool is_readable() const override { return at_ < head_.size() + body_.size(); }
  bool is_writable() const override { return wait_writable(); }

  ssize_t read(char* ptr, size_t size) override {
    std::size_t n = 0;
    while (n < size && at_ < head_.size() + body_.size()) {
      const bool in_head = at_ < head_.size();
      const std::string& part = in_head ? head_ : body_;
      const std::size_t offset = in_head ? at_ : at_ - head_.size();
      const std::size_t take = std::min(size - n, part.size() - offset);
      part.copy(ptr + n, take, offset);
      n += take;
      at_ += take;
    }
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    std::size_t sent = 0;
    while (sent < size && !failed_) {
      const ssize_t n = ::send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        sent_total_ += n;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        failed_ = !wait_writable();
      } else {
        failed_ = true;
      }
    }
    return failed_ ? -1 : static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
  socket_t socket() const override { return fd_; }
  bool failed() const { return failed_; }
  // A write failed because the client took nothing for the limit, or too little (not a reset or a closed
  // connection).
  bool stalled() const { return stalled_; }
  // Of those, one failed because the client took less than min_drain_rate.
  bool slow() const { return slow_; }

 private:
  using Clock = std::chrono::steady_clock;
  static int64_t ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
  }
  static int64_t us_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
  }

  // The bytes of this answer the client has taken: those sent less those its side has not acknowledged yet
  // (SIOCOUTQ, Linux; elsewhere those sent). Bytes of an earlier answer still in flight count as taken as
  // they are acknowledged; DrainRate reads only differences.
  int64_t taken() const {
    int unacknowledged = 0;
#ifdef __linux__
    if (::ioctl(fd_, SIOCOUTQ, &unacknowledged) != 0) unacknowledged = 0;
#endif
    return sent_total_ - unacknowledged;
  }

  // Waits for room in slices of kStallCheckMs, so that a stall limit set meanwhile applies to this wait too.
  // All of the wait is counted in drain_, slice by slice and up to the room it found.
  bool wait_writable() const {
    const auto start = Clock::now();
    auto last = start;
    // The waiting since `last`, counted: false (failed as slow) once the client took too little.
    const auto count_waiting = [&](int64_t limit_ms) {
      if (drain_.rate() <= 0) return true;  // off: not even the kernel asked
      const auto now = Clock::now();
      const bool enough = drain_.waited(us_between(last, now), taken(), limit_ms * 1000);
      last = now;
      if (!enough) slow_ = stalled_ = true;
      return enough;
    };
    while (true) {
      const int64_t stall = stall_ms_.load();
      const int64_t limit = stall >= 0 ? std::min(write_ms_, stall) : write_ms_;
      const int64_t waited = ms_between(start, Clock::now());
      if (waited >= limit) return !(stalled_ = true);
      if (!count_waiting(limit)) return false;
      pollfd p{fd_, POLLOUT, 0};
      const int slice = static_cast<int>(std::min<int64_t>(limit - waited, HttpFront::kStallCheckMs));
      const int r = ::poll(&p, 1, slice);
      if (r < 0 && errno != EINTR) return false;
      if (r > 0) return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0 && count_waiting(limit);
    }
  }

  template <typename NameFn>
  void address(NameFn name_of, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    char host[NI_MAXHOST] = "";
    char service[NI_MAXSERV] = "";
    if (name_of(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
        ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), length, host, sizeof host, service, sizeof service,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      return;
    }
    ip = host;
    port = std::atoi(service);
  }

  int fd_;
  const std::string& head_;
  const std::string& body_;
  int64_t write_ms_;
  const std::atomic<int64_t>& stall_ms_;
  std::size_t at_ = 0;
  bool failed_ = false;
  int64_t sent_total_ = 0;  // bytes send() took, this answer's
  mutable DrainRate drain_;
  mutable bool stalled_ = false;
  mutable bool slow_ = false;
};

}  // namespace

bool send_now(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

void HttpFront::worker_loop() {
  while (true) {
    std::unique_ptr<FrontConnection> c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;
      c = std::move(work_.front());
      work_.pop_front();
    }
    bool keep = false;
    try {
      keep = answer(*c);
    } catch (const std::exception&) {  // a failure outside the routes (their exceptions became 500s): close
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!keep || stopping_) {
      c.reset();
      --in_workers_;
      continue;
    }
    c->await_next(FrontConnection::Clock::now() + std::chrono::seconds(options_.keep_alive_seconds));
    returned_.push_back(std::move(c));
    wake();
  }
}

void HttpFront::limit_stalled_writes(std::chrono::milliseconds grace) {
  stall_ms_ = std::max<int64_t>(0, grace.count());
}

bool HttpFront::answer(FrontConnection& c) {
  const ReadRequest& request = c.reader.request();
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
  }
  RequestStream stream(c.fd, request, options_, stall_ms_);
  bool closed = false;
  const ConnectionScope connection(c.fd);  // the socket a route's PeerWatch looks at
  const bool ok = process_request(stream, !request.keep_alive || stopping, closed, nullptr);
  if (stream.stalled() && hooks_.stalled) hooks_.stalled(stream.slow());
  return ok && !closed && !stream.failed() && request.keep_alive && !stopping;
}

}  // namespace orbit::serve
