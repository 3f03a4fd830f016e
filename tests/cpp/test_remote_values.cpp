// What a shared Redis server may hand an engine, and what it refuses: values another party wrote under
// a real chunk key (NaN, integer KV, wrong shapes, layer counts or lengths, another kind) are refused
// before use or promotion, counted corrupt, removed from the server and recomputed, so the logits equal a
// clean engine's; with a remote secret, values without a valid HMAC tag are refused too, counted
// unauthenticated and left on the server (another engine's under another secret, not damage).
// Real redis-server processes on 127.0.0.1 (redis_test_server.h; label remote).
#include "orbit_catch.h"

#include <cmath>
#include <random>

#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_client.h"
#include "orbit/store/remote_auth.h"
#include "redis_test_server.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;

namespace {

ChunkStoreOptions remote_store(const std::string& url, const std::string& secret = "", const std::string& dir = "") {
  ChunkStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.remote.url = url;
  o.remote.connect_timeout_ms = 200;
  o.remote.command_timeout_ms = 500;
  o.remote.retry_after_ms = 100;
  o.remote.warn = false;
  o.remote.secret = secret;
  return o;
}

// Writes `value` under `key` to the remote of `url` (sealed under `secret` when given) and waits for it.
void write_remote(const std::string& url, const std::string& fingerprint, const std::string& key, const ValuePtr& value,
                  const std::string& secret = "") {
  ChunkStoreOptions o = remote_store(url, secret);
  o.model_fingerprint = fingerprint;
  ChunkStore writer(o);
  REQUIRE(writer.put(key, value));
  REQUIRE(writer.drain_remote(std::chrono::milliseconds(5000)));
}

bool on_server(const test::RedisServer& server, const std::string& key) {
  return test::redis_cli(server.port(), "EXISTS 'orbit:{" + key + "}'").find('1') != std::string::npos;
}

}  // namespace

TEST_CASE("seal and open: the tag covers key and bytes; without a secret a sealed value still opens", "[remote]") {
  const std::string key(64, 'a'), blob = "blob bytes ending in hex 0123456789abcdef0123456789abcdef";
  const std::string sealed = seal_remote_value("s1", key, blob);
  CHECK(sealed.size() == blob.size() + kRemoteSealBytes);
  CHECK(seal_remote_value("", key, blob) == blob);
  CHECK(open_remote_value("s1", key, sealed).value() == blob);
  CHECK(open_remote_value("", key, sealed).value() == blob);
  CHECK(open_remote_value("", key, blob).value() == blob);
  CHECK_THAT(open_remote_value("s1", key, blob).status().reason(), Contains("no authentication tag"));
  CHECK_THAT(open_remote_value("s2", key, sealed).status().reason(), Contains("does not verify"));
  CHECK_FALSE(open_remote_value("s1", std::string(64, 'b'), sealed));  // another key
  std::string altered = sealed;
  altered[3] ^= 1;
  CHECK_FALSE(open_remote_value("s1", key, altered));
  for (const std::string& reason :
       {open_remote_value("s1", key, blob).status().reason(), open_remote_value("s2", key, sealed).status().reason()}) {
    CHECK(reason.find("s1") == std::string::npos);
    CHECK(reason.find("s2") == std::string::npos);
  }
}

TEST_CASE("with a remote secret, values written without it or with another are refused; the same is accepted",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  const std::string secret = "correct horse battery staple";
  const ValuePtr value = test::store_test_value(1);
  for (const std::string& writer_secret : {std::string(), std::string("another secret")}) {
    INFO("written with secret '" << writer_secret << "'");
    write_remote(server.url(), test::kStoreTestFingerprint, test::store_test_key(1), value, writer_secret);
    REQUIRE(on_server(server, test::store_test_key(1)));
    ChunkStore reader(remote_store(server.url(), secret, dir / ("r" + writer_secret.substr(0, 1))));
    Result<ValuePtr> got = reader.get(test::store_test_key(1));
    CHECK(got.status().code() == StatusCode::kNotFound);
    const RemoteStats stats = reader.stats().remote;
    CHECK(stats.unauthenticated == 1);
    CHECK(stats.corrupt == 0);
    CHECK(stats.hits == 0);
    CHECK_FALSE(reader.residence(test::store_test_key(1)) == StoreTier::kHost);  // never promoted
    // Left on the server: most likely another engine's under its own secret, not damage (a put replaces it).
    CHECK(on_server(server, test::store_test_key(1)));
    CHECK(stats.last_error.find(secret) == std::string::npos);
    for (const StoreFault& f : reader.faults()) CHECK(f.reason.find(secret) == std::string::npos);
  }
  write_remote(server.url(), test::kStoreTestFingerprint, test::store_test_key(1), value, secret);
  ChunkStore same(remote_store(server.url(), secret));
  Result<ValuePtr> got = same.get(test::store_test_key(1));
  REQUIRE(got);
  CHECK(values_equal(*got.value(), *value));
  CHECK(same.stats().remote.hits == 1);
  // A reader without a secret still reads a sealed value (it cannot check the tag).
  ChunkStore open(remote_store(server.url()));
  CHECK(open.get(test::store_test_key(1)));
}

