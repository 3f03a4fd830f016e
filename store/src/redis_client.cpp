#include "orbit/store/redis_client.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "redis_tls.h"
#include "redis_url.h"

namespace orbit::store {

namespace {

constexpr int kSlots = 16384;

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// Writing to a connection the server closed raises SIGPIPE, whose default action kills the process. A
// library must not change the process's signal handling, so SIGPIPE is blocked on this thread while it
// talks to the server, and one raised meanwhile is consumed before unblocking (the write itself fails
// with EPIPE, which hiredis reports).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::kString; break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::kStatus; break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::kError; break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::kInteger; break;
    case REDIS_REPLY_ARRAY: out.type = RedisReply::Type::kArray; break;
    default: out.type = RedisReply::Type::kNil; break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    out.str.assign(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
  }
  return out;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the endpoint, or false.
bool redirection(const RedisReply& reply, const char* kind, RedisEndpoint* to) {
  if (!reply.is_error()) return false;
  const std::string prefix = std::string(kind) + " ";
  if (reply.str.compare(0, prefix.size(), prefix) != 0) return false;
  const auto space = reply.str.find(' ', prefix.size());
  if (space == std::string::npos) return false;
  try {
    *to = parse_endpoint(reply.str, reply.str.substr(space + 1));
  } catch (const Error&) {
    return false;
  }
  return true;
}

// A failed reply read in words: a read that waited past the reply timeout (hiredis reports the socket's EAGAIN,
// "Resource temporarily unavailable") is named as the timeout it is, as the TLS path names it.
std::string reply_error(const redisContext& c, int64_t timeout_ms) {
  const std::string why = c.errstr;
  if (c.err == REDIS_ERR_IO && (why == std::strerror(EAGAIN) || why == std::strerror(EWOULDBLOCK))) {
    return "timed out: no reply within the command timeout of " + std::to_string(timeout_ms) + " ms";
  }
#ifdef REDIS_ERR_TIMEOUT
  if (c.err == REDIS_ERR_TIMEOUT) {
    return "timed out: no reply within the command timeout of " + std::to_string(timeout_ms) + " ms";
  }
#endif
  return why;
}

}  // namespace

int redis_key_slot(const std::string& key) {
  std::size_t begin = 0, length = key.size();
  const auto open = key.find('{');
  if (open != std::string::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) {
      begin = open + 1;
      length = close - open - 1;
    }
  }
  // CRC16, polynomial 0x1021, initial value 0, no reflection (the XMODEM variant Redis Cluster uses).
  uint16_t crc = 0;
  for (std::size_t i = begin; i < begin + length; ++i) {
    crc ^= static_cast<uint16_t>(static_cast<uint8_t>(key[i])) << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : (crc << 1);
  }
  return crc % kSlots;
}

// One node's connection: a hiredis context (redis://), or a TLS connection (rediss://).
struct RedisClient::Node {
  RedisEndpoint endpoint;
  redisContext* context = nullptr;
  std::unique_ptr<detail::TlsConnection> tls;
  bool connected() const { return context != nullptr || tls != nullptr; }
};

RedisClient::RedisClient(RedisUrl url, RedisClientOptions options) : url_(std::move(url)), options_(options) {}

RedisClient::~RedisClient() {
  for (auto& [name, node] : nodes_) drop(*node);
}

void RedisClient::drop(Node& node) {
  if (node.context) redisFree(node.context);
  node.context = nullptr;
  node.tls.reset();
}

RedisClient::Node* RedisClient::node_at(const RedisEndpoint& endpoint) {
  auto& slot = nodes_[endpoint.str()];
  if (!slot) {
    slot = std::make_unique<Node>();
    slot->endpoint = endpoint;
  }
  return slot.get();
}

