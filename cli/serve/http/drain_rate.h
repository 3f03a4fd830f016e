// DrainRate: whether a client that `orbit serve` waits on takes its answer fast enough
// (`--min-drain-rate`, FrontOptions::min_drain_rate). No sockets: the worker's write (http_front_worker.cpp)
// feeds it the time it waited for room in the socket and the bytes the client has taken so far.
//
// The stall limit alone (`--stall-seconds`) fails a write only when it makes no progress for the whole
// limit, so a client that reads a little before each limit runs out (a few KiB a minute) kept its worker,
// its held decode sequences and its unsent backlog indefinitely. The rate counts only time the server
// waited for room, that is time in which it had bytes for the client and the client's side of the
// connection took none of them faster: over every window of that waiting as long as the stall limit, the
// client must have taken at least rate x window bytes, else the answer is given up as stalled.
//
//   waiting for room:   |==== window ====|==== window ====|==   (time between waits is not counted)
//   taken since start:  >= rate x window >= rate x window ...
//
// A client on a slow but healthy network takes what the network carries while the server waits, so it is
// cut only where its network carries less than the rate (the default, 1 KiB/s, is 8 kbit/s: below GPRS). A
// client the server never waits on (one that keeps up) is never measured. Bytes a window's client took
// while the server was not waiting count for that window (they only help the client).
//
// Thread-safety: none (one write's own).
#pragma once

#include <cstdint>

namespace orbit::serve {

class DrainRate {
 public:
  // `bytes_per_second`: the least a client must take while the server waits on it; 0 turns the check off.
  explicit DrainRate(int64_t bytes_per_second) : rate_(bytes_per_second) {}

  // The server waited `waited_us` more microseconds for room (a wait's every slice, the last one included,
  // however short: a client that frees room often makes many short waits); `taken`: the bytes the client
  // has taken so far (a count that only grows, from any origin: only differences are read); `window_us`:
  // the window (the stall limit that applies now, > 0). Returns false once a window of waiting has ended
  // with less than rate x window bytes taken since it began; true otherwise (then a window that ended
  // starts the next one).
  bool waited(int64_t waited_us, int64_t taken, int64_t window_us) {
    if (rate_ <= 0 || window_us <= 0) return true;
    if (!started_) {
      started_ = true;
      from_ = taken;
    }
    waited_us_ += waited_us;
    if (waited_us_ < window_us) return true;
    // rate x window in bytes, compared in doubles: exact for the counts here, and no overflow for any window
    // up to a day at rates up to 1 GiB/s (cmd_serve.cpp bounds both).
    const bool enough = static_cast<double>(taken - from_) * 1e6 >= static_cast<double>(rate_) * window_us;
    waited_us_ = 0;
    from_ = taken;
    return enough;
  }
  int64_t rate() const { return rate_; }

 private:
  int64_t rate_;
  bool started_ = false;
  int64_t waited_us_ = 0;  // waiting in the current window
  int64_t from_ = 0;       // `taken` when the current window began
};

}  // namespace orbit::serve
