// One connection HttpFront holds (http_front.h), and the socket helpers its threads share.
// A connection belongs to one thread at a time: the reception thread while it is read, a worker while its
// request is answered; it moves between them through HttpFront's queues.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "serve/http/http_request_reader.h"

namespace orbit::serve {

struct FrontConnection {
  using Clock = std::chrono::steady_clock;
  enum class Phase {
    kWaiting,    // between requests (keep-alive deadline)
    kReading,    // a request started (the head's deadline, then the body's)
    kLingering,  // refused: its further bytes are dropped until the linger ends
  };

  FrontConnection(int socket, const RequestLimits& limits) : fd(socket), reader(limits) {}
  ~FrontConnection() { close(); }
  FrontConnection(const FrontConnection&) = delete;
  FrontConnection& operator=(const FrontConnection&) = delete;

  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  // The request answered: read the next one (from bytes already received, if any).
  void await_next(Clock::time_point idle_deadline) {
    reader.next();
    phase = Phase::kWaiting;
    in_body = false;
    deadline = idle_deadline;
  }

  int fd = -1;
  RequestReader reader;
  Phase phase = Phase::kWaiting;
  Clock::time_point deadline;
  bool in_body = false;          // the deadline is the body's
  std::size_t discarded = 0;     // bytes dropped while lingering
  std::size_t linger_bytes = 0;  // ... at most
  Clock::time_point linger_end;  // the linger's end, however steadily the bytes come
};

// Sends all of `bytes` on a non-blocking socket without waiting (a short answer to a client that reads);
// false when it could not (the client is not reading, or left).
bool send_now(int fd, const std::string& bytes);

// "OK", "Request Timeout", ... for the statuses the front answers itself.
const char* reason_phrase(int status);

}  // namespace orbit::serve
