#include "orbit/store/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "orbit/common/error.h"

namespace orbit::store {

namespace {

std::string blob_relative_path(const std::string& key) {
  return "blobs/" + key.substr(0, 2) + "/" + key + "." + unique_nonce() + ".blob";
}

}  // namespace

DiskTier::DiskTier(const DiskTierOptions& options) : options_(options) {
  ORBIT_CHECK(!options_.dir.empty(), "disk tier: the store directory is empty");
  ORBIT_CHECK(!options_.model_fingerprint.empty(), "disk tier " << options_.dir << ": the model fingerprint is empty");
  ORBIT_CHECK(options_.budget_bytes >= 0, "disk tier " << options_.dir << ": budget must be >= 0 bytes");
  options_.dir = std::filesystem::absolute(options_.dir).lexically_normal().string();
  Status made = ensure_directory(options_.dir + "/blobs", options_.io_hooks);
  ORBIT_CHECK(made.is_ok(), "store " << options_.dir << ": " << made.reason());
  const std::string lock_path = options_.dir + "/LOCK";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ORBIT_CHECK(lock_fd_ >= 0, "store " << options_.dir << ": cannot open " << lock_path << ": " << errno_text(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(lock_fd_);
    ORBIT_FAIL("store " << options_.dir << " is open in another process or store object (" << lock_path
                        << ": " << errno_text(error) << ")");
  }
  try {
    index_ = std::make_unique<SqliteIndex>(options_.dir + "/index.sqlite", SqliteIndex::Mode::kReadWrite);
    const auto recorded = index_->meta("model_fingerprint");
    if (!recorded) {
      Status s = index_->set_meta("model_fingerprint", options_.model_fingerprint);
      ORBIT_CHECK(s.is_ok(), "store " << options_.dir << ": " << s.reason());
    } else {
      ORBIT_CHECK(*recorded == options_.model_fingerprint,
                  "store " << options_.dir << " holds chunks of model fingerprint " << *recorded
                           << ", not this model's " << options_.model_fingerprint
                           << " (use another store directory for this model)");
    }
    for (DiskRow& row : index_->rows()) {
      if (row.corrupt) continue;
      used_ += row.blob_bytes;
      rows_.emplace(row.key, std::move(row));
    }
  } catch (...) {
    index_.reset();
    ::close(lock_fd_);
    throw;
  }
}

DiskTier::~DiskTier() {
  index_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

int64_t DiskTier::charge(const StoredValue& value) const {
  const BlobEncoding encoding = options_.int8_canonicals && value.kind == EntryKind::kCanonical ? BlobEncoding::kInt8
                                                                                                : BlobEncoding::kExact;
  return static_cast<int64_t>(encoded_blob_size(std::string(64, '0'), options_.model_fingerprint, value, encoding));
}

std::string DiskTier::absolute(const std::string& blob) const { return options_.dir + "/" + blob; }

Result<PreparedBlob> DiskTier::prepare(const std::string& key, const StoredValue& value) const {
  PreparedBlob out;
  out.key = key;
  out.kind = value.kind;
  out.encoding = options_.int8_canonicals && value.kind == EntryKind::kCanonical ? BlobEncoding::kInt8
                                                                                 : BlobEncoding::kExact;
  out.value_bytes = value.bytes();
  out.blob = blob_relative_path(key);
  const std::string path = absolute(out.blob);
  Status dir = ensure_directory(std::filesystem::path(path).parent_path().string(), options_.io_hooks);
  if (!dir) return dir;
  const EncodedBlob encoded = encode_blob(key, options_.model_fingerprint, value, out.encoding);
  BlobWriteResult written;
  Status s = write_blob_file(path, encoded, options_.io_hooks, &written);
  if (!s) return s;
  out.blob_bytes = static_cast<int64_t>(written.bytes);
  out.checksum = written.checksum;
  return out;
}

void DiskTier::discard(const PreparedBlob& blob) const { ::unlink(absolute(blob.blob).c_str()); }

Result<ValuePtr> DiskTier::load(const DiskRow& row) const {
  const std::string path = absolute(row.blob);
  const std::string where = "key " + row.key + ", blob " + path;
  Result<at::Tensor> bytes = read_file_bytes(path);
  if (!bytes) return Status::not_found(where + ": " + bytes.status().reason());
  if (bytes.value().numel() != row.blob_bytes) {
    return Status::not_found("corrupt blob " + where + ": size " + std::to_string(bytes.value().numel()) +
                             " != " + std::to_string(row.blob_bytes) + " in the index (truncated?)");
  }
  Result<DecodedBlob> decoded = decode_blob(bytes.value(), row.checksum, where);
  if (!decoded) return decoded.status();
  if (decoded.value().key != row.key || decoded.value().model_fingerprint != options_.model_fingerprint) {
    return Status::not_found("corrupt blob " + where + ": it holds key " + decoded.value().key + " of model " +
                             decoded.value().model_fingerprint);
  }
  return decoded.value().value;
}

Status DiskTier::commit(const PreparedBlob& blob, const RowAttrs& attrs) {
  DiskRow row;
  row.key = blob.key;
  row.kind = blob.kind;
  row.encoding = blob.encoding;
  row.blob = blob.blob;
  row.blob_bytes = blob.blob_bytes;
  row.value_bytes = blob.value_bytes;
  row.checksum = blob.checksum;
  row.pinned = attrs.pinned;
  row.hits = attrs.hits;
  row.last_access = attrs.last_access;
  row.recompute_cost = attrs.recompute_cost;
  row.expected_reuse = attrs.expected_reuse;
  std::string replaced;
  Status s = index_->upsert(row, &replaced);
  if (!s) {
    discard(blob);
    return s;
  }
  // The row is durable: the replaced blob (possibly of a corrupt row) is garbage now.
  if (!replaced.empty()) ::unlink(absolute(replaced).c_str());
  auto it = rows_.find(row.key);
  if (it != rows_.end()) used_ -= it->second.blob_bytes;
  used_ += row.blob_bytes;
  rows_[row.key] = std::move(row);
  return Status::ok();
}

Status DiskTier::insert(const std::string& key, const ValuePtr& value) {
  Result<PreparedBlob> blob = prepare(key, *value);
  if (!blob) return blob.status();
  return commit(blob.value(), RowAttrs{});
}

Result<ValuePtr> DiskTier::read(const std::string& key) {
  const DiskRow* row = locate(key);
  if (row == nullptr) return Status::not_found("disk tier: no entry " + key);
  return load(*row);
}

Status DiskTier::erase(const std::string& key) {
  std::string blob;
  Status s = index_->erase(key, &blob);
  if (!s) return s;
  if (!blob.empty()) ::unlink(absolute(blob).c_str());
  auto it = rows_.find(key);
  if (it != rows_.end()) {
    used_ -= it->second.blob_bytes;
    rows_.erase(it);
  }
  return Status::ok();
}

void DiskTier::remove(const std::string& key) { (void)erase(key); }

int64_t DiskTier::charged(const std::string& key) const {
  auto it = rows_.find(key);
  return it == rows_.end() ? 0 : it->second.blob_bytes;
}

const DiskRow* DiskTier::locate(const std::string& key) const {
  auto it = rows_.find(key);
  return it == rows_.end() ? nullptr : &it->second;
}

void DiskTier::mark_corrupt(const DiskRow& row) {
  (void)index_->mark_corrupt(row.key, row.blob);  // best effort: the in-memory miss is what matters now
  auto it = rows_.find(row.key);
  if (it != rows_.end() && it->second.blob == row.blob) {
    used_ -= it->second.blob_bytes;
    rows_.erase(it);
  }
}

Status DiskTier::set_pinned(const std::string& key, bool pinned) {
  auto it = rows_.find(key);
  if (it == rows_.end()) return Status::ok();
  Status s = index_->set_pinned(key, pinned);
  if (s) it->second.pinned = pinned;
  return s;
}

Status DiskTier::persist_access(const std::vector<AccessUpdate>& updates) {
  Status s = index_->update_access(updates);
  if (!s) return s;
  for (const AccessUpdate& u : updates) {
    auto it = rows_.find(u.key);
    if (it == rows_.end()) continue;
    it->second.hits = u.hits;
    it->second.last_access = u.last_access;
  }
  return s;
}

void DiskTier::verify_integrity(bool deep) const {
  int64_t bytes = 0;
  for (const auto& [key, row] : rows_) bytes += row.blob_bytes;
  ORBIT_CHECK(bytes == used_, "disk tier integrity: rows hold " << bytes << " bytes, accounted " << used_);
  if (!deep) return;
  int64_t live = 0;
  for (const DiskRow& row : index_->rows()) {
    if (row.corrupt) continue;
    ++live;
    auto it = rows_.find(row.key);
    ORBIT_CHECK(it != rows_.end(), "disk tier integrity: index row " << row.key << " is not in the tier");
    ORBIT_CHECK(it->second.blob == row.blob && it->second.checksum == row.checksum,
                "disk tier integrity: index row " << row.key << " names blob " << row.blob << ", the tier "
                                                  << it->second.blob);
    ORBIT_CHECK(std::filesystem::exists(absolute(row.blob)),
                "disk tier integrity: blob " << absolute(row.blob) << " of key " << row.key << " is missing");
  }
  ORBIT_CHECK(live == static_cast<int64_t>(rows_.size()),
              "disk tier integrity: index has " << live << " rows, the tier " << rows_.size());
}

}  // namespace orbit::store
