// Real redis-server processes for the remote-tier tests, on 127.0.0.1 only, on free ports, in a temp
// directory, stopped (SIGKILL or SHUTDOWN) by the test. A missing redis-server fails the test loudly:
// these tests are never skipped silently (scripts/common.sh installs redis-server and redis-tools).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_helpers.h"

extern char** environ;

namespace orbit::test {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("free_port: cannot bind a socket on 127.0.0.1");
  }
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A free port whose cluster bus port (port + 10000) is free too (a cluster node listens on both).
inline int free_cluster_port() {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = free_port();
    if (port + 10000 > 65535) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port + 10000));
    const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    if (ok) return port;
  }
  throw std::runtime_error("free_cluster_port: no port pair found on 127.0.0.1");
}

inline std::string redis_cli(int port, const std::string& args) {
  return run_command("redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + args).out;
}

class RedisServer {
 public:
  // extra: more `--name value` arguments (e.g. {"--cluster-enabled", "yes"}).
  explicit RedisServer(const std::string& dir, std::vector<std::string> extra = {}, bool durable = true)
      : dir_(dir), extra_(std::move(extra)), durable_(durable) {
    bool cluster = false;
    for (const std::string& a : extra_) cluster = cluster || a == "--cluster-enabled";
    port_ = cluster ? free_cluster_port() : free_port();
    std::filesystem::create_directories(dir_);
    start();
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  bool running() const { return pid_ > 0; }

  // Starts it (again, on the same port and directory: its append-only file is replayed).
  void start() {
    if (pid_ > 0) return;
    std::vector<std::string> args{"redis-server",
                                  "--bind",
                                  "127.0.0.1",
                                  "--port",
                                  std::to_string(port_),
                                  "--dir",
                                  dir_,
                                  "--save",
                                  "",
                                  "--protected-mode",
                                  "no",
                                  "--appendonly",
                                  durable_ ? "yes" : "no",
                                  "--appendfsync",
                                  "always",
                                  "--aof-load-truncated",
                                  "yes",
                                  "--maxmemory-policy",
                                  "allkeys-lru",
                                  "--logfile",
                                  dir_ + "/redis.log"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      throw std::runtime_error("cannot start redis-server (install redis-server: scripts/common.sh)");
    }
    for (int i = 0; i < 500; ++i) {  // up to 5 s for the first PING
      if (redis_cli(port_, "PING").find("PONG") != std::string::npos) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server exited at start; see " + dir_ + "/redis.log");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server on port " + std::to_string(port_) + " did not answer PING");
  }
  // SIGKILL: no shutdown save, connections dropped mid-reply.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: a server that accepts connections but never answers (a slow or hung server).
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }

 private:
  std::string dir_;
  int port_;
  std::vector<std::string> extra_;
  bool durable_;
  pid_t pid_ = -1;
};

}  // namespace orbit::test
