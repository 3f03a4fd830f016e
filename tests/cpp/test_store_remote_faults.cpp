// The remote tier's faults on real redis-server processes (test_store_remote.cpp's executable): the server
// down, hung or restarted, stopped and restarted under load, and kill -9 of the server and of a writer at
// random points, and kill -9 at random points of puts, evictions and gc with a remote. Nothing local is ever lost
// and every operation returns.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store.h"
#include "orbit/store/backend.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "redis_test_server.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_remote.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using test::remote_key;
using test::wait_until;

TEST_CASE("the remote down, hung or restarted never stops the store and loses nothing local", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore store(test::remote_store_options(server.url(), dir / "s"));
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(store.drain_remote(std::chrono::milliseconds(10000)));

  server.kill();
  // Writes while down: the local copy is committed; the remote write waits and fails without loss.
  for (int64_t i = 4; i <= 6; ++i) REQUIRE(store.put(remote_key(i), test::store_test_value(i)).is_ok());
  for (int64_t i = 1; i <= 6; ++i) CHECK(values_equal(*store.get(remote_key(i)).value(), *test::store_test_value(i)));
  CHECK_FALSE(store.get(remote_key(50)).is_ok());  // a miss everywhere: the remote is asked or skipped, no throw
  wait_until([&] { return store.stats().remote.write_failures > 0; });
  RemoteStats rs = store.stats().remote;
  CHECK_FALSE(rs.available);
  CHECK(rs.outages == 1);
  CHECK(rs.errors >= 1);
  CHECK_THAT(rs.last_error, Contains(server.endpoint()));
  CHECK(list_store(dir / "s").size() == 6);

  server.start();  // the same port: the store reconnects by itself and sends what waited
  REQUIRE(store.drain_remote(std::chrono::milliseconds(15000)));
  rs = store.stats().remote;
  CHECK(rs.available);
  CHECK(rs.writes == 6);
  ChunkStore other(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 6; ++i) CHECK(values_equal(*other.get(remote_key(i)).value(), *test::store_test_value(i)));

  // A hung server (accepts, never answers): reads time out (bounded) and count; it comes back.
  server.pause();
  ChunkStore fresh(test::remote_store_options(server.url()));
  CHECK_FALSE(fresh.get(remote_key(1)).is_ok());
  CHECK(fresh.stats().remote.errors == 1);
  // Named as the timeout it is (hiredis says "Resource temporarily unavailable", the socket's EAGAIN).
  CHECK_THAT(fresh.stats().remote.last_error, Contains("timed out: no reply within the command timeout of"));
  CHECK_FALSE(fresh.get(remote_key(2)).is_ok());
  CHECK(fresh.stats().remote.skipped >= 1);  // down: answered at once, no second timeout
  server.resume();
  wait_until([&] { return fresh.get(remote_key(2)).is_ok(); });
  CHECK(fresh.stats().remote.hits == 1);
}

TEST_CASE("the server stopped and restarted under load: every operation returns, nothing local is lost",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore store(test::remote_store_options(server.url(), dir / "s"));
  ChunkStoreOptions ro = test::remote_store_options(server.url());
  ro.host_budget_bytes = 0;  // nothing stays local: every get asks the server
  ChunkStore other(ro);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ops{0}, wrong{0}, remote_ok{0};
  std::vector<std::thread> workers;
  workers.emplace_back([&] {
    for (int64_t n = 0; !stop; ++n) {
      const int64_t i = 1 + n % 60;
      Result<ValuePtr> v = other.get(remote_key(i));
      if (v) {
        ++remote_ok;
        if (!values_equal(*v.value(), *test::store_test_value(i))) ++wrong;
      }
      ++ops;
    }
  });
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      for (int64_t n = 0; !stop; ++n) {
        const int64_t i = 1 + (n * 3 + t) % 60;
        if (n % 2 == 0) {
          if (!store.put(remote_key(i), test::store_test_value(i))) ++wrong;
        } else {
          Result<ValuePtr> v = store.get(remote_key(i));
          if (v && !values_equal(*v.value(), *test::store_test_value(i))) ++wrong;
        }
        ++ops;
      }
    });
  }
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    server.kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    server.start();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  stop = true;
  for (auto& w : workers) w.join();
  CHECK(wrong == 0);
  CHECK(ops > 100);
  REQUIRE(store.drain_remote(std::chrono::milliseconds(15000)));
  CHECK(other.stats().remote.outages >= 1);
  CHECK(remote_ok > 0);
  // Every entry on the server verifies (nothing half-written is visible).
  ChunkStore reader(test::remote_store_options(server.url()));
  int64_t present = 0;
  for (int64_t i = 1; i <= 60; ++i) {
    Result<ValuePtr> v = reader.get(remote_key(i));
    if (v) {
      ++present;
      CHECK(values_equal(*v.value(), *test::store_test_value(i)));
    }
  }
  CHECK(reader.stats().remote.corrupt == 0);
  CHECK(present > 0);
}

