// The reception thread of HttpFront (http_front.h): connections accepted and read under deadlines, complete
// requests handed to the workers (http_front_worker.cpp), /health and refusals answered here.
#include "serve/http/http_front.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "orbit/common/error.h"

#include "serve/http/http_front_connection.h"

namespace orbit::serve {

namespace {

// A refused request's further bytes are read and dropped (lingering) so that its client, still sending,
// reads the answer instead of a reset: at most kLingerBytes, or the Content-Length a 413 refused where that
// is at most kLingerDeclaredBytes (a client uploading a body a few MiB over --max-body-kb reads its 413);
// until kLinger passes without a byte, or kLingerTotal since the refusal.
constexpr std::size_t kLingerBytes = std::size_t{1} << 20;
constexpr uint64_t kLingerDeclaredBytes = uint64_t{64} << 20;
constexpr auto kLinger = std::chrono::seconds(2);
constexpr auto kLingerTotal = std::chrono::seconds(30);
// Connections refused past max_connections that linger at once, at most: past it the next one is answered and
// closed at once, so that a client opening connections faster than they linger out cannot take every descriptor
// the process has (the store's files need them too).
constexpr std::size_t kMaxLingeringOverLimit = 64;
constexpr int kAcceptsPerTurn = 256;  // connections accepted in one turn at most

std::size_t default_max_connections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<std::size_t>(64, static_cast<std::size_t>(limit.rlim_cur) / 2);
}

}  // namespace

HttpFront::HttpFront(FrontOptions options, FrontHooks hooks) : options_(std::move(options)), hooks_(std::move(hooks)) {
  if (options_.max_connections == 0) options_.max_connections = default_max_connections();
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("serve: cannot create a pipe");
  set_keep_alive_timeout(options_.keep_alive_seconds);  // what each answer's Keep-Alive header announces
  try {
    reception_ = std::thread([this] { reception_loop(); });
    for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // The threads already started are joined here: the destructor does not run for a constructor that throws.
    const std::size_t started = workers_.size();
    stop_connections();
    ::close(wake_[0]);
    ::close(wake_[1]);
    ORBIT_FAIL("serve: --threads " << options_.workers << ": the system refused a thread after " << started
                                   << " workers started (" << e.what() << ")");
  }
}

HttpFront::~HttpFront() {
  stop_connections();  // closes the listening socket, taken by serve() or not
  ::close(wake_[0]);
  ::close(wake_[1]);
}

bool HttpFront::widen_backlog() {
  const socket_t bound = svr_sock_.load();
  return bound != INVALID_SOCKET && ::listen(bound, SOMAXCONN) == 0;
}

bool HttpFront::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!listen_stopped_ && !listener_taken_) {
    // svr_sock_ keeps its value while serving: cpp-httplib's content providers read INVALID_SOCKET there as
    // "shutting down" (stop_listening() sets it, as Server::stop() did).
    listener_ = svr_sock_.load();
    listener_taken_ = true;
    if (listener_ < 0 || ::fcntl(listener_, F_SETFL, ::fcntl(listener_, F_GETFL) | O_NONBLOCK) != 0) {
      listener_failed_ = listen_stopped_ = true;
    }
    wake();  // the reception polls the listening socket from its next turn
  }
  listen_cv_.wait(lock, [this] { return listen_stopped_; });
  return !listener_failed_;
}

void HttpFront::stop_listening() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    listen_stopped_ = true;
    const socket_t bound = svr_sock_.exchange(INVALID_SOCKET);        // streams still running end
    if (bound != INVALID_SOCKET && !listener_taken_) ::close(bound);  // else the reception closes it
  }
  listen_cv_.notify_all();
  wake();
}

void HttpFront::stop_connections() {
  stop_listening();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  wake();
  if (reception_.joinable()) reception_.join();
  for (std::thread& w : workers_) {
    if (w.joinable()) w.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (listener_ >= 0) ::close(listener_);  // the reception ended before its turn closed it
  listener_ = -1;
  returned_.clear();
  work_.clear();
}

void HttpFront::wake() {
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_[1], &byte, 1);  // a full pipe already wakes the poll
}

