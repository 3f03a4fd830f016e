// Undelivered remote writes against how the remote is named (real redis-server processes, test_store_remote.cpp's
// executable): records under another spelling of the same server's URL are re-sent, records for another server
// are named in a warning at open (ChunkStore::adopt_other_spellings), and the identity of a URL
// (redis_server_identity).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/warn.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
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

TEST_CASE("writes recorded for the remote under another spelling of its URL are re-sent", "[store][remote]") {
  // An open with "redis://127.0.0.1:P/0" (or with the host's case changed) found the writes recorded for
  // "redis://127.0.0.1:P" none of its own: re-sent 0, kept forever, no warning.
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  server.kill();
  {
    ChunkStore down(test::remote_store_options(server.url(), dir / "s"));
    for (int64_t i = 1; i <= 3; ++i) REQUIRE(down.put(remote_key(i), test::store_test_value(i)).is_ok());
  }
  CHECK(summarize_store(dir / "s").remote_pending == std::vector<std::pair<std::string, int64_t>>{{server.url(), 3}});
  server.start();
  const std::string respelled = server.url() + "/0";
  {
    ChunkStore up(test::remote_store_options(respelled, dir / "s"));
    REQUIRE(up.drain_remote(std::chrono::milliseconds(15000)));
    CHECK(up.stats().remote.resent == 3);
  }
  CHECK(summarize_store(dir / "s").remote_pending.empty());
  ChunkStore other(test::remote_store_options(server.url()));
  for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*other.get(remote_key(i)).value(), *test::store_test_value(i)));
  CHECK(redis_server_identity("redis://U:p@LocalHost:6379/0") == redis_server_identity("redis://localhost:6379"));
  CHECK(redis_server_identity("redis://localhost:6379/1") != redis_server_identity("redis://localhost:6379"));
  CHECK(redis_server_identity("redis-cluster://b:2,a:1") == redis_server_identity("redis-cluster://a:1,b:2"));
}

TEST_CASE("writes recorded for another server are named in a warning at open", "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  const std::string gone = "redis://127.0.0.1:1";  // nothing listens on port 1
  {
    ChunkStore down(test::remote_store_options(gone, dir / "s"));
    for (int64_t i = 1; i <= 2; ++i) REQUIRE(down.put(remote_key(i), test::store_test_value(i)).is_ok());
  }
  std::vector<std::string> said;
  const WarningSink previous = set_warning_sink([&](std::string m) { said.push_back(std::move(m)); });
  ChunkStore moved(test::remote_store_options(server.url(), dir / "s"));
  set_warning_sink(previous);
  REQUIRE_FALSE(said.empty());
  CHECK_THAT(said.front(), Contains("2 remote writes or erases not yet delivered are recorded for " + gone +
                                    ", not for this store's remote " + server.url()));
  CHECK_THAT(said.front(), Contains("orbit store forget-remote --store"));
}

}  // namespace ORBIT_TEST_FILE