TEST_CASE("kill -9 of the server and of a writer at random points loses nothing committed", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  std::mt19937 rng(20261123);
  std::set<int64_t> committed;  // reached the server (acknowledged EXEC, appendfsync always)
  std::set<int64_t> attempted;
  int server_kills = 0, writer_kills = 0;
  const int rounds = 50;  // 40 server kills and 10 writer kills, at random points of the write stream
  std::unique_ptr<test::ChildProcess> writer;
  int64_t last = 0;
  std::string line;
  auto note = [&](const std::string& l) {
    last = std::stoll(l);
    attempted.insert(last);
    if (l.back() == 'r') committed.insert(last);
  };
  for (int round = 0; round < rounds; ++round) {
    if (!writer) {
      const int64_t first = int64_t{round} * 1000 + 1;
      last = first - 1;
      writer = std::make_unique<test::ChildProcess>(
          ORBIT_STORE_CHILD_PATH, std::vector<std::string>{"rwrite", "-", server.url(), std::to_string(first), "1000"});
    }
    const int lines = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int n = 0; n < lines && writer->next_line(&line); ++n) note(line);
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    if (round % 5 != 4) {
      server.kill();  // often mid-transaction: the writer sends ~64 KiB parts
      ++server_kills;
      server.start();  // replays its append-only file; the writer reconnects by itself
    } else {
      writer->kill();
      ++writer_kills;
      while (writer->next_line(&line)) note(line);
      (void)writer->wait();
      attempted.insert(last + 1);  // the write in flight at the kill
      writer.reset();
    }
  }
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i : committed) {
    Result<ValuePtr> v = reader.get(remote_key(i));
    INFO("entry " << i);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  // Whatever else is visible is whole: no manifest without its parts, no mixed value.
  for (int64_t i : attempted) {
    Result<ValuePtr> v = reader.get(remote_key(i));
    if (v) CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(reader.stats().remote.corrupt == 0);
  WARN("remote kill test: " << rounds << " rounds, " << server_kills << " server kills, " << writer_kills
                            << " writer kills, " << committed.size() << " committed entries intact");
  CHECK(committed.size() >= 40);
}

namespace {

// Collects orbit's warnings while it lives (instead of stderr).
class WarningLog {
 public:
  WarningLog() {
    previous_ = set_warning_sink([this](std::string m) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::move(m));
    });
  }
  ~WarningLog() { set_warning_sink(previous_); }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  WarningSink previous_;
  std::mutex mu_;
  std::vector<std::string> messages_;
};

// A store on `dir` with its remote tier at `server`, whose warnings are on (for a WarningLog) and whose values
// are authenticated (no warning about unauthenticated reads).
ChunkStoreOptions warning_store_options(const test::RedisServer& server, const std::string& dir) {
  ChunkStoreOptions o = test::remote_store_options(server.url(), dir);
  o.remote.warn = true;
  o.remote.secret = "s";
  return o;
}

// What close_with_queued_writes saw.
struct QueuedClose {
  int64_t writes_before_kill = 0;        // remote writes delivered before the kill: entry 1's
  RemoteStats at_close;                  // the remote tier's counters just before the close
  std::vector<std::string> undelivered;  // the "not delivered" warnings `log` got
};

