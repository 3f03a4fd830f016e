// The remote tier on real redis-server processes (started here on 127.0.0.1, free ports, stopped here):
// the client (URLs, hash slots, AUTH), values split into parts and verified on every load, two stores
// sharing through Redis, corrupted, truncated and forged values refused before use, and erase on the
// remote. The same executable holds test_store_remote_faults.cpp (the server down, slow, killed and
// restarted under load), test_store_remote_cluster.cpp (a 3-node cluster: MOVED, ASK) and
// test_store_remote_engine.cpp (engines sharing through Redis, the remote read rate).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "redis_test_server.h"
#include "test_helpers.h"
#include "test_store_remote.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using test::remote_key;
using test::wait_until;

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
  CHECK(redis_key_slot(RedisBackend::part_key(remote_key(1), 3)) ==
        redis_key_slot(RedisBackend::manifest_key(remote_key(1))));
}

TEST_CASE("two stores share entries through one redis server; values are split into parts", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore a(test::remote_store_options(server.url(), dir / "a"));
  ChunkStore b(test::remote_store_options(server.url(), dir / "b"));
  for (int64_t i = 1; i <= 12; ++i) REQUIRE(a.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  CHECK(a.stats().remote.writes == 12);
  // Value 5 is 2 MiB: 33 parts of 64 KiB under one manifest, all in the manifest's hash slot.
  const std::string parts =
      test::redis_cli(server.port(), "EXISTS '" + RedisBackend::part_key(remote_key(5), 32) + "'");
  CHECK_THAT(parts, Contains("1"));
  for (int64_t i = 1; i <= 12; ++i) {
    CHECK(b.residence(remote_key(i)) == StoreTier::kRemote);
    Result<ValuePtr> v = b.get(remote_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
    CHECK(b.residence(remote_key(i)) == StoreTier::kHost);  // promoted
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
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(writer.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  // 1: a flipped byte inside a part (sizes intact); 2: the last part truncated; 3: a part missing.
  const std::string p1 = RedisBackend::part_key(remote_key(1), 0);
  test::redis_cli(server.port(), "SETRANGE '" + p1 + "' 300 X");
  const std::string p2 = RedisBackend::part_key(remote_key(2), 0);
  test::redis_cli(server.port(), "SET '" + p2 + "' short");
  const std::string p3 = RedisBackend::part_key(remote_key(3), 0);
  test::redis_cli(server.port(), "DEL '" + p3 + "'");
  ChunkStore reader(test::remote_store_options(server.url()));
  // Each miss says why through GetOptions::remote_refusal, naming the key; a plain miss leaves it empty.
  std::string refusal = "stale";
  GetOptions go;
  go.remote_refusal = &refusal;
  CHECK_FALSE(reader.get(remote_key(4), go).is_ok());  // never written
  CHECK(refusal.empty());
  for (int64_t i = 1; i <= 3; ++i) {
    CHECK_FALSE(reader.get(remote_key(i), go).is_ok());
    CHECK_THAT(refusal, Contains(remote_key(i)));
  }
  const RemoteStats rs = reader.stats().remote;
  CHECK(rs.corrupt == 2);
  CHECK(rs.incomplete == 1);  // a part gone is what a server's allkeys-lru does: counted apart from damage
  CHECK(rs.misses == 4);
  CHECK(rs.hits == 0);
  for (int64_t i = 1; i <= 3; ++i) {  // removed from the server
    CHECK_THAT(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(remote_key(i)) + "'"),
               Contains("0"));
  }
  // The next put replaces it, and the value is whole again.
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(reader.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(reader.drain_remote(std::chrono::milliseconds(10000)));
  ChunkStore third(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*third.get(remote_key(i)).value(), *test::store_test_value(i)));
}

TEST_CASE("a forged manifest (a size of 9e18 bytes, a false size) is corrupt: dropped, never raised",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore writer(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 2; ++i) REQUIRE(writer.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  const std::string hex(64, 'a');
  test::redis_cli(server.port(), "SET '" + RedisBackend::manifest_key(remote_key(1)) +
                                     "' 'orbit-remote 1 1 9000000000000000000 " + hex + "'");
  test::redis_cli(server.port(),
                  "SET '" + RedisBackend::manifest_key(remote_key(2)) + "' 'orbit-remote 1 1 500000000 " + hex + "'");
  ChunkStore reader(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 2; ++i) {
    Result<ValuePtr> r = Status::not_found("unset");
    REQUIRE_NOTHROW(r = reader.get(remote_key(i)));
    CHECK_FALSE(r.is_ok());
    CHECK_THAT(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(remote_key(i)) + "'"),
               Contains("0"));
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
  const std::string mkey = RedisBackend::manifest_key(remote_key(1));
  // A 90-byte manifest claiming 2^20 parts (each read was an MGET of 2^20 keys), one claiming more parts
  // than parts of 1 KiB make up its size, and one whose count disagrees with the part size it states.
  for (const std::string& forged : {"orbit-remote 1 1048576 1073741824 " + hex, "orbit-remote 1 3 2048 " + hex,
                                    "orbit-remote 1 2 5000 " + hex + " 1024"}) {
    test::redis_cli(server.port(), "SET '" + mkey + "' '" + forged + "'");
    const int64_t mgets = mget_calls(server.port());
    const BackendRead r = backend.get(remote_key(1));
    CHECK(r.outcome == BackendRead::Outcome::kCorrupt);
    CHECK_THAT(r.reason, Contains(mkey) && Contains("the manifest claims"));
    CHECK(mget_calls(server.port()) == mgets);
  }
  // What a writer puts reads back, and so does a manifest without the part size older writers wrote.
  const std::string bytes(150 << 10, 'x');
  REQUIRE(backend.put(remote_key(2), bytes).is_ok());
  CHECK_THAT(test::redis_cli(server.port(), "GET '" + RedisBackend::manifest_key(remote_key(2)) + "'"),
             Contains(" 65536"));
  CHECK(backend.get(remote_key(2)).bytes == bytes);
  const std::string manifest =
      test::redis_cli(server.port(), "GET '" + RedisBackend::manifest_key(remote_key(2)) + "'");
  test::redis_cli(server.port(), "SET '" + RedisBackend::manifest_key(remote_key(2)) + "' '" +
                                     manifest.substr(0, manifest.rfind(' ')) + "'");
  CHECK(backend.get(remote_key(2)).bytes == bytes);
  // A value too large for 4096 parts is refused at put, naming the limit.
  RedisBackendOptions small = o;
  small.part_bytes = 1024;
  RedisBackend tiny(small);
  const Status big = tiny.put(remote_key(3), std::string((4 << 20) + 1, 'y'));
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
  REQUIRE(backend("")->put(remote_key(1), bytes).is_ok());
  REQUIRE(backend("s3cret-B")->put(remote_key(2), bytes).is_ok());
  REQUIRE(backend("s3cret-A")->put(remote_key(3), bytes).is_ok());
  auto reader = backend("s3cret-A");
  const int64_t mgets = mget_calls(server.port());
  const BackendRead unsealed = reader->get(remote_key(1));
  CHECK(unsealed.outcome == BackendRead::Outcome::kUnauthenticated);
  CHECK_THAT(unsealed.reason, Contains(RedisBackend::manifest_key(remote_key(1))) && Contains("no authentication tag"));
  const BackendRead other = reader->get(remote_key(2));
  CHECK(other.outcome == BackendRead::Outcome::kUnauthenticated);
  CHECK_THAT(other.reason, Contains("does not verify"));
  CHECK_THAT(other.reason, !Contains("s3cret"));  // the secret is never part of a message
  CHECK(mget_calls(server.port()) == mgets);
  CHECK(reader->get(remote_key(3)).bytes == bytes);
  // Altered: the count changed in a sealed manifest.
  const std::string mkey = RedisBackend::manifest_key(remote_key(3));
  std::string manifest = test::redis_cli(server.port(), "GET '" + mkey + "'");
  manifest.erase(manifest.find_last_not_of("\n") + 1);
  manifest.replace(manifest.find(" 2 "), 3, " 3 ");
  test::redis_cli(server.port(), "SET '" + mkey + "' '" + manifest + "'");
  CHECK_THAT(reader->get(remote_key(3)).reason, Contains("does not verify"));
  // Without a secret, a sealed manifest still reads (its tag skipped).
  REQUIRE(backend("s3cret-A")->put(remote_key(4), bytes).is_ok());
  CHECK(backend("")->get(remote_key(4)).bytes == bytes);
}

TEST_CASE("redis AUTH from the URL's credentials, which no message, warning or stat repeats", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  test::redis_cli(server.port(), "ACL SETUSER alice on '>s3cret-pw' '~*' '+@all'");
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.port());
  {
    ChunkStore writer(test::remote_store_options("redis://alice:s3cret-pw@" + endpoint));
    REQUIRE(writer.put(remote_key(1), test::store_test_value(1)).is_ok());
    REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
    CHECK(writer.stats().remote.writes == 1);
    CHECK(writer.stats().remote.url == "redis://alice:***@" + endpoint);
    ChunkStore reader(test::remote_store_options("redis://alice:s3cret-pw@" + endpoint));
    CHECK(reader.get(remote_key(1)).is_ok());
  }
  ChunkStore wrong(test::remote_store_options("redis://alice:wr0ng-pw@" + endpoint));
  CHECK_FALSE(wrong.get(remote_key(1)).is_ok());
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

TEST_CASE("erase removes an entry from the remote tier too, after any write of it still queued", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  ChunkStore a(test::remote_store_options(server.url(), dir / "a"));
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(a.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  auto on_server = [&](int64_t i) {
    return test::redis_cli(server.port(), "EXISTS " + RedisBackend::manifest_key(remote_key(i))).find('1') == 0;
  };
  REQUIRE(on_server(1));
  REQUIRE(a.erase(remote_key(1)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
  CHECK_FALSE(on_server(1));
  CHECK(test::redis_cli(server.port(), "KEYS " + RedisBackend::manifest_key(remote_key(1)) + "*").find("orbit") ==
        std::string::npos);  // no part is left behind either
  CHECK(on_server(2));
  CHECK(a.stats().remote.removals == 1);
  CHECK_FALSE(a.contains(remote_key(1)));

  // Another process's store sees the removal: a miss, not a stale hit.
  ChunkStore b(test::remote_store_options(server.url(), dir / "b"));
  CHECK(b.get(remote_key(1)).status().code() == StatusCode::kNotFound);
  // An entry only on the remote (b never held key 2 locally) is erased from there by b.
  REQUIRE(b.erase(remote_key(2)).is_ok());
  REQUIRE(b.drain_remote(std::chrono::milliseconds(10000)));
  CHECK_FALSE(on_server(2));
  CHECK(b.erase(remote_key(2)).code() == StatusCode::kNotFound);

  // A put still queued when erase() is called never reaches the server after the removal.
  server.pause();  // writes wait in the queue (the remote is "down" once a call times out)
  REQUIRE(a.put(remote_key(4), test::store_test_value(4)).is_ok());
  REQUIRE(a.erase(remote_key(4)).is_ok());
  server.resume();
  REQUIRE(a.drain_remote(std::chrono::milliseconds(20000)));
  CHECK_FALSE(on_server(4));
  CHECK(on_server(3));
}

TEST_CASE("a value sealed under another secret is a miss warned of once and left on the server", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  auto options = [&](const std::string& secret) {
    ChunkStoreOptions o = test::remote_store_options(server.url());
    o.remote.secret = secret;
    o.remote.warn = true;
    return o;
  };
  {
    ChunkStore writer(options("team-secret"));
    for (int64_t i = 1; i <= 3; ++i) REQUIRE(writer.put(remote_key(i), test::store_test_value(i)).is_ok());
    REQUIRE(writer.drain_remote(std::chrono::milliseconds(10000)));
  }
  std::vector<std::string> said;
  const WarningSink previous = set_warning_sink([&](std::string m) { said.push_back(std::move(m)); });
  const std::unique_ptr<void, std::function<void(void*)>> restore(&said, [&](void*) { set_warning_sink(previous); });
  ChunkStore outsider(options("other-secret"));
  for (int64_t i = 1; i <= 3; ++i) CHECK_FALSE(outsider.get(remote_key(i)).is_ok());
  const RemoteStats rs = outsider.stats().remote;
  CHECK(rs.unauthenticated == 3);
  CHECK(rs.corrupt == 0);
  CHECK(rs.misses == 3);
  CHECK_THAT(rs.last_error, Contains("does not verify") && !Contains("secret-"));
  std::vector<std::string> refused;
  for (const std::string& m : said)
    if (m.find("does not verify") != std::string::npos) refused.push_back(m);
  REQUIRE(refused.size() == 1);  // once a run, naming the cause
  CHECK_THAT(refused[0], Contains("need the same secret") && Contains(remote_key(1)) && !Contains("secret-"));
  // Left on the server: the engines that share the secret still read them.
  ChunkStore teammate(options("team-secret"));
  for (int64_t i = 1; i <= 3; ++i) CHECK(teammate.get(remote_key(i)).is_ok());
  CHECK(teammate.stats().remote.hits == 3);
}

}  // namespace ORBIT_TEST_FILE
