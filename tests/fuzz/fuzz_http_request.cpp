// libFuzzer target for the bytes a client sends `orbit serve` before any worker sees them: RequestReader
// (cli/serve/http/http_request_reader.h), fed the input in pieces whose sizes the input's first byte picks, and
// every request it completes read after the one before (pipelining), as the server's reception does.
//
// Checked on every input: nothing crashes or throws; a complete request's body is within the limit and its
// rewritten head is a request line and headers, each with a value, each line within what the library behind reads,
// every '%' of a value passed on as "%25", ending in a blank line, without Transfer-Encoding
// and with one Content-Length, the body's, where there is a body; a refusal carries a 4xx or 5xx status and a message;
// the same bytes fed whole give the same requests and the same final state.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "serve/http/http_request_reader.h"

namespace {

using orbit::serve::RequestLimits;
using orbit::serve::RequestReader;
using State = RequestReader::State;

constexpr RequestLimits kLimits{512, 1024};

void check(bool ok) {
  if (!ok) std::abort();
}

// A rewritten head: lines ending in CRLF, then a blank line; no Transfer-Encoding, one Content-Length
// (equal to the body's size) where a body is.
void check_head(const std::string& head, std::size_t body) {
  check(head.size() >= 4 && head.compare(head.size() - 4, 4, "\r\n\r\n") == 0);
  int lengths = 0;
  for (std::size_t at = head.find("\r\n") + 2; at + 2 < head.size();) {
    const std::size_t eol = head.find("\r\n", at);
    std::string name = head.substr(at, head.find(':', at) - at);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    check(name != "transfer-encoding");
    const std::size_t value = head.find_first_not_of(" \t", head.find(':', at) + 1);
    check(value < eol);  // a field the HTTP library behind would drop (no value) is named, never passed on
    check(eol - at + 2 <= orbit::serve::kMaxLineBytes);  // the library behind reads no longer line
    // Every '%' of a value goes on as "%25", which the library's percent-decoding turns back into the '%' sent.
    for (std::size_t p = head.find('%', value); p < eol; p = head.find('%', p + 3)) {
      check(head.compare(p, 3, "%25") == 0);
    }
    if (name == "content-length") {
      ++lengths;
      check(head.substr(at, eol - at) == "Content-Length: " + std::to_string(body));
    }
    at = eol + 2;
  }
  check(lengths <= 1 && (body == 0 || lengths == 1));
}

// What the reader made of `bytes` fed in pieces of `piece` bytes (0: whole): each request's head and body,
// then the final state and refusal.
std::vector<std::string> read_all(const std::string& bytes, std::size_t piece) {
  RequestReader reader(kLimits);
  std::vector<std::string> out;
  auto drain = [&] {
    while (reader.state() == State::kComplete) {
      const auto& r = reader.request();
      check(r.body.size() <= kLimits.max_body_bytes);
      check_head(r.head, r.body.size());
      out.push_back(r.head + "|" + r.body);
      reader.next();
    }
  };
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = piece == 0 ? bytes.size() : std::min(piece, bytes.size() - at);
    reader.feed(bytes.data() + at, n);
    at += n;
    drain();
    if (reader.state() == State::kRefused) break;
  }
  if (reader.state() == State::kRefused) {
    check(reader.refusal().status >= 400 && reader.refusal().status < 600 && !reader.refusal().message.empty());
    out.push_back("refused " + std::to_string(reader.refusal().status));
  } else {
    out.push_back("state " + std::to_string(static_cast<int>(reader.state())));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 17;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  check(read_all(bytes, piece) == read_all(bytes, 0));
  return 0;
}