// On a store opened on `o`: puts entry 1 and waits until it is delivered, kills `server`, puts entries 2 to 4
// (their remote writes queue) and waits until the writer has met the dead server; then closes the store with
// those three writes queued. REQUIREs each put, the delivery and the writer's failure.
QueuedClose close_with_queued_writes(const ChunkStoreOptions& o, test::RedisServer& server, WarningLog& log) {
  QueuedClose closed;
  {
    ChunkStore store(o);
    REQUIRE(store.put(remote_key(1), test::store_test_value(1)).is_ok());
    REQUIRE(store.drain_remote(std::chrono::milliseconds(10000)));
    closed.writes_before_kill = store.stats().remote.writes;
    server.kill();  // mid-stream: what is queued now never reaches it
    for (int64_t i = 2; i <= 4; ++i) REQUIRE(store.put(remote_key(i), test::store_test_value(i)).is_ok());
    wait_until([&] { return store.stats().remote.write_failures > 0; });
    closed.at_close = store.stats().remote;
    REQUIRE(closed.at_close.write_failures > 0);  // the writer met the dead server
  }
  for (const std::string& m : log.messages()) {
    if (m.find("not delivered") != std::string::npos) closed.undelivered.push_back(m);
  }
  return closed;
}

}  // namespace

TEST_CASE("writes queued for a killed server are named when the store closes; an empty restart loses nothing local",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis", {}, /*durable=*/false);  // a restart comes back empty
  const ChunkStoreOptions o = warning_store_options(server, dir / "s");
  WarningLog log;
  // Closed while the server is down: the three writes are dropped, and said so.
  const QueuedClose closed = close_with_queued_writes(o, server, log);
  REQUIRE(closed.writes_before_kill == 1);
  CHECK(closed.at_close.queued == 3);
  CHECK(closed.at_close.writes == 1);
  const std::vector<std::string>& undelivered = closed.undelivered;
  REQUIRE(undelivered.size() == 1);
  CHECK_THAT(undelivered[0], Contains(server.endpoint()) && Contains("closed with 3 queued writes") &&
                                 Contains("the local tiers keep those entries"));

  server.start();  // empty: no persistence
  REQUIRE(test::redis_cli(server.port(), "DBSIZE").find("0") != std::string::npos);
  ChunkStore reopened(o);
  for (int64_t i = 1; i <= 4; ++i) {
    INFO("entry " << i);
    GetOptions local_only;
    local_only.remote = false;
    Result<ValuePtr> v = reopened.get(remote_key(i), local_only);
    REQUIRE(v.is_ok());  // the local store kept every entry, delivered or not
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(reopened.stats().remote.hits == 0);
  CHECK(list_store(dir / "s").size() == 4);
}

namespace {

// A backend whose puts wait until release() (a slow link holding one write in flight), over a MemoryBackend.
class HeldBackend final : public BlobBackend {
 public:
  std::string describe() const override { return "held-memory"; }
  BackendRead get(const std::string& key) override { return inner_.get(key); }
  Status put(const std::string& key, const std::string& bytes) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    puts_.push_back(key);
    return inner_.put(key, bytes);
  }
  Status remove(const std::string& key) override { return inner_.remove(key); }
  Result<bool> exists(const std::string& key) override { return inner_.exists(key); }
  // Waits until a put is in the backend (the writer's write in flight); false after 60 s.
  bool wait_entered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return entered_ > 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<std::string> puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool released_ = false;
  std::vector<std::string> puts_;
  MemoryBackend inner_;
};

}  // namespace

TEST_CASE("a queue over its byte bound drops the oldest queued write, never the one in flight", "[store][remote]") {
  auto backend = std::make_shared<HeldBackend>();
  ChunkStoreOptions o = test::remote_store_options("");
  o.remote_backend = backend;
  o.remote.max_queued_bytes = 1;  // every put beyond the newest is over the bound
  ChunkStore store(o);
  REQUIRE(store.put(remote_key(1), test::store_test_value(1)).is_ok());
  REQUIRE(backend->wait_entered());  // value 1 is in flight, held by the backend
  REQUIRE(store.put(remote_key(2), test::store_test_value(2)).is_ok());
  REQUIRE(store.put(remote_key(3), test::store_test_value(3)).is_ok());  // 2 is dropped: queued, not in flight
  backend->release();
  REQUIRE(store.drain_remote(std::chrono::milliseconds(60000)));
  const RemoteStats rs = store.stats().remote;
  // Each put counted once: written (1 and 3) or dropped (2), never both.
  CHECK(rs.writes == 2);
  CHECK(rs.writes_dropped == 1);
  CHECK(backend->puts() == std::vector<std::string>{remote_key(1), remote_key(3)});
}

