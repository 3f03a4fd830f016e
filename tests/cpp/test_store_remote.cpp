// The remote tier on real redis-server processes (started here on 127.0.0.1, free ports, stopped here):
// the client (hash slots, one server and a 3-node cluster with MOVED redirections), values split into
// parts and verified on every load, two stores and two engine processes sharing through Redis, corrupted
// and truncated values, the server down, slow, killed and restarted under load, and kill -9 of the
// server and of a writer at random points.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/planner/cost_model.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "orbit/store/redis_client.h"
#include "redis_test_server.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_values.h"

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
namespace fs = std::filesystem;

namespace {

std::string key(int64_t i) { return test::store_test_key(i); }

void wait_until(const std::function<bool()>& done, int max_ms = 10000) {
  for (int waited = 0; waited < max_ms && !done(); waited += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

TEST_CASE("redis URLs and cluster hash slots", "[store][remote]") {
  const RedisUrl one = parse_redis_url("redis://127.0.0.1:6390/2");
  CHECK_FALSE(one.cluster);
  CHECK(one.nodes.size() == 1);
  CHECK(one.nodes[0].port == 6390);
  CHECK(one.db == 2);
  const RedisUrl c = parse_redis_url("redis-cluster://127.0.0.1:7000,127.0.0.1:7001");
  CHECK(c.cluster);
  CHECK(c.nodes.size() == 2);
  const RedisUrl tls = parse_redis_url("rediss://127.0.0.1:6390");
  CHECK(tls.tls);
  CHECK_FALSE(tls.cluster);
  const RedisUrl tls_cluster = parse_redis_url("rediss-cluster://a:1,b:2");
  CHECK((tls_cluster.tls && tls_cluster.cluster && tls_cluster.nodes.size() == 2));
  CHECK_FALSE(c.tls);
  CHECK(redact_redis_url("rediss://u:p@h:1") == "rediss://u:***@h:1");
  CHECK_THROWS_WITH(parse_redis_url("rediss://a:1,b:2"), Contains("rediss-cluster://"));
  CHECK_THROWS_WITH(parse_redis_url("http://x:1"), Contains("unknown scheme"));
  CHECK_THROWS_WITH(parse_redis_url("redis://host:99999"), Contains("port '99999'"));
  CHECK_THROWS_WITH(parse_redis_url("redis://a:1,b:2"), Contains("redis-cluster://"));
  CHECK_THROWS_WITH(parse_redis_url("redis-cluster://a:1/3"), Contains("database 0"));
  // The Redis Cluster specification's examples: CRC16("123456789") = 0x31C3; hash tags pick the slot.
  CHECK(redis_key_slot("123456789") == 0x31C3 % 16384);
  CHECK(redis_key_slot("foo") == 12182);
  CHECK(redis_key_slot("{user1000}.following") == redis_key_slot("{user1000}.followers"));
  CHECK(redis_key_slot("foo{bar}{zap}") == redis_key_slot("bar"));  // the first {...} only
  CHECK(redis_key_slot(RedisBackend::part_key(key(1), 3)) == redis_key_slot(RedisBackend::manifest_key(key(1))));
}

TEST_CASE("two stores share entries through one redis server; values are split into parts", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore a(test::remote_store_options(server.url(), dir / "a"));
  ChunkStore b(test::remote_store_options(server.url(), dir / "b"));
  for (int64_t i = 1; i <= 12; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  CHECK(a.stats().remote.writes == 12);
  // Value 5 is 2 MiB: 33 parts of 64 KiB under one manifest, all in the manifest's hash slot.
  const std::string parts = test::redis_cli(server.port(), "EXISTS '" + RedisBackend::part_key(key(5), 32) + "'");
  CHECK_THAT(parts, Contains("1"));
  for (int64_t i = 1; i <= 12; ++i) {
    CHECK(b.residence(key(i)) == StoreTier::kRemote);
    Result<ValuePtr> v = b.get(key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
    CHECK(b.residence(key(i)) == StoreTier::kHost);  // promoted
  }
  const RemoteStats rs = b.stats().remote;
  CHECK(rs.hits == 12);
  CHECK(rs.bytes_read > 2 << 20);
  CHECK(rs.read_seconds > 0);
  CHECK(list_store(dir / "b").size() == 12);  // promoted to b's disk too
  const RemoteSummary summary = summarize_remote(server.url());
  CHECK(summary.reachable);
  CHECK(summary.entries == 12);
  CHECK(summary.maxmemory_policy == "allkeys-lru");
  const test::CliRun stat = test::cli("store stat --store " + (dir / "b") + " --remote " + server.url());
  INFO(stat.out);
  CHECK(stat.status == 0);
  CHECK_THAT(stat.out, Contains("remote tier") && Contains("12 orbit entries"));
}

TEST_CASE("a corrupted or truncated remote value is detected, never used, and replaced", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore writer(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(writer.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  // 1: a flipped byte inside a part (sizes intact); 2: the last part truncated; 3: a part missing.
  const std::string p1 = RedisBackend::part_key(key(1), 0);
  test::redis_cli(server.port(), "SETRANGE '" + p1 + "' 300 X");
  const std::string p2 = RedisBackend::part_key(key(2), 0);
  test::redis_cli(server.port(), "SET '" + p2 + "' short");
  const std::string p3 = RedisBackend::part_key(key(3), 0);
  test::redis_cli(server.port(), "DEL '" + p3 + "'");
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 3; ++i) CHECK_FALSE(reader.get(key(i)).is_ok());
  const RemoteStats rs = reader.stats().remote;
  CHECK(rs.corrupt == 3);
  CHECK(rs.hits == 0);
  for (int64_t i = 1; i <= 3; ++i) {  // removed from the server
    CHECK_THAT(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key(i)) + "'"), Contains("0"));
  }
  // The next put replaces it, and the value is whole again.
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(reader.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(reader.drain_remote(std::chrono::milliseconds(10000)));
  ChunkStore third(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*third.get(key(i)).value(), *test::store_test_value(i)));
}

TEST_CASE("a forged manifest (a size of 9e18 bytes, a false size) is corrupt: dropped, never raised",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore writer(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 2; ++i) REQUIRE(writer.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  const std::string hex(64, 'a');
  test::redis_cli(server.port(), "SET '" + RedisBackend::manifest_key(key(1)) +
                                     "' 'orbit-remote 1 1 9000000000000000000 " + hex + "'");
  test::redis_cli(server.port(),
                  "SET '" + RedisBackend::manifest_key(key(2)) + "' 'orbit-remote 1 1 500000000 " + hex + "'");
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 2; ++i) {
    Result<ValuePtr> r = Status::not_found("unset");
    REQUIRE_NOTHROW(r = reader.get(key(i)));
    CHECK_FALSE(r.is_ok());
    CHECK_THAT(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key(i)) + "'"), Contains("0"));
  }
  CHECK(reader.stats().remote.corrupt == 2);
}

namespace {

// How many MGETs the server has answered (INFO commandstats).
int64_t mget_calls(int port) {
  const std::string info = test::redis_cli(port, "INFO commandstats");
  const std::size_t at = info.find("cmdstat_mget:calls=");
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + 19));
}

}  // namespace

