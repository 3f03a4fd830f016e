// The connections of `orbit serve`: cpp-httplib routes and answers requests, but does not read them.
//
//   accept (cpp-httplib's listener) ──► reception (one thread, poll) ──complete request──► workers (N)
//                                          │  reads heads and bodies under deadlines           │ route, answer
//                                          │  answers GET /health and refusals itself          │ (process_request)
//                                          ◄──────────── keep-alive: back to wait for the next ┘
//
// cpp-httplib (0.11) gives each connection a pool thread for its whole life, reading with a per-recv
// timeout: a client sending a byte a second, or half a head, holds a thread indefinitely, and past
// --threads such clients every request waits, /health included. Here the reception thread reads every
// connection without blocking, as far as a complete request (RequestReader: head, then body, chunks
// decoded, limits enforced as bytes arrive), under deadlines:
//   header_seconds      from a request's first byte to the end of its head, else 408 and the connection closed
//   body_seconds        from the end of the head to the end of the body, else 408 and closed
//   keep_alive_seconds  an idle connection between requests is closed after this (announced to clients in
//                       every answer's "Keep-Alive: timeout=N", so a client's pool closes it first)
// Only a complete request goes to a worker, as bytes in memory (the worker's stream never waits on the
// socket to read), so a worker is held only while a request is routed and answered. GET and HEAD /health
// are answered by the reception thread itself: health answers while every worker is busy. Refusals the
// reader makes (400, 408, 413, 431, 501, 505) are answered there too, counted through FrontHooks::refused,
// and the connection is then closed after a short lingering read (so the client reads the answer rather
// than a reset), which discards at most 1 MiB in at most 2 s.
// Connections past max_connections: the longest idle one is closed; with none idle the new one gets 503.
// A worker's write waits for room at most write_seconds; once limit_stalled_writes(grace) was called (the
// server drains), at most `grace` as well, checked every kStallCheckMs while a write waits: a client that
// stopped reading then holds its worker, and the server's exit, for at most that grace.
//
// Thread-safety: construct, then listen (cpp-httplib's listen_after_bind, on the caller's thread);
// stop_connections() from any thread after Server::stop().
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/http/http_request_reader.h"

namespace orbit::serve {

struct FrontOptions {
  int workers = 64;  // requests routed and answered at once
  int header_seconds = 10;
  int body_seconds = 60;
  int keep_alive_seconds = 120;
  int write_seconds = 60;           // a worker's write that makes no progress this long fails (the connection closes)
  std::size_t max_connections = 0;  // 0: half the process's descriptor limit
  RequestLimits limits;
};

struct FrontHooks {
  // GET /health's status and JSON body.
  std::function<std::pair<int, std::string>()> health;
  // A request the reception refused (`path` "" when its request line was not read), answered `status`
  // `seconds` after its first byte.
  std::function<void(const std::string& path, int status, double seconds)> refused;
  // The JSON error body of a refusal.
  std::function<std::string(int status, const std::string& message)> error_body;
};

struct FrontConnection;

class HttpFront : public httplib::Server {
 public:
  HttpFront(FrontOptions options, FrontHooks hooks);
  ~HttpFront() override;
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // After Server::stop(): closes the connections the reception holds, lets each worker finish the request
  // it answers and joins them. Idempotent.
  void stop_connections();
  // From now on a write that has made no progress for `grace` fails (its connection closes), also one
  // already waiting: min(grace, write_seconds) applies. A later call replaces the grace. Any thread.
  void limit_stalled_writes(std::chrono::milliseconds grace);
  // How often a waiting write looks at that limit.
  static constexpr int kStallCheckMs = 100;

 private:
  using Clock = std::chrono::steady_clock;
  // cpp-httplib's listener calls this (through an inline task queue) with each accepted socket.
  bool process_and_close_socket(socket_t sock) override;

  void reception_loop();
  void take_arrivals(std::vector<std::unique_ptr<FrontConnection>>& held);
  void on_readable(std::unique_ptr<FrontConnection>& c);
  void advance(std::unique_ptr<FrontConnection>& c);
  void answer_health(FrontConnection& c);
  void refuse(FrontConnection& c, int status, const std::string& message);
  void expire(std::unique_ptr<FrontConnection>& c, Clock::time_point now);
  void admit(std::vector<std::unique_ptr<FrontConnection>>& held, std::unique_ptr<FrontConnection> c);
  int poll_timeout_ms(const std::vector<std::unique_ptr<FrontConnection>>& held) const;
  void wake();

  void worker_loop();
  bool answer(FrontConnection& c);  // true: keep the connection

  FrontOptions options_;
  FrontHooks hooks_;
  int wake_[2] = {-1, -1};  // a pipe: arrivals wake the reception's poll

  std::mutex mu_;  // guards the queues and stopping_
  std::condition_variable work_cv_;
  std::deque<int> accepted_;
  std::deque<std::unique_ptr<FrontConnection>> returned_;  // from workers, for the next request
  std::deque<std::unique_ptr<FrontConnection>> work_;      // complete requests for the workers
  bool stopping_ = false;
  std::atomic<std::size_t> in_workers_{0};  // connections handed to the workers, not yet back
  std::atomic<int64_t> stall_ms_{-1};       // limit_stalled_writes' grace in ms; -1: none (write_seconds)

  std::thread reception_;
  std::vector<std::thread> workers_;
};

}  // namespace orbit::serve
