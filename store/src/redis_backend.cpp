#include "orbit/store/redis_backend.h"

#include <algorithm>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/store/remote_auth.h"

namespace orbit::store {

namespace {

constexpr const char* kManifestTag = "orbit-remote";
constexpr int kManifestVersion = 1;
constexpr int64_t kMaxParts = 4096;  // a read's MGET names at most this many keys
constexpr int64_t kMinPartBytes = 1024;
constexpr int64_t kMaxPartBytes = int64_t{512} << 20;  // Redis's largest string
constexpr std::size_t kTagHex = 64;

struct Manifest {
  int64_t parts = 0;
  int64_t bytes = 0;
  std::string checksum;
  int64_t part_bytes = 0;  // 0: not stated (a writer before part sizes were)
};

int64_t parts_for(int64_t bytes, int64_t part_bytes) {
  return std::max<int64_t>(1, (bytes + part_bytes - 1) / part_bytes);
}

// Reads "orbit-remote 1 <parts> <bytes> <sha256> [<part bytes>] [<tag>]" (the tag already checked, or not
// checked without a secret). A manifest is a claim of whoever wrote it: its part count must be one its
// size allows (at most kMaxParts, no part under kMinPartBytes but the only one, and exactly the count its
// part size gives where it states one), so a reader never asks the server for more keys than a real
// entry of that size has. Returns "" when it reads, else what is wrong.
std::string parse_manifest(const std::string& text, Manifest* m) {
  std::istringstream in(text);
  std::string tag;
  int version = 0;
  if (!(in >> tag >> version >> m->parts >> m->bytes >> m->checksum) || tag != kManifestTag ||
      version != kManifestVersion || m->checksum.size() != 64) {
    return "malformed manifest '" + text.substr(0, 120) + "'";
  }
  std::string field;
  while (in >> field) {
    if (field.size() == kTagHex) continue;  // a writer's tag, read without the secret to check it
    if (m->part_bytes != 0 || field.size() > 12 || field.find_first_not_of("0123456789") != std::string::npos) {
      return "malformed manifest '" + text.substr(0, 120) + "'";
    }
    m->part_bytes = std::stoll(field);
  }
  const std::string claim =
      "the manifest claims " + std::to_string(m->parts) + " parts for " + std::to_string(m->bytes) + " bytes";
  if (m->parts < 1 || m->parts > kMaxParts) return claim + " (1 to " + std::to_string(kMaxParts) + " are read)";
  if (m->bytes < 0 || m->bytes > m->parts * kMaxPartBytes) return claim + ": more than its parts can hold";
  if (m->parts > parts_for(m->bytes, kMinPartBytes)) return claim + ": more parts than parts of 1 KiB or more";
  if (m->part_bytes != 0 && (m->part_bytes < kMinPartBytes || m->part_bytes > kMaxPartBytes ||
                             m->parts != parts_for(m->bytes, m->part_bytes))) {
    return claim + " in parts of " + std::to_string(m->part_bytes) + " bytes";
  }
  return "";
}

}  // namespace

// ---- MemoryBackend ---------------------------------------------------------------------------------

BackendRead MemoryBackend::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  BackendRead r;
  auto it = values_.find(key);
  if (it == values_.end()) return r;
  r.outcome = BackendRead::Outcome::kHit;
  r.bytes = it->second;
  return r;
}

Status MemoryBackend::put(const std::string& key, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = bytes;
  return Status::ok();
}

Status MemoryBackend::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  values_.erase(key);
  return Status::ok();
}

Result<bool> MemoryBackend::exists(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.count(key) > 0;
}

// ---- RedisBackend ----------------------------------------------------------------------------------

RedisBackend::RedisBackend(RedisBackendOptions options) : options_(std::move(options)) {
  const RedisUrl url = parse_redis_url(options_.url);
  options_.url = url.text;  // what messages and describe() show: the password stays in `url` only
  ORBIT_CHECK(options_.part_bytes >= 1024,
              "remote " << options_.url << ": part size " << options_.part_bytes << " bytes is below 1 KiB");
  ORBIT_CHECK(options_.ttl_seconds >= 0, "remote " << options_.url << ": ttl must be >= 0 seconds (0 = none)");
  reader_ = std::make_unique<RedisClient>(url, options_.client);
  writer_ = std::make_unique<RedisClient>(url, options_.client);
}

RedisBackend::~RedisBackend() = default;

