// Child process for the store's crash and cross-process tests (test_store_faults.cpp, test_store.cpp).
//
//   store_kill_child write DIR FIRST COUNT   puts values FIRST..FIRST+COUNT-1 (test_store_values.h) and
//                                            prints "i\n" (flushed) after each put returned ok
//   store_kill_child fsize DIR FIRST LIMIT [small [AFTER]]
//                                            same, under RLIMIT_FSIZE = LIMIT bytes with SIGXFSZ ignored,
//                                            printing "i ok" per put until one fails ("i <status>") or
//                                            degrades the disk ("i degraded <warning>"); small: only the
//                                            values under 128 KiB (every i not a multiple of 5), so that the
//                                            index's WAL reaches the limit before a blob does; AFTER: after the
//                                            degraded put, AFTER more puts under the same limit, each printed as
//                                            "i ok" or "i degraded <warning>", then "memory-only N" (entries
//                                            still not durable) and "flush <status>"
//   store_kill_child stuck DIR AFTER         puts 30 small values, closes, reopens under RLIMIT_FSIZE = the
//                                            index file's size (SIGXFSZ ignored), so the index cannot grow:
//                                            puts values of at most 20 rows (blobs far below the limit) until
//                                            one degrades the disk ("degraded <i>"; "never degraded" after 400),
//                                            then AFTER more, each printed as "i degraded" or "i ok", then
//                                            "blob-writes N" (write calls on blob files during those AFTER puts)
//                                            and "memory-only N"
//   store_kill_child stall DIR I             puts value I, stopping inside its blob write: after the first
//                                            write to the temp file it prints "in blob" and waits to be killed
//   store_kill_child key FINGERPRINT T,T,... prints chunk_key_tokens(FINGERPRINT, tokens)
//   store_kill_child hold DIR I LEASE_MS     puts value I, pins it (a lease of LEASE_MS ms), prints
//                                            "pinned", and keeps the store open until stdin closes
//   store_kill_child rwrite DIR URL FIRST N  puts values with a remote tier at URL (DIR "-": no disk);
//                                            after each, waits for the remote write and prints "i r"
//                                            when it reached the server, "i l" when only the local copy
//   store_kill_child rerase DIR URL FIRST N  erases values FIRST.. of a store with a remote tier at URL,
//                                            printing "i e" after each (its removal queued, not waited for),
//                                            then waits to be killed
//   store_kill_child rbudget DIR URL FIRST N BUDGET FRACTION  puts values FIRST.. with a remote tier at URL, a
//                                            disk budget of BUDGET bytes and max_held_fraction FRACTION, printing
//                                            "i" after each put that returned ok and "i refused: REASON" after
//                                            each refused one (its remote writes queued, not waited for), then
//                                            "abandoned N" (the remote stats' count) and "done"; then waits to be
//                                            killed
//   store_kill_child race DIR ROUNDS I       for each round r: prints "ready r", waits for a line on stdin
//                                            (the start line of several such children), opens the store
//                                            DIR/r and puts value I ("failed r: <status>" and exit 1 if
//                                            that fails); prints "done" after the last round
//   store_kill_child fork-server             reads commands ("write DIR FIRST COUNT", "churn DIR URL FIRST
//                                            COUNT", "gc DIR") from stdin; each runs in a forked process that
//                                            prints "pid P" and then what the command prints; when that process
//                                            ends, prints "exit STATUS" (the raw wait status). Forking skips the
//                                            ~1 s of loading libtorch that starting this program costs, for
//                                            tests that kill hundreds of writers. churn: as write, into a store
//                                            with a remote tier at URL (its writes queued, not waited for) and
//                                            a disk budget of 3 MiB, so that puts evict (a put refused for
//                                            want of room is skipped, unprinted); gc: gc_store(DIR),
//                                            then "gc done"
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/store/chunk_store.h"
#include "test_store_values.h"