TEST_CASE("writes a close left queued for a down server are re-sent from the local copies by a later open",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis", {}, /*durable=*/false);
  ChunkStoreOptions o = warning_store_options(server, dir / "s");
  WarningLog log;
  const std::vector<std::string> undelivered = close_with_queued_writes(o, server, log).undelivered;
  REQUIRE(undelivered.size() == 1);
  CHECK_THAT(undelivered[0],
             Contains("closed with 3 queued writes") && Contains("the next open of this store re-sends them"));
  {  // opened while the server is still down: the open does not wait, and the records outlive this close too
    ChunkStore down(o);
    CHECK(down.stats().remote.resent == 0);
  }
  {  // a process without the remote, its disk budget full: it cannot send those writes, so it keeps their entries
    ChunkStoreOptions local = o;
    local.remote = RemoteOptions{};
    local.host_budget_bytes = 0;
    local.disk_budget_bytes = 300 << 10;  // entries 2 to 4 take ~140 KiB; 101 to 109 (~50 KiB each) need room
    ChunkStore tight(local);
    for (int64_t i = 101; i < 110; ++i) {
      if (i % 5 != 0) (void)tight.put(remote_key(i), test::store_test_value(i));  // (multiples of 5: 2 MiB)
    }
    CHECK(tight.stats().tiers[2].evictions > 0);
    for (int64_t i = 2; i <= 4; ++i) CHECK(tight.get(remote_key(i)).is_ok());
  }
  server.start();  // empty: only a re-send can put entries 2 to 4 there
  ChunkStoreOptions quiet = o;
  quiet.remote.warn = false;
  {
    ChunkStore reopened(quiet);
    REQUIRE(reopened.drain_remote(std::chrono::milliseconds(30000)));
    const RemoteStats rs = reopened.stats().remote;
    CHECK(rs.resent == 3);
    CHECK(rs.resend_backlog == 0);
    CHECK(rs.writes == 0);  // re-sent writes are not this run's own
  }
  ChunkStoreOptions reader_options = test::remote_store_options(server.url());
  reader_options.remote.secret = "s";
  ChunkStore reader(reader_options);
  for (int64_t i = 2; i <= 4; ++i) {
    INFO("entry " << i);
    Result<ValuePtr> v = reader.get(remote_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  ChunkStore again(quiet);  // delivered: the records are gone, nothing is sent twice
  REQUIRE(again.drain_remote(std::chrono::milliseconds(30000)));
  CHECK(again.stats().remote.resent == 0);
}

TEST_CASE("writes a killed writer left queued for a down server are re-sent by the next open", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis", {}, /*durable=*/false);
  const std::string store_dir = dir / "s";
  server.kill();  // the writer's puts commit locally, their remote writes wait in its queue
  std::vector<int64_t> local;
  {
    test::ChildProcess writer(ORBIT_STORE_CHILD_PATH,
                              std::vector<std::string>{"rwrite", store_dir, server.url(), "1", "1000"});
    std::string line;
    while (local.size() < 2 && writer.next_line(&line)) {
      REQUIRE(line.back() == 'l');  // committed locally, not delivered
      local.push_back(std::stoll(line));
    }
    REQUIRE(local.size() == 2);
    writer.kill();  // SIGKILL: no close, no flush
    (void)writer.wait();
  }
  server.start();
  {
    ChunkStore reopened(test::remote_store_options(server.url(), store_dir));
    REQUIRE(reopened.drain_remote(std::chrono::milliseconds(30000)));
    CHECK(reopened.stats().remote.resent >= 2);  // the entry in flight at the kill may be recorded too
  }
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i : local) {
    INFO("entry " << i);
    Result<ValuePtr> v = reader.get(remote_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
}

// An erase is journaled like a write: a writer killed with its removals queued for a down server leaves them
// recorded, and the next open sends them, so an erased key does not come back from the remote. (Before, only
// writes were recorded: the values stayed on the remote and a later get brought the erased keys back.)
TEST_CASE("erases a killed writer left queued for a down server are re-sent by the next open", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");  // durable: what it holds outlives the kill below
  const std::string store_dir = dir / "s";
  {
    ChunkStore store(test::remote_store_options(server.url(), store_dir));
    for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(remote_key(i), test::store_test_value(i)).is_ok());
    REQUIRE(store.drain_remote(std::chrono::milliseconds(30000)));
    REQUIRE(store.stats().remote.writes == 3);
  }
  server.kill();  // the writer's erases remove the local copies, their removals wait in its queue
  {
    test::ChildProcess writer(ORBIT_STORE_CHILD_PATH,
                              std::vector<std::string>{"rerase", store_dir, server.url(), "1", "2"});
    std::string line;
    for (int64_t i = 1; i <= 2; ++i) {
      REQUIRE(writer.next_line(&line));
      REQUIRE(line == std::to_string(i) + " e");
    }
    writer.kill();  // SIGKILL: no close, no flush
    (void)writer.wait();
  }
  server.start();  // replays its append-only file: entries 1 to 3 are there again
  {
    ChunkStore remote_only(test::remote_store_options(server.url()));
    REQUIRE(remote_only.get(remote_key(1)).is_ok());  // the erase has not reached the server yet
  }
  {
    ChunkStore reopened(test::remote_store_options(server.url(), store_dir));
    REQUIRE(reopened.drain_remote(std::chrono::milliseconds(30000)));
    CHECK(reopened.stats().remote.resent == 2);
    CHECK(reopened.stats().remote.resend_backlog == 0);
  }
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 2; ++i) {
    INFO("erased entry " << i);
    Result<ValuePtr> v = reader.get(remote_key(i));
    CHECK(v.status().code() == StatusCode::kNotFound);
  }
  Result<ValuePtr> kept = reader.get(remote_key(3));
  REQUIRE(kept.is_ok());
  CHECK(values_equal(*kept.value(), *test::store_test_value(3)));
  ChunkStore again(test::remote_store_options(server.url(), store_dir));  // settled: nothing is sent twice
  REQUIRE(again.drain_remote(std::chrono::milliseconds(30000)));
  CHECK(again.stats().remote.resent == 0);
}

// A disk budget with the server down: the entries whose remote writes are queued are the only copies those writes
// can be sent from. Before, a put evicted them like any entry, and the writer killed afterwards left records the
// next open dropped (no local copy): the entries were lost from both tiers. Now eviction keeps them, up to
// max_held_fraction of the budget: with 1 a put that needs their room is refused (saying why) and every put that
// returned ok is on the remote once the next open re-sent it; with the default (half) no put is refused, the oldest
// writes past the bound are given up (abandoned) with their local copies, and every other put that returned ok, the
// newest, is on the remote after the re-send, the given-up ones not.
TEST_CASE("an entry whose remote write is not delivered is not evicted: a kill then loses nothing", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis", {}, /*durable=*/false);
  const std::string store_dir = dir / "s";
  server.kill();                          // the writer's remote writes wait in its queue
  constexpr int64_t kBudget = 256 << 10;  // values 1 to 4 (200 KiB) fit; 5 (2 MiB) never does; 6 to 9 need room
  std::string fraction = "1";
  SECTION("max_held_fraction = 1: every one held") {}
  SECTION("max_held_fraction = 0.5 (the default): the newest held") { fraction = "0.5"; }
  std::vector<int64_t> stored;
  std::vector<std::string> refused;
  int64_t abandoned = -1;
  {
    test::ChildProcess writer(ORBIT_STORE_CHILD_PATH, std::vector<std::string>{"rbudget", store_dir, server.url(), "1",
                                                                               "9", std::to_string(kBudget), fraction});
    std::string line;
    while (writer.next_line(&line) && line != "done") {
      if (line.find(" refused: ") != std::string::npos) {
        refused.push_back(line);
      } else if (line.rfind("abandoned ", 0) == 0) {
        abandoned = std::stoll(line.substr(10));
      } else {
        stored.push_back(std::stoll(line));
      }
    }
    REQUIRE(line == "done");
    writer.kill();  // SIGKILL: no close, no flush
    (void)writer.wait();
  }
  INFO("max_held_fraction " << fraction << ", stored " << stored.size() << ", abandoned " << abandoned << ", refused:\n"
                            << [&] {
                                 std::string all;
                                 for (const std::string& r : refused) all += r + "\n";
                                 return all;
                               }());
  CHECK(stored.size() >= 4);
  const auto for_remote = [](const std::string& r) {
    return r.find("kept until their remote write") != std::string::npos;
  };
  if (fraction == "1") {
    CHECK(std::count_if(refused.begin(), refused.end(), for_remote) >= 1);
    CHECK(abandoned == 0);
  } else {
    CHECK(refused.size() == 1);  // 5 alone: over the whole budget
    CHECK(stored.size() == 8);
    CHECK(abandoned >= 1);
  }
  REQUIRE(abandoned >= 0);
  REQUIRE(abandoned < static_cast<int64_t>(stored.size()));
  server.start();  // empty: only a re-send puts the entries there
  {
    ChunkStore reopened(test::remote_store_options(server.url(), store_dir));
    REQUIRE(reopened.drain_remote(std::chrono::milliseconds(30000)));
    reopened.verify_integrity(/*deep=*/true);
    CHECK(reopened.stats().tiers[static_cast<int>(StoreTier::kDisk)].bytes <= kBudget);
    CHECK(reopened.stats().remote.resent == static_cast<int64_t>(stored.size()) - abandoned);
  }
  // The given-up writes are the oldest but for one the writer thread had in flight as the bound was reached (its
  // retry of the down server picks up the oldest queued write; a write being sent is not given up): so they are
  // `abandoned` of the oldest abandoned + 1, neither local nor re-sent; every other entry is intact.
  ChunkStore reader(test::remote_store_options(server.url()));
  int64_t missing = 0;
  for (std::size_t n = 0; n < stored.size(); ++n) {
    const int64_t i = stored[n];
    INFO("entry " << i);
    Result<ValuePtr> v = reader.get(remote_key(i));
    if (!v.is_ok()) {
      CHECK(v.status().code() == StatusCode::kNotFound);
      CHECK(static_cast<int64_t>(n) <= abandoned);
      ++missing;
      continue;
    }
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(missing == abandoned);
}

namespace {

// Sends `command` to a store_kill_child fork-server, waits for `lines` lines of the forked process (its puts:
// each is added to *reported when `reported` is given), SIGKILLs it 0 to `max_us` microseconds later (this picks
// the moment, it does not wait for work), reads what it printed before it died, and REQUIREs that the kill ended
// it. Returns whether it died inside its work (it had not printed `done_line`).
bool kill_forked(test::ChildProcess& server, const std::string& command, int lines, int max_us, std::mt19937& rng,
                 std::vector<int64_t>* reported, const std::string& done_line = "") {
  REQUIRE(server.write_line(command));
  std::string line;
  REQUIRE(server.next_line(&line));
  REQUIRE(line.rfind("pid ", 0) == 0);
  const pid_t pid = static_cast<pid_t>(std::stol(line.substr(4)));
  for (int seen = 0; seen < lines; ++seen) {
    REQUIRE(server.next_line(&line));
    if (reported) reported->push_back(std::stoll(line));
  }
  std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(rng)));
  ::kill(pid, SIGKILL);
  bool done = false;
  while (server.next_line(&line) && line.rfind("exit ", 0) != 0) {
    if (line == done_line) {
      done = true;
    } else if (reported) {
      reported->push_back(std::stoll(line));  // puts that returned before the kill
    }
  }
  REQUIRE(line.rfind("exit ", 0) == 0);
  const int status = std::stoi(line.substr(5));
  if (done) return false;  // it finished before the kill (gc: a clean directory has little to do)
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
  return true;
}

}  // namespace

