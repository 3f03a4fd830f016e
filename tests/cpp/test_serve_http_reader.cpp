// How `orbit serve` reads a request off a connection before a worker sees it (cli/serve/http/http_request_reader.h):
// heads and bodies fed whole or a byte at a time read the same, chunked bodies are decoded and the head
// rewritten to a Content-Length, the limits refuse as bytes arrive (a chunked body past the limit at the
// chunk that passes it, holding at most the limit), malformed framing is refused with its status, and
// pipelined requests are read one after another; a head's lines may end in a bare LF, chunk lines may not; a
// field sent empty is named in the rewritten head (orbit-empty-field), which cpp-httplib would drop; a '%' in a
// header value goes on as "%25", which cpp-httplib's percent-decoding of header values turns back into '%'; an
// absolute-form target goes on in origin form.
#include <string>

#include "orbit_catch.h"
#include "serve/http/http_request_reader.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using State = sv::RequestReader::State;

namespace {

sv::RequestReader fed(const std::string& bytes, bool byte_at_a_time, sv::RequestLimits limits = {}) {
  sv::RequestReader reader(limits);
  if (byte_at_a_time) {
    for (char c : bytes) reader.feed(&c, 1);
  } else {
    reader.feed(bytes.data(), bytes.size());
  }
  return reader;
}

int refusal_of(const std::string& bytes, sv::RequestLimits limits = {}) {
  sv::RequestReader reader = fed(bytes, false, limits);
  return reader.state() == State::kRefused ? reader.refusal().status : 0;
}

}  // namespace

TEST_CASE("a request reads the same whole or a byte at a time", "[serve][cpu]") {
  const std::string chunked =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader r = fed(chunked, byte_at_a_time);
    REQUIRE(r.state() == State::kComplete);
    CHECK(r.request().method == "POST");
    CHECK(r.request().target == "/v1/completions?x=1");
    CHECK(r.request().path == "/v1/completions");
    CHECK(r.request().body == "hello world");
    CHECK(r.request().head == "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n");
    CHECK(r.request().keep_alive);
  }
  sv::RequestReader get = fed("\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n", true);
  REQUIRE(get.state() == State::kComplete);
  CHECK(get.request().head == "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");  // no body: no framing added
  CHECK(get.request().body.empty());
}

TEST_CASE("a line exactly at its limit reads the same when a read ends between its CR and LF", "[serve][cpu]") {
  // Trailers of exactly max_head_bytes (a 510-byte line and its CRLF), and a chunk size line of exactly 1024
  // bytes: a byte at a time, the read that ends on the CR must not count it as part of the line.
  const sv::RequestLimits limits{512, 1024};
  const std::string head = "POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string trailers = head + "1\r\nx\r\n0\r\nT: " + std::string(507, 't') + "\r\n\r\n";
  const std::string size_line = head + "1;" + std::string(1022, 'e') + "\r\nx\r\n0\r\n\r\n";
  for (const std::string& bytes : {trailers, size_line}) {
    for (bool byte_at_a_time : {false, true}) {
      sv::RequestReader r = fed(bytes, byte_at_a_time, limits);
      INFO("byte at a time: " << byte_at_a_time << (r.state() == State::kRefused ? ", " + r.refusal().message : ""));
      REQUIRE(r.state() == State::kComplete);
      CHECK(r.request().body == "x");
    }
  }
  // One byte more is refused either way.
  const std::string over = head + "1\r\nx\r\n0\r\nT: " + std::string(508, 't') + "\r\n\r\n";
  for (bool byte_at_a_time : {false, true}) CHECK(fed(over, byte_at_a_time, limits).refusal().status == 431);
}

TEST_CASE("pipelined requests are read one after another", "[serve][cpu]") {
  sv::RequestReader r =
      fed("POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.0\r\n\r\nGET /c HTTP/1.1\r\nHost: "
          "t\r\nConnection: "
          "close\r\n\r\nGE",
          false);
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().body == "abc");
  r.next();
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().path == "/b");
  CHECK_FALSE(r.request().keep_alive);  // HTTP/1.0 without keep-alive
  r.next();
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().path == "/c");
  CHECK_FALSE(r.request().keep_alive);
  r.next();
  CHECK(r.state() == State::kHead);
  const std::string rest = "T /d HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
  r.feed(rest.data(), rest.size());
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().keep_alive);
}

