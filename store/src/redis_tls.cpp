// TLS connections to Redis nodes (redis_tls.h): a TCP socket with bounded waits, an OpenSSL client session
// over it, hiredis's command formatter and reply reader.
#include "redis_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace orbit::store::detail {

namespace {

// OpenSSL's most recent error as text (its queue emptied), or `fallback` when it has none.
std::string ssl_error(const std::string& fallback) {
  unsigned long code = 0, last = 0;
  while ((code = ERR_get_error()) != 0) last = code;
  if (last == 0) return fallback;
  char buf[256];
  ERR_error_string_n(last, buf, sizeof buf);
  return buf;
}

bool is_ip_address(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// A connected TCP socket to one of `host`'s addresses within `timeout_ms`, blocking, with send and
// receive timeouts of `io_timeout_ms`; -1 with `why` set.
int connect_tcp(const RedisEndpoint& e, int timeout_ms, int io_timeout_ms, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found);
  if (rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  *why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = poll(&p, 1, timeout_ms);
      socklen_t len = sizeof err;
      err = ready == 0 ? ETIMEDOUT : ready < 0 ? errno : 0;
      if (ready > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err != 0) {
      *why = std::string("cannot connect: ") + std::strerror(err);
      ::close(fd);
      fd = -1;
      continue;
    }
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    const timeval tv = to_timeval(io_timeout_ms);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  freeaddrinfo(found);
  return fd;
}

// What a failed SSL_read / SSL_write / SSL_connect means, in words.
std::string io_error(SSL* ssl, int ret, const char* what) {
  const int code = SSL_get_error(ssl, ret);
  if (code == SSL_ERROR_ZERO_RETURN) return std::string(what) + ": the server closed the connection";
  if (code == SSL_ERROR_SYSCALL || code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::string(what) + ": timed out";
    if (errno != 0) return std::string(what) + ": " + std::strerror(errno);
    return ssl_error(std::string(what) + ": the connection was closed");
  }
  return std::string(what) + ": " + ssl_error("TLS error " + std::to_string(code));
}

// A client context: TLS 1.2 or later, the server verified against the options' CA (or the system's),
// the client's certificate and key where given. Null with `why` set.
SSL_CTX* make_context(const RedisTlsOptions& o, std::string* why) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    *why = ssl_error("cannot create a TLS context");
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  auto fail = [&](const std::string& what) {
    *why = what + ": " + ssl_error("failed");
    SSL_CTX_free(ctx);
    return nullptr;
  };
  if (o.verify_peer) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (!o.ca_file.empty() || !o.ca_dir.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, o.ca_file.empty() ? nullptr : o.ca_file.c_str(),
                                        o.ca_dir.empty() ? nullptr : o.ca_dir.c_str()) != 1) {
        return fail("cannot load the CA certificates (" + (o.ca_file.empty() ? o.ca_dir : o.ca_file) + ")");
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return fail("cannot load the system's CA certificates");
    }
  }
  if (!o.cert_file.empty() || !o.key_file.empty()) {
    if (o.cert_file.empty() || o.key_file.empty()) {
      *why = "a client certificate needs both a certificate file and a key file";
      SSL_CTX_free(ctx);
      return nullptr;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      return fail("cannot load the client certificate " + o.cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail("cannot load the client key " + o.key_file);
    }
  }
  return ctx;
}

}  // namespace

struct TlsConnection::Impl {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  int fd = -1;
  redisReader* reader = nullptr;
  ~Impl() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
    if (reader != nullptr) redisReaderFree(reader);
  }
};

TlsConnection::TlsConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsConnection::~TlsConnection() = default;

Result<std::unique_ptr<TlsConnection>> TlsConnection::open(const RedisEndpoint& e, const RedisTlsOptions& tls,
                                                           int connect_timeout_ms, int command_timeout_ms) {
  const std::string node = "redis " + e.str() + " (TLS): ";
  auto impl = std::make_unique<Impl>();
  std::string why;
  impl->ctx = make_context(tls, &why);
  if (impl->ctx == nullptr) return Status::refused(node + why);
  impl->fd = connect_tcp(e, connect_timeout_ms, command_timeout_ms, &why);
  if (impl->fd < 0) return Status::refused(node + why);
  impl->ssl = SSL_new(impl->ctx);
  if (impl->ssl == nullptr || SSL_set_fd(impl->ssl, impl->fd) != 1) {
    return Status::refused(node + ssl_error("cannot create a TLS session"));
  }
  if (!is_ip_address(e.host)) SSL_set_tlsext_host_name(impl->ssl, e.host.c_str());  // SNI
  if (tls.verify_peer) {
    X509_VERIFY_PARAM* param = SSL_get0_param(impl->ssl);
    const int named = is_ip_address(e.host) ? X509_VERIFY_PARAM_set1_ip_asc(param, e.host.c_str())
                                            : X509_VERIFY_PARAM_set1_host(param, e.host.c_str(), 0);
    if (named != 1) return Status::refused(node + ssl_error("cannot set the name to verify"));
  }
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_connect(impl->ssl);
  if (rc != 1) {
    const long verified = SSL_get_verify_result(impl->ssl);
    std::string reason = io_error(impl->ssl, rc, "handshake");
    if (verified != X509_V_OK) {
      reason = std::string("the server's certificate was not accepted: ") + X509_verify_cert_error_string(verified);
    }
    return Status::refused(node + reason);
  }
  impl->reader = redisReaderCreate();
  if (impl->reader == nullptr) return Status::refused(node + "out of memory");
  return std::unique_ptr<TlsConnection>(new TlsConnection(std::move(impl)));
}

Status TlsConnection::send(const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ERR_clear_error();
    errno = 0;
    // SSL_write takes an int: at most 1 GiB a call (a transaction of 2 GiB or more, cast whole, was refused as
    // a bad length, every time).
    const std::size_t piece = std::min<std::size_t>(bytes.size() - sent, std::size_t{1} << 30);
    const int n = SSL_write(impl_->ssl, bytes.data() + sent, static_cast<int>(piece));
    if (n <= 0) return Status::refused(io_error(impl_->ssl, n, "write"));
    sent += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Result<redisReply*> TlsConnection::read_reply() {
  char buf[16384];
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(impl_->reader, &reply) != REDIS_OK) {
      return Status::refused(std::string("protocol error: ") + impl_->reader->errstr);
    }
    if (reply != nullptr) return static_cast<redisReply*>(reply);
    ERR_clear_error();
    errno = 0;
    const int n = SSL_read(impl_->ssl, buf, sizeof buf);
    if (n <= 0) return Status::refused(io_error(impl_->ssl, n, "read"));
    if (redisReaderFeed(impl_->reader, buf, static_cast<std::size_t>(n)) != REDIS_OK) {
      return Status::refused(std::string("protocol error: ") + impl_->reader->errstr);
    }
  }
}

}  // namespace orbit::store::detail
