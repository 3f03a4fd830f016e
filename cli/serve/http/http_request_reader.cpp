#include "serve/http/http_request_reader.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace orbit::serve {

namespace {

constexpr std::size_t kMaxChunkLine = 1024;  // a chunk size with its extensions

bool is_tchar(char c) {  // RFC 9110's token characters
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

// The methods the HTTP library behind routes (it answers any other, CONNECT and TRACE among them, with a bare
// 400 "HTTP status 400"); those no route serves get 405 with Allow there. HTTP/2's PRI never arrives here:
// its version is refused first.
bool is_known_method(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    if (method == known) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The origin form of a request target (RFC 9112 §3.2.2): an absolute-form target ("http://host:port/path?q",
// as a proxy sends it; scheme compared case-insensitively) becomes its path and query, "/" where it has no
// path ("http://host?q" is "/?q"); any other target is returned as it is. The authority is not checked: the
// server has no notion of its own name (it answers any Host header), so it takes the path from any.
std::string origin_form(std::string_view target) {
  std::size_t authority = 0;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && lower(target.substr(0, scheme.size())) == scheme) authority = scheme.size();
  }
  if (authority == 0) return std::string(target);
  const std::size_t path = target.find_first_of("/?", authority);
  if (path == std::string_view::npos) return "/";
  return (target[path] == '/' ? "" : "/") + std::string(target.substr(path));
}

// A Host value as RFC 9112 section 3.2 writes it, uri-host [":" port]: the characters of a reg-name, an IPv4
// address or an IP-literal in brackets, and the port's colon and digits; empty is allowed (no authority).
bool is_host_value(std::string_view value) {
  return std::all_of(value.begin(), value.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-._~%!$&'()*+,;=:[]").find(c) != std::string_view::npos;
  });
}

// Whether a comma-separated header value (Connection's) holds `token`, case-insensitively.
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    if (lower(trim(value.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// A Content-Length value: digits only (a list of equal values is one value), at most 18 of them.
bool parse_length(std::string_view value, uint64_t* out) {
  bool any = false;
  while (true) {
    const std::size_t comma = value.find(',');
    const std::string_view item = trim(value.substr(0, comma));
    if (item.empty() || item.size() > 18 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    const uint64_t n = std::stoull(std::string(item));
    if (any && n != *out) return false;
    *out = n;
    any = true;
    if (comma == std::string_view::npos) return true;
    value.remove_prefix(comma + 1);
  }
}

// Where the head in `in` that starts at `begin` ends, just past its blank line, searching for the end from
// `from`; npos while it has not arrived. A line ends in LF, with or without a CR before it (RFC 9112 §2.2 lets
// a recipient take a bare LF as a line's end; the rewritten head has CRLF throughout).
std::size_t head_end(const std::string& in, std::size_t begin, std::size_t from) {
  for (std::size_t lf = in.find('\n', std::max(begin, from)); lf != std::string::npos; lf = in.find('\n', lf + 1)) {
    if (lf + 1 < in.size() && in[lf + 1] == '\n') return lf + 2;
    if (lf + 2 < in.size() && in[lf + 1] == '\r' && in[lf + 2] == '\n') return lf + 3;
  }
  return std::string::npos;
}

// The line in `text` that starts at `at` and ends at `lf` (its LF), less a CR before that LF.
std::string_view line_before(std::string_view text, std::size_t at, std::size_t lf) {
  const std::size_t end = lf > at && text[lf - 1] == '\r' ? lf - 1 : lf;
  return text.substr(at, end - at);
}

// `text` for the head behind: cpp-httplib 0.11 percent-decodes every header value it reads ("ab%2Dcd" reached
// the routes as "ab-cd"), so each '%' goes as "%25", which it decodes back: the routes see the value as sent.
std::string percent_kept(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

RequestReader::RequestReader(RequestLimits limits) : limits_(limits) {}

void RequestReader::feed(const char* data, std::size_t n) {
  in_.append(data, n);
  advance();
}

bool RequestReader::take_continue() {
  if (!continue_pending_ || state_ != State::kBody) return false;
  continue_pending_ = false;
  return true;
}

void RequestReader::next() {
  request_ = ReadRequest{};
  chunked_ = false;
  framed_ = false;
  trailer_bytes_ = 0;
  chunk_ = Chunk::kSize;
  remaining_ = 0;
  continue_pending_ = false;
  state_ = State::kIdle;
  advance();
}

void RequestReader::advance() {
  bool progress = true;
  while (progress) {
    switch (state_) {
      case State::kIdle:
      case State::kHead: progress = read_head(); break;
      case State::kBody: progress = chunked_ ? read_chunked_body() : read_length_body(); break;
      default: progress = false;
    }
  }
  compact();
}

bool RequestReader::refuse(int status, std::string message) {
  refusal_ = ReadRefusal{status, std::move(message)};
  state_ = State::kRefused;
  return false;
}

void RequestReader::compact() {
  if (pos_ == 0 || (pos_ < in_.size() && pos_ < (std::size_t{64} << 10))) return;
  in_.erase(0, pos_);
  scanned_ = scanned_ > pos_ ? scanned_ - pos_ : 0;
  pos_ = 0;
}

bool RequestReader::read_head() {
  if (state_ == State::kIdle) {  // empty lines before a request are ignored (RFC 9112 §2.2)
    while (true) {
      if (in_.compare(pos_, 1, "\n") == 0) {
        pos_ += 1;
      } else if (in_.compare(pos_, 2, "\r\n") == 0) {
        pos_ += 2;
      } else {
        break;
      }
    }
    if (pos_ == in_.size() || (in_.size() - pos_ == 1 && in_[pos_] == '\r')) return false;
    state_ = State::kHead;
    scanned_ = pos_;
  }
  const std::size_t end = head_end(in_, pos_, scanned_);
  if (end == std::string::npos) {
    scanned_ = std::max(pos_, in_.size() >= 2 ? in_.size() - 2 : 0);  // an LF there may begin the blank line
    if (request_.path.empty()) {  // the path, for a refusal of the unfinished head to name
      const std::size_t eol = in_.find('\n', pos_);
      const std::size_t a = eol == std::string::npos ? eol : in_.find(' ', pos_);
      if (a < eol) {
        const std::size_t b = std::min(in_.find(' ', a + 1), eol);
        const std::string target = origin_form(std::string_view(in_).substr(a + 1, b - a - 1));
        request_.path = target.substr(0, target.find('?'));
      }
    }
    if (in_.size() - pos_ > limits_.max_head_bytes) {
      return refuse(431, "the request head (request line and headers) is over " +
                             std::to_string(limits_.max_head_bytes) + " bytes");
    }
    return false;
  }
  if (end - pos_ > limits_.max_head_bytes) {
    return refuse(431, "the request head (request line and headers) is over " + std::to_string(limits_.max_head_bytes) +
                           " bytes");
  }
  return parse_head(end);
}

// The request line and headers in in_[pos_, end) (end just past the blank line).
bool RequestReader::parse_head(std::size_t end) {
  const std::string_view head(in_.data() + pos_, end - pos_);
  const std::size_t line_end = head.find('\n');
  const std::string_view line = line_before(head, 0, line_end);
  const std::size_t a = line.find(' ');
  const std::size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos) return refuse(400, "malformed request line (expected METHOD TARGET HTTP/1.1)");
  const std::string_view method = line.substr(0, a), target = line.substr(a + 1, b - a - 1),
                         version = line.substr(b + 1);
  const bool target_ok = !target.empty() && std::all_of(target.begin(), target.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
  });
  if (!is_token(method) || !target_ok || version.substr(0, 5) != "HTTP/") {
    return refuse(400, "malformed request line (expected METHOD TARGET HTTP/1.1)");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return refuse(505, "HTTP version '" + std::string(version.substr(0, 16)) + "' is not supported (HTTP/1.1 is)");
  }
  if (line.size() + 2 > kMaxLineBytes) {
    return refuse(414, "the request line is over " + std::to_string(kMaxLineBytes) +
                           " bytes (this server's limit: shorten the target)");
  }
  if (!is_known_method(method)) {
    return refuse(501, "method '" + std::string(method.substr(0, 32)) +
                           "' is not implemented (this server answers GET, HEAD, POST, DELETE and OPTIONS)");
  }
  request_.method = std::string(method);
  request_.target = origin_form(target);  // the library behind routes an absolute-form target as its path
  request_.path = request_.target.substr(0, request_.target.find('?'));
  request_.keep_alive = version == "HTTP/1.1";
  http11_ = version == "HTTP/1.1";
  request_.head = request_.method + " " + request_.target + " " + std::string(version) + "\r\n";
  const std::size_t headers_begin = pos_ + line_end + 1;
  pos_ = end;
  return parse_headers(headers_begin, in_[end - 2] == '\r' ? end - 2 : end - 1);
}

// Header lines in in_[begin, end) (end: where the blank line starts), each ending in LF or CRLF: the ones the
// rewritten head keeps are appended to it; the framing is read.
bool RequestReader::parse_headers(std::size_t begin, std::size_t end) {
  bool has_length = false, expect_continue = false;
  uint64_t length = 0;
  int hosts = 0;
  std::string encoding, compressed;
  for (std::size_t at = begin; at < end;) {
    const std::size_t eol = in_.find('\n', at);
    const std::string_view line = line_before(in_, at, eol);
    at = eol + 1;
    if (line.size() + 2 > kMaxLineBytes) {
      return refuse(431, "the header line '" + std::string(line.substr(0, line.find(':') < 80 ? line.find(':') : 80)) +
                             "' is over " + std::to_string(kMaxLineBytes) + " bytes (this server's limit per line)");
    }
    const std::size_t colon = line.find(':');
    const bool bad_byte =
        std::any_of(line.begin(), line.end(), [](char c) { return c == '\r' || c == '\n' || c == 0; });
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)) || bad_byte) {
      return refuse(400, "malformed header line '" + std::string(line.substr(0, 80)) + "'");
    }
    const std::string name = lower(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "host" && (++hosts > 1 || !is_host_value(value))) {
      return refuse(400, hosts > 1 ? "a request carries one Host header; this one has more"
                                   : "Host '" + std::string(value.substr(0, 80)) + "' is not a host[:port]");
    }
    if (name == "content-length") {
      uint64_t n = 0;
      if (!parse_length(value, &n) || (has_length && n != length)) {
        return refuse(400, "malformed or conflicting Content-Length '" + std::string(value.substr(0, 40)) + "'");
      }
      has_length = true;
      length = n;
    } else if (name == "transfer-encoding") {
      encoding += (encoding.empty() ? "" : ",") + std::string(value);
    } else if (name == "expect" && lower(value) == "100-continue") {
      expect_continue = true;
    } else if (name == "expect") {  // RFC 9110 section 10.1.1: an expectation not met may be refused, 417
      return refuse(417, "Expect '" + std::string(value.substr(0, 40)) +
                             "' is not an expectation this server meets (it meets 100-continue alone)");
    } else if (name == "content-encoding" && !value.empty() && lower(value) != "identity") {
      // The HTTP library behind would inflate it whole before any limit is checked: 300 KB of gzip made 300 MB.
      // Refused once the other lines are read (an Origin after it is known to the refusal's answer).
      if (compressed.empty()) compressed = std::string(value.substr(0, 40));
    } else if (name == "content-type" && lower(value).rfind("application/x-www-form-urlencoded", 0) == 0) {
      // Dropped: every body this server takes is JSON, whatever type a client names (curl -d names this one). The
      // library behind parsed such a body as form fields, and refused one over its compiled-in 8 KB (a 413 far
      // below --max-body-kb) before any route could read it.
    } else if (name == "range" || name == "if-range") {
      // Dropped: every answer goes whole (HTTP lets a server ignore Range). The library behind served each
      // range listed, a copy of the answer per "0-": 4.5 KB of Range made a 16 KB answer 24 MB in memory.
    } else if (name == kEmptyFieldHeader) {
      return refuse(400, "header " + std::string(line.substr(0, colon)) +
                             " may not be sent: the server uses it to name the fields sent empty");
    } else if (value.empty()) {  // the library behind drops a field without a value: it is named instead
      if (!keep_line(std::string(kEmptyFieldHeader) + ": " + percent_kept(line.substr(0, colon)))) return false;
    } else {
      if (name == "origin") request_.origin = std::string(value);
      if (name == "connection") {
        request_.keep_alive = has_token(value, "close")        ? false
                              : has_token(value, "keep-alive") ? true
                                                               : request_.keep_alive;
      }
      if (!keep_line(std::string(line.substr(0, colon + 1)) + percent_kept(line.substr(colon + 1)))) return false;
    }
  }
  if (hosts == 0 && http11_) return refuse(400, "an HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)");
  if (!compressed.empty()) {
    return refuse(415, "Content-Encoding '" + compressed +
                           "' is not supported: send the body uncompressed (the body limit applies to its bytes)");
  }
  framed_ = has_length || !encoding.empty();
  if (!encoding.empty()) {
    if (has_length) return refuse(400, "a request may not carry both Content-Length and Transfer-Encoding");
    if (lower(trim(encoding)) != "chunked") {
      return refuse(501, "Transfer-Encoding '" + encoding.substr(0, 40) + "' is not supported (chunked is)");
    }
    chunked_ = true;
    state_ = State::kBody;
  } else if (has_length && length > limits_.max_body_bytes) {
    refuse(413, "request body of " + std::to_string(length) + " bytes is over the limit of " +
                    std::to_string(limits_.max_body_bytes) + " bytes");
    refusal_.declared_body = length;
    return false;
  } else if (has_length && length > 0) {
    remaining_ = length;
    state_ = State::kBody;
  } else {
    complete();
  }
  // RFC 9110 §10.1.1: an HTTP/1.0 request's 100-continue is ignored (its client cannot read a 1xx answer).
  continue_pending_ = expect_continue && http11_ && state_ == State::kBody;
  return true;
}

// Appends a header line, as rewritten (percent_kept), to the head behind; false (refused, 431) when its '%'
// made it longer than the library behind reads.
bool RequestReader::keep_line(const std::string& line) {
  if (line.size() + 2 > kMaxLineBytes) {
    return refuse(431, "the header line '" + line.substr(0, std::min<std::size_t>(line.find(':'), 80)) + "' is over " +
                           std::to_string(kMaxLineBytes) +
                           " bytes (this server's limit per line) with each '%' in it counted as 3 bytes "
                           "(it is passed on as %25)");
  }
  request_.head += line + "\r\n";
  return true;
}

bool RequestReader::read_length_body() {
  const std::size_t take = static_cast<std::size_t>(std::min<uint64_t>(in_.size() - pos_, remaining_));
  if (take == 0) return false;
  request_.body.append(in_, pos_, take);
  pos_ += take;
  remaining_ -= take;
  continue_pending_ = false;
  if (remaining_ > 0) return false;
  complete();
  return true;
}

// The line starting at pos_ as far as it is known: up to `eol` (its CRLF) when found, else what has come, less
// a last CR that may begin the CRLF (so a line split between two reads is judged as the whole line would be).
std::size_t RequestReader::line_so_far(std::size_t eol) const {
  if (eol != std::string::npos) return eol - pos_;
  const std::size_t n = in_.size() - pos_;
  return n > 0 && in_.back() == '\r' ? n - 1 : n;
}

// The line starting at pos_ (a chunk size or trailer line): where its CRLF starts, npos while that has not
// arrived or when the line ends in a bare LF; its length as far as known; whether it ends in a bare LF.
RequestReader::LineAhead RequestReader::line_ahead() const {
  const std::size_t lf = in_.find('\n', pos_);
  if (lf != std::string::npos && (lf == pos_ || in_[lf - 1] != '\r')) return {std::string::npos, lf - pos_, true};
  const std::size_t eol = lf == std::string::npos ? lf : lf - 1;
  return {eol, line_so_far(eol), false};
}

// The head may end its lines in a bare LF; chunked framing may not (a lenient reading of it is a request
// smuggling vector): such a line is refused at once rather than left to wait for the body deadline.
bool RequestReader::read_chunked_body() {
  const std::size_t available = in_.size() - pos_;
  switch (chunk_) {
    case Chunk::kSize: {
      const LineAhead line = line_ahead();
      if (line.length > kMaxChunkLine) return refuse(400, "a chunk size line is over 1024 bytes");
      if (line.bare_lf) return refuse(400, "a chunk size line ends in a bare LF (chunk lines end in CRLF)");
      if (line.eol == std::string::npos) return false;
      return read_chunk_size(line.eol);
    }
    case Chunk::kData: {
      const std::size_t take = static_cast<std::size_t>(std::min<uint64_t>(available, remaining_));
      if (take == 0) return false;
      request_.body.append(in_, pos_, take);
      pos_ += take;
      remaining_ -= take;
      if (remaining_ == 0) chunk_ = Chunk::kDataEnd;
      return remaining_ == 0;
    }
    case Chunk::kDataEnd:
      if (available < 2) return false;
      if (in_.compare(pos_, 2, "\r\n") != 0) return refuse(400, "a chunk does not end in CRLF where its size says");
      pos_ += 2;
      chunk_ = Chunk::kSize;
      return true;
    case Chunk::kTrailers: return read_trailers();
  }
  return false;
}

// The chunk size line in in_[pos_, eol): hex digits, then optional extensions after ';' (ignored).
bool RequestReader::read_chunk_size(std::size_t eol) {
  const std::string_view line(in_.data() + pos_, eol - pos_);
  const std::string_view digits = trim(line.substr(0, line.find(';')));
  if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    return refuse(400, "malformed chunk size '" + std::string(line.substr(0, 40)) + "'");
  }
  const uint64_t size = std::stoull(std::string(digits), nullptr, 16);
  continue_pending_ = false;
  if (size > limits_.max_body_bytes - request_.body.size()) {
    return refuse(413,
                  "the chunked request body passes the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
  }
  pos_ = eol + 2;
  remaining_ = size;
  chunk_ = size == 0 ? Chunk::kTrailers : Chunk::kData;
  return true;
}

// Trailer lines after the last chunk (dropped, at most max_head_bytes of them), up to the blank line that
// ends the request.
bool RequestReader::read_trailers() {
  const LineAhead line = line_ahead();
  if (trailer_bytes_ + line.length > limits_.max_head_bytes) {
    return refuse(431, "the request's trailers are over " + std::to_string(limits_.max_head_bytes) + " bytes");
  }
  if (line.bare_lf) return refuse(400, "a trailer line ends in a bare LF (chunk lines end in CRLF)");
  if (line.eol == std::string::npos) return false;
  trailer_bytes_ += line.length + 2;
  pos_ = line.eol + 2;
  if (line.length == 0) complete();
  return true;
}

void RequestReader::complete() {
  if (framed_) request_.head += "Content-Length: " + std::to_string(request_.body.size()) + "\r\n";
  request_.head += "\r\n";
  state_ = State::kComplete;
}

}  // namespace orbit::serve