TEST_CASE("bodies past the limit are refused as they arrive", "[serve][cpu]") {
  const sv::RequestLimits limits{1024, 100};
  // A Content-Length past the limit: at once, before any body byte.
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n", limits) == 413);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n", limits) == 0);
  // A chunk that would pass it: at its size line, before its data.
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n", limits) ==
        413);
  // Many small chunks: at the one that passes the limit, holding no more than the limit.
  sv::RequestReader r(limits);
  const std::string head = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  r.feed(head.data(), head.size());
  int chunks = 0;
  while (r.state() == State::kBody) {
    const std::string chunk = "a\r\n0123456789\r\n";
    r.feed(chunk.data(), chunk.size());
    ++chunks;
  }
  CHECK(r.state() == State::kRefused);
  CHECK(r.refusal().status == 413);
  CHECK(chunks == 11);  // 10 chunks make 100 bytes; the 11th passes
  // Exactly the limit is accepted.
  sv::RequestReader exact = fed(head + "64\r\n" + std::string(100, 'x') + "\r\n0\r\n\r\n", false, limits);
  CHECK(exact.state() == State::kComplete);
}

TEST_CASE("heads past the limit and malformed framing are refused with their status", "[serve][cpu]") {
  const sv::RequestLimits limits{64, 1000};
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\nX: " + std::string(100, 'a'), limits) == 431);  // no end in sight
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\nX: " + std::string(100, 'a') + "\r\n\r\n", limits) == 431);
  const std::string chunked = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
  CHECK(refusal_of(chunked + "T: " + std::string(100, 'a') + "\r\n\r\n", limits) == 431);  // trailers, whole
  CHECK(refusal_of(chunked + "T: a\r\n\r\n", limits) == 0);
  // One line past what the HTTP library behind reads: 431 for a header line, 414 for the request line.
  const std::string at_limit = "X: " + std::string(sv::kMaxLineBytes - 5, 'a');  // with its CRLF: the limit
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\n" + at_limit + "\r\n\r\n") == 0);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\n" + at_limit + "a\r\n\r\n") == 431);
  const std::string long_target = "GET /" + std::string(sv::kMaxLineBytes, 'p') + " HTTP/1.1\r\nHost: t\r\n\r\n";
  CHECK(refusal_of(long_target) == 414);
  CHECK(refusal_of("GET /\r\n\r\n") == 400);
  CHECK(refusal_of("GET  / HTTP/1.1\r\nHost: t\r\n\r\n") == 400);
  CHECK(refusal_of("G(T / HTTP/1.1\r\nHost: t\r\n\r\n") == 400);
  CHECK(refusal_of("GET / HTTP/2.0\r\n\r\n") == 505);
  // A method the library behind does not route is named, not left to its bare 400; case matters. The server
  // is no proxy (CONNECT) and echoes nothing (TRACE).
  for (const char* method : {"FOO", "get", "PROPFIND", "PRI", "CONNECT", "TRACE"}) {
    INFO(method);
    sv::RequestReader reader = fed(std::string(method) + " / HTTP/1.1\r\nHost: t\r\n\r\n", false);
    REQUIRE(reader.state() == State::kRefused);
    CHECK(reader.refusal().status == 501);
    CHECK(reader.refusal().message.find("method '" + std::string(method) + "' is not implemented") == 0);
  }
  for (const char* method : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    INFO(method);
    CHECK(refusal_of(std::string(method) + " / HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
  }
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\nNo colon\r\n\r\n") == 400);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\n folded: x\r\n\r\n") == 400);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\nX: a\nb\r\n\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2, 2\r\n\r\nab") == 0);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n") == 501);
  // A compressed body is refused at its head: the library behind would inflate it unbounded.
  for (const char* coding : {"gzip", "deflate", "br", "GZIP", "identity, gzip"}) {
    INFO(coding);
    CHECK(refusal_of(std::string("POST / HTTP/1.1\r\nHost: t\r\nContent-Encoding: ") + coding +
                     "\r\nContent-Length: 1\r\n\r\n") == 415);
  }
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nContent-Encoding: identity\r\nContent-Length: 1\r\n\r\nx") == 0);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n") == 400);
  CHECK(refusal_of("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(2000, '1')) == 400);
}

TEST_CASE("Expect: 100-continue is answered once, before the body, and dropped from the head", "[serve][cpu]") {
  const std::string head = "POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  sv::RequestReader r = fed(head, false);
  CHECK(r.state() == State::kBody);
  CHECK(r.take_continue());
  CHECK_FALSE(r.take_continue());
  r.feed("ok", 2);
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().head == "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n");
  sv::RequestReader sent_along = fed(head + "o", false);  // the client did not wait: nothing to answer
  CHECK_FALSE(sent_along.take_continue());
  CHECK(refusal_of("POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 9999999\r\n\r\n") == 413);
  // Any other expectation is refused, 417, where it was served as if not sent.
  CHECK(refusal_of("POST /x HTTP/1.1\r\nHost: t\r\nExpect: foo\r\nContent-Length: 2\r\n\r\nok") == 417);
  CHECK(refusal_of("POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nok") == 0);
}

