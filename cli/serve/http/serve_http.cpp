#include "serve/http/serve_http.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "orbit/common/error.h"
#include "serve/http/http_front.h"
#include "serve/http/serve_http_route.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

HttpServer::HttpServer(ServeCore& core, const HttpOptions& options) : core_(core), options_(options) {
  std::random_device entropy;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%06x%06x", entropy() & 0xffffffu, entropy() & 0xffffffu);
  id_tag_ = tag;
  FrontOptions front;
  front.workers = options.threads;
  front.header_seconds = options.header_seconds;
  front.body_seconds = options.body_seconds;
  front.keep_alive_seconds = options.keep_alive_seconds;
  front.write_seconds = options.stall_seconds;
  front.min_drain_rate = options.min_drain_rate;
  front.limits.max_body_bytes = core.options().limits.max_body_bytes;
  FrontHooks hooks;
  hooks.health = [this] {
    const int status = draining_ ? 503 : 200;
    core_.metrics().count_untimed("other", status);
    return std::make_pair(status, json{{"status", draining_ ? "draining" : "ok"}}.dump());
  };
  hooks.refused = [this](const std::string& method, const std::string& path, int status) {
    core_.metrics().count_untimed(serve_http_route::endpoint_of(method, path), status);
  };
  hooks.error_body = [](int status, const std::string& message) {
    return error_body(api_error(status, message, status >= 500 ? "server_error" : "invalid_request_error"));
  };
  hooks.answer_fields = [this](const std::string& origin) { return options_.cors.answer_fields(origin); };
  hooks.stalled = [this](bool slow) { core_.metrics().count_stalled(slow); };
  server_ = std::make_unique<HttpFront>(front, hooks);
  // cpp-httplib's default sets SO_REUSEPORT, with which a second server binds a
  // port the first listens on and the kernel splits connections (and so
  // sessions) between them; SO_REUSEADDR alone still allows a restart while old
  // connections linger in TIME_WAIT.
  server_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_payload_max_length(core.options().limits.max_body_bytes);
  server_->set_keep_alive_max_count(100000);
  server_->set_tcp_nodelay(true);
  routes();
}

HttpServer::~HttpServer() {
  server_->stop_connections();  // its threads call back into this object
}

int HttpServer::bind() {
  // An empty host is no address: the listener would bind the loopback of getaddrinfo's choosing (::1 alone,
  // not 127.0.0.1) and announce 'http://:PORT'.
  ORBIT_CHECK(!options_.host.empty(),
              "serve: argument '--host' is empty (leave it out for 127.0.0.1; 0.0.0.0 "
              "for every IPv4 interface)");
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    ORBIT_CHECK(port > 0, "serve: --host " << options_.host
                                           << ": cannot bind any port (not an address of "
                                              "this host, or none free)");
  } else {
    ORBIT_CHECK(server_->bind_to_port(options_.host, port),
                "serve: --host " << options_.host << " --port " << port
                                 << ": cannot bind (in use, or not an address of this host)");
  }
  server_->widen_backlog();  // the bound socket's (cpp-httplib listens with a backlog of 5)
  return port;
}

bool HttpServer::listen() { return server_->serve(); }

// The closed core ends every answer still in flight (a running one with its server_shutdown error event): they
// write that ending before the listener goes, since cpp-httplib does not start a stream's content once its
// listening socket is gone, and a stream whose head went out just before would end with no body at all (not
// even its last chunk; the client reads a broken answer). Bounded by kSettleAfterClose: a stalled write fails
// within the drain's stall grace, and an exit is never held longer than that bound.
void HttpServer::settle_after_close() {
  const auto settle = Clock::now() + kSettleAfterClose;
  while (in_flight_ > 0 && Clock::now() < settle) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

bool HttpServer::drain_and_stop(const std::function<bool()>& cut_short) {
  draining_ = true;
  const auto deadline = Clock::now() + std::chrono::seconds(options_.drain_seconds);
  server_->limit_stalled_writes(std::chrono::seconds(std::min(options_.drain_stall_seconds, options_.drain_seconds)));
  bool cut = false;
  while (in_flight_ > 0 && Clock::now() < deadline && !cut) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cut = cut_short && cut_short();
  }
  if (cut) server_->limit_stalled_writes(std::chrono::milliseconds(0));
  // The background work queued for the store gets what is left of the drain, and a second signal ends it too.
  CloseOptions close_options;
  close_options.finish_seconds =
      cut ? 0.0 : std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
  close_options.stop = cut_short;
  if (core_.close(close_options).stopped) cut = true;
  settle_after_close();
  server_->stop_listening();  // also before listen() started: listen() then
                              // returns at once
  server_->stop_connections();
  return cut;
}

}  // namespace orbit::serve