namespace {

orbit::store::ChunkStoreOptions options(const std::string& dir) {
  orbit::store::ChunkStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = orbit::test::kStoreTestFingerprint;
  o.host_budget_bytes = 4 << 20;
  return o;
}

// Puts the test values first .. first + count - 1, printing each key's index once it is stored: 0, or 1 at the
// first refused put (with `skip_full`, a put refused for want of room is skipped, unprinted, instead).
int put_range(orbit::store::ChunkStore& store, int64_t first, int64_t count, bool skip_full = false) {
  for (int64_t i = first; i < first + count; ++i) {
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    if (!s && skip_full && s.code() == orbit::StatusCode::kOutOfCapacity) continue;
    if (!s) {
      std::fprintf(stderr, "put %lld failed: %s\n", static_cast<long long>(i), s.to_string().c_str());
      return 1;
    }
    std::printf("%lld\n", static_cast<long long>(i));
    std::fflush(stdout);
  }
  return 0;
}

int write(const std::string& dir, int64_t first, int64_t count) {
  orbit::store::ChunkStore store(options(dir));
  return put_range(store, first, count);
}

int hold(const std::string& dir, int64_t i, int64_t lease_ms) {
  orbit::store::ChunkStoreOptions o = options(dir);
  o.lease_ms = lease_ms;
  orbit::store::ChunkStore store(o);
  orbit::store::PutOptions po;
  po.pin = true;
  const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i), po);
  if (!s) return 1;
  std::printf("pinned\n");
  std::fflush(stdout);
  char buffer[64];
  while (std::fread(buffer, 1, sizeof buffer, stdin) > 0) {
  }
  return 0;
}

int rwrite(const std::string& dir, const std::string& url, int64_t first, int64_t count) {
  orbit::store::ChunkStoreOptions o = options(dir == "-" ? "" : dir);
  o.remote.url = url;
  o.remote.part_bytes = 64 << 10;  // many parts per value: a kill lands between them
  o.remote.retry_after_ms = 50;
  o.remote.warn = false;
  orbit::store::ChunkStore store(o);
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t before = store.stats().remote.writes;
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    if (!s) return 1;
    const bool sent = store.drain_remote(std::chrono::milliseconds(3000)) && store.stats().remote.writes > before;
    std::printf("%lld %s\n", static_cast<long long>(i), sent ? "r" : "l");
    std::fflush(stdout);
  }
  return 0;
}

int rerase(const std::string& dir, const std::string& url, int64_t first, int64_t count) {
  orbit::store::ChunkStoreOptions o = options(dir);
  o.remote.url = url;
  o.remote.retry_after_ms = 50;
  o.remote.warn = false;
  orbit::store::ChunkStore store(o);
  for (int64_t i = first; i < first + count; ++i) {
    const orbit::Status s = store.erase(orbit::test::store_test_key(i));
    if (!s) return 1;
    std::printf("%lld e\n", static_cast<long long>(i));
    std::fflush(stdout);
  }
  for (;;) ::pause();  // until killed: the removals stay queued
}

// rbudget's puts: values first .. first + count - 1.
struct BudgetPuts {
  int64_t first = 0, count = 0;
  int64_t budget = 0;            // the disk budget (bytes)
  double max_held_fraction = 0;  // RemoteOptions::max_held_fraction
};

int rbudget(const std::string& dir, const std::string& url, const BudgetPuts& puts) {
  orbit::store::ChunkStoreOptions o = options(dir);
  o.disk_budget_bytes = puts.budget;
  o.remote.url = url;
  o.remote.retry_after_ms = 50;
  o.remote.warn = false;
  o.remote.max_held_fraction = puts.max_held_fraction;
  orbit::store::ChunkStore store(o);
  for (int64_t i = puts.first; i < puts.first + puts.count; ++i) {
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    if (s) {
      std::printf("%lld\n", static_cast<long long>(i));
    } else {
      std::printf("%lld refused: %s\n", static_cast<long long>(i), s.reason().c_str());
    }
    std::fflush(stdout);
  }
  std::printf("abandoned %lld\ndone\n", static_cast<long long>(store.stats().remote.abandoned));
  std::fflush(stdout);
  for (;;) ::pause();  // until killed: the writes stay queued
}

int stall(const std::string& dir, int64_t i) {
  orbit::store::ChunkStoreOptions o = options(dir);
  o.io_hooks.write = [](int fd, const void* data, std::size_t size) -> ssize_t {
    const ssize_t n = ::write(fd, data, size);
    std::printf("in blob\n");
    std::fflush(stdout);
    for (;;) ::pause();  // until killed
    return n;
  };
  orbit::store::ChunkStore store(o);
  (void)store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
  return 1;  // never reached
}

