// A small Redis client over hiredis (Debian's libhiredis-dev, synchronous API): one server, or a Redis
// Cluster (hiredis has no cluster support; this client maps keys to hash slots with CRC16 and hash tags,
// learns the slot owners with CLUSTER SLOTS, and follows MOVED and ASK redirections). Valkey speaks the
// same protocol.
//
//   redis://host:port[/db]                      one server (db: SELECT on connect; default 0);
//                                               host may be [IPv6 address], e.g. redis://[::1]:6379
//   redis-cluster://host:port[,host:port...]    seed nodes of a cluster (db 0 only)
//   rediss://..., rediss-cluster://...          the same over TLS (RedisTlsOptions below): the server's
//                                               certificate verified against the host named, TLS 1.2+
//
// Every network wait is bounded: connecting by RedisClientOptions::connect_timeout_ms, each reply by
// command_timeout_ms. A failed connection is dropped and reopened by the next command (no background
// thread). Errors are values (Status refused, naming the node and the cause); nothing here throws except
// parse_redis_url on a malformed URL.
//
// Thread-safety: none; one owner (the remote tier serialises calls).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/common/status.h"

struct redisContext;
struct redisReply;

namespace orbit::store {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  // host:port, or [host]:port for an IPv6 address.
  std::string str() const {
    return (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + std::to_string(port);
  }
};

struct RedisUrl {
  bool cluster = false;
  bool tls = false;                  // rediss:// or rediss-cluster://
  std::vector<RedisEndpoint> nodes;  // one for redis://, the seeds for redis-cluster://
  int db = 0;
  std::string user;      // ACL user of redis://[user:]password@host:port ("" = the default user)
  std::string password;  // "" = no AUTH
  std::string text;      // as given, with the password shown as *** (what messages print)
};

// Parses a redis://, redis-cluster://, rediss:// or rediss-cluster:// URL, optionally with credentials before the host
// list (redis://[user:]password@host:port, percent-encoded as RFC 3986 has it: "p%40ss" is "p@ss"; sent as AUTH on
// every new connection). Throws orbit::Error naming the URL (its password redacted) and the part at fault (scheme,
// host, port out of 1..65535, db not a number, a db with a cluster).
RedisUrl parse_redis_url(const std::string& url);

// The server (and database) a remote URL names, whatever its spelling: "redis://127.0.0.1:6379/0",
// "redis://127.0.0.1" and "redis://u:***@127.0.0.1:6379" name the same one. Its scheme, its hosts in lower case and
// sorted with their ports, and its db. Credentials are not part of it. The text itself when it is no URL this
// parser reads (another backend's description). Never throws.
std::string redis_server_identity(const std::string& url);

// `url` with the password of its credentials (if any) replaced by ***: the only form of a remote URL
// that may appear in a message, a warning or stats. Never throws.
std::string redact_redis_url(const std::string& url);

// The cluster hash slot of `key` (CRC16-CCITT/XMODEM of the key, or of its first non-empty {hash tag},
// modulo 16384).
int redis_key_slot(const std::string& key);

struct RedisReply {
  enum class Type { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
  bool is_error() const { return type == Type::kError; }
};

// TLS for rediss:// (ignored otherwise). Hiredis 0.14 (Debian 12) has no TLS: the client speaks it through
// OpenSSL itself (store/src/redis_tls.h), with hiredis formatting commands and reading replies.
struct RedisTlsOptions {
  std::string ca_file;      // PEM CA certificates to verify the server with; both empty: the system's CAs
  std::string ca_dir;       // a hashed CA directory (c_rehash)
  std::string cert_file;    // PEM client certificate chain, for servers that verify clients (tls-auth-clients)
  std::string key_file;     // its PEM private key (both or neither)
  bool verify_peer = true;  // false: accept any certificate (testing only: no protection from a man in the middle)
};

// RedisTlsOptions from the environment, for programs that take only a URL (the CLI, the Python module):
// ORBIT_REDIS_TLS_CA_FILE, ORBIT_REDIS_TLS_CA_DIR, ORBIT_REDIS_TLS_CERT_FILE, ORBIT_REDIS_TLS_KEY_FILE, and
// ORBIT_REDIS_TLS_VERIFY=0 to skip verification. Unset variables leave the defaults.
RedisTlsOptions redis_tls_from_environment();

struct RedisClientOptions {
  int connect_timeout_ms = 500;
  int command_timeout_ms = 2000;
  RedisTlsOptions tls = redis_tls_from_environment();
};

class RedisClient {
 public:
  // Connects lazily (the first command). Never throws.
  RedisClient(RedisUrl url, RedisClientOptions options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Runs one command on the node owning `routing_key`'s slot (any node when routing_key is empty).
  // An error reply of the server (other than MOVED/ASK, which are followed) is returned as a reply of
  // type kError; refused means the node could not be reached or did not answer in time.
  Result<RedisReply> command(const std::vector<std::string>& argv, const std::string& routing_key);
  // Runs `commands` as one MULTI/EXEC transaction on the node owning routing_key's slot (all keys of
  // all commands must hash to that slot). ok with EXEC's reply array; refused when the node could not be
  // reached or the transaction was aborted (EXECABORT, a MOVED redirection: the slot map is refreshed,
  // and the caller may retry). A slot being migrated (ASK: the keys are not on the source) is the one
  // exception to atomicity: Redis refuses multi-key transactions on the importing node while the slot
  // moves, so the commands run there one by one, in order, each after ASKING, and the reply array holds
  // their replies. Callers order commands so that any prefix of them is harmless (RedisBackend writes
  // an entry's parts first and its manifest last, so a reader never sees a partial entry).
  Result<RedisReply> transaction(const std::vector<std::vector<std::string>>& commands, const std::string& routing_key);

  // The nodes that own slots (a cluster's masters; the one server otherwise). refused when unreachable.
  Result<std::vector<RedisEndpoint>> masters();
  // Runs one command on `node` (no redirection).
  Result<RedisReply> command_on(const RedisEndpoint& node, const std::vector<std::string>& argv);

  const RedisUrl& url() const { return url_; }

 private:
  struct Node;
  Node* node_for(const std::string& routing_key, Status* error);
  Node* node_at(const RedisEndpoint& endpoint);
  Status connect(Node& node);          // opens the connection if needed, then AUTH and SELECT
  Status open_connection(Node& node);  // plain (hiredis) or TLS, as the URL says
  void drop(Node& node);
  Status send(Node& node, const std::vector<std::vector<std::string>>& commands);
  Result<redisReply*> next_reply(Node& node);  // the caller frees it (freeReplyObject)
  Status refresh_slots();
  // Sends `pipeline` (each command after ASKING when `asking`) and returns the last reply; `replies`
  // (optional) receives every command's reply in order, ASKING's excluded.
  Result<RedisReply> run(Node& node, const std::vector<std::vector<std::string>>& pipeline, bool asking,
                         std::vector<RedisReply>* replies = nullptr);

  RedisUrl url_;
  RedisClientOptions options_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // "host:port" -> connection
  std::vector<RedisEndpoint> slot_owner_;               // cluster: 16384 entries once known
  bool slots_known_ = false;
};

// Connects to `url`'s server (one of a cluster's) as the tier does -- TLS, AUTH and SELECT as the URL and
// `options` say -- and sends PING: ok when it answers PONG, else refused naming the node and the cause (cannot
// connect, a refused AUTH, a TLS failure, a timeout). For a start-up check of an optional remote (orbit serve
// --remote warns when it fails). Throws only what parse_redis_url throws, on a malformed URL.
Status ping_redis(const std::string& url, const RedisClientOptions& options);

}  // namespace orbit::store