TEST_CASE("an HTTP/1.0 request's Expect: 100-continue is ignored: no 1xx goes to a 1.0 client", "[serve][cpu]") {
  // RFC 9110 §10.1.1. Before, the server sent "HTTP/1.1 100 Continue" to it, which a 1.0 client reads as
  // the answer's status line.
  sv::RequestReader r = fed("POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", false);
  CHECK(r.state() == State::kBody);
  CHECK_FALSE(r.take_continue());
  r.feed("ok", 2);
  REQUIRE(r.state() == State::kComplete);
  CHECK(r.request().head == "POST /x HTTP/1.0\r\nContent-Length: 2\r\n\r\n");
}

TEST_CASE("an unfinished head names its path once its request line arrived", "[serve][cpu]") {
  sv::RequestReader r = fed("POST /v1/chat/completions?a=b HTTP/1.1\r\nHost:", false);
  CHECK(r.state() == State::kHead);
  CHECK(r.path() == "/v1/chat/completions");
  CHECK(fed("POST /v1/chat/compl", false).path().empty());
}

TEST_CASE("an absolute-form target is read, and passed on, as its path and query", "[serve][cpu]") {
  // RFC 9112 §3.2.2: a server MUST accept the absolute form (a proxy's); the library behind routes the target
  // as sent, so the head it gets carries the origin form.
  const std::string head = "POST HTTP://127.0.0.1:8080/v1/completions?x=1&y=http://a/b HTTP/1.1\r\nHost: a\r\n";
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader r = fed(head + "Content-Length: 2\r\n\r\nok", byte_at_a_time);
    REQUIRE(r.state() == State::kComplete);
    CHECK(r.request().target == "/v1/completions?x=1&y=http://a/b");
    CHECK(r.request().path == "/v1/completions");
    CHECK(r.request().head == "POST /v1/completions?x=1&y=http://a/b HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n");
  }
  CHECK(fed("GET https://user@example.com HTTP/1.1\r\nHost: t\r\n\r\n", false).request().head ==
        "GET / HTTP/1.1\r\nHost: t\r\n\r\n");
  CHECK(fed("GET http://a:1?q=1 HTTP/1.1\r\nHost: t\r\n\r\n", false).request().target == "/?q=1");
  CHECK(fed("GET http://a:1/health HTTP/1.0\r\n\r\n", false).request().path == "/health");
  CHECK(fed("POST http://a:1/v1/chat/completions?a=b HTTP/1.1\r\nHost:", false).path() == "/v1/chat/completions");
  // Not an absolute form: passed on as sent (the routes answer 404).
  CHECK(fed("GET http:/x HTTP/1.1\r\nHost: t\r\n\r\n", false).request().target == "http:/x");
  CHECK(fed("GET ftp://a/x HTTP/1.1\r\nHost: t\r\n\r\n", false).request().target == "ftp://a/x");
}

TEST_CASE("a head whose lines end in a bare LF is read; chunk lines that do are refused at once", "[serve][cpu]") {
  // RFC 9112 §2.2: a recipient may take a bare LF as a line's end. The head behind has CRLF throughout.
  const std::string mixed = "\nPOST /v1/completions HTTP/1.1\nHost: a\r\nContent-Length: 2\n\nok";
  for (const std::string& bytes : {mixed, std::string("GET /health HTTP/1.1\nHost: a\n\r\n")}) {
    for (bool byte_at_a_time : {false, true}) {
      sv::RequestReader r = fed(bytes, byte_at_a_time);
      INFO(bytes << (r.state() == State::kRefused ? ", " + r.refusal().message : ""));
      REQUIRE(r.state() == State::kComplete);
      CHECK(r.request().head.find('\n') == r.request().head.find("\r\n") + 1);
      CHECK(r.request().head.find("Host: a\r\n") != std::string::npos);
      CHECK(r.request().head.substr(r.request().head.size() - 4) == "\r\n\r\n");
    }
  }
  sv::RequestReader r = fed(mixed, false);
  CHECK(r.request().head == "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n");
  CHECK(r.request().body == "ok");
  sv::RequestReader bare = fed("GET / HTTP/1.1\nHost: t\n\n", true);
  REQUIRE(bare.state() == State::kComplete);
  CHECK(bare.request().head == "GET / HTTP/1.1\r\nHost: t\r\n\r\n");
  // A CR alone inside a line is still malformed, and chunked framing takes CRLF only: refused, not waited for.
  CHECK(refusal_of("GET / HTTP/1.1\nHost: t\nX: a\rb\n\n") == 400);
  const std::string chunked = "POST / HTTP/1.1\nHost: t\nTransfer-Encoding: chunked\n\n";
  CHECK(refusal_of(chunked + "2\nok\r\n0\r\n\r\n") == 400);
  CHECK(refusal_of(chunked + "2\r\nok\r\n0\r\nT: x\n") == 400);
  CHECK(refusal_of(chunked + "2\r\nok\r\n0\r\n\r\n") == 0);
}