TEST_CASE("a manifest claiming more parts than its size allows is refused by name before any part is fetched",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  RedisBackendOptions o;
  o.url = server.url();
  o.part_bytes = 64 << 10;
  RedisBackend backend(o);
  const std::string hex(64, 'a');
  const std::string mkey = RedisBackend::manifest_key(key(1));
  // A 90-byte manifest claiming 2^20 parts (each read was an MGET of 2^20 keys), one claiming more parts
  // than parts of 1 KiB make up its size, and one whose count disagrees with the part size it states.
  for (const std::string& forged : {"orbit-remote 1 1048576 1073741824 " + hex, "orbit-remote 1 3 2048 " + hex,
                                    "orbit-remote 1 2 5000 " + hex + " 1024"}) {
    test::redis_cli(server.port(), "SET '" + mkey + "' '" + forged + "'");
    const int64_t mgets = mget_calls(server.port());
    const BackendRead r = backend.get(key(1));
    CHECK(r.outcome == BackendRead::Outcome::kCorrupt);
    CHECK_THAT(r.reason, Contains(mkey) && Contains("the manifest claims"));
    CHECK(mget_calls(server.port()) == mgets);
  }
  // What a writer puts reads back, and so does a manifest without the part size older writers wrote.
  const std::string bytes(150 << 10, 'x');
  REQUIRE(backend.put(key(2), bytes).is_ok());
  CHECK_THAT(test::redis_cli(server.port(), "GET '" + RedisBackend::manifest_key(key(2)) + "'"), Contains(" 65536"));
  CHECK(backend.get(key(2)).bytes == bytes);
  const std::string manifest = test::redis_cli(server.port(), "GET '" + RedisBackend::manifest_key(key(2)) + "'");
  test::redis_cli(server.port(),
                  "SET '" + RedisBackend::manifest_key(key(2)) + "' '" + manifest.substr(0, manifest.rfind(' ')) + "'");
  CHECK(backend.get(key(2)).bytes == bytes);
  // A value too large for 4096 parts is refused at put, naming the limit.
  RedisBackendOptions small = o;
  small.part_bytes = 1024;
  RedisBackend tiny(small);
  const Status big = tiny.put(key(3), std::string((4 << 20) + 1, 'y'));
  CHECK_FALSE(big.is_ok());
  CHECK_THAT(big.reason(), Contains("4096 parts"));
}