// kill -9 at random points of puts that evict (a disk budget of a few values) into a store with a remote, and of
// gc between them. After each kill the store reopens with the remote: every entry its index holds reads back whole,
// and once it has re-sent what its journal recorded (drain_remote), the remote holds each of them too, the put in
// flight at the kill included when it committed: its row and its journal record commit in one transaction (before,
// the record was a commit of its own after the row's, and a kill between the two left a row never re-sent). Every
// put that returned is on the remote then, also those evicted locally: eviction keeps an entry until its write is
// delivered (before, one evicted first was lost from both tiers). No value served, locally or by the remote, is
// corrupt.
TEST_CASE("SIGKILL at random points of puts, evictions and gc with a remote: nothing committed is lost",
          "[store][remote][kill]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  const std::string d = dir / "s";
  std::mt19937 rng(20261202);
  test::ChildProcess forks(ORBIT_STORE_CHILD_PATH, {"fork-server"});
  REQUIRE(forks.started());
  std::vector<int64_t> reported;
  int64_t on_remote = 0, evicted = 0, gc_kills = 0;
  for (int round = 0; round < 12; ++round) {
    INFO("round " << round);
    const int64_t first = int64_t{round} * 100000 + 1;
    const size_t before = reported.size();
    const std::string churn = "churn " + d + " " + server.url() + " " + std::to_string(first) + " 100000";
    REQUIRE(kill_forked(forks, churn, std::uniform_int_distribution<int>(1, 8)(rng), 4000, rng, &reported));
    std::vector<int64_t> check(reported.begin() + static_cast<std::ptrdiff_t>(before), reported.end());
    // The put at the kill (when no put was skipped for want of room: else one at or after it).
    const int64_t in_flight = first + static_cast<int64_t>(reported.size() - before);
    check.push_back(in_flight);
    for (int s = 0; s < 10; ++s) check.push_back(reported[std::uniform_int_distribution<size_t>(0, before)(rng)]);
    if (round % 2 == 1) gc_kills += kill_forked(forks, "gc " + d, 0, 3000, rng, nullptr, "gc done") ? 1 : 0;
    std::vector<int64_t> local;
    {
      ChunkStore store(test::remote_store_options(server.url(), d));
      store.verify_integrity(/*deep=*/true);
      for (int64_t i : check) {
        Result<ValuePtr> v = store.get(remote_key(i), GetOptions{false, false});
        INFO("entry " << i);
        if (!v) continue;  // evicted, or the put in flight that did not commit
        REQUIRE(values_equal(*v.value(), *test::store_test_value(i)));
        local.push_back(i);
      }
      REQUIRE(store.drain_remote(std::chrono::milliseconds(60000)));  // re-sends what the journal recorded
    }
    for (int64_t i : check) {
      if (i != in_flight && std::find(local.begin(), local.end(), i) == local.end()) ++evicted;
    }
    ChunkStore reader(test::remote_store_options(server.url()));
    for (int64_t i : local) {
      INFO("entry " << i << " (held locally)");
      Result<ValuePtr> v = reader.get(remote_key(i));
      REQUIRE(v.is_ok());
      REQUIRE(values_equal(*v.value(), *test::store_test_value(i)));
      ++on_remote;
    }
    for (int64_t i : check) {  // every put that returned: on the remote (delivered, or kept locally and re-sent)
      INFO("entry " << i << " (reported)");
      Result<ValuePtr> v = reader.get(remote_key(i));
      if (i != in_flight) REQUIRE(v.is_ok());
      if (v) REQUIRE(values_equal(*v.value(), *test::store_test_value(i)));
    }
    REQUIRE(reader.stats().remote.corrupt == 0);
  }
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  WARN("remote kill test: 12 writer kills, "
       << gc_kills << " gc kills mid-run, " << reported.size() << " puts reported, " << on_remote
       << " local entries found on the remote, " << evicted << " reported entries found evicted");
  CHECK(on_remote >= 12);
  CHECK(evicted >= 1);  // the puts evicted (a test whose kills never met an eviction would prove less)
}

}  // namespace ORBIT_TEST_FILE