TEST_CASE("a remote value the validator refuses is corrupt: a miss, dropped from the server, never promoted",
          "[store][remote]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  write_remote(server.url(), test::kStoreTestFingerprint, test::store_test_key(2), test::store_test_value(2));
  ChunkStoreOptions o = remote_store(server.url(), "", dir / "local");
  int calls = 0;
  o.remote.validate = [&](const std::string& key, const StoredValue& value) {
    ++calls;
    CHECK(key == test::store_test_key(2));
    return value.kind == EntryKind::kPatch ? Status::ok() : Status::refused("not what this reader expects");
  };
  {
    ChunkStore reader(o);
    Result<ValuePtr> got = reader.get(test::store_test_key(2));
    CHECK(got.status().code() == StatusCode::kNotFound);
    CHECK(calls == 1);
    CHECK(reader.stats().remote.corrupt == 1);
    CHECK_FALSE(reader.residence(test::store_test_key(2)).has_value());
  }
  CHECK_FALSE(on_server(server, test::store_test_key(2)));
  CHECK(verify_store(dir / "local").checked == 0);  // nothing reached the local disk
}

namespace {

EngineOptions engine_options(const std::string& dir, const std::string& url, const std::string& secret = "") {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{8} << 20;
  o.page_size = 4;
  o.store_dir = dir;
  o.remote = url;
  o.remote_secret = secret;
  o.background = BackgroundMode::kInline;
  return o;
}

std::vector<int64_t> chunk_tokens() {
  std::mt19937_64 rng(42);
  std::vector<int64_t> t(24);
  for (auto& x : t) x = 3 + static_cast<int64_t>(rng() % 500);
  return t;
}

const std::vector<int64_t> kQuery{5, 17, 99};

// The logits after the chunk and the query; `encoded` gets how many canonicals the engine encoded.
std::vector<float> window_logits(Engine& engine, int64_t* encoded = nullptr) {
  const ChunkRef chunk = engine.add_tokens(chunk_tokens());
  Window w = engine.new_window();
  w.admit(chunk);
  const Logits logits = w.logits(kQuery);
  if (encoded != nullptr) *encoded = engine.stats().canonicals_encoded;
  return logits.values;
}

// A copy of `clean` with its tensors and attributes changed by `edit`.
ValuePtr edited(const StoredValue& clean,
                const std::function<void(std::vector<NamedTensor>&, std::map<std::string, std::string>&)>& edit,
                EntryKind kind = EntryKind::kCanonical) {
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& t : clean.tensors) tensors.push_back({t.name, t.tensor.clone()});
  std::map<std::string, std::string> attrs = clean.attrs;
  edit(tensors, attrs);
  return make_value(kind, std::move(tensors), std::move(attrs));
}

}  // namespace