Status RedisClient::open_connection(Node& node) {
  if (url_.tls) {
    Result<std::unique_ptr<detail::TlsConnection>> c = detail::TlsConnection::open(
        node.endpoint, options_.tls, options_.connect_timeout_ms, options_.command_timeout_ms);
    if (!c) return c.status();
    node.tls = std::move(c.value());
    return Status::ok();
  }
  redisContext* c =
      redisConnectWithTimeout(node.endpoint.host.c_str(), node.endpoint.port, to_timeval(options_.connect_timeout_ms));
  if (c == nullptr || c->err) {
    const std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return Status::refused("redis " + node.endpoint.str() + ": cannot connect: " + why);
  }
  if (redisSetTimeout(c, to_timeval(options_.command_timeout_ms)) != REDIS_OK) {
    redisFree(c);
    return Status::refused("redis " + node.endpoint.str() + ": cannot set the reply timeout");
  }
  node.context = c;
  return Status::ok();
}

Status RedisClient::connect(Node& node) {
  if (node.connected()) return Status::ok();
  Status opened = open_connection(node);
  if (!opened) return opened;
  if (!url_.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!url_.user.empty()) auth.push_back(url_.user);
    auth.push_back(url_.password);
    Result<RedisReply> authed = run(node, {auth}, false);
    if (!authed) return authed.status();
    if (authed.value().is_error()) {  // the server's reply (WRONGPASS, ...) never repeats the password
      drop(node);
      return Status::refused("redis " + node.endpoint.str() + ": AUTH" + (url_.user.empty() ? "" : " as " + url_.user) +
                             " refused: " + authed.value().str);
    }
  }
  if (url_.db != 0) {
    Result<RedisReply> selected = run(node, {{"SELECT", std::to_string(url_.db)}}, false);
    if (!selected) return selected.status();
    if (selected.value().is_error()) {
      drop(node);
      return Status::refused("redis " + node.endpoint.str() + ": SELECT " + std::to_string(url_.db) + ": " +
                             selected.value().str);
    }
  }
  return Status::ok();
}

Result<RedisReply> RedisClient::run(Node& node, const std::vector<std::vector<std::string>>& pipeline, bool asking,
                                    std::vector<RedisReply>* replies) {
  SigpipeGuard guard;
  Status connected = connect(node);
  if (!connected) return connected;
  std::vector<std::vector<std::string>> all;
  std::vector<bool> is_asking;
  for (const auto& argv : pipeline) {
    if (asking) {  // ASKING admits only the command right after it
      all.push_back({"ASKING"});
      is_asking.push_back(true);
    }
    all.push_back(argv);
    is_asking.push_back(false);
  }
  Status sent = send(node, all);
  if (!sent) return sent;
  RedisReply last;
  for (std::size_t i = 0; i < all.size(); ++i) {
    Result<redisReply*> raw = next_reply(node);
    if (!raw) return raw.status();
    last = convert(raw.value());
    freeReplyObject(raw.value());
    if (replies != nullptr && !is_asking[i]) replies->push_back(last);
  }
  return last;
}

Status RedisClient::send(Node& node, const std::vector<std::vector<std::string>>& commands) {
  std::string bytes;  // TLS: every command formatted, then one write
  for (const auto& argv : commands) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const std::string& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    const int argc = static_cast<int>(argv.size());
    if (node.tls) {
      char* cmd = nullptr;
      const int n = redisFormatCommandArgv(&cmd, argc, ptrs.data(), lens.data());
      if (n < 0 || cmd == nullptr) return Status::refused("redis " + node.endpoint.str() + ": out of memory");
      bytes.append(cmd, static_cast<std::size_t>(n));
      redisFreeCommand(cmd);
    } else if (redisAppendCommandArgv(node.context, argc, ptrs.data(), lens.data()) != REDIS_OK) {
      const std::string why = node.context->errstr;
      drop(node);
      return Status::refused("redis " + node.endpoint.str() + ": " + why);
    }
  }
  if (!node.tls) return Status::ok();
  Status sent = node.tls->send(bytes);
  if (!sent) {
    drop(node);
    return Status::refused("redis " + node.endpoint.str() + " (TLS): " + sent.reason());
  }
  return sent;
}

