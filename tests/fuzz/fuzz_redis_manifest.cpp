// libFuzzer target for what a shared Redis hands a reader: RedisBackend::get (the remote tier's read of
// one entry: the manifest, its checks, the MGET of the parts, the size and checksum checks) against an
// in-process stand-in for the server, so that the product's own decoding runs on every input.
//
// Input: MANIFEST [\0 PART0 [\0 PART1 ...]]. The stand-in answers GET with MANIFEST (an empty input: no
// such key) and MGET with the parts it has, nil for the rest. get() must return an outcome (hit, miss,
// corrupt, unavailable) without crashing or throwing; a hit must be a concatenation of the first parts
// whose SHA-256 the manifest names.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "orbit/common/sha256.h"
#include "orbit/store/redis_backend.h"

namespace {

// A Redis stand-in on 127.0.0.1 (RESP2, one connection at a time): GET, MGET, and +OK to anything else.
class FakeRedis {
 public:
  FakeRedis() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_, 4) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::abort();
    }
    port_ = ntohs(addr.sin_port);
    std::thread([this] { serve(); }).detach();
  }

  int port() const { return port_; }

  // What the next GET and MGET answer. `present` false: GET answers nil.
  void set(bool present, std::string manifest, std::vector<std::string> parts) {
    std::lock_guard<std::mutex> lock(mu_);
    present_ = present;
    manifest_ = std::move(manifest);
    parts_ = std::move(parts);
  }

 private:
  struct Connection {
    int fd;
    std::string buffer;
    std::size_t at = 0;

    bool fill() {
      if (at > 0) buffer.erase(0, at), at = 0;
      char chunk[65536];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    bool line(std::string* out) {
      std::size_t end;
      while ((end = buffer.find("\r\n", at)) == std::string::npos) {
        if (!fill()) return false;
      }
      *out = buffer.substr(at, end - at);
      at = end + 2;
      return true;
    }
    bool bytes(std::size_t n, std::string* out) {
      while (buffer.size() - at < n + 2) {
        if (!fill()) return false;
      }
      *out = buffer.substr(at, n);
      at += n + 2;
      return true;
    }
    // One command as its arguments; false when the client went away or sent something else.
    bool command(std::vector<std::string>* argv) {
      std::string head;
      if (!line(&head) || head.empty() || head[0] != '*') return false;
      argv->assign(std::strtoul(head.c_str() + 1, nullptr, 10), std::string());
      for (std::string& arg : *argv) {
        if (!line(&head) || head.empty() || head[0] != '$') return false;
        if (!bytes(std::strtoul(head.c_str() + 1, nullptr, 10), &arg)) return false;
      }
      return true;
    }
  };

  static std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

  std::string reply(const std::vector<std::string>& argv) {
    std::lock_guard<std::mutex> lock(mu_);
    if (argv.empty()) return "-ERR empty command\r\n";
    if (argv[0] == "GET") return present_ ? bulk(manifest_) : "$-1\r\n";
    if (argv[0] != "MGET") return "+OK\r\n";
    std::string out = "*" + std::to_string(argv.size() - 1) + "\r\n";
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) out += i < parts_.size() ? bulk(parts_[i]) : "$-1\r\n";
    return out;
  }

  void serve() {
    for (;;) {
      Connection c{::accept(listener_, nullptr, nullptr)};
      if (c.fd < 0) continue;
      std::vector<std::string> argv;
      while (c.command(&argv)) {
        const std::string out = reply(argv);
        if (::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) break;
      }
      ::close(c.fd);
    }
  }

  int listener_ = -1;
  int port_ = 0;
  std::mutex mu_;
  bool present_ = false;
  std::string manifest_;
  std::vector<std::string> parts_;
};

const std::string kKey(64, 'a');

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FakeRedis* server = new FakeRedis();
  static orbit::store::RedisBackend* backend =
      new orbit::store::RedisBackend({.url = "redis://127.0.0.1:" + std::to_string(server->port())});
  // The input split at NUL bytes: the manifest, then the parts.
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      pieces.emplace_back();
    } else {
      pieces.back() += static_cast<char>(data[i]);
    }
  }
  const std::string manifest = pieces.front();
  pieces.erase(pieces.begin());
  server->set(size > 0, manifest, pieces);

  const orbit::store::BackendRead r = backend->get(kKey);  // never throws (its contract)
  if (r.outcome != orbit::store::BackendRead::Outcome::kHit) return 0;
  if (manifest.find(orbit::sha256_hex(r.bytes)) == std::string::npos) std::abort();
  std::string joined;
  for (const std::string& part : pieces) {
    if (joined == r.bytes) break;
    joined += part;
  }
  if (joined != r.bytes) std::abort();
  return 0;
}