TEST_CASE("the Origin header is kept for the answer, a refusal of the head's framing included", "[serve][cpu]") {
  // The CORS fields of an answer the front writes itself (a 413 or 415) need the request's Origin: a 415 is
  // refused once the head's other lines are read, so an Origin after Content-Encoding is known too.
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader ok =
        fed("GET /v1/models HTTP/1.1\r\nHost: t\r\nOrigin: http://localhost:5173\r\n\r\n", byte_at_a_time);
    REQUIRE(ok.state() == State::kComplete);
    CHECK(ok.origin() == "http://localhost:5173");
    CHECK(ok.request().head.find("Origin: http://localhost:5173\r\n") != std::string::npos);  // kept for routes
    sv::RequestReader gzip =
        fed("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\nOrigin: "
            "http://a.test\r\nContent-Length: 1\r\n\r\n",
            byte_at_a_time);
    REQUIRE(gzip.state() == State::kRefused);
    CHECK(gzip.refusal().status == 415);
    CHECK(gzip.origin() == "http://a.test");
    sv::RequestReader big =
        fed("POST /v1/completions HTTP/1.1\r\nHost: t\r\nOrigin: http://a.test\r\nContent-Length: 99\r\n\r\n",
            byte_at_a_time, sv::RequestLimits{1024, 10});
    REQUIRE(big.state() == State::kRefused);
    CHECK(big.refusal().status == 413);
    CHECK(big.origin() == "http://a.test");
  }
  sv::RequestReader pipelined =
      fed("GET /a HTTP/1.1\r\nHost: t\r\nOrigin: http://a.test\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n",
          false);  // origins do not carry over
  REQUIRE(pipelined.state() == State::kComplete);
  CHECK(pipelined.origin() == "http://a.test");
  pipelined.next();
  REQUIRE(pipelined.state() == State::kComplete);
  CHECK(pipelined.request().path == "/b");
  CHECK(pipelined.origin().empty());
}

TEST_CASE("a field sent empty is named in the rewritten head; a request may not name one itself", "[serve][cpu]") {
  // cpp-httplib drops a field without a value, so "X-Orbit-Session:" would reach the route as no header at all.
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader r =
        fed("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Orbit-Session:\r\nAccept: \t \r\n\r\n", byte_at_a_time);
    REQUIRE(r.state() == State::kComplete);
    CHECK(r.request().head ==
          "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\norbit-empty-field: X-Orbit-Session\r\norbit-empty-field: "
          "Accept\r\n\r\n");
  }
  sv::RequestReader forged =
      fed("GET /v1/models HTTP/1.1\r\nHost: t\r\nOrbit-Empty-Field: X-Orbit-Session\r\n\r\n", false);
  REQUIRE(forged.state() == State::kRefused);
  CHECK(forged.refusal().status == 400);
  CHECK(forged.refusal().message.find("Orbit-Empty-Field") != std::string::npos);
  sv::RequestReader kept = fed("GET /v1/models HTTP/1.1\r\nHost: t\r\nX-Orbit-Session: s1\r\n\r\n", false);
  REQUIRE(kept.state() == State::kComplete);
  CHECK(kept.request().head == "GET /v1/models HTTP/1.1\r\nHost: t\r\nX-Orbit-Session: s1\r\n\r\n");
}

