// The remote tier on a 3-node redis cluster (test_store_remote.cpp's executable): keys across nodes' slots,
// MOVED after a reshard, and ASK with ASKING while a slot migrates.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <memory>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "orbit/store/redis_client.h"
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
  for (int64_t i = 1; i <= 30; ++i) REQUIRE(a.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(20000)));
  CHECK(a.stats().remote.writes == 30);
  const RemoteSummary summary = summarize_remote(url);
  CHECK(summary.reachable);
  CHECK(summary.nodes.size() == 3);
  CHECK(summary.entries == 30);
  for (auto& n : nodes) CHECK(std::stoll(test::redis_cli(n->port(), "DBSIZE")) > 0);  // spread over all three

  ChunkStore b(test::remote_store_options(url));
  for (int64_t i = 1; i <= 10; ++i) CHECK(values_equal(*b.get(remote_key(i)).value(), *test::store_test_value(i)));
  // Move every slot of node 0 to node 1 while b's client holds the old slot map: it must follow MOVED.
  const std::string id0 = node_id(*nodes[0]);
  const std::string id1 = node_id(*nodes[1]);
  const test::CliRun reshard =
      test::run_command("redis-cli --cluster reshard " + nodes[0]->endpoint() + " --cluster-from " + id0 +
                        " --cluster-to " + id1 + " --cluster-slots 5461 --cluster-yes");  // node 0 holds slots 0..5460
  INFO(reshard.out);
  REQUIRE(reshard.status == 0);
  for (int64_t i = 11; i <= 30; ++i) {
    Result<ValuePtr> v = b.get(remote_key(i));
    INFO("entry " << i);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(std::stoll(test::redis_cli(nodes[0]->port(), "DBSIZE")) == 0);
  CHECK(b.stats().remote.corrupt == 0);
  // Writes (transactions) with the old slot map follow MOVED too: each is sent to the slot's new owner whole.
  for (int64_t i = 31; i <= 40; ++i) REQUIRE(a.put(remote_key(i), test::store_test_value(i)).is_ok());
  REQUIRE(a.drain_remote(std::chrono::milliseconds(20000)));
  CHECK(a.stats().remote.write_failures == 0);
  ChunkStore c(test::remote_store_options(url));  // reads them from the cluster
  for (int64_t i = 31; i <= 40; ++i) CHECK(values_equal(*c.get(remote_key(i)).value(), *test::store_test_value(i)));
}

TEST_CASE("a transaction the server aborts names the queued command's own error", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  RedisClient client(parse_redis_url(server.url()), RedisClientOptions{});
  const Result<RedisReply> r = client.transaction({{"SET", "k", "v"}, {"SET", "k"}}, "k");
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().reason(), Contains("transaction aborted") && Contains("wrong number of arguments"));
  CHECK(test::redis_cli(server.port(), "EXISTS k").find('0') != std::string::npos);  // nothing was applied
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
  const std::string old_key = remote_key(1);
  const int slot = redis_key_slot(RedisBackend::manifest_key(old_key));
  int64_t other = 2;
  while (redis_key_slot(RedisBackend::manifest_key(remote_key(other))) != slot) ++other;
  const std::string new_key = remote_key(other);
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

}  // namespace ORBIT_TEST_FILE