Result<redisReply*> RedisClient::next_reply(Node& node) {
  if (node.tls) {
    Result<redisReply*> r = node.tls->read_reply();
    if (!r) {
      drop(node);  // the stream is out of step now: reconnect next time
      return Status::refused("redis " + node.endpoint.str() + " (TLS): " + r.status().reason());
    }
    return r;
  }
  void* raw = nullptr;
  if (redisGetReply(node.context, &raw) != REDIS_OK || raw == nullptr) {
    const std::string why = node.context->err ? reply_error(*node.context, options_.command_timeout_ms) : "no reply";
    drop(node);  // the stream is out of step now: reconnect next time
    return Status::refused("redis " + node.endpoint.str() + ": " + why);
  }
  return static_cast<redisReply*>(raw);
}

Status RedisClient::refresh_slots() {
  std::vector<RedisEndpoint> candidates;
  for (auto& [name, node] : nodes_) candidates.push_back(node->endpoint);
  candidates.insert(candidates.end(), url_.nodes.begin(), url_.nodes.end());
  Status last = Status::refused("redis cluster " + url_.text + ": no node answered CLUSTER SLOTS");
  for (const RedisEndpoint& e : candidates) {
    Node* node = node_at(e);
    Result<RedisReply> r = run(*node, {{"CLUSTER", "SLOTS"}}, false);
    if (!r) {
      last = r.status();
      continue;
    }
    if (r.value().type != RedisReply::Type::kArray) {
      last = Status::refused("redis " + e.str() + ": CLUSTER SLOTS: " + r.value().str);
      continue;
    }
    std::vector<RedisEndpoint> owners(kSlots);
    int covered = 0;
    for (const RedisReply& range : r.value().elements) {
      // [start, end, [host, port, ...], replicas...]: a range not of that shape, or out of the slots or ports
      // (a server that is not Redis, or a damaged reply), is skipped.
      if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
      const RedisReply& first = range.elements[0];
      const RedisReply& last_slot = range.elements[1];
      const RedisReply& port = range.elements[2].elements[1];
      if (first.type != RedisReply::Type::kInteger || last_slot.type != RedisReply::Type::kInteger ||
          port.type != RedisReply::Type::kInteger || first.integer < 0 || last_slot.integer >= kSlots ||
          first.integer > last_slot.integer || port.integer < 1 || port.integer > 65535) {
        continue;
      }
      RedisEndpoint owner;
      owner.host = range.elements[2].elements[0].str;
      owner.port = static_cast<int>(port.integer);
      if (owner.host.empty()) owner.host = e.host;  // a node that does not know its own address
      for (int64_t s = first.integer; s <= last_slot.integer; ++s) {
        owners[static_cast<std::size_t>(s)] = owner;
        ++covered;
      }
    }
    if (covered == 0) {
      last = Status::refused("redis " + e.str() + ": CLUSTER SLOTS names no slot owner (cluster not formed?)");
      continue;
    }
    slot_owner_ = std::move(owners);
    slots_known_ = true;
    return Status::ok();
  }
  return last;
}

RedisClient::Node* RedisClient::node_for(const std::string& routing_key, Status* error) {
  if (!url_.cluster) return node_at(url_.nodes.front());
  if (!slots_known_) {
    Status s = refresh_slots();
    if (!s) {
      *error = s;
      return nullptr;
    }
  }
  const RedisEndpoint& owner =
      slot_owner_[static_cast<std::size_t>(routing_key.empty() ? 0 : redis_key_slot(routing_key))];
  if (owner.host.empty()) {
    *error = Status::refused("redis cluster " + url_.text + ": no node serves the slot of " + routing_key);
    slots_known_ = false;
    return nullptr;
  }
  return node_at(owner);
}