TEST_CASE("Range and If-Range are dropped from the head: every answer goes whole", "[serve][cpu]") {
  // The library behind answered each range listed with a copy of the answer: "bytes=0-,0-,..." multiplied it.
  std::string ranges = "bytes=0-";
  for (int i = 1; i < 1500; ++i) ranges += ",0-";
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader r =
        fed("GET /metrics HTTP/1.1\r\nHost: a\r\nRange: bytes=0-10\r\nIf-Range: \"x\"\r\n"
            "X-After: b\r\nrange: " +
                ranges + "\r\n\r\n",
            byte_at_a_time);
    REQUIRE(r.state() == State::kComplete);
    CHECK(r.request().head == "GET /metrics HTTP/1.1\r\nHost: a\r\nX-After: b\r\n\r\n");
  }
}

TEST_CASE("a '%' in a header goes on as %25, so the route reads the value as sent", "[serve][cpu]") {
  // cpp-httplib 0.11 percent-decodes header values: "ab%2Dcd" would reach the route as the session "ab-cd".
  for (bool byte_at_a_time : {false, true}) {
    sv::RequestReader r =
        fed("POST /v1/chat/completions%2F HTTP/1.1\r\nHost: t\r\nX-Orbit-Session: ab%2Dcd\r\nAuthorization: Bearer "
            "k%41%\r\n"
            "X-Sessio%6E:\r\n\r\n",
            byte_at_a_time);
    REQUIRE(r.state() == State::kComplete);
    CHECK(r.request().path == "/v1/chat/completions%2F");  // the target is a URL: decoding it is right
    CHECK(r.request().head ==
          "POST /v1/chat/completions%2F HTTP/1.1\r\nHost: t\r\nX-Orbit-Session: ab%252Dcd\r\nAuthorization: Bearer "
          "k%2541%25\r\norbit-empty-field: X-Sessio%256E\r\n\r\n");
  }
  // A line the library would read whole as sent but not escaped: each '%' counts as 3 bytes against its limit.
  const std::string fits = "X: " + std::string(sv::kMaxLineBytes - 5, 'a');
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\n" + fits + "\r\n\r\n") == 0);
  const std::string escaped = "X: %" + std::string(sv::kMaxLineBytes - 8, 'a');  // 8190 bytes once escaped
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: t\r\n" + escaped + "\r\n\r\n") == 0);
  sv::RequestReader over =
      fed("GET / HTTP/1.1\r\nHost: t\r\nX: %" + std::string(sv::kMaxLineBytes - 7, 'a') + "\r\n\r\n", false);
  REQUIRE(over.state() == State::kRefused);
  CHECK(over.refusal().status == 431);
  CHECK(over.refusal().message.find("'X'") != std::string::npos);
  CHECK(over.refusal().message.find("%25") != std::string::npos);
}

TEST_CASE("an HTTP/1.1 request carries one Host header holding a host[:port] (RFC 9112 3.2)", "[serve][cpu]") {
  for (bool byte_at_a_time : {false, true}) {
    INFO(byte_at_a_time);
    sv::RequestReader none = fed("GET /health HTTP/1.1\r\nAccept: */*\r\n\r\n", byte_at_a_time);
    REQUIRE(none.state() == State::kRefused);
    CHECK(none.refusal().status == 400);
    CHECK(none.refusal().message == "an HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)");
    sv::RequestReader two = fed("GET /health HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", byte_at_a_time);
    REQUIRE(two.state() == State::kRefused);
    CHECK(two.refusal().status == 400);
    CHECK(two.refusal().message.find("one Host header") != std::string::npos);
    sv::RequestReader bad = fed("GET /health HTTP/1.1\r\nHost: a b/c\r\n\r\n", byte_at_a_time);
    REQUIRE(bad.state() == State::kRefused);
    CHECK(bad.refusal().message == "Host 'a b/c' is not a host[:port]");
  }
  // The same values a second time, the same answer: the count is per request, not per connection.
  sv::RequestReader pipelined = fed("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n", false);
  REQUIRE(pipelined.state() == State::kComplete);
  pipelined.next();
  CHECK(pipelined.state() == State::kComplete);
  CHECK(pipelined.request().path == "/b");
  for (const char* host : {"", "a", "127.0.0.1:8080", "[::1]:8080", "xn--bcher-kva.example", "a%2Eb"}) {
    INFO(host);
    CHECK(refusal_of(std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\n\r\n") == 0);
  }
  CHECK(refusal_of("GET / HTTP/1.0\r\n\r\n") == 0);  // HTTP/1.0 has no Host requirement
  CHECK(refusal_of("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n") == 400);
  CHECK(refusal_of("GET http://a:1/x HTTP/1.1\r\nHost: b\r\n\r\n") == 0);  // the target's authority wins
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: a@b\r\n\r\n") == 400);
}

}  // namespace ORBIT_TEST_FILE