TEST_CASE("poisoned remote KV under a real chunk key is refused and recomputed: the logits equal a clean engine's",
          "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  // The clean reference, and its canonical as stored.
  std::vector<float> reference;
  std::string key, fingerprint;
  {
    auto clean = Engine::open(engine_options(dir / "clean", ""));
    reference = window_logits(*clean);
    key = clean->add_tokens(chunk_tokens()).key;
    fingerprint = clean->model_info().fingerprint;
  }
  ChunkStoreOptions local;
  local.dir = dir / "clean";
  local.model_fingerprint = fingerprint;
  const ValuePtr canonical = ChunkStore(local).get(key).value();
  const int64_t layers = std::stoll(canonical->attrs.at("num_layers"));

  using Tensors = std::vector<NamedTensor>;
  using Attrs = std::map<std::string, std::string>;
  const std::vector<std::pair<std::string, ValuePtr>> poisons{
      {"NaN", edited(*canonical, [](Tensors& t, Attrs&) { t[0].tensor.view(-1)[0].fill_(NAN); })},
      {"Inf", edited(*canonical, [](Tensors& t, Attrs&) { t[1].tensor.view(-1)[5].fill_(INFINITY); })},
      {"int32 KV", edited(*canonical,
                          [](Tensors& t, Attrs&) {
                            for (NamedTensor& x : t) x.tensor = x.tensor.to(at::kInt);
                          })},
      {"wrong shape", edited(*canonical, [](Tensors& t, Attrs&) { t[0].tensor = t[0].tensor.narrow(2, 0, 1); })},
      {"wrong layer count", edited(*canonical,
                                   [&](Tensors& t, Attrs& a) {
                                     t.resize(t.size() - 2);
                                     a["num_layers"] = std::to_string(layers - 1);
                                   })},
      {"another length", edited(*canonical,
                                [](Tensors& t, Attrs& a) {
                                  for (NamedTensor& x : t)
                                    x.tensor = x.tensor.narrow(0, 0, x.tensor.size(0) - 1).clone();
                                  a["length"] = std::to_string(t[0].tensor.size(0));
                                })},
      {"a patch under a chunk key", edited(
                                        *canonical, [](Tensors&, Attrs&) {}, EntryKind::kPatch)},
  };
  int round = 0;
  for (const auto& [what, poison] : poisons) {
    INFO("poison: " << what);
    (void)test::redis_cli(server.port(), "FLUSHALL");
    write_remote(server.url(), fingerprint, key, poison);
    REQUIRE(on_server(server, key));
    const std::string local_dir = dir / ("victim-" + std::to_string(round++));
    {
      auto victim = Engine::open(engine_options(local_dir, server.url()));
      int64_t encoded = 0;
      std::vector<float> logits;
      REQUIRE_NOTHROW(logits = window_logits(*victim, &encoded));
      CHECK(encoded == 1);  // recomputed
      CHECK(victim->stats().store.remote.corrupt == 1);
      CHECK(victim->stats().store.remote.hits == 0);
      REQUIRE(logits.size() == reference.size());
      CHECK(logits == reference);
    }
    // What reached the victim's disk is its own clean canonical, and the store verifies clean.
    ChunkStoreOptions victim_store = local;
    victim_store.dir = local_dir;
    const ValuePtr kept = ChunkStore(victim_store).get(key).value();
    CHECK(values_equal(*kept, *canonical));
    CHECK(verify_store(local_dir).clean());
  }
  // The clean value itself is accepted (a remote hit, nothing encoded).
  (void)test::redis_cli(server.port(), "FLUSHALL");
  write_remote(server.url(), fingerprint, key, canonical);
  auto reader = Engine::open(engine_options(dir / "reader", server.url()));
  int64_t encoded = -1;
  CHECK(window_logits(*reader, &encoded) == reference);
  CHECK(encoded == 0);
  CHECK(reader->stats().store.remote.hits >= 1);
}

TEST_CASE("engines with a remote secret (option or ORBIT_REMOTE_SECRET) share only values sealed with it",
          "[store][remote][model]") {
  test::TempDir dir;
  test::RedisServer server(dir / "redis");
  std::vector<float> reference;
  {
    auto writer = Engine::open(engine_options(dir / "w", server.url(), "team secret"));
    reference = window_logits(*writer);
  }
  {  // another secret: refused, recomputed, same logits
    auto other = Engine::open(engine_options(dir / "o", server.url(), "not the team secret"));
    int64_t encoded = 0;
    CHECK(window_logits(*other, &encoded) == reference);
    CHECK(encoded == 1);
    CHECK(other->stats().store.remote.unauthenticated >= 1);
    CHECK(other->stats().store.remote.corrupt == 0);
    CHECK(other->stats().store.remote.last_error.find("team secret") == std::string::npos);
  }
  {  // the same secret from the environment: the values written just now (sealed by `other`) are shared
    ::setenv("ORBIT_REMOTE_SECRET", "not the team secret", 1);
    auto same = Engine::open(engine_options(dir / "s", server.url()));
    ::unsetenv("ORBIT_REMOTE_SECRET");
    int64_t encoded = -1;
    CHECK(window_logits(*same, &encoded) == reference);
    CHECK(encoded == 0);
    CHECK(same->stats().store.remote.corrupt == 0);
  }
}

