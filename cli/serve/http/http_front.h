// The connections of `orbit serve`: cpp-httplib routes and answers requests, but neither accepts nor reads them.
//
//   reception (one thread, poll) ────────────────────complete request──► workers (N)
//     │  accepts on the listening socket                                  │ route, answer
//     │  reads heads and bodies under deadlines                           │ (process_request)
//     │  answers GET /health and refusals itself                          │
//     ◄───────────────────────────── keep-alive: back to wait for the next ┘
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
// reader makes (400, 408, 413, 415, 431, 501, 505) are answered there too, counted through FrontHooks::refused,
// and the connection is then closed after a short lingering read (so the client reads the answer rather
// than a reset), which discards at most 1 MiB (or a 413's Content-Length up to 64 MiB) until 2 s pass without
// a byte or 30 s in all.
// Connections past max_connections: the longest idle one is closed; with none idle the new one gets 503.
// A worker's write waits for room at most write_seconds; once limit_stalled_writes(grace) was called (the
// server drains), at most `grace` as well, checked every kStallCheckMs while a write waits: a client that
// stopped reading then holds its worker, and the server's exit, for at most that grace. A client that reads,
// but less than min_drain_rate over a window of that limit spent waiting for it, fails the write as well.
//
// Listening: cpp-httplib's bind_to_port / bind_to_any_port bind the socket; serve() hands it to the reception
// thread, which accepts there (non-blocking, in the poll that reads the connections), and waits until
// stop_listening(). cpp-httplib's own listener is not used, nor its stop(): that stop does nothing until the
// listener's loop has started, so a stop that came first was lost and the listen that followed never
// returned. stop_listening() is kept whenever it comes: before serve() starts, serve() returns at once. As
// Server::stop() did, it also tells the answers still streaming that the server is shutting down
// (cpp-httplib's content providers stop once the listening socket is gone).
//
// Thread-safety: construct, bind, then serve() on one thread; stop_listening() and stop_connections() from
// any thread, at any time (also before serve()).
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
#include <utility>
#include <vector>

#include "serve/http/http_request_reader.h"

namespace orbit::serve {

struct FrontOptions {
  int workers = 64;  // requests routed and answered at once
  int header_seconds = 10;
  int body_seconds = 60;
  int keep_alive_seconds = 120;
  // A worker's write that makes no progress this long fails (the connection closes): a client that stopped
  // reading is dropped as one that left (`orbit serve --stall-seconds`).
  int write_seconds = 60;
  // Bytes per second a client must take while a write waits for room, over every window of waiting as long
  // as the stall limit (drain_rate.h), else the write fails as stalled: a client that trickles its reads is
  // dropped too (`orbit serve --min-drain-rate`). 0: not checked.
  int64_t min_drain_rate = 1024;
  std::size_t max_connections = 0;  // 0: half the process's descriptor limit
  RequestLimits limits;
};

struct FrontHooks {
  // GET /health's status and JSON body (also called for HEAD, once per request answered).
  std::function<std::pair<int, std::string>()> health;
  // A request the reception refused with `status` (`method` and `path` "" when its request line was not read).
  std::function<void(const std::string& method, const std::string& path, int status)> refused;
  // The JSON error body of a refusal.
  std::function<std::string(int status, const std::string& message)> error_body;
  // Header fields the answers written here (GET /health, refusals) carry beside their own, for the request's
  // Origin header ("" when it has none or its head was not read): the CORS fields (cors.h). Null: none.
  std::function<std::vector<std::pair<std::string, std::string>>(const std::string& origin)> answer_fields;
  // An answer a worker gave up writing because its client took nothing for write_seconds (or the stall limit
  // of limit_stalled_writes), `slow` false, or less than min_drain_rate, `slow` true. Null: not told.
  std::function<void(bool slow)> stalled;
};

struct FrontConnection;

class HttpFront : public httplib::Server {
 public:
  HttpFront(FrontOptions options, FrontHooks hooks);
  ~HttpFront() override;
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // After bind_to_port / bind_to_any_port: listens on the bound socket again with the system's backlog.
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's library), so when
  // more clients connect at once than that, the kernel drops the rest's SYNs and they connect only after TCP's
  // one-second retransmit (16 sessions opened together ran as two waves of 8); Linux updates the backlog of a
  // socket that already listens. Returns false when no socket is bound.
  bool widen_backlog();
  // Accepts connections on the bound socket (the reception thread does; this thread waits) until
  // stop_listening(). Returns true once stopped (at once when stop_listening() came first), false when the
  // listening socket failed or none was bound. Call it once.
  bool serve();
  // Ends serve() (now, or as soon as it starts) and accepts no more connections: the listening socket is
  // closed here when serve() has not taken it yet, else within the reception's next turn. Idempotent.
  void stop_listening();
  // stop_listening(), then closes the connections the reception holds, lets each worker finish the request
  // it answers and joins them. Idempotent.
  void stop_connections();
  // From now on a write that has made no progress for `grace` fails (its connection closes), also one
  // already waiting: min(grace, write_seconds) applies. A later call replaces the grace. Any thread.
  void limit_stalled_writes(std::chrono::milliseconds grace);
  // How often a waiting write looks at that limit.
  static constexpr int kStallCheckMs = 100;