int race(const std::string& dir, int64_t rounds, int64_t i) {
  char line[64];
  for (int64_t r = 0; r < rounds; ++r) {
    std::printf("ready %lld\n", static_cast<long long>(r));
    std::fflush(stdout);
    if (!std::fgets(line, sizeof line, stdin)) return 4;  // the parent went away
    orbit::store::ChunkStore store(options(dir + "/" + std::to_string(r)));
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    if (!s) {
      std::printf("failed %lld: %s\n", static_cast<long long>(r), s.to_string().c_str());
      std::fflush(stdout);
      return 1;
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

// fsize's AFTER: puts `count` more values from `first` on a store whose disk degraded, then what is not durable.
int fsize_after(orbit::store::ChunkStore& store, int64_t first, int64_t count, bool small) {
  for (int64_t i = first, done = 0; done < count; ++i) {
    if (small && i % 5 == 0) continue;
    ++done;
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    const orbit::StoreStats stats = store.stats();
    if (s && stats.disk_degraded) {
      std::printf("%lld degraded %s\n", static_cast<long long>(i), stats.disk_warning.c_str());
    } else {
      std::printf("%lld %s\n", static_cast<long long>(i), s ? "ok" : s.to_string().c_str());
    }
  }
  std::printf("memory-only %lld\n", static_cast<long long>(store.memory_only_entries()));
  const orbit::Status flushed = store.flush();
  std::printf("flush %s\n", flushed ? "ok" : flushed.to_string().c_str());
  std::fflush(stdout);
  return 0;
}

int fsize(const std::string& dir, int64_t first, int64_t limit, bool small, int64_t after) {
  ::signal(SIGXFSZ, SIG_IGN);
  orbit::store::ChunkStore store(options(dir));
  struct rlimit rl {};
  getrlimit(RLIMIT_FSIZE, &rl);
  rl.rlim_cur = static_cast<rlim_t>(limit);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
  for (int64_t i = first;; ++i) {
    if (small && i % 5 == 0) continue;  // store_test_value's large ones
    const orbit::Status s = store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i));
    const orbit::StoreStats stats = store.stats();
    if (s && stats.disk_degraded) {
      std::printf("%lld degraded %s\n", static_cast<long long>(i), stats.disk_warning.c_str());
      std::fflush(stdout);
      return after > 0 ? fsize_after(store, i + 1, after, small) : 0;
    }
    std::printf("%lld %s\n", static_cast<long long>(i), s ? "ok" : s.to_string().c_str());
    std::fflush(stdout);
    if (!s) return 0;
  }
}

// Whether store_test_value(i) has at most 20 rows (a blob of about 10 KiB at most).
bool tiny(int64_t i) { return i % 5 != 0 && (i * 7919) % 200 < 20; }

int stuck(const std::string& dir, int64_t after) {
  ::signal(SIGXFSZ, SIG_IGN);
  int64_t i = 1;
  {
    orbit::store::ChunkStore store(options(dir));
    for (int n = 0; n < 30; ++i) {
      if (!tiny(i)) continue;
      ++n;
      if (!store.put(orbit::test::store_test_key(i), orbit::test::store_test_value(i))) return 1;
    }
  }  // the last connection's close checkpoints the WAL into the index file
  struct stat st {};
  if (::stat((dir + "/index.sqlite").c_str(), &st) != 0) return 2;
  auto writes = std::make_shared<std::atomic<int64_t>>(0);
  orbit::store::ChunkStoreOptions o = options(dir);
  o.warn_disk_errors = false;
  o.io_hooks.write = [writes](int fd, const void* data, std::size_t size) -> ssize_t {
    ++*writes;
    return ::write(fd, data, size);
  };
  orbit::store::ChunkStore store(o);
  struct rlimit rl {};
  getrlimit(RLIMIT_FSIZE, &rl);
  rl.rlim_cur = static_cast<rlim_t>(st.st_size);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 3;
  const auto put = [&](int64_t k) {
    (void)store.put(orbit::test::store_test_key(k), orbit::test::store_test_value(k));
    return store.stats().disk_degraded;
  };
  bool degraded = false;
  for (int n = 0; n < 400 && !degraded; ++i) {
    if (!tiny(i)) continue;
    ++n;
    degraded = put(i);
  }
  std::printf(degraded ? "degraded %lld\n" : "never degraded\n", static_cast<long long>(i - 1));
  *writes = 0;
  for (int64_t done = 0; degraded && done < after; ++i) {
    if (!tiny(i)) continue;
    ++done;
    std::printf("%lld %s\n", static_cast<long long>(i), put(i) ? "degraded" : "ok");
  }
  std::printf("blob-writes %lld\nmemory-only %lld\n", static_cast<long long>(writes->load()),
              static_cast<long long>(store.memory_only_entries()));
  std::fflush(stdout);
  return 0;
}

// fork-server's churn: puts FIRST..FIRST+COUNT-1 with a remote tier and a disk budget that makes puts evict,
// printing "i" after each put returned ok (its remote write queued, maybe not sent). A put refused for want of
// room (the entries it would evict wait for their remote writes) is skipped.
int churn(const std::string& dir, const std::string& url, int64_t first, int64_t count) {
  orbit::store::ChunkStoreOptions o = options(dir);
  o.disk_budget_bytes = 3 << 20;  // a large value (2 MiB) and a few small ones
  o.remote.url = url;
  o.remote.part_bytes = 64 << 10;
  o.remote.retry_after_ms = 50;
  o.remote.warn = false;
  orbit::store::ChunkStore store(o);
  return put_range(store, first, count, /*skip_full=*/true);
}

// One fork-server command, in the forked process: its exit status.
int fork_command(const std::string& line) {
  char dir[4096], url[4096];
  long long first = 0, count = 0;
  if (std::sscanf(line.c_str(), "write %4095s %lld %lld", dir, &first, &count) == 3) return write(dir, first, count);
  if (std::sscanf(line.c_str(), "churn %4095s %4095s %lld %lld", dir, url, &first, &count) == 4) {
    return churn(dir, url, first, count);
  }
  if (std::sscanf(line.c_str(), "gc %4095s", dir) == 1) {
    (void)orbit::gc_store(dir);
    std::printf("gc done\n");
    return 0;
  }
  std::fprintf(stderr, "store_kill_child fork-server: bad command: %s", line.c_str());
  return 2;
}

// Nothing here has started a thread (no store is open in this process), so fork() is safe.
int fork_server() {
  char line[4096];
  while (std::fgets(line, sizeof line, stdin)) {
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) return 5;
    if (pid == 0) {
      std::printf("pid %d\n", static_cast<int>(::getpid()));
      std::fflush(stdout);
      int rc = 3;
      try {
        rc = fork_command(line);
      } catch (const orbit::Error& e) {
        std::fprintf(stderr, "store_kill_child: %s\n", e.what());
      }
      std::fflush(stdout);
      ::_exit(rc);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::printf("exit %d\n", status);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc == 5) return write(argv[2], std::atoll(argv[3]), std::atoll(argv[4]));
    if (mode == "fsize" && (argc == 5 || (argc >= 6 && argc <= 7 && std::strcmp(argv[5], "small") == 0))) {
      return fsize(argv[2], std::atoll(argv[3]), std::atoll(argv[4]), argc >= 6, argc == 7 ? std::atoll(argv[6]) : 0);
    }
    if (mode == "stuck" && argc == 4) return stuck(argv[2], std::atoll(argv[3]));
    if (mode == "stall" && argc == 4) return stall(argv[2], std::atoll(argv[3]));
    if (mode == "hold" && argc == 5) return hold(argv[2], std::atoll(argv[3]), std::atoll(argv[4]));
    if (mode == "rwrite" && argc == 6) return rwrite(argv[2], argv[3], std::atoll(argv[4]), std::atoll(argv[5]));
    if (mode == "rerase" && argc == 6) return rerase(argv[2], argv[3], std::atoll(argv[4]), std::atoll(argv[5]));
    if (mode == "rbudget" && argc == 8) {
      return rbudget(argv[2], argv[3],
                     BudgetPuts{std::atoll(argv[4]), std::atoll(argv[5]), std::atoll(argv[6]), std::atof(argv[7])});
    }
    if (mode == "race" && argc == 5) return race(argv[2], std::atoll(argv[3]), std::atoll(argv[4]));
    if (mode == "fork-server" && argc == 2) return fork_server();
    if (mode == "key" && argc == 4) {
      std::vector<int64_t> tokens;
      for (char* p = std::strtok(argv[3], ","); p; p = std::strtok(nullptr, ",")) tokens.push_back(std::atoll(p));
      std::printf("%s\n", orbit::chunk_key_tokens(argv[2], tokens).c_str());
      return 0;
    }
    std::fprintf(
        stderr,
        "usage: store_kill_child write DIR FIRST N  |  fsize DIR FIRST LIMIT [small [AFTER]]  |  stall DIR I  |  key "
        "FINGERPRINT "
        "T,T,...  |  hold DIR I LEASE_MS"
        "  |  rwrite DIR URL FIRST N  |  rerase DIR URL FIRST N  |  rbudget DIR URL FIRST N BUDGET FRACTION  |  race "
        "DIR "
        "ROUNDS I  |  fork-server\n");
    return 2;
  } catch (const orbit::Error& e) {
    std::fprintf(stderr, "store_kill_child: %s\n", e.what());
    return 3;
  }
}
