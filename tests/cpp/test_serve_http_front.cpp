// How `orbit serve`'s connections start and stop (cli/serve/http/http_front.h): serve() accepts and answers
// until stop_listening(), and a stop is kept whenever it comes: before serve() has started (a SIGTERM that
// arrives as the server starts listening), or racing it from another thread. cpp-httplib's own stop() did
// nothing until its listener's loop had started, so a stop that came first was lost and the server never
// exited. Each stop is given a generous hang guard; no timing is asserted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "orbit_catch.h"
#include "serve/http/drain_rate.h"
#include "serve/http/http_front.h"

namespace sv = orbit::serve;

namespace {

// A serve() still running this long after its stop is a hang.
constexpr auto kHangGuard = std::chrono::seconds(30);

std::unique_ptr<sv::HttpFront> bound_front(int& port) {
  sv::FrontOptions options;
  options.workers = 2;
  sv::FrontHooks hooks;
  hooks.health = [] { return std::make_pair(200, std::string(R"({"status":"ok"})")); };
  hooks.refused = [](const std::string&, const std::string&, int) {};
  hooks.error_body = [](int, const std::string& message) { return "{\"error\":\"" + message + "\"}"; };
  auto front = std::make_unique<sv::HttpFront>(options, hooks);
  port = front->bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  return front;
}

// serve() on its own thread, started by `serve_now` (spun on) and stopped by the caller. Its result, or
// nullopt when it still ran kHangGuard after `stopped` returned: then the front and its thread are left
// running (released, detached), so that the test fails instead of hanging.
class ServeThread {
 public:
  ServeThread(std::unique_ptr<sv::HttpFront>& front, const std::atomic<bool>& go) : front_(front) {
    auto promise = std::make_shared<std::promise<bool>>();
    result_ = promise->get_future();
    sv::HttpFront* f = front.get();
    thread_ = std::thread([f, promise, &go] {
      while (!go.load()) {
      }
      promise->set_value(f->serve());
    });
  }
  ~ServeThread() {
    if (thread_.joinable()) thread_.join();
  }
  std::optional<bool> result() {
    if (result_.wait_for(kHangGuard) != std::future_status::ready) {
      thread_.detach();
      (void)front_.release();
      return std::nullopt;
    }
    thread_.join();
    return result_.get();
  }

 private:
  std::unique_ptr<sv::HttpFront>& front_;
  std::future<bool> result_;
  std::thread thread_;
};

// A connection to 127.0.0.1:port, or -1 with errno set.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return fd;
  const int error = errno;
  ::close(fd);
  errno = error;
  return -1;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) text.append(buffer, static_cast<std::size_t>(n));
  return text;
}

}  // namespace

TEST_CASE("a stop that comes before serve() starts ends it at once, and the port closes", "[serve][cpu]") {
  int port = 0;
  auto front = bound_front(port);
  front->stop_listening();
  const std::atomic<bool> go{true};
  ServeThread serve(front, go);
  const std::optional<bool> served = serve.result();
  {
    INFO("serve() ran on " << std::chrono::seconds(kHangGuard).count() << " s after a stop that came first");
    REQUIRE(served.has_value());
  }
  CHECK(*served);
  CHECK(connect_to(port) == -1);  // closed by the stop, before stop_connections()
  CHECK(errno == ECONNREFUSED);
  front->stop_connections();
}

TEST_CASE("a stop racing serve() from another thread ends it, whichever comes first", "[serve][cpu]") {
  // The stop is offset from serve()'s start by 0 to 63 rounds of a spin, so that it falls before, at and
  // after the moment serve() starts across the iterations.
  constexpr int kIterations = 300;
  int hung = 0;
  for (int i = 0; i < kIterations && hung == 0; ++i) {
    int port = 0;
    auto front = bound_front(port);
    std::atomic<bool> go{false};
    ServeThread serve(front, go);
    std::thread stopper([&front, &go, spins = i % 64] {
      while (!go.load()) {
      }
      for (volatile int k = 0; k < spins * 50; k = k + 1) {
      }
      front->stop_listening();
    });
    go = true;
    stopper.join();
    const std::optional<bool> served = serve.result();
    if (!served) {
      ++hung;
      INFO("iteration " << i << ": serve() still ran " << std::chrono::seconds(kHangGuard).count()
                        << " s after its stop");
      CHECK(served.has_value());
      continue;
    }
    CHECK(*served);
  }
  CHECK(hung == 0);
}