TEST_CASE("with a secret, a manifest written without it or with another is refused before its parts are fetched",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  auto backend = [&](const std::string& secret) {
    RedisBackendOptions o;
    o.url = server.url();
    o.part_bytes = 64 << 10;
    o.secret = secret;
    return std::make_unique<RedisBackend>(o);
  };
  const std::string bytes(100 << 10, 'z');
  REQUIRE(backend("")->put(key(1), bytes).is_ok());
  REQUIRE(backend("s3cret-B")->put(key(2), bytes).is_ok());
  REQUIRE(backend("s3cret-A")->put(key(3), bytes).is_ok());
  auto reader = backend("s3cret-A");
  const int64_t mgets = mget_calls(server.port());
  const BackendRead unsealed = reader->get(key(1));
  CHECK(unsealed.outcome == BackendRead::Outcome::kCorrupt);
  CHECK_THAT(unsealed.reason, Contains(RedisBackend::manifest_key(key(1))) && Contains("no authentication tag"));
  const BackendRead other = reader->get(key(2));
  CHECK(other.outcome == BackendRead::Outcome::kCorrupt);
  CHECK_THAT(other.reason, Contains("does not verify"));
  CHECK_THAT(other.reason, !Contains("s3cret"));  // the secret is never part of a message
  CHECK(mget_calls(server.port()) == mgets);
  CHECK(reader->get(key(3)).bytes == bytes);
  // Altered: the count changed in a sealed manifest.
  const std::string mkey = RedisBackend::manifest_key(key(3));
  std::string manifest = test::redis_cli(server.port(), "GET '" + mkey + "'");
  manifest.erase(manifest.find_last_not_of("\n") + 1);
  manifest.replace(manifest.find(" 2 "), 3, " 3 ");
  test::redis_cli(server.port(), "SET '" + mkey + "' '" + manifest + "'");
  CHECK_THAT(reader->get(key(3)).reason, Contains("does not verify"));
  // Without a secret, a sealed manifest still reads (its tag skipped).
  REQUIRE(backend("s3cret-A")->put(key(4), bytes).is_ok());
  CHECK(backend("")->get(key(4)).bytes == bytes);
}

TEST_CASE("redis AUTH from the URL's credentials, which no message, warning or stat repeats", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  test::redis_cli(server.port(), "ACL SETUSER alice on '>s3cret-pw' '~*' '+@all'");
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.port());
  {
    ChunkStore writer(test::remote_store_options("redis://alice:s3cret-pw@" + endpoint));
    REQUIRE(writer.put(key(1), test::store_test_value(1)).is_ok());
    REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
    CHECK(writer.stats().remote.writes == 1);
    CHECK(writer.stats().remote.url == "redis://alice:***@" + endpoint);
    ChunkStore reader(test::remote_store_options("redis://alice:s3cret-pw@" + endpoint));
    CHECK(reader.get(key(1)).is_ok());
  }
  ChunkStore wrong(test::remote_store_options("redis://alice:wr0ng-pw@" + endpoint));
  CHECK_FALSE(wrong.get(key(1)).is_ok());
  const RemoteStats rs = wrong.stats().remote;
  CHECK(rs.errors >= 1);
  CHECK_THAT(rs.last_error, Contains("AUTH as alice refused") && !Contains("wr0ng-pw"));
  CHECK_THAT(rs.url, !Contains("wr0ng-pw"));
  CHECK_THROWS_WITH(parse_redis_url("redis://bob:hunter2@host:99999"), Contains("port") && !Contains("hunter2"));
  CHECK_THROWS_WITH(ChunkStore(test::remote_store_options("redis://bob:hunter2@host:1/x")), !Contains("hunter2"));
  CHECK(redact_redis_url("redis-cluster://pw@a:1,b:2") == "redis-cluster://:***@a:1,b:2");
}