 private:
  using Clock = std::chrono::steady_clock;
  // Out of descriptors or memory, accepting waits this long (the listening socket stays readable meanwhile).
  static constexpr std::chrono::milliseconds kAcceptPause{10};
  // serve() and stop_listening() replace these (see above).
  using httplib::Server::listen;
  using httplib::Server::listen_after_bind;
  using httplib::Server::stop;

  void reception_loop();
  int listener_for_turn();  // the listening socket to poll this turn, -1 for none; closes it once stopped
  void accept_arrivals(int listener, std::vector<std::unique_ptr<FrontConnection>>& held);
  void take_arrivals(std::vector<std::unique_ptr<FrontConnection>>& held);
  void on_readable(std::unique_ptr<FrontConnection>& c);
  void advance(std::unique_ptr<FrontConnection>& c);
  void answer_health(FrontConnection& c);
  std::string extra_fields(const FrontConnection& c) const;
  void refuse(FrontConnection& c, int status, const std::string& message);
  void expire(std::unique_ptr<FrontConnection>& c, Clock::time_point now);
  void admit(std::vector<std::unique_ptr<FrontConnection>>& held, std::unique_ptr<FrontConnection> c);
  int poll_timeout_ms(const std::vector<std::unique_ptr<FrontConnection>>& held, bool accept_paused) const;
  void wake();

  void worker_loop();
  bool answer(FrontConnection& c);  // true: keep the connection

  FrontOptions options_;
  FrontHooks hooks_;
  int wake_[2] = {-1, -1};  // a pipe: arrivals wake the reception's poll

  std::mutex mu_;  // guards the queues, stopping_ and the listener's state below
  std::condition_variable work_cv_;
  std::condition_variable listen_cv_;  // serve() waits on it for listen_stopped_
  int listener_ = -1;                  // the listening socket, from serve() until the reception closes it
  bool listener_taken_ = false;        // serve() took it: the reception closes it, stop_listening() does not
  bool listen_stopped_ = false;        // stop_listening() was called, or the listening socket failed
  bool listener_failed_ = false;
  Clock::time_point accept_paused_until_;                  // the reception thread's alone
  std::deque<std::unique_ptr<FrontConnection>> returned_;  // from workers, for the next request
  std::deque<std::unique_ptr<FrontConnection>> work_;      // complete requests for the workers
  bool stopping_ = false;
  std::atomic<std::size_t> in_workers_{0};  // connections handed to the workers, not yet back
  std::atomic<int64_t> stall_ms_{-1};       // limit_stalled_writes' grace in ms; -1: none (write_seconds)

  std::thread reception_;
  std::vector<std::thread> workers_;
};

}  // namespace orbit::serve
