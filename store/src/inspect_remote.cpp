// `orbit store stat --remote URL`: what a remote tier's server(s) hold (orbit/store.h).
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/redis_client.h"

namespace orbit {

namespace {

// "name:value" from INFO text, or "".
std::string info_field(const std::string& info, const std::string& name) {
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.compare(0, name.size() + 1, name + ":") == 0) return line.substr(name.size() + 1);
  }
  return "";
}

int64_t to_i64(const std::string& s) {
  try {
    return s.empty() ? 0 : std::stoll(s);
  } catch (...) {
    return 0;
  }
}

}  // namespace

RemoteSummary summarize_remote(const std::string& url) {
  RemoteSummary out;
  out.url = store::redact_redis_url(url);
  store::RedisUrl parsed = store::parse_redis_url(url);
  out.cluster = parsed.cluster;
  store::RedisClientOptions o;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 5000;
  store::RedisClient client(parsed, o);
  Result<std::vector<store::RedisEndpoint>> masters = client.masters();
  if (!masters) {
    out.error = masters.status().reason();
    return out;
  }
  bool first = true;
  for (const store::RedisEndpoint& node : masters.value()) {
    out.nodes.push_back(node.str());
    auto fail = [&](const std::string& why) { out.error = "redis " + node.str() + ": " + why; };
    Result<store::RedisReply> info = client.command_on(node, {"INFO"});
    if (!info) {
      out.error = info.status().reason();  // names the node already
      return out;
    }
    if (info.value().is_error()) {
      fail(info.value().str);
      return out;
    }
    out.used_memory_bytes += to_i64(info_field(info.value().str, "used_memory"));
    if (first) {
      out.server_version = info_field(info.value().str, "redis_version");
      out.maxmemory_bytes = to_i64(info_field(info.value().str, "maxmemory"));
      out.maxmemory_policy = info_field(info.value().str, "maxmemory_policy");
      first = false;
    }
    if (parsed.db != 0) {
      Result<store::RedisReply> sel = client.command_on(node, {"SELECT", std::to_string(parsed.db)});
      if (!sel || sel.value().is_error()) {
        fail(sel ? sel.value().str : sel.status().reason());
        return out;
      }
    }
    Result<store::RedisReply> size = client.command_on(node, {"DBSIZE"});
    if (size && size.value().type == store::RedisReply::Type::kInteger) out.keys += size.value().integer;
    // Manifests are "orbit:{KEY}" (parts add ":<i>"): match the exact shape.
    std::string cursor = "0";
    do {
      Result<store::RedisReply> page = client.command_on(node, {"SCAN", cursor, "MATCH", "orbit:{*}", "COUNT", "1000"});
      if (!page || page.value().type != store::RedisReply::Type::kArray || page.value().elements.size() != 2) {
        fail(page ? "SCAN: " + page.value().str : page.status().reason());
        return out;
      }
      cursor = page.value().elements[0].str;
      out.entries += static_cast<int64_t>(page.value().elements[1].elements.size());
    } while (cursor != "0");
  }
  out.reachable = true;
  return out;
}

}  // namespace orbit