void HttpFront::reception_loop() {
  std::vector<std::unique_ptr<FrontConnection>> held;
  std::vector<pollfd> fds;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    const int listener = listener_for_turn();
    const bool accepting = listener >= 0 && Clock::now() >= accept_paused_until_;
    take_arrivals(held);
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    if (accepting) fds.push_back(pollfd{listener, POLLIN, 0});
    const std::size_t first = fds.size();
    for (const auto& c : held) fds.push_back(pollfd{c->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), poll_timeout_ms(held, listener >= 0 && !accepting)) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      char drain[256];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (fds[first + i].revents != 0) on_readable(held[i]);
    }
    const Clock::time_point now = Clock::now();
    for (auto& c : held) {
      if (c && now >= c->deadline) expire(c, now);
    }
    held.erase(std::remove(held.begin(), held.end(), nullptr), held.end());
    if (accepting && fds[1].revents != 0) accept_arrivals(listener, held);
  }
}

int HttpFront::listener_for_turn() {
  std::lock_guard<std::mutex> lock(mu_);
  if (listen_stopped_ && listener_ >= 0) {
    ::close(listener_);
    listener_ = -1;
  }
  return listener_;
}

// Takes the connections waiting on the listening socket (non-blocking). Out of descriptors or memory,
// accepting pauses for kAcceptPause; a socket that can no longer accept ends serve() with false.
void HttpFront::accept_arrivals(int listener, std::vector<std::unique_ptr<FrontConnection>>& held) {
  for (int taken = 0; taken < kAcceptsPerTurn; ++taken) {  // the rest wait a turn: the held ones get theirs
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        accept_paused_until_ = Clock::now() + kAcceptPause;
      } else if (error == EBADF || error == EINVAL || error == ENOTSOCK || error == EOPNOTSUPP) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          listener_failed_ = listen_stopped_ = true;
        }
        listen_cv_.notify_all();
      }
      // EAGAIN: none left; a connection aborted before it was taken, or a signal: the next turn goes on.
      return;
    }
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    auto c = std::make_unique<FrontConnection>(fd, options_.limits);
    c->deadline = Clock::now() + std::chrono::seconds(options_.keep_alive_seconds);
    admit(held, std::move(c));
  }
}

// Connections the workers answered join the ones held.
void HttpFront::take_arrivals(std::vector<std::unique_ptr<FrontConnection>>& held) {
  std::deque<std::unique_ptr<FrontConnection>> returned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    returned.swap(returned_);
  }
  for (auto& c : returned) {
    --in_workers_;
    advance(c);  // the bytes received past the last request may hold the next one
    if (c) held.push_back(std::move(c));
  }
}

// Holds a new connection within max_connections: the longest idle one makes room, else it gets 503.
void HttpFront::admit(std::vector<std::unique_ptr<FrontConnection>>& held, std::unique_ptr<FrontConnection> c) {
  if (held.size() + in_workers_ >= options_.max_connections) {
    auto idle = held.end();
    for (auto it = held.begin(); it != held.end(); ++it) {
      if ((*it)->phase == FrontConnection::Phase::kWaiting &&
          (idle == held.end() || (*it)->deadline < (*idle)->deadline))
        idle = it;
    }
    if (idle == held.end()) {
      refuse(*c, 503, "the server holds " + std::to_string(options_.max_connections) + " connections, its limit");
      const auto lingering = std::count_if(
          held.begin(), held.end(), [](const auto& h) { return h->phase == FrontConnection::Phase::kLingering; });
      if (static_cast<std::size_t>(lingering) < kMaxLingeringOverLimit) held.push_back(std::move(c));  // lingering
      return;  // else closed here, its answer written
    }
    held.erase(idle);
  }
  held.push_back(std::move(c));
}

int HttpFront::poll_timeout_ms(const std::vector<std::unique_ptr<FrontConnection>>& held, bool accept_paused) const {
  const Clock::time_point now = Clock::now();
  auto next = now + std::chrono::seconds(1);
  for (const auto& c : held) next = std::min(next, c->deadline);
  if (accept_paused) next = std::min(next, accept_paused_until_);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
}

void HttpFront::on_readable(std::unique_ptr<FrontConnection>& c) {
  static thread_local std::vector<char> buffer(std::size_t{64} << 10);
  for (int round = 0; round < 16 && c; ++round) {  // at most 1 MiB a turn: the others get theirs
    const ssize_t n = ::recv(c->fd, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // closed by the client (a partial request goes unanswered) or reset
      c.reset();
      return;
    }
    if (c->phase == FrontConnection::Phase::kLingering) {
      c->discarded += static_cast<std::size_t>(n);
      if (c->discarded > c->linger_bytes) {
        c.reset();
        return;
      }
      c->deadline = std::min(Clock::now() + kLinger, c->linger_end);
      continue;
    }
    c->reader.feed(buffer.data(), static_cast<std::size_t>(n));
    advance(c);
    if (!c || c->phase == FrontConnection::Phase::kLingering) return;
  }
}