TEST_CASE("remote_ttl_seconds is bounded: 2^62 is refused at open, not by every write", "[store][remote]") {
  ChunkStoreOptions o = test::remote_store_options("redis://127.0.0.1:1");
  o.remote.ttl_seconds = int64_t{1} << 62;
  CHECK_THROWS_WITH(ChunkStore(o), Contains("remote_ttl_seconds") && Contains("100 years"));
  o.remote.ttl_seconds = kMaxRemoteTtlSeconds;
  CHECK_NOTHROW(ChunkStore(o));
}

TEST_CASE("the remote down, hung or restarted never stops the store and loses nothing local", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore store(test::remote_store_options(server.url(), dir / "s"));
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(store.drain_remote(std::chrono::milliseconds(10000)));

  server.kill();
  // Writes while down: the local copy is committed; the remote write waits and fails without loss.
  for (int64_t i = 4; i <= 6; ++i) REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
  for (int64_t i = 1; i <= 6; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  CHECK_FALSE(store.get(key(50)).is_ok());  // a miss everywhere: the remote is asked or skipped, no throw
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
  for (int64_t i = 1; i <= 6; ++i) CHECK(values_equal(*other.get(key(i)).value(), *test::store_test_value(i)));

  // A hung server (accepts, never answers): reads time out (bounded) and count; it comes back.
  server.pause();
  ChunkStore fresh(test::remote_store_options(server.url()));
  CHECK_FALSE(fresh.get(key(1)).is_ok());
  CHECK(fresh.stats().remote.errors == 1);
  CHECK_FALSE(fresh.get(key(2)).is_ok());
  CHECK(fresh.stats().remote.skipped >= 1);  // down: answered at once, no second timeout
  server.resume();
  wait_until([&] { return fresh.get(key(2)).is_ok(); });
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
      Result<ValuePtr> v = other.get(key(i));
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
          if (!store.put(key(i), test::store_test_value(i))) ++wrong;
        } else {
          Result<ValuePtr> v = store.get(key(i));
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
    Result<ValuePtr> v = reader.get(key(i));
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
    Result<ValuePtr> v = reader.get(key(i));
    INFO("entry " << i);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  // Whatever else is visible is whole: no manifest without its parts, no mixed value.
  for (int64_t i : attempted) {
    Result<ValuePtr> v = reader.get(key(i));
    if (v) CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(reader.stats().remote.corrupt == 0);
  WARN("remote kill test: " << rounds << " rounds, " << server_kills << " server kills, " << writer_kills
                            << " writer kills, " << committed.size() << " committed entries intact");
  CHECK(committed.size() >= 40);
}

TEST_CASE("two engine processes share canonicals through redis: the second encodes none", "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  {
    test::ChildProcess first(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), dir / "a", server.url(), "6"});
    std::string line;
    REQUIRE(first.next_line(&line));
    CHECK(nlohmann::json::parse(line)["canonicals_encoded"] == 6);
    first.close_stdin();  // closing the engine sends its queued remote writes
    REQUIRE(WEXITSTATUS(first.wait()) == 0);
  }
  // Another machine: its own (empty) store directory, the same server.
  test::ChildProcess second(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), dir / "b", server.url(), "6"});
  std::string line;
  REQUIRE(second.next_line(&line));
  const auto b = nlohmann::json::parse(line);
  CHECK(b["canonicals_encoded"] == 0);
  CHECK(b["remote_hits"] >= 6);  // the canonicals, and the patches the first engine formed
  second.close_stdin();
  CHECK(WEXITSTATUS(second.wait()) == 0);
}

