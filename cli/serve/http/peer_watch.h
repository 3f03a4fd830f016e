// Whether the client of an HTTP connection has gone away, asked between forwards. cpp-httplib does not hand
// a handler its socket, so PeerWatch finds it once among the process's descriptors (the socket whose
// local and peer ports are the request's), then peeks at it without blocking: end of stream (the client
// closed its end) or an error (reset) means gone; no data yet, or data (a pipelined request), means still
// there. A client that shuts down only its sending side after the request looks gone too. Where the socket
// cannot be found it never says gone (a streamed response still notices a client that left when a write
// fails).
#pragma once

namespace orbit::serve {

class PeerWatch {
 public:
  // Finds the connection's socket (local_port, remote_port as the request reports them).
  PeerWatch(int local_port, int remote_port);
  bool gone();  // one non-blocking peek; stays true once true
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  bool gone_ = false;
};

}  // namespace orbit::serve
