// bench_stream_client: the native load client of decode_load.py and decode_compare.py (--client native). Reads
// many streamed answers of `orbit serve` in one thread with epoll, so that the client's CPU time stays far
// below the server's (a Python client spends about as much as the server's decode thread at 16 sessions).
//
//   bench_stream_client HOST PORT REQUESTS
//
// REQUESTS holds two HTTP requests per session, each as "<bytes>\n" then the bytes: the opening one
// (non-streamed, read whole off a kept-alive connection) and the timed one (streamed, chunked). Once every
// session is opened, every timed request is sent, then every stream read; nothing is parsed but the events
// with non-empty content (the pattern "content":"; a quote inside the text is escaped, so the text cannot
// hold it), the usage's completion_tokens and the last chunk. Prints, with times in seconds from the first
// timed send:
//   wall SECONDS
//   stream I TOKENS T1 T2 ...      (the arrival time of each content event)
// Exits 1 naming what failed (a status other than 200, a closed connection, bad arguments).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

const std::string kContent = "\"content\":\"";
const std::string kEmpty = "\"content\":\"\"";
const std::string kUsage = "\"completion_tokens\":";
const std::string kLastChunk = "\r\n0\r\n\r\n";

std::vector<std::string> read_requests(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot read REQUESTS file ") + path);
  std::vector<std::string> out;
  std::size_t n = 0;
  while (in >> n) {
    in.get();  // the newline
    std::string bytes(n, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(n))) throw std::runtime_error("REQUESTS: truncated");
    out.push_back(std::move(bytes));
  }
  if (out.empty() || out.size() % 2 != 0) throw std::runtime_error("REQUESTS: needs two requests per session");
  return out;
}

int connect_to(const char* host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw std::runtime_error(std::string("cannot connect to ") + host + ":" + std::to_string(port));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  for (std::size_t at = 0; at < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("send failed");
    at += static_cast<std::size_t>(n);
  }
}

void check_status(const std::string& head, const char* what) {
  if (head.compare(0, head.find("\r\n"), "HTTP/1.1 200 OK") != 0) {
    throw std::runtime_error(std::string(what) + ": " + head.substr(0, head.find("\r\n")));
  }
}

// A non-streamed answer (Content-Length) read whole.
void read_whole(int fd) {
  std::string got;
  char buf[65536];
  std::size_t end = std::string::npos, length = 0;
  while (end == std::string::npos || got.size() < end + 4 + length) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) throw std::runtime_error("the server closed an opening request's connection");
    got.append(buf, static_cast<std::size_t>(n));
    if (end == std::string::npos && (end = got.find("\r\n\r\n")) != std::string::npos) {
      check_status(got, "opening request");
      const std::size_t at = got.find("Content-Length: ");
      if (at == std::string::npos || at > end) throw std::runtime_error("opening request: no Content-Length");
      length = std::strtoul(got.c_str() + at + 16, nullptr, 10);
    }
  }
}

std::size_t count(const std::string& s, const std::string& pattern, std::size_t from) {
  std::size_t n = 0;
  for (std::size_t at = s.find(pattern, from); at != std::string::npos; at = s.find(pattern, at + 1)) ++n;
  return n;
}

struct Stream {
  std::string kept;  // the bytes before the new ones: the head until whole, then the last 4096
  bool head_done = false, done = false;
  long tokens = -1;
  std::vector<double> arrivals;

  // A pattern is counted where it ends in the new bytes: from the kept bytes' last len - 1 on.
  void feed(const char* data, std::size_t n, double now) {
    std::size_t old = kept.size();
    kept.append(data, n);
    if (!head_done) {
      const std::size_t end = kept.find("\r\n\r\n");
      if (end == std::string::npos) return;
      check_status(kept, "streamed request");
      kept.erase(0, end + 4);
      head_done = true;
      old = 0;
    }
    const auto from = [&](const std::string& p) { return old >= p.size() ? old - p.size() + 1 : 0; };
    const std::size_t found = count(kept, kContent, from(kContent)) - count(kept, kEmpty, from(kEmpty));
    arrivals.insert(arrivals.end(), found, now);
    if (kept.size() >= kLastChunk.size() &&
        kept.compare(kept.size() - kLastChunk.size(), kLastChunk.size(), kLastChunk) == 0) {
      done = true;
      const std::size_t at = kept.rfind(kUsage);
      if (at != std::string::npos) tokens = std::strtol(kept.c_str() + at + kUsage.size(), nullptr, 10);
    }
    if (kept.size() > 4096) kept.erase(0, kept.size() - 4096);
  }
};

int run(const char* host, int port, const char* path) {
  const std::vector<std::string> requests = read_requests(path);
  const std::size_t sessions = requests.size() / 2;
  std::vector<int> fds;
  for (std::size_t i = 0; i < sessions; ++i) {
    fds.push_back(connect_to(host, port));
    send_all(fds.back(), requests[2 * i]);
    read_whole(fds.back());
  }
  const int ep = epoll_create1(0);
  std::vector<Stream> streams(sessions);
  const Clock::time_point t0 = Clock::now();
  for (std::size_t i = 0; i < sessions; ++i) {
    send_all(fds[i], requests[2 * i + 1]);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
  }
  std::size_t open = sessions;
  std::vector<epoll_event> ready(sessions);
  char buf[262144];
  while (open > 0) {
    const int n = epoll_wait(ep, ready.data(), static_cast<int>(ready.size()), 900000);
    if (n <= 0) throw std::runtime_error("the streams did not end in time");
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int k = 0; k < n; ++k) {
      const std::size_t i = ready[static_cast<std::size_t>(k)].data.u64;
      const ssize_t got = recv(fds[i], buf, sizeof buf, 0);
      if (got <= 0) throw std::runtime_error("the server closed a stream before its end");
      streams[i].feed(buf, static_cast<std::size_t>(got), now);
      if (streams[i].done) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
        --open;
      }
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("wall %.9f\n", wall);
  for (std::size_t i = 0; i < sessions; ++i) {
    if (streams[i].tokens < 0) throw std::runtime_error("stream " + std::to_string(i) + " ended without usage");
    std::printf("stream %zu %ld", i, streams[i].tokens);
    for (double t : streams[i].arrivals) std::printf(" %.9f", t);
    std::printf("\n");
    close(fds[i]);
  }
  close(ep);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: bench_stream_client HOST PORT REQUESTS\n");
    return 2;
  }
  try {
    return run(argv[1], std::atoi(argv[2]), argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_stream_client: %s\n", e.what());
    return 1;
  }
}
