// The remote tier over TLS (rediss://) on real redis-server processes serving TLS (started here on
// 127.0.0.1, free ports, stopped here), with a CA and certificates made by the openssl command: entries shared
// over TLS, AUTH inside it, the server's certificate and name verified, client certificates, the CLI with the
// CA from the environment, and the errors for each refusal.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <filesystem>

#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_backend.h"
#include "orbit/store/redis_client.h"
#include "redis_test_server.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)
namespace fs = std::filesystem;

namespace {

// Certificates for the TLS tests, made with the openssl command (Debian's openssl package): a CA, a server
// certificate for 127.0.0.1 and one for another name (both signed by it), a client certificate, and a
// second CA nothing is signed by.
class TestPki {
 public:
  explicit TestPki(const std::string& dir) : dir_(dir) {
    fs::create_directories(dir_);
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh("openssl req -x509 " + key + " -keyout ca.key -out ca.crt -days 2 -subj /CN=orbit-test-ca");
    sh("openssl req -x509 " + key + " -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca");
    issue(key, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1");
    issue(key, "wrong-name", "/CN=orbit.invalid", "subjectAltName=DNS:orbit.invalid");
    issue(key, "client", "/CN=orbit-client", "extendedKeyUsage=clientAuth");
  }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  // redis-server arguments serving TLS on `port` with `name`.crt (tls-auth-clients `clients`).
  std::vector<std::string> server_args(const std::string& name, int port, const std::string& clients) const {
    return {"--tls-port",        std::to_string(port), "--tls-cert-file", path(name + ".crt"),  "--tls-key-file",
            path(name + ".key"), "--tls-ca-cert-file", path("ca.crt"),    "--tls-auth-clients", clients};
  }

 private:
  void sh(const std::string& command) {
    const test::CliRun r = test::run_command("cd '" + dir_ + "' && " + command + " 2>&1");
    INFO(command << "\n" << r.out);
    REQUIRE(r.status == 0);
  }
  void issue(const std::string& key, const std::string& name, const std::string& subject, const std::string& ext) {
    sh("printf '%s\\n' '" + ext + "' > " + name + ".ext");
    sh("openssl req " + key + " -keyout " + name + ".key -out " + name + ".csr -subj " + subject);
    sh("openssl x509 -req -in " + name + ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out " + name +
       ".crt -extfile " + name + ".ext");
  }
  std::string dir_;
};

ChunkStoreOptions tls_options(const std::string& url, const TestPki& pki) {
  ChunkStoreOptions o = test::remote_store_options(url);
  o.remote.tls = RedisTlsOptions{};
  o.remote.tls.ca_file = pki.path("ca.crt");
  return o;
}

std::string last_remote_error(ChunkStore& s, const std::string& k) {
  CHECK_FALSE(s.get(k).is_ok());
  return s.stats().remote.last_error;
}

}  // namespace

TEST_CASE("rediss://: the remote tier over TLS, the server's certificate verified, AUTH inside it",
          "[store][remote][tls]") {
  test::TempDir dir;
  const TestPki pki(dir / "pki");
  const int port = test::free_port();
  test::RedisServer server(dir / "redis", pki.server_args("server", port, "no"));
  const std::string url = "rediss://127.0.0.1:" + std::to_string(port);
  {
    ChunkStore a(tls_options(url, pki));
    ChunkStore b(tls_options(url, pki));
    for (int64_t i = 1; i <= 6; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
    REQUIRE(a.drain_remote(std::chrono::milliseconds(10000)));
    CHECK(a.stats().remote.writes == 6);
    CHECK(a.stats().remote.url == url);
    for (int64_t i = 1; i <= 6; ++i) {
      Result<ValuePtr> v = b.get(key(i));
      REQUIRE(v.is_ok());
      CHECK(values_equal(*v.value(), *test::store_test_value(i)));  // value 5 is 2 MiB: many TLS records
    }
    CHECK(b.stats().remote.hits == 6);
  }
  // The CLI takes the CA from the environment (what a URL alone cannot carry).
  const test::CliRun stat = test::run_command("ORBIT_REDIS_TLS_CA_FILE='" + pki.path("ca.crt") + "' " +
                                              std::string(ORBIT_CLI_PATH) + " store stat --remote " + url + " 2>&1");
  INFO(stat.out);
  CHECK(stat.status == 0);
  CHECK_THAT(stat.out, Contains("remote tier") && Contains("6 orbit entries"));
  const test::CliRun system_cas = test::run_command("env -u ORBIT_REDIS_TLS_CA_FILE " + std::string(ORBIT_CLI_PATH) +
                                                    " store stat --remote " + url + " 2>&1");
  INFO(system_cas.out);  // the system's CAs do not know the test CA
  CHECK_THAT(system_cas.out, Contains("UNREACHABLE") && Contains("certificate was not accepted"));
  // The same server's plain port sees what went in over TLS.
  CHECK_THAT(test::redis_cli(server.port(), "EXISTS '" + RedisBackend::manifest_key(key(3)) + "'"), Contains("1"));
  test::redis_cli(server.port(), "ACL SETUSER alice on '>s3cret-pw' '~*' '+@all'");
  ChunkStore authed(tls_options("rediss://alice:s3cret-pw@127.0.0.1:" + std::to_string(port), pki));
  CHECK(authed.get(key(1)).is_ok());
  CHECK(authed.stats().remote.url == "rediss://alice:***@127.0.0.1:" + std::to_string(port));
  ChunkStore wrong_pw(tls_options("rediss://alice:wr0ng@127.0.0.1:" + std::to_string(port), pki));
  CHECK_THAT(last_remote_error(wrong_pw, key(1)), Contains("AUTH as alice refused") && !Contains("wr0ng"));

  ChunkStoreOptions other = tls_options(url, pki);
  other.remote.tls.ca_file = pki.path("other-ca.crt");
  ChunkStore untrusted(other);
  CHECK_THAT(last_remote_error(untrusted, key(1)), Contains("TLS") && Contains("certificate was not accepted"));
  other.remote.tls.verify_peer = false;  // testing only: any certificate
  ChunkStore unverified(other);
  CHECK(unverified.get(key(1)).is_ok());
  // rediss:// to the plain port: the handshake fails, within the timeouts.
  ChunkStore plain(tls_options("rediss://127.0.0.1:" + std::to_string(server.port()), pki));
  CHECK_THAT(last_remote_error(plain, key(1)), Contains("(TLS)"));
  ChunkStoreOptions missing = tls_options(url, pki);
  missing.remote.tls.ca_file = dir / "missing-ca.crt";
  CHECK_THROWS_WITH(ChunkStore(missing), Contains("tls.ca_file") && Contains("missing-ca.crt"));
  missing.remote.tls.ca_file = pki.path("ca.crt");
  missing.remote.tls.cert_file = pki.path("client.crt");
  CHECK_THROWS_WITH(ChunkStore(missing), Contains("needs both"));
}

TEST_CASE("rediss:// checks the server's name and presents a client certificate where the server asks",
          "[store][remote][tls]") {
  test::TempDir dir;
  const TestPki pki(dir / "pki");
  const int named_port = test::free_port();
  test::RedisServer named(dir / "named", pki.server_args("wrong-name", named_port, "no"));
  ChunkStore mismatch(tls_options("rediss://127.0.0.1:" + std::to_string(named_port), pki));
  CHECK_THAT(last_remote_error(mismatch, key(1)), Contains("certificate was not accepted") && Contains("mismatch"));

  const int port = test::free_port();
  test::RedisServer strict(dir / "strict", pki.server_args("server", port, "yes"));
  const std::string url = "rediss://127.0.0.1:" + std::to_string(port);
  ChunkStore anonymous(tls_options(url, pki));
  CHECK_THAT(last_remote_error(anonymous, key(1)), Contains("(TLS)"));
  ChunkStoreOptions o = tls_options(url, pki);
  o.remote.tls.cert_file = pki.path("client.crt");
  o.remote.tls.key_file = pki.path("client.key");
  ChunkStore client(o);
  REQUIRE(client.put(key(1), test::store_test_value(1)).is_ok());
  REQUIRE(client.drain_remote(std::chrono::milliseconds(10000)));
  CHECK(client.stats().remote.writes == 1);
  ChunkStore reader(o);
  CHECK(reader.get(key(1)).is_ok());
}

}  // namespace ORBIT_TEST_FILE