TEST_CASE("serve() accepts and answers, streamed answers too, until stopped; an idle connection does not hold the stop",
          "[serve][cpu]") {
  int port = 0;
  auto front = bound_front(port);
  // A streamed answer: cpp-httplib's content provider stops early when it believes the server stops.
  front->Get("/stream", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/plain", [](std::size_t, httplib::DataSink& sink) {
      for (const char* part : {"one ", "two ", "three"}) sink.write(part, std::string(part).size());
      sink.done();
      return true;
    });
  });
  std::atomic<bool> go{true};
  ServeThread serve(front, go);
  const int idle = connect_to(port);  // accepted, never sends a byte
  REQUIRE(idle >= 0);
  for (int round = 0; round < 3; ++round) {  // each round a new connection, accepted while serve() runs
    const int fd = connect_to(port);
    REQUIRE(fd >= 0);
    const std::string request = "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    const std::string answer = read_all(fd);
    ::close(fd);
    CHECK(answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(answer.find(R"({"status":"ok"})") != std::string::npos);
  }
  const int fd = connect_to(port);
  REQUIRE(fd >= 0);
  const std::string request = "GET /stream HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  const std::string streamed = read_all(fd);
  ::close(fd);
  CHECK(streamed.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(streamed.find("\r\n4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n") != std::string::npos);
  front->stop_listening();
  const std::optional<bool> served = serve.result();
  REQUIRE(served.has_value());
  CHECK(*served);
  front->stop_connections();
  CHECK(read_all(idle).empty());  // closed by the stop, unanswered
  ::close(idle);
  CHECK(connect_to(port) == -1);
}

TEST_CASE("a listening socket that fails ends serve() with false", "[serve][cpu]") {
  int port = 0;
  auto front = bound_front(port);
  // The listening socket, found by its port among this process's descriptors, is shut down under the front:
  // accept then fails with EINVAL, which no retry mends.
  int listener = -1;
  for (int fd = 3; fd < 1024 && listener < 0; ++fd) {
    int listening = 0;
    socklen_t length = sizeof listening;
    sockaddr_in address{};
    socklen_t size = sizeof address;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening != 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0 && ntohs(address.sin_port) == port)
      listener = fd;
  }
  REQUIRE(listener >= 0);
  std::atomic<bool> go{true};
  ServeThread serve(front, go);
  ::shutdown(listener, SHUT_RDWR);
  const std::optional<bool> served = serve.result();
  REQUIRE(served.has_value());
  CHECK_FALSE(*served);
  front->stop_connections();
}

// DrainRate (drain_rate.h), the policy behind --min-drain-rate, fed waiting and bytes by hand: no socket, no
// clock.
TEST_CASE("a client that takes less than the drain rate over a window of waiting is judged slow", "[serve][cpu]") {
  constexpr int64_t kWindow = 2'000'000;  // us: a 2 s stall limit
  constexpr int64_t kSlice = 100'000;     // us: HttpFront::kStallCheckMs
  constexpr int64_t kDay = int64_t{86'400} * 1'000'000;
  SECTION("judged only at the end of a window of waiting, on what it took since the window began") {
    sv::DrainRate rate(1000);                       // bytes a second: 2000 per 2 s window
    CHECK(rate.waited(0, 5'000, kWindow));          // the first wait starts the window at 5000 taken
    CHECK(rate.waited(1'999'999, 5'100, kWindow));  // 100 bytes in 1.999 s of waiting: not judged yet
    CHECK_FALSE(rate.waited(1, 6'999, kWindow));    // the window ends with 1999 bytes taken: slow
  }
  SECTION("a client at the rate passes window after window; bytes taken between waits count") {
    sv::DrainRate rate(1000);
    int64_t taken = 0;
    CHECK(rate.waited(0, taken, kWindow));
    for (int window = 0; window < 5; ++window) {
      for (int slice = 0; slice < 20; ++slice) CHECK(rate.waited(kSlice, taken += 100, kWindow));
    }
    // Nothing taken while it waits, all of it while the server was busy elsewhere (between writes): enough.
    CHECK(rate.waited(kWindow / 2, taken, kWindow));
    taken += 2000;
    CHECK(rate.waited(kWindow / 2, taken, kWindow));
    // The next window starts from there: a trickle of 10 bytes every 100 ms is not enough.
    for (int slice = 0; slice < 19; ++slice) CHECK(rate.waited(kSlice, taken += 10, kWindow));
    CHECK_FALSE(rate.waited(kSlice, taken += 10, kWindow));
  }
  SECTION("rate 0 never judges") {
    sv::DrainRate rate(0);
    CHECK(rate.waited(0, 0, kWindow));
    CHECK(rate.waited(kDay, 0, kWindow));
  }
  SECTION("the largest rate over a day's window does not overflow") {
    sv::DrainRate rate(int64_t{1} << 30);
    CHECK(rate.waited(0, 0, kDay));
    CHECK_FALSE(rate.waited(kDay, (int64_t{1} << 30) * 86'400 - 1, kDay));
    CHECK(rate.waited(kDay, 2 * (int64_t{1} << 30) * 86'400, kDay));
  }
}
