// A TLS connection to one Redis node for RedisClient (rediss://, rediss-cluster://): Debian's hiredis 0.14
// has no TLS, so the bytes travel over OpenSSL here. RedisClient formats the commands with hiredis
// (redisFormatCommandArgv), and replies are parsed by hiredis's own reader (redisReader): the same
// protocol code the plain connections use.
//
// Every wait is bounded: the TCP connect by connect_timeout_ms (non-blocking connect + poll), the TLS
// handshake, each write and each read by command_timeout_ms (the socket's SO_SNDTIMEO / SO_RCVTIMEO).
// The server's certificate is verified against RedisTlsOptions' CA (or the system's CAs) and its name or
// IP address against the host the URL names, unless verify_peer is off. Errors are values naming the
// node and OpenSSL's reason; nothing here throws.
//
// Thread-safety: none; one owner (a RedisClient node).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store/redis_client.h"

struct redisReply;

namespace orbit::store::detail {

class TlsConnection {
 public:
  // Connects and completes the handshake, or refused naming `endpoint` and the cause.
  static Result<std::unique_ptr<TlsConnection>> open(const RedisEndpoint& endpoint, const RedisTlsOptions& tls,
                                                     int connect_timeout_ms, int command_timeout_ms);
  ~TlsConnection();
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // Sends `bytes` (commands in the protocol's format, redisFormatCommandArgv), pipelined in one write.
  Status send(const std::string& bytes);
  // The next reply (caller frees it with freeReplyObject), or refused on a timeout, a closed connection or
  // a protocol error.
  Result<redisReply*> read_reply();

 private:
  struct Impl;
  explicit TlsConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace orbit::store::detail
