// Whether the client of an HTTP connection has gone away, asked between forwards. cpp-httplib does not hand
// a handler its socket: HttpFront, which owns the connections, names it for the thread answering its request
// (ConnectionScope), and PeerWatch takes it from there, then looks at it without blocking: a reset, or both
// directions closed (poll's POLLHUP/POLLERR), means gone; no data yet, or data (a pipelined request), means
// still there. (It used to search the process's descriptors for the socket whose local and peer ports were the
// request's: two clients on different addresses can use the same port, and a request then watched, and wrote
// its probe into, the other's connection.)
//
// End of stream (the client's FIN) is ambiguous: a client that closed its socket sends it, and so does one that
// only shut down its sending side after its request (a half-close, shutdown(SHUT_WR), which HTTP/1.1 permits;
// some proxies and tools do it) and waits for the answer. Nothing on the wire tells them apart until the server
// sends a byte: a socket that still reads takes it, a closed one answers with a reset. So at the first end of
// stream gone() writes a probe once, bytes the client's parser reads past:
//   probe_with_continue()  an answer whose head has not gone out: an interim "HTTP/1.1 100 Continue"
//                          (RFC 9110 §15.2: an HTTP/1.1 client reads any number of 1xx before the answer)
//   probe_with_comment(w)  a stream under way: `w` sends the SSE comment ": ping", which clients skip
// and from then on reports gone only once the reset came back (a later call). Without a probe (an HTTP/1.0
// request, which must not be sent a 1xx) end of stream means gone. A probe waits while the socket has no room
// (not gone meanwhile). Outside a ConnectionScope it never says gone (a streamed response still notices a
// client that left when a write fails).
//
// Thread-safety: none; the request's thread constructs it, sets its probe and asks gone() (the probe writes on
// that thread, between the answer's own writes).
#pragma once

#include <functional>
#include <string>

namespace orbit::serve {

// The socket of the connection whose request this thread answers, for the scope's life (HttpFront, around
// each request it hands cpp-httplib); scopes nest. current_connection(): that socket, -1 outside any scope.
class ConnectionScope {
 public:
  explicit ConnectionScope(int fd);
  ~ConnectionScope();
  ConnectionScope(const ConnectionScope&) = delete;
  ConnectionScope& operator=(const ConnectionScope&) = delete;

 private:
  int previous_;
};
int current_connection();

class PeerWatch {
 public:
  // Watches the connection this thread answers (current_connection()). No probe.
  PeerWatch();
  // The probe for an answer nothing of which was written yet (HTTP/1.1 requests only): "HTTP/1.1 100
  // Continue\r\n\r\n" straight to the socket.
  void probe_with_continue();
  // The probe for a stream under way: `write` sends ": ping\n\n" as the stream's next piece (false: it
  // failed). `write` must stay callable until no_probe().
  void probe_with_comment(std::function<bool(const std::string&)> write);
  void no_probe();  // end of stream means gone again

  bool gone();  // one non-blocking look (and the probe, at most once); stays true once true
  bool found() const { return fd_ >= 0; }

 private:
  // What a probe did: sent its bytes whole; found no room (nothing sent: it is tried again at the next look);
  // failed (the client left, or a part went out and the connection was ended: gone either way).
  enum class Sent { kWhole, kNoRoom, kFailed };
  using Probe = std::function<Sent()>;

  void probe_now();  // writes the probe when the socket has room; sets probed_, or gone_ when it failed

  int fd_ = -1;
  bool gone_ = false;
  bool probed_ = false;  // the probe went out: only a reset (or an error) means gone now
  Probe probe_;
};

}  // namespace orbit::serve
