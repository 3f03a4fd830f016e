// orbit::warn (orbit/common/warn.h): the default writes "orbit: warning: ..." to stderr; an installed sink
// receives each message instead, from any thread, and is never running once it has been replaced; the
// store's warnings (a failed disk write, a store closed with entries never written) reach it.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "orbit/common/warn.h"
#include "orbit/store/chunk_store.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;

namespace {

// What `body` writes to file descriptor 2, read back from a temporary file.
template <typename Body>
std::string captured_stderr(Body body) {
  orbit::test::TempDir dir;
  const std::string path = dir / "stderr";
  std::fflush(stderr);
  const int saved = ::dup(2);
  REQUIRE(saved >= 0);
  std::FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  ::dup2(::fileno(file), 2);
  body();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Installs a sink collecting the messages for the scope; restores the default at the end.
struct CollectingSink {
  std::mutex mu;
  std::vector<std::string> messages;
  CollectingSink() {
    orbit::set_warning_sink([this](std::string m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(std::move(m));
    });
  }
  ~CollectingSink() { orbit::set_warning_sink(nullptr); }
};

}  // namespace

TEST_CASE("warn writes one line to stderr by default", "[common][cpu]") {
  const std::string out = captured_stderr([] { orbit::warn("store /x: something happened"); });
  CHECK(out == "orbit: warning: store /x: something happened\n");
}

TEST_CASE("an installed sink receives the messages, and the default comes back", "[common][cpu]") {
  std::string out;
  std::vector<std::string> got;
  {
    CollectingSink sink;
    out = captured_stderr([] { orbit::warn("first"); });
    got = sink.messages;
  }
  CHECK(out.empty());
  CHECK(got == std::vector<std::string>{"first"});
  CHECK(captured_stderr([] { orbit::warn("second"); }) == "orbit: warning: second\n");
  // set_warning_sink returns the sink it replaces; a sink that throws loses nothing: stderr has the message.
  orbit::set_warning_sink([](std::string) { throw std::runtime_error("sink failed"); });
  CHECK(captured_stderr([] { orbit::warn("third"); }) == "orbit: warning: third\n");
  CHECK(static_cast<bool>(orbit::set_warning_sink(nullptr)));
}

TEST_CASE("warn from many threads: every message arrives once, none after the sink is replaced", "[common][cpu]") {
  constexpr int kThreads = 8;
  constexpr int kEach = 2000;
  auto delivered = std::make_shared<std::atomic<int>>(0);
  auto running = std::make_shared<std::atomic<int>>(0);  // calls of the sink in progress
  auto overlap = std::make_shared<std::atomic<bool>>(false);
  auto retired = std::make_shared<std::atomic<bool>>(false);
  auto after_retired = std::make_shared<std::atomic<int>>(0);
  orbit::set_warning_sink([=](std::string m) {
    if (running->fetch_add(1) != 0) overlap->store(true);
    if (retired->load()) after_retired->fetch_add(1);
    if (!m.empty()) delivered->fetch_add(1);
    running->fetch_sub(1);
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kEach; ++i) orbit::warn("message " + std::to_string(i));
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(delivered->load() == kThreads * kEach);
  CHECK_FALSE(overlap->load());

  // Replacing the sink while threads warn: once set_warning_sink returned, the old sink never runs again.
  std::atomic<bool> stop{false};
  std::vector<std::thread> more;
  for (int t = 0; t < 4; ++t) {
    more.emplace_back([&stop] {
      while (!stop.load()) orbit::warn("late");
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  orbit::set_warning_sink([](std::string) {});
  retired->store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.store(true);
  for (std::thread& t : more) t.join();
  CHECK(after_retired->load() == 0);
  orbit::set_warning_sink(nullptr);
}

TEST_CASE("the store's disk warnings go through the sink", "[common][store][cpu]") {
  orbit::test::TempDir dir;
  const std::string d = dir.path().string();
  auto fail = std::make_shared<std::atomic<bool>>(false);
  orbit::store::ChunkStoreOptions o;
  o.dir = d;
  o.model_fingerprint = orbit::test::kStoreTestFingerprint;
  o.host_budget_bytes = 4 << 20;
  o.io_hooks.write = [fail](int fd, const void* data, std::size_t size) -> ssize_t {
    if (fail->load()) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, size);
  };
  CollectingSink sink;
  const std::string out = captured_stderr([&] {
    orbit::store::ChunkStore store(o);
    REQUIRE(store.put(orbit::test::store_test_key(1), orbit::test::store_test_value(1)).is_ok());
    fail->store(true);
    REQUIRE(store.put(orbit::test::store_test_key(2), orbit::test::store_test_value(2)).is_ok());
    REQUIRE(store.stats().disk_degraded);
  });  // closed with key 2 never written
  CHECK(out.empty());
  std::lock_guard<std::mutex> lock(sink.mu);
  REQUIRE(sink.messages.size() == 2);
  CHECK_THAT(sink.messages[0], Contains("store " + d + ": a disk write failed (") &&
                                   Contains("No space left on device") && !Contains("orbit: warning"));
  CHECK_THAT(sink.messages[1], Contains("store " + d + ": closing with entries that never reached the disk"));
}

}  // namespace ORBIT_TEST_FILE