TEST_CASE("redis URLs: IPv6 hosts in brackets and percent-encoded credentials", "[store][remote]") {
  const RedisUrl v6 = parse_redis_url("redis://[::1]:6380/2");
  REQUIRE(v6.nodes.size() == 1);
  CHECK(v6.nodes[0].host == "::1");
  CHECK(v6.nodes[0].port == 6380);
  CHECK(v6.nodes[0].str() == "[::1]:6380");
  CHECK(v6.db == 2);
  const RedisUrl cluster = parse_redis_url("redis-cluster://[fe80::1]:7000,[::1]:7001,127.0.0.1:7002");
  REQUIRE(cluster.nodes.size() == 3);
  CHECK(cluster.nodes[0].host == "fe80::1");
  CHECK(cluster.nodes[1].port == 7001);
  CHECK(cluster.nodes[2].host == "127.0.0.1");
  CHECK_THROWS_WITH(parse_redis_url("redis://[::1:6379"), Contains("[IPv6 address]:port"));
  CHECK_THROWS_WITH(parse_redis_url("redis://[::1]6379"), Contains("[IPv6 address]:port"));
  CHECK_THROWS_WITH(parse_redis_url("redis://[::1]:0"), Contains("1..65535"));

  const RedisUrl creds = parse_redis_url("redis://al%3Aice:p%40ss%2Fw%25rd@[::1]:6379");
  CHECK(creds.user == "al:ice");
  CHECK(creds.password == "p@ss/w%rd");
  CHECK(creds.text.find("p%40ss") == std::string::npos);
  CHECK(creds.text.find("p@ss") == std::string::npos);
  // A password with an unescaped '/' or '@' still ends at the last '@', and no part of it is shown.
  const RedisUrl raw = parse_redis_url("redis://:Sup3r@Secret/Pass:9@127.0.0.1:6379/2");
  CHECK(raw.password == "Sup3r@Secret/Pass:9");
  CHECK(raw.db == 2);
  CHECK(raw.text == "redis://:***@127.0.0.1:6379/2");
  CHECK(redact_redis_url("redis://u:Sup3r@Secret/Pass:9@h:1/x") == "redis://u:***@h:1/x");
  for (const char* bad : {"redis://u:p%4@h:1", "redis://u:p%zz@h:1", "redis://u:pw%@h:1"}) {
    INFO(bad);
    try {
      (void)parse_redis_url(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("password has a '%'"));
      CHECK(std::string(e.what()).find(":p%") == std::string::npos);  // the password is not repeated
    }
  }
}

namespace {

bool ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("a store reaches redis at redis://[::1]:port as an ACL user with a percent-encoded password",
          "[store][remote]") {
  if (!ipv6_loopback()) {
    WARN("this machine has no IPv6 loopback: only the URL parsing is tested (see the test above)");
    return;
  }
  test::TempDir dir;
  test::RedisServer server(dir / "redis", {"--bind", "127.0.0.1", "::1"});
  test::redis_cli(server.port(), "ACL SETUSER carol on '>p@ss/w%rd' '~*' '+@all'");
  const std::string url = "redis://carol:p%40ss%2Fw%25rd@[::1]:" + std::to_string(server.port());
  {
    ChunkStore writer(remote_store(url));
    REQUIRE(writer.put(test::store_test_key(3), test::store_test_value(3)));
    REQUIRE(writer.drain_remote(std::chrono::milliseconds(5000)));
    CHECK(writer.stats().remote.writes == 1);
    CHECK(writer.stats().remote.url.find("p%40ss") == std::string::npos);
  }
  ChunkStore wrong(remote_store("redis://carol:p%40ss@[::1]:" + std::to_string(server.port())));
  CHECK_FALSE(wrong.get(test::store_test_key(3)));
  CHECK_THAT(wrong.stats().remote.last_error, Contains("AUTH as carol refused"));
  ChunkStore reader(remote_store(url));
  Result<ValuePtr> got = reader.get(test::store_test_key(3));
  REQUIRE(got);
  CHECK(values_equal(*got.value(), *test::store_test_value(3)));
}

}  // namespace ORBIT_TEST_FILE
