// bench_store's sharing part (bench_share.h): recall from a remote tier (a redis-server it starts on
// 127.0.0.1 itself, or --remote URL), and N processes sharing one store directory.
#include "bench_share.h"

#include <ATen/ATen.h>

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/codec.h"

extern char** environ;

namespace orbit::bench {

namespace st = orbit::store;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ORBIT_CHECK(fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0,
              "bench_store: cannot find a free port on 127.0.0.1");
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A synthetic canonical-kind value of `bytes` bytes (float32), a pure function of `i`.
st::ValuePtr synthetic(int64_t i, int64_t bytes) {
  const int64_t n = std::max<int64_t>(1, bytes / 8);
  at::Tensor k = at::full({n}, static_cast<double>(i), at::kFloat);
  at::Tensor v = at::full({n}, static_cast<double>(-i), at::kFloat);
  return st::make_value(EntryKind::kCanonical, {{"k", k}, {"v", v}}, {});
}

std::string worker_key(int64_t i) { return chunk_key_tokens("bench-share-model", {i, 424242}); }

}  // namespace

LocalRedis::LocalRedis(const std::string& dir) {
  port_ = free_port();
  std::filesystem::create_directories(dir);
  std::vector<std::string> args{
      "redis-server",    "--bind", "127.0.0.1", "--port", std::to_string(port_), "--save",      "",
      "--appendonly",    "no",     "--dir",     dir,      "--maxmemory-policy",  "allkeys-lru", "--logfile",
      dir + "/redis.log"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ORBIT_CHECK(posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) == 0,
              "bench_store: cannot start redis-server (apt install redis-server), or pass --remote URL");
  for (int i = 0; i < 500; ++i) {
    if (summarize_remote(url()).reachable) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ORBIT_FAIL("bench_store: redis-server on 127.0.0.1:" << port_ << " did not answer");
}

LocalRedis::~LocalRedis() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string LocalRedis::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

RemoteRecall measure_remote_recall(const std::string& url, const std::string& fingerprint, const std::string& key,
                                   const st::ValuePtr& value, int reps) {
  RemoteRecall out;
  st::ChunkStoreOptions wo;
  wo.model_fingerprint = fingerprint;
  wo.remote.url = url;
  wo.remote.command_timeout_ms = 30000;
  {
    st::ChunkStore writer(wo);
    const auto t = Clock::now();
    ORBIT_CHECK(writer.put(key, value).is_ok(), "bench_store: remote put");
    ORBIT_CHECK(writer.drain_remote(std::chrono::milliseconds(60000)), "bench_store: the remote write did not finish");
    out.save_s = since(t);
    const RemoteStats rs = writer.stats().remote;
    ORBIT_CHECK(rs.writes == 1, "bench_store: remote write failed: " << rs.last_error);
    out.blob_bytes = rs.bytes_written;
  }
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    st::ChunkStoreOptions ro = wo;
    ro.host_budget_bytes = 0;  // a fresh reader with nothing local: every get is a remote recall
    st::ChunkStore reader(ro);
    const auto t = Clock::now();
    Result<st::ValuePtr> v = reader.get(key, st::GetOptions{false});
    const double s = since(t);
    ORBIT_CHECK(v.is_ok(), "bench_store: remote recall missed: " << v.status().reason());
    (void)st::content_from_value(*v.value());
    times.push_back(s);
    const RemoteStats rs = reader.stats().remote;
    out.hits += rs.hits;
    out.gets += rs.hits + rs.misses;
  }
  std::sort(times.begin(), times.end());
  out.load_s = times[times.size() / 2];
  return out;
}

int run_share_worker(int argc, char** argv) {
  // bench_store --share-worker DIR KEYS VALUE_BYTES SEED
  ORBIT_CHECK(argc == 6, "bench_store --share-worker DIR KEYS VALUE_BYTES SEED");
  const std::string dir = argv[2];
  const int64_t keys = std::atoll(argv[3]), bytes = std::atoll(argv[4]);
  std::mt19937 rng(static_cast<unsigned>(std::atoi(argv[5])));
  st::ChunkStoreOptions o;
  o.model_fingerprint = "bench-share-model";
  o.dir = dir;
  o.host_budget_bytes = 0;  // every hit is a disk (shared) hit, not this process's memory
  st::ChunkStore store(o);
  int64_t hits = 0, puts = 0, bytes_read = 0;
  std::vector<int64_t> order(static_cast<std::size_t>(keys));
  for (int64_t i = 0; i < keys; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const auto t = Clock::now();
  for (int64_t i : order) {  // an agent's lookups: get, and on a miss compute (here: make) and put
    Result<st::ValuePtr> v = store.get(worker_key(i));
    if (v) {
      ++hits;
      bytes_read += v.value()->bytes();
    } else {
      ORBIT_CHECK(store.put(worker_key(i), synthetic(i, bytes)).is_ok(), "bench_store worker: put failed");
      ++puts;
    }
  }
  std::printf("%lld %lld %lld %.6f\n", static_cast<long long>(hits), static_cast<long long>(puts),
              static_cast<long long>(bytes_read), since(t));
  return 0;
}

ShareResult measure_shared_directory(const std::string& self, const std::string& dir, int processes, int64_t keys,
                                     int64_t value_bytes) {
  std::filesystem::remove_all(dir);
  std::vector<pid_t> pids;
  std::vector<FILE*> outs;
  const auto t = Clock::now();
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    ORBIT_CHECK(::pipe(fds) == 0, "bench_store: pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    std::vector<std::string> args{
        self, "--share-worker", dir, std::to_string(keys), std::to_string(value_bytes), std::to_string(p + 1)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    ORBIT_CHECK(posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) == 0,
                "bench_store: cannot start a worker");
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    pids.push_back(pid);
    outs.push_back(::fdopen(fds[0], "r"));
  }
  ShareResult r;
  r.processes = processes;
  for (int p = 0; p < processes; ++p) {
    long long hits = 0, puts = 0, bytes = 0;
    double seconds = 0;
    const int n = std::fscanf(outs[static_cast<std::size_t>(p)], "%lld %lld %lld %lf", &hits, &puts, &bytes, &seconds);
    std::fclose(outs[static_cast<std::size_t>(p)]);
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(p)], &status, 0);
    ORBIT_CHECK(n == 4 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench_store: a share worker failed");
    r.hits += hits;
    r.puts += puts;
    r.bytes_read += bytes;
    r.seconds = std::max(r.seconds, seconds);  // the slowest worker's lookup loop (process start excluded)
  }
  r.wall_seconds = since(t);
  r.lookups = static_cast<int64_t>(processes) * keys;
  r.blob_bytes = summarize_store(dir).blob_bytes;
  return r;
}

}  // namespace orbit::bench