namespace {

// Three cluster nodes on loopback joined by `redis-cli --cluster create` (no replicas), once every node
// reports cluster_state:ok.
std::vector<std::unique_ptr<test::RedisServer>> start_cluster(const test::TempDir& dir) {
  std::vector<std::unique_ptr<test::RedisServer>> nodes;
  for (int n = 0; n < 3; ++n) {
    nodes.push_back(std::make_unique<test::RedisServer>(
        dir / ("node" + std::to_string(n)),
        std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                 dir / ("node" + std::to_string(n) + ".conf"), "--cluster-node-timeout", "2000"}));
  }
  std::string endpoints;
  for (auto& n : nodes) endpoints += " " + n->endpoint();
  const test::CliRun create =
      test::run_command("redis-cli --cluster create" + endpoints + " --cluster-replicas 0 --cluster-yes");
  INFO(create.out);
  REQUIRE(create.status == 0);
  wait_until([&] {
    for (auto& n : nodes) {
      if (test::redis_cli(n->port(), "CLUSTER INFO").find("cluster_state:ok") == std::string::npos) return false;
    }
    return true;
  });
  return nodes;
}

std::string node_id(const test::RedisServer& node) {
  return test::redis_cli(node.port(), "CLUSTER MYID").substr(0, 40);
}

}  // namespace

TEST_CASE("a 3-node redis cluster: slots across nodes, MOVED after a reshard", "[store][remote]") {
  test::TempDir dir;
  const auto nodes = start_cluster(dir);
  const std::string url = "redis-cluster://" + nodes[0]->endpoint();  // one seed is enough
  ChunkStore a(test::remote_store_options(url));
  for (int64_t i = 1; i <= 30; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(20000)));
  CHECK(a.stats().remote.writes == 30);
  const RemoteSummary summary = summarize_remote(url);
  CHECK(summary.reachable);
  CHECK(summary.nodes.size() == 3);
  CHECK(summary.entries == 30);
  for (auto& n : nodes) CHECK(std::stoll(test::redis_cli(n->port(), "DBSIZE")) > 0);  // spread over all three

  ChunkStore b(test::remote_store_options(url));
  for (int64_t i = 1; i <= 10; ++i) CHECK(values_equal(*b.get(key(i)).value(), *test::store_test_value(i)));
  // Move every slot of node 0 to node 1 while b's client holds the old slot map: it must follow MOVED.
  const std::string id0 = node_id(*nodes[0]);
  const std::string id1 = node_id(*nodes[1]);
  const test::CliRun reshard =
      test::run_command("redis-cli --cluster reshard " + nodes[0]->endpoint() + " --cluster-from " + id0 +
                        " --cluster-to " + id1 + " --cluster-slots 5461 --cluster-yes");  // node 0 holds slots 0..5460
  INFO(reshard.out);
  REQUIRE(reshard.status == 0);
  for (int64_t i = 11; i <= 30; ++i) {
    Result<ValuePtr> v = b.get(key(i));
    INFO("entry " << i);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(std::stoll(test::redis_cli(nodes[0]->port(), "DBSIZE")) == 0);
  CHECK(b.stats().remote.corrupt == 0);
}