// Acts on what the connection's reader has: deadlines as a request starts and its head ends, 100 Continue,
// a refusal, /health answered here, a complete request handed to the workers.
void HttpFront::advance(std::unique_ptr<FrontConnection>& c) {
  using State = RequestReader::State;
  while (c) {
    const State state = c->reader.state();
    const Clock::time_point now = Clock::now();
    if (state == State::kIdle) return;
    if (c->phase == FrontConnection::Phase::kWaiting) {  // a request's first byte
      c->phase = FrontConnection::Phase::kReading;
      c->deadline = now + std::chrono::seconds(options_.header_seconds);
    }
    if (state == State::kHead) return;
    if (state == State::kBody) {
      if (!c->in_body) c->deadline = now + std::chrono::seconds(options_.body_seconds);
      c->in_body = true;
      if (c->reader.take_continue() && !send_now(c->fd, "HTTP/1.1 100 Continue\r\n\r\n")) c.reset();
      return;
    }
    if (state == State::kRefused) return refuse(*c, c->reader.refusal().status, c->reader.refusal().message);
    const ReadRequest& request = c->reader.request();
    if (request.path == "/health" && (request.method == "GET" || request.method == "HEAD")) {
      answer_health(*c);
      if (!request.keep_alive || c->fd < 0) return c.reset();
      c->await_next(now + std::chrono::seconds(options_.keep_alive_seconds));
      continue;
    }
    ++in_workers_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back(std::move(c));
    }
    work_cv_.notify_one();
    return;
  }
}

// The "Name: value\r\n" lines of FrontHooks::answer_fields for the connection's request.
std::string HttpFront::extra_fields(const FrontConnection& c) const {
  if (!hooks_.answer_fields) return "";
  std::string lines;
  for (const auto& [name, value] : hooks_.answer_fields(c.reader.origin())) lines += name + ": " + value + "\r\n";
  return lines;
}

void HttpFront::answer_health(FrontConnection& c) {
  const auto [status, body] = hooks_.health();
  const ReadRequest& request = c.reader.request();
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                    extra_fields(c);
  out += request.keep_alive ? "Keep-Alive: timeout=" + std::to_string(options_.keep_alive_seconds) + "\r\n"
                            : std::string("Connection: close\r\n");
  out += "\r\n";
  if (request.method != "HEAD") out += body;
  if (!send_now(c.fd, out)) c.close();
}

// Answers a refusal, counts it, and lingers: the client's further bytes are read and dropped for a while
// (see kLingerBytes), so it reads the answer instead of a reset.
void HttpFront::refuse(FrontConnection& c, int status, const std::string& message) {
  const std::string body = hooks_.error_body(status, message);
  send_now(c.fd, "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                     "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                     extra_fields(c) + "Connection: close\r\n\r\n" + body);
  hooks_.refused(c.reader.method(), c.reader.path(), status);
  ::shutdown(c.fd, SHUT_WR);
  const uint64_t declared = c.reader.state() == RequestReader::State::kRefused ? c.reader.refusal().declared_body : 0;
  c.phase = FrontConnection::Phase::kLingering;
  c.linger_bytes = declared <= kLingerDeclaredBytes ? std::max<std::size_t>(kLingerBytes, declared) : kLingerBytes;
  c.linger_end = Clock::now() + kLingerTotal;
  c.deadline = Clock::now() + kLinger;
}

void HttpFront::expire(std::unique_ptr<FrontConnection>& c, Clock::time_point) {
  if (c->phase != FrontConnection::Phase::kReading) return c.reset();  // idle past keep-alive, or lingered
  const std::string message =
      c->in_body ? "the request's body did not arrive within " + std::to_string(options_.body_seconds) +
                       " seconds of its head (--body-seconds)"
                 : "the request's head did not arrive within " + std::to_string(options_.header_seconds) +
                       " seconds of its first byte (--header-seconds)";
  refuse(*c, 408, message);
}

}  // namespace orbit::serve