BackendRead RedisBackend::get(const std::string& key) {
  const std::string mkey = manifest_key(key);
  BackendRead out;
  auto unavailable = [&](const std::string& why) {
    out.outcome = BackendRead::Outcome::kUnavailable;
    out.reason = why;
    return out;
  };
  auto refused = [&](BackendRead::Outcome outcome, const std::string& why) {
    out.outcome = outcome;
    out.reason = "remote " + options_.url + ", key " + mkey + ": " + why;
    return out;
  };
  auto corrupt = [&](const std::string& why) { return refused(BackendRead::Outcome::kCorrupt, why); };
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<RedisReply> head = reader_->command({"GET", mkey}, mkey);
  if (!head) return unavailable(head.status().reason());
  if (head.value().is_error()) return unavailable("remote " + options_.url + ": GET " + mkey + ": " + head.value().str);
  if (head.value().type == RedisReply::Type::kNil) return out;  // a miss
  Result<std::string_view> opened = open_remote_manifest(options_.secret, key, head.value().str);
  if (!opened) return refused(BackendRead::Outcome::kUnauthenticated, opened.status().reason());
  Manifest m;
  const std::string wrong = parse_manifest(std::string(opened.value()), &m);
  if (!wrong.empty()) return corrupt(wrong);
  std::vector<std::string> argv{"MGET"};
  for (int64_t i = 0; i < m.parts; ++i) argv.push_back(part_key(key, i));
  Result<RedisReply> parts = reader_->command(argv, mkey);
  if (!parts) return unavailable(parts.status().reason());
  if (parts.value().type != RedisReply::Type::kArray) {
    return unavailable("remote " + options_.url + ": MGET " + mkey + ": " + parts.value().str);
  }
  if (static_cast<int64_t>(parts.value().elements.size()) != m.parts) {
    return corrupt("MGET returned " + std::to_string(parts.value().elements.size()) + " parts of " +
                   std::to_string(m.parts));
  }
  // Sizes are checked against what arrived before anything is allocated: the manifest's size is a claim
  // of whoever wrote it.
  int64_t received = 0;
  for (int64_t i = 0; i < m.parts; ++i) {
    const RedisReply& p = parts.value().elements[static_cast<std::size_t>(i)];
    if (p.type != RedisReply::Type::kString) {  // evicted by the server (allkeys-lru), the manifest left
      return refused(BackendRead::Outcome::kIncomplete,
                     "part " + std::to_string(i) + " is missing (evicted by the server?)");
    }
    received += static_cast<int64_t>(p.str.size());
  }
  if (received != m.bytes) {
    return corrupt(std::to_string(received) + " bytes in the parts, " + std::to_string(m.bytes) +
                   " in the manifest (truncated?)");
  }
  out.bytes.reserve(static_cast<std::size_t>(received));
  for (const RedisReply& p : parts.value().elements) out.bytes += p.str;
  if (sha256_hex(out.bytes) != m.checksum) return corrupt("checksum mismatch with the manifest");
  out.outcome = BackendRead::Outcome::kHit;
  return out;
}

Status RedisBackend::put(const std::string& key, const std::string& bytes) {
  const std::string mkey = manifest_key(key);
  const int64_t size = static_cast<int64_t>(bytes.size());
  const int64_t parts = parts_for(size, options_.part_bytes);
  if (parts > kMaxParts) {
    return Status::refused("remote " + options_.url + ": " + std::to_string(size) + " bytes is too large (more than " +
                           std::to_string(kMaxParts) + " parts of " + std::to_string(options_.part_bytes) + " bytes)");
  }
  std::vector<std::vector<std::string>> commands;
  auto set = [&](const std::string& k, std::string v) {
    std::vector<std::string> c{"SET", k, std::move(v)};
    if (options_.ttl_seconds > 0) {
      c.push_back("PX");
      c.push_back(std::to_string(options_.ttl_seconds * 1000));
    }
    commands.push_back(std::move(c));
  };
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t begin = i * options_.part_bytes;
    set(part_key(key, i), bytes.substr(static_cast<std::size_t>(begin),
                                       static_cast<std::size_t>(std::min(options_.part_bytes, size - begin))));
  }
  std::ostringstream manifest;
  manifest << kManifestTag << ' ' << kManifestVersion << ' ' << parts << ' ' << size << ' ' << sha256_hex(bytes) << ' '
           << options_.part_bytes;
  set(mkey, seal_remote_manifest(options_.secret, key, manifest.str()));  // last: after its parts, applied with them
  std::lock_guard<std::mutex> lock(write_mu_);
  Result<RedisReply> r = writer_->transaction(commands, mkey);
  if (!r) return r.status();
  for (const RedisReply& e : r.value().elements) {
    if (e.is_error()) return Status::refused("remote " + options_.url + ": SET " + mkey + ": " + e.str);
  }
  return Status::ok();
}

Status RedisBackend::remove(const std::string& key) {
  const std::string mkey = manifest_key(key);
  std::lock_guard<std::mutex> lock(write_mu_);
  Result<RedisReply> head = writer_->command({"GET", mkey}, mkey);
  if (!head) return head.status();
  std::vector<std::string> argv{"DEL", mkey};
  Manifest m;
  if (head.value().type == RedisReply::Type::kString && parse_manifest(head.value().str, &m).empty()) {
    for (int64_t i = 0; i < m.parts; ++i) argv.push_back(part_key(key, i));
  }
  Result<RedisReply> r = writer_->command(argv, mkey);
  if (!r) return r.status();
  if (r.value().is_error()) return Status::refused("remote " + options_.url + ": DEL " + mkey + ": " + r.value().str);
  return Status::ok();
}

Result<bool> RedisBackend::exists(const std::string& key) {
  const std::string mkey = manifest_key(key);
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<RedisReply> r = reader_->command({"EXISTS", mkey}, mkey);
  if (!r) return r.status();
  if (r.value().type != RedisReply::Type::kInteger) {
    return Status::refused("remote " + options_.url + ": EXISTS " + mkey + ": " + r.value().str);
  }
  return r.value().integer > 0;
}

}  // namespace orbit::store