TEST_CASE("a redis cluster slot in migration: puts and gets follow ASK with ASKING", "[store][remote]") {
  test::TempDir dir;
  const auto nodes = start_cluster(dir);
  const std::string url = "redis-cluster://" + nodes[0]->endpoint();
  RedisClient probe(parse_redis_url(url), RedisClientOptions{});
  // The node that owns a key's slot answers it; the others answer MOVED.
  auto owner_of = [&](const std::string& store_key) -> std::size_t {
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      RedisEndpoint e{"127.0.0.1", nodes[n]->port()};
      Result<RedisReply> r = probe.command_on(e, {"EXISTS", RedisBackend::manifest_key(store_key)});
      if (r && !r.value().is_error()) return n;
    }
    FAIL("no node owns the slot of " << store_key);
    return 0;
  };
  // Two entries in one slot: `old_key` stored before the migration starts (it stays on the source until
  // moved), `new_key` put while the slot migrates (the source answers ASK: it goes to the target).
  const std::string old_key = key(1);
  const int slot = redis_key_slot(RedisBackend::manifest_key(old_key));
  int64_t other = 2;
  while (redis_key_slot(RedisBackend::manifest_key(key(other))) != slot) ++other;
  const std::string new_key = key(other);
  const std::size_t src = owner_of(old_key), dst = (src + 1) % nodes.size();
  ChunkStore writer(test::remote_store_options(url));
  REQUIRE(writer.put(old_key, test::store_test_value(1)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));

  const std::string s = std::to_string(slot);
  CHECK(test::redis_cli(nodes[dst]->port(), "CLUSTER SETSLOT " + s + " IMPORTING " + node_id(*nodes[src])).find("OK") !=
        std::string::npos);
  CHECK(test::redis_cli(nodes[src]->port(), "CLUSTER SETSLOT " + s + " MIGRATING " + node_id(*nodes[dst])).find("OK") !=
        std::string::npos);
  // Without ASKING the target refuses the slot it imports (MOVED back to the source): ASK is the only way in.
  RedisEndpoint target{"127.0.0.1", nodes[dst]->port()};
  Result<RedisReply> refused = probe.command_on(target, {"GET", RedisBackend::manifest_key(new_key)});
  REQUIRE(refused.is_ok());
  CHECK(refused.value().str.rfind("MOVED", 0) == 0);

  REQUIRE(writer.put(new_key, test::store_test_value(other)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  CHECK(writer.stats().remote.write_failures == 0);
  CHECK(writer.stats().remote.writes == 2);
  // The new entry landed on the importing node (asked with ASKING), none of it on the source.
  Result<RedisReply> on_src =
      probe.command_on({"127.0.0.1", nodes[src]->port()}, {"EXISTS", RedisBackend::manifest_key(new_key)});
  REQUIRE(on_src.is_ok());
  CHECK(on_src.value().integer == 0);
  CHECK(std::stoll(test::redis_cli(nodes[dst]->port(), "CLUSTER COUNTKEYSINSLOT " + s)) >= 2);  // manifest + parts

  // A fresh client (its slot map says: the source owns the slot) reads both: the old entry from the
  // source directly, the new one through ASK + ASKING (manifest and parts).
  ChunkStore reader(test::remote_store_options(url));
  Result<ValuePtr> got_old = reader.get(old_key);
  REQUIRE(got_old.is_ok());
  CHECK(values_equal(*got_old.value(), *test::store_test_value(1)));
  Result<ValuePtr> got_new = reader.get(new_key);
  REQUIRE(got_new.is_ok());
  CHECK(values_equal(*got_new.value(), *test::store_test_value(other)));
  CHECK(reader.stats().remote.hits == 2);
  CHECK(reader.stats().remote.corrupt == 0);
  CHECK(reader.stats().remote.errors == 0);
}

TEST_CASE("erase removes an entry from the remote tier too, after any write of it still queued", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore a(test::remote_store_options(server.url(), dir / "a"));
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  auto on_server = [&](int64_t i) {
    return test::redis_cli(server.port(), "EXISTS " + RedisBackend::manifest_key(key(i))).find('1') == 0;
  };
  REQUIRE(on_server(1));
  REQUIRE(a.erase(key(1)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  CHECK_FALSE(on_server(1));
  CHECK(test::redis_cli(server.port(), "KEYS " + RedisBackend::manifest_key(key(1)) + "*").find("orbit") ==
        std::string::npos);  // no part is left behind either
  CHECK(on_server(2));
  CHECK(a.stats().remote.removals == 1);
  CHECK_FALSE(a.contains(key(1)));

  // Another process's store sees the removal: a miss, not a stale hit.
  ChunkStore b(test::remote_store_options(server.url(), dir / "b"));
  CHECK(b.get(key(1)).status().code() == StatusCode::kNotFound);
  // An entry only on the remote (b never held key 2 locally) is erased from there by b.
  REQUIRE(b.erase(key(2)).is_ok());
  REQUIRE(b.drain_remote(std::chrono::milliseconds(10000)));
  CHECK_FALSE(on_server(2));
  CHECK(b.erase(key(2)).code() == StatusCode::kNotFound);

  // A put still queued when erase() is called never reaches the server after the removal.
  server.pause();  // writes wait in the queue (the remote is "down" once a call times out)
  REQUIRE(a.put(key(4), test::store_test_value(4)).is_ok());
  REQUIRE(a.erase(key(4)).is_ok());
  server.resume();
  REQUIRE(a.drain_remote(std::chrono::milliseconds(20000)));
  CHECK_FALSE(on_server(4));
  CHECK(on_server(3));
}

namespace {

// A backend whose every read takes at least `delay` longer (a slow link), over a MemoryBackend.
class SlowBackend final : public BlobBackend {
 public:
  explicit SlowBackend(std::chrono::milliseconds delay) : delay_(delay) {}
  std::string describe() const override { return "slow-memory"; }
  BackendRead get(const std::string& key) override {
    std::this_thread::sleep_for(delay_);
    ++reads;
    return inner_.get(key);
  }
  Status put(const std::string& key, const std::string& bytes) override { return inner_.put(key, bytes); }
  Status remove(const std::string& key) override { return inner_.remove(key); }
  Result<bool> exists(const std::string& key) override { return inner_.exists(key); }
  std::atomic<int> reads{0};

 private:
  std::chrono::milliseconds delay_;
  MemoryBackend inner_;
};

}  // namespace

TEST_CASE("the remote read rate is measured with a probe, and the planner prices remote recalls with it",
          "[store][remote]") {
  auto slow = std::make_shared<SlowBackend>(std::chrono::milliseconds(50));
  ChunkStoreOptions o = test::remote_store_options("");
  o.remote_backend = slow;
  ChunkStore s(o);
  const int64_t bytes = 64 << 10;
  Result<RemoteReadSample> sample = s.measure_remote_read(bytes);
  REQUIRE(sample.is_ok());
  CHECK(slow->reads == 3);                // best of three reads of the probe
  CHECK(sample.value().bytes >= bytes);   // the probe blob: payload plus header and checksum
  CHECK(sample.value().seconds >= 0.05);  // every read waited for the link
  CHECK(s.stats().remote.hits == 0);      // a probe is not a hit
  // A cost model fitted with the probe prices a recall of B bytes at B / (probe bytes / probe seconds):
  // at least 50 ms for the probe's size, where the default 100 MB/s would say 0.7 ms.
  std::vector<planner::CostSample> samples{{planner::sample_kind::kForward, 8, 0, 0, 1e-3},
                                           {planner::sample_kind::kForward, 32, 0, 0, 4e-3},
                                           {planner::sample_kind::kRelocate, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kPatchApply, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kPatchForm, 0, 0, 1 << 20, 1e-3},
                                           {planner::sample_kind::kTransferDevice, 0, 0, 1 << 20, 1e-5},
                                           {planner::sample_kind::kTransferHost, 0, 0, 1 << 20, 1e-4},
                                           {planner::sample_kind::kTransferDisk, 0, 0, 1 << 20, 1e-3}};
  const planner::CostModel unmeasured = planner::CostModel::fit(samples);
  samples.push_back({planner::sample_kind::kTransferRemote, 0, 0, sample.value().bytes, sample.value().seconds});
  const planner::CostModel measured = planner::CostModel::fit(samples);
  CHECK(unmeasured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) < 0.01);
  CHECK(measured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) >= 0.05);
  CHECK(measured.seconds_transfer(sample.value().bytes, planner::Tier::kRemote) ==
        Approx(sample.value().seconds).epsilon(1e-9));
  // Without a remote tier there is nothing to measure.
  ChunkStore local(test::remote_store_options(""));
  CHECK(local.measure_remote_read(bytes).status().code() == StatusCode::kRefused);
}

TEST_CASE("Engine::calibrate measures the remote tier's read rate before any remote hit", "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.remote = server.url();
  auto engine = Engine::open(o);
  CHECK(engine->stats().store.remote.hits == 0);
  const CalibrationReport report = engine->calibrate();
  CHECK(report.remote_bytes_per_s > 0);
  CHECK(report.remote_bytes_per_s != 100e6);  // not the default any more
  CHECK_THAT(report.cost_model, Contains("remote"));
  CHECK(engine->stats().store.remote.hits == 0);
  CHECK(std::stoll(test::redis_cli(server.port(), "DBSIZE")) == 0);  // the probe removed itself
  WARN("loopback redis read rate measured by calibrate: " << report.remote_bytes_per_s / 1e6 << " MB/s");
  // Without a remote tier, nothing is measured.
  o.remote.clear();
  CHECK(Engine::open(o)->calibrate().remote_bytes_per_s == 0);
}