Result<RedisReply> RedisClient::command(const std::vector<std::string>& argv, const std::string& routing_key) {
  Status error = Status::ok();
  Node* node = node_for(routing_key, &error);
  if (!node) return error;
  bool asking = false;
  for (int hop = 0; hop < 5; ++hop) {
    Result<RedisReply> r = run(*node, {argv}, asking);
    if (!r) {
      if (url_.cluster) slots_known_ = false;  // the node may have failed over: ask again next time
      return r;
    }
    RedisEndpoint to;
    if (redirection(r.value(), "MOVED", &to)) {
      slots_known_ = false;  // the map changed: learn it again on the next command
      node = node_at(to);
      asking = false;
      continue;
    }
    if (redirection(r.value(), "ASK", &to)) {  // a slot in migration: this key only, this time only
      node = node_at(to);
      asking = true;
      continue;
    }
    return r;
  }
  return Status::refused("redis cluster " + url_.text + ": too many redirections for " + routing_key);
}

Result<RedisReply> RedisClient::transaction(const std::vector<std::vector<std::string>>& commands,
                                            const std::string& routing_key) {
  Status error = Status::ok();
  Node* node = node_for(routing_key, &error);
  if (!node) return error;
  std::vector<std::vector<std::string>> pipeline;
  pipeline.push_back({"MULTI"});
  pipeline.insert(pipeline.end(), commands.begin(), commands.end());
  pipeline.push_back({"EXEC"});
  // A slot that moved (MOVED to a queued command: a reshard finished since the slots were read) sends the whole
  // transaction to its new owner once; nothing was applied where EXEC aborted.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<RedisReply> replies;
    Result<RedisReply> r = run(*node, pipeline, false, &replies);
    if (!r) {
      if (url_.cluster) slots_known_ = false;
      return r;
    }
    if (r.value().type == RedisReply::Type::kArray) return r;
    RedisEndpoint to;
    const RedisReply* refused = nullptr;  // the first queued command the server refused
    bool moved = false;
    for (const RedisReply& queued : replies) {
      if (redirection(queued, "ASK", &to)) {
        // The slot is migrating and these keys are not on the source: they go to the importing node. A
        // multi-key transaction there is refused (TRYAGAIN) until the migration ends, so the commands run
        // one by one in order, each after ASKING; EXEC's reply array is rebuilt from their replies.
        RedisReply exec;
        exec.type = RedisReply::Type::kArray;
        Result<RedisReply> last = run(*node_at(to), commands, true, &exec.elements);
        if (!last) return last;
        return exec;
      }
      if (redirection(queued, "MOVED", &to)) {
        moved = true;
        break;
      }
      if (refused == nullptr && queued.is_error() && queued.str != r.value().str) refused = &queued;
    }
    if (url_.cluster) slots_known_ = false;
    if (moved && url_.cluster && attempt == 0) {
      node = node_at(to);
      continue;
    }
    // EXECABORT: nothing was applied. Named by the queued command's own error (OOM, WRONGTYPE, ...).
    return Status::refused("redis " + node->endpoint.str() + ": transaction aborted: " +
                           (refused != nullptr ? refused->str + " (" + r.value().str + ")" : r.value().str));
  }
  return Status::refused("redis cluster " + url_.text + ": the transaction's slot moved again");
}

Result<std::vector<RedisEndpoint>> RedisClient::masters() {
  if (!url_.cluster) return std::vector<RedisEndpoint>{url_.nodes.front()};
  Status s = refresh_slots();
  if (!s) return s;
  std::vector<RedisEndpoint> out;
  std::map<std::string, bool> seen;
  for (const RedisEndpoint& e : slot_owner_) {
    if (e.host.empty() || seen[e.str()]) continue;
    seen[e.str()] = true;
    out.push_back(e);
  }
  return out;
}

Result<RedisReply> RedisClient::command_on(const RedisEndpoint& node, const std::vector<std::string>& argv) {
  return run(*node_at(node), {argv}, false);
}

Status ping_redis(const std::string& url, const RedisClientOptions& options) {
  RedisClient client(parse_redis_url(url), options);
  Result<RedisReply> r = client.command({"PING"}, "");
  if (!r) return r.status();
  if (r.value().is_error()) return Status::refused("redis " + client.url().text + ": PING: " + r.value().str);
  return Status::ok();
}

}  // namespace orbit::store
