// One HTTP/1.1 request read from the bytes a connection delivers, incrementally and before any worker sees
// it (http_front.h reads every connection this way on one thread, so a slow client costs a buffer, not a
// worker). No sockets: tests and the fuzz target feed it bytes.
//
//   idle ──first byte──► head ──blank line──► body (Content-Length bytes, or chunks decoded) ──► complete
//                         │                    │
//                         └──────── refused (a status and a message; the connection is then closed) ◄┘
//
// What it refuses, before reading more than the limits:
//   431  a head (request line and headers) over RequestLimits::max_head_bytes without its blank line, or a
//        header line over kMaxLineBytes (with its CRLF; the HTTP library behind reads no longer line), each
//        '%' counted as the 3 bytes it is passed on as (see below)
//   414  a request line over kMaxLineBytes
//   413  a Content-Length over max_body_bytes (at once, nothing of the body read), or a chunked body whose
//        decoded bytes pass max_body_bytes (at the chunk that passes it: at most the limit is held)
//   501  a Transfer-Encoding other than chunked
//   415  a Content-Encoding other than identity (gzip, deflate, br: the library behind would inflate the body
//        whole, unbounded, before the body limit is checked), once the head's other lines are read
//   400  a malformed request line, header line, Content-Length, chunk size or chunk ending; a chunk size or
//        trailer line ending in a bare LF; both Content-Length and Transfer-Encoding (a request smuggling
//        vector); differing Content-Lengths; an HTTP/1.1 request without a Host header, any request with two, or
//        a Host value that is no host[:port] (RFC 9112 §3.2)
// The head's lines may end in a bare LF as well as CRLF (RFC 9112 §2.2); chunked framing takes CRLF only.
// A complete request's head is rewritten for the HTTP library behind it: Transfer-Encoding, Content-Length
// and "Expect: 100-continue" are dropped and, where the request had a body's framing, one Content-Length of
// the decoded body added, so the library reads a plain body of known length and never waits on the socket; a
// Content-Type of application/x-www-form-urlencoded is dropped (the body goes to the routes as sent: every body
// they take is JSON), as are Range and If-Range.
// A header field sent with an empty value (nothing but blanks after its colon), which cpp-httplib 0.11
// drops, becomes a field kEmptyFieldHeader whose value is its name as sent, so a route can tell "sent empty"
// from "not sent" (orbit serve refuses an empty X-Orbit-Session); a request that sends kEmptyFieldHeader
// itself is refused (400). Every '%' of a header value (and of a field name sent empty) goes to the library
// as "%25": cpp-httplib 0.11 percent-decodes header values, and decodes that back, so a route reads each
// value as it was sent ("X-Orbit-Session: ab%2Dcd" is that id, not "ab-cd").
// A target in absolute form ("GET http://127.0.0.1:8080/v1/models?x=1 HTTP/1.1", as a proxy sends it), which
// a server MUST accept (RFC 9112 §3.2.2), is read, and passed on in the head, in origin form ("/v1/models?x=1";
// "/" where it has no path): the library behind would route the whole URI and find no route. Its authority is
// not checked: the server has no notion of its own name and answers any Host.
// Bytes past a complete request (a pipelined next one) are kept: next() starts reading them.
// Thread-safety: none; one connection's reader is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace orbit::serve {

// The longest request line or header line, CRLF included, that the HTTP library behind the reader takes.
inline constexpr std::size_t kMaxLineBytes = 8192;
// The field of the rewritten head that names a field sent with an empty value (lowercase, as compared).
inline constexpr const char* kEmptyFieldHeader = "orbit-empty-field";

struct RequestLimits {
  std::size_t max_head_bytes = std::size_t{64} << 10;  // request line and headers, with their blank line
  std::size_t max_body_bytes = std::size_t{4} << 20;   // the body (decoded from chunks)
};

// A complete request.
struct ReadRequest {
  std::string method;      // as sent ("GET", "POST", ...)
  std::string target;      // the path and any query, in origin form ("/health", "/v1/models?x=1")
  std::string path;        // the target up to '?'
  bool keep_alive = true;  // HTTP/1.1 without "Connection: close", or HTTP/1.0 with "Connection: keep-alive"
  std::string head;        // the rewritten head (see above), ending in "\r\n\r\n"
  std::string origin;      // the Origin header's value ("" without one); also kept for a refusal after the head
  std::string body;        // decoded
};

struct ReadRefusal {
  int status = 400;
  std::string message;
  // A 413 for a Content-Length over the limit: that length, the body its client sends anyway (0 otherwise).
  uint64_t declared_body = 0;
};

class RequestReader {
 public:
  enum class State { kIdle, kHead, kBody, kComplete, kRefused };

  explicit RequestReader(RequestLimits limits = {});

  // Takes `n` received bytes and reads as far as they allow. In kComplete and kRefused bytes are only kept.
  void feed(const char* data, std::size_t n);
  State state() const { return state_; }
  // The head of an HTTP/1.1 request asked for "Expect: 100-continue" and none of its body arrived yet: true
  // once, when the caller should answer "100 Continue" (an HTTP/1.0 request's expectation is ignored).
  bool take_continue();
  const ReadRequest& request() const { return request_; }  // kComplete
  const ReadRefusal& refusal() const { return refusal_; }  // kRefused
  // The path of the request being read or refused ("" before its request line was read).
  const std::string& path() const { return request_.path; }
  // Its method, "" likewise.
  const std::string& method() const { return request_.method; }
  // The Origin header of the request being read or refused: "" before its head was read, or without one (a
  // header line refused as malformed ends the reading of those after it). A refusal of the head's framing
  // (413, 415, 501, conflicting lengths) has it, so its answer can carry CORS fields (cors.h).
  const std::string& origin() const { return request_.origin; }
  // After kComplete: forgets the request and reads the bytes received past it (the next request).
  void next();

 private:
  void advance();
  bool read_head();
  bool parse_head(std::size_t end);
  bool parse_headers(std::size_t begin, std::size_t end);
  bool keep_line(const std::string& line);
  bool read_length_body();
  bool read_chunked_body();
  bool read_chunk_size(std::size_t line_end);
  bool read_trailers();
  std::size_t line_so_far(std::size_t eol) const;
  struct LineAhead {
    std::size_t eol;
    std::size_t length;
    bool bare_lf;
  };
  LineAhead line_ahead() const;
  void complete();
  bool refuse(int status, std::string message);
  void compact();

  enum class Chunk { kSize, kData, kDataEnd, kTrailers };

  RequestLimits limits_;
  State state_ = State::kIdle;
  std::string in_;  // received bytes; in_[pos_, end) not yet read
  std::size_t pos_ = 0;
  std::size_t scanned_ = 0;  // in the head: where the search for its end resumes
  ReadRequest request_;
  ReadRefusal refusal_;
  bool chunked_ = false;
  bool framed_ = false;  // the request had Content-Length or Transfer-Encoding
  Chunk chunk_ = Chunk::kSize;
  std::size_t trailer_bytes_ = 0;  // the trailers read so far
  uint64_t remaining_ = 0;         // body bytes (Content-Length) or bytes of the current chunk still to come
  bool continue_pending_ = false;
  bool http11_ = false;  // the request being read is HTTP/1.1 (not 1.0)
};

}  // namespace orbit::serve
