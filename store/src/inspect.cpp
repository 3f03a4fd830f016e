// Offline inspection of a store directory (orbit/store.h): what `orbit store ls|stat|verify|gc` runs.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "blob_files.h"
#include "blobs_root.h"
#include "inspect_verify.h"
#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/blob_io.h"
#include "orbit/store/disk_tier.h"
#include "orbit/store/redis_client.h"
#include "orbit/store/sqlite_index.h"
#include "shown_text.h"

namespace orbit {

namespace fs = std::filesystem;
using store::BlobFiles;
using store::count_blob_files;
using store::DiskRow;
using store::scan_blobs;
using store::shown;
using store::SqliteIndex;

namespace {

std::string store_root(const std::string& dir) {
  ORBIT_CHECK(!dir.empty(), "store: the store directory is empty (give --store DIR)");
  std::error_code ec;
  std::string root = fs::absolute(dir, ec).lexically_normal().string();
  ORBIT_CHECK(!ec, "store " << dir << ": cannot resolve the path: " << ec.message());
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  const Result<std::string> blobs = store::resolve_blobs_root(root);  // a symlinked blobs/ is refused
  ORBIT_CHECK(blobs.is_ok() || blobs.status().code() == StatusCode::kNotFound, blobs.status().reason());
  const auto has_index = [&] {
    std::error_code error;
    return fs::is_regular_file(root + "/index.sqlite", error);
  };
  if (!has_index()) {
    // A store's index is made before its first blob: an index there now, after blobs were seen, is one
    // another process was creating; one still missing was lost.
    const int64_t blobs = count_blob_files(root);
    if (has_index()) return root;
    ORBIT_CHECK(blobs == 0, "store " << root << ": index.sqlite is missing but blobs/ holds " << blobs
                                     << " blobs (was the index deleted?); run `orbit store repair --store " << root
                                     << "` to rebuild it");
    std::error_code error;
    ORBIT_CHECK(fs::exists(root, error), "store " << root << ": does not exist");
    ORBIT_CHECK(fs::is_directory(root, error), "store " << root << ": is a file, not a store directory");
    const fs::file_status index = fs::symlink_status(root + "/index.sqlite", error);
    ORBIT_CHECK(!fs::exists(index), "store " << root << ": index.sqlite is not a regular file (it is a "
                                             << (fs::is_directory(index) ? "directory" : "special file or link")
                                             << "); move it aside, then run `orbit store repair --store " << root
                                             << "`");
    ORBIT_FAIL("store " << root << ": not an orbit store (no index.sqlite)");
  }
  return root;
}

// DIR's index. An empty or damaged one is refused with a pointer to repair (read as empty, every blob
// would look unreferenced, and gc would delete them); so is one without a model fingerprint beside blobs.
std::unique_ptr<SqliteIndex> open_index(const std::string& root, SqliteIndex::Mode mode) {
  const std::string path = root + "/index.sqlite";
  const std::string repair = "; run `orbit store repair --store " + root + "` to rebuild it from the blobs";
  const auto is_empty = [&] {
    std::error_code ec;
    return fs::file_size(path, ec) == 0 && !ec;
  };
  // Still empty after blobs were seen (a store being created writes its index before any blob): damaged.
  const bool empty = is_empty();
  ORBIT_CHECK(!empty || count_blob_files(root) == 0 || !is_empty(),
              "store " << root << ": " << path << " is empty but blobs/ holds " << count_blob_files(root) << " blobs"
                       << repair);
  std::unique_ptr<SqliteIndex> index;
  try {
    index = std::make_unique<SqliteIndex>(path, mode);
    if (!empty && !index->meta("model_fingerprint")) {
      const int64_t blobs = count_blob_files(root);
      ORBIT_CHECK(
          blobs == 0 || index->meta("model_fingerprint"),
          "store " << root << ": its index has no model fingerprint but blobs/ holds " << blobs << " blobs" << repair);
    }
  } catch (const Error& e) {
    // An index with no table beside blobs lost its first commits (its WAL): as an empty file, damaged.
    const bool no_tables = std::string(e.what()).find(store::kNoTables) != std::string::npos;
    if (no_tables && count_blob_files(root) > 0) {
      ORBIT_FAIL("store " << root << ": its index " << path << " holds no tables but blobs/ holds "
                          << count_blob_files(root) << " blobs (its first commits were lost)" << repair);
    }
    if (!store::is_index_damage(e)) throw;
    std::error_code ec;
    if (!fs::is_directory(root + "/blobs", ec)) {  // nothing repair could rebuild it from
      ORBIT_FAIL("store " << root << ": its index " << path << " is damaged (" << e.what()
                          << ") and there is no blobs/ directory to rebuild it from: not an orbit store, or one that "
                             "never stored a value (remove "
                          << path << " to start an empty store there)");
    }
    ORBIT_FAIL("store " << root << ": its index " << path << " is damaged (" << e.what() << ")" << repair);
  }
  return index;
}

// Every row of the index of the store at `root`. Damage that only reading the rows finds (a corrupt page of
// the entries table) is refused like damage found at opening, with the pointer to repair.
std::vector<DiskRow> index_rows(SqliteIndex& index, const std::string& root) {
  try {
    return index.rows();
  } catch (const Error& e) {
    if (!store::is_index_damage(e)) throw;
    ORBIT_FAIL("store " << root << ": its index " << root << "/index.sqlite is damaged (" << e.what()
                        << "); run `orbit store repair --store " << root << "` to rebuild it from the blobs");
  }
}

std::string blobs_root(const std::string& root) {
  std::error_code ec;
  const fs::path p = fs::canonical(root + "/blobs", ec);
  return ec ? root + "/blobs" : p.string();
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::set<std::string> referenced(const std::string& root, const std::vector<DiskRow>& rows) {
  std::set<std::string> out;
  for (const DiskRow& r : rows) out.insert((fs::path(root) / r.blob).lexically_normal().string());
  return out;
}

int64_t count_unreferenced(const std::string& root, const std::vector<DiskRow>& rows, const BlobFiles& files) {
  const std::set<std::string> used = referenced(root, rows);
  int64_t n = 0;
  for (const fs::path& p : files.blobs) n += used.count(p.lexically_normal().string()) ? 0 : 1;
  return n;
}

// What gc learns of the index rows: which keys have a healthy row (a store key naming an existing blob file
// of the store that is named for that key: blob files are KEY.NONCE.blob), and the keys of rows that name
// no blob file (missing, or a path outside the store). `damaged` counts the rows that are not healthy.
struct RowHealth {
  std::set<std::string> healthy_keys;
  std::set<std::string> keys_without_blob;
  int64_t damaged = 0;
};

RowHealth row_health(const std::string& root, const std::vector<DiskRow>& rows, const BlobFiles& files) {
  std::set<std::string> present;
  for (const fs::path& p : files.blobs) present.insert(p.lexically_normal().string());
  RowHealth out;
  for (const DiskRow& r : rows) {
    const fs::path path = (fs::path(root) / r.blob).lexically_normal();
    const bool exists = present.count(path.string()) > 0;
    if (!exists) out.keys_without_blob.insert(r.key);
    if (exists && is_store_key(r.key) && path.filename().string().rfind(r.key + ".", 0) == 0) {
      out.healthy_keys.insert(r.key);
    } else {
      ++out.damaged;
    }
  }
  return out;
}

// True when an unreferenced blob must stay because `orbit store repair` could rebuild a row from it: it
// could not be read now (nothing is proven), or it verifies, holds a store key of this store's model, and
// that key has no healthy row. Only asked while the index has damaged rows: one of them may be this
// blob's own row with its key and path both damaged, which would make the blob look orphaned.
bool repair_could_restore(const fs::path& p, const std::string& fingerprint, const RowHealth& health) {
  Result<at::Tensor> bytes = store::read_file_bytes(p.string());
  if (!bytes) return bytes.status().code() != StatusCode::kNotFound;
  Result<store::DecodedBlob> decoded = store::decode_blob(bytes.value(), "", p.string());
  if (!decoded) return false;
  const store::DecodedBlob& d = decoded.value();
  return is_store_key(d.key) && d.model_fingerprint == fingerprint && !health.healthy_keys.count(d.key);
}

}  // namespace

std::vector<StoreEntryInfo> list_store(const std::string& dir) {
  const std::string root = store_root(dir);
  std::unique_ptr<SqliteIndex> opened = open_index(root, SqliteIndex::Mode::kReadOnly);
  SqliteIndex& index = *opened;
  const std::set<std::string> pins = index.live_pins(now_ms());
  std::vector<StoreEntryInfo> out;
  for (const DiskRow& r : index_rows(index, root)) {
    StoreEntryInfo e;
    e.key = shown(r.key);
    e.kind = r.kind;
    e.encoding = r.encoding;
    e.value_bytes = r.value_bytes;
    e.blob_bytes = r.blob_bytes;
    e.blob_path = shown((fs::path(root) / r.blob).string());
    e.checksum = shown(r.checksum);
    e.pinned = pins.count(r.key) > 0;
    e.marked_corrupt = r.corrupt;
    e.hits = r.hits;
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

// A byte count added to a total: a damaged row's negative count adds nothing and a sum past int64's range stays
// at its largest value (verify reports such rows; the totals stay totals instead of wrapping negative).
void add_bytes(int64_t& total, int64_t bytes) {
  if (bytes <= 0) return;
  total = bytes > std::numeric_limits<int64_t>::max() - total ? std::numeric_limits<int64_t>::max() : total + bytes;
}

// Paths found by listing the file system, as reports show text: a name that is not UTF-8 with \xNN (shown_text.h).
std::vector<std::string> shown_all(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) out.push_back(shown(p));
  return out;
}

}  // namespace

StoreSummary summarize_store(const std::string& dir) {
  const std::string root = store_root(dir);
  std::unique_ptr<SqliteIndex> opened = open_index(root, SqliteIndex::Mode::kReadOnly);
  SqliteIndex& index = *opened;
  StoreSummary s;
  s.dir = shown(root);
  s.model_fingerprint = shown(index.meta("model_fingerprint").value_or(""));
  s.format_version = std::stoll(index.meta("format_version").value_or("0"));
  std::map<std::string, int64_t> count, bytes;
  const std::vector<DiskRow> rows = index_rows(index, root);
  const std::set<std::string> pins = index.live_pins(now_ms());
  for (const DiskRow& r : rows) {
    ++s.entries;
    add_bytes(s.value_bytes, r.value_bytes);
    add_bytes(s.blob_bytes, r.blob_bytes);
    s.pinned += pins.count(r.key) ? 1 : 0;
    s.marked_corrupt += r.corrupt ? 1 : 0;
    ++count[entry_kind_name(r.kind)];
    add_bytes(bytes[entry_kind_name(r.kind)], r.blob_bytes);
  }
  s.entries_by_kind.assign(count.begin(), count.end());
  s.bytes_by_kind.assign(bytes.begin(), bytes.end());
  const BlobFiles files = scan_blobs(root);
  s.unreferenced_blobs = count_unreferenced(root, rows, files);
  s.temp_files = static_cast<int64_t>(files.temps.size());
  s.unreadable_dirs = shown_all(files.unreadable_dirs);
  const std::map<std::string, int64_t> pending = index.remote_pending_counts();
  const std::map<std::string, int64_t> abandoned = index.remote_abandoned();
  s.remote_pending.assign(pending.begin(), pending.end());
  s.remote_abandoned.assign(abandoned.begin(), abandoned.end());
  return s;
}

namespace store {
namespace {

// What verify finds of one row: nothing (sound), a problem (damage), or a blob it could not read.
struct RowCheck {
  enum class Kind { kSound, kProblem, kUnreadable } kind = Kind::kSound;
  std::string path;
  std::string reason;
};

RowCheck row_problem(std::string path, std::string reason) {
  return {RowCheck::Kind::kProblem, std::move(path), std::move(reason)};
}

// Reads the blob `r` names and checks it against the row: key, size, checksum, model, kind, encoding, value
// bytes, and the row's corrupt mark.
RowCheck check_row(const std::string& root, const std::string& confined_root, const std::string& fingerprint,
                   const DiskRow& r) {
  std::string path = (fs::path(root) / r.blob).string();
  if (!is_store_key(r.key)) {
    return row_problem(path, "the index row's key is not a store key (64 lowercase hex characters)");
  }
  Result<std::string> confined = confine_blob_path(root, confined_root, r.blob);
  if (!confined) return row_problem(path, confined.status().reason());  // never read a file outside the store
  path = confined.value();
  Result<at::Tensor> bytes = read_file_bytes(path);
  if (!bytes && bytes.status().code() != StatusCode::kNotFound) {  // EMFILE, EACCES, EIO, ...: not damage
    return {RowCheck::Kind::kUnreadable, path, bytes.status().reason()};
  }
  std::error_code ec;
  if (!bytes && fs::is_directory(fs::symlink_status(path, ec))) {
    return row_problem(path, bytes.status().reason() + " (repair drops its row and moves it to " + root +
                                 "/quarantine/ with what it holds)");
  }
  if (!bytes && fs::exists(fs::symlink_status(path, ec))) return row_problem(path, bytes.status().reason());
  if (!bytes) return row_problem(path, "missing: " + bytes.status().reason());
  if (bytes.value().numel() != r.blob_bytes) {
    return row_problem(path, "size " + std::to_string(bytes.value().numel()) + " != " + std::to_string(r.blob_bytes) +
                                 " in the index (truncated or overwritten)");
  }
  Result<DecodedBlob> decoded = decode_blob(bytes.value(), r.checksum, path);
  if (!decoded) {
    // The problem line names the blob already: "corrupt: checksum mismatch ...", not the path twice.
    std::string reason = decoded.status().reason();
    const std::string lead = "corrupt blob " + path + ": ";
    if (reason.rfind(lead, 0) == 0) reason = "corrupt: " + reason.substr(lead.size());
    return row_problem(path, reason);
  }
  if (decoded.value().key != r.key || decoded.value().model_fingerprint != fingerprint) {
    return row_problem(path,
                       "the blob holds key " + decoded.value().key + " of model " + decoded.value().model_fingerprint);
  }
  const EntryKind kind = decoded.value().value->kind;
  if (kind != r.kind || decoded.value().encoding != r.encoding) {
    return row_problem(path, std::string("the index says kind ") + entry_kind_name(r.kind) + ", encoding " +
                                 blob_encoding_name(r.encoding) + " (" + std::to_string(static_cast<int>(r.kind)) +
                                 ", " + std::to_string(static_cast<int>(r.encoding)) + "); the blob holds " +
                                 entry_kind_name(kind) + ", " + blob_encoding_name(decoded.value().encoding));
  }
  const int64_t value_bytes = decoded.value().value->bytes();
  if (value_bytes != r.value_bytes) {  // stat's "in memory" sums this field
    return row_problem(path, "the index says value_bytes " + std::to_string(r.value_bytes) +
                                 "; the blob's value holds " + std::to_string(value_bytes) + " bytes");
  }
  if (r.corrupt) {
    return row_problem(path, "marked corrupt by an earlier read (the blob now verifies; rewrite the entry to clear)");
  }
  return {};
}

// True when the index no longer holds `r` as it was read: erased, evicted, or rewritten to another blob.
bool row_changed(const SqliteIndex& index, const DiskRow& r) {
  const std::optional<DiskRow> now = index.row(r.key);
  return !now || now->blob != r.blob || now->checksum != r.checksum;
}

}  // namespace

VerifyReport verify_rows(const SqliteIndex& index, const std::string& root, const std::string& fingerprint,
                         const std::vector<DiskRow>& rows) {
  VerifyReport report;
  const std::string confined_root = blobs_root(root);
  for (const DiskRow& r : rows) {
    RowCheck c = check_row(root, confined_root, fingerprint, r);
    if (c.kind != RowCheck::Kind::kSound && row_changed(index, r)) continue;
    ++report.checked;
    if (c.kind == RowCheck::Kind::kSound) continue;
    auto& list = c.kind == RowCheck::Kind::kProblem ? report.problems : report.unreadable;
    list.push_back({shown(r.key), shown(c.path), shown(c.reason)});
  }
  return report;
}

}  // namespace store

VerifyReport verify_store(const std::string& dir) {
  const std::string root = store_root(dir);
  std::unique_ptr<SqliteIndex> opened = open_index(root, SqliteIndex::Mode::kReadOnly);
  SqliteIndex& index = *opened;
  const std::string fingerprint = index.meta("model_fingerprint").value_or("");
  std::vector<DiskRow> rows = index_rows(index, root);
  VerifyReport report = store::verify_rows(index, root, fingerprint, rows);
  const BlobFiles files = scan_blobs(root);
  // A blob an engine wrote after the rows were read is named by a row read after the scan.
  const std::vector<DiskRow> later = index_rows(index, root);
  rows.insert(rows.end(), later.begin(), later.end());
  report.unreferenced_blobs = count_unreferenced(root, rows, files);
  report.temp_files = static_cast<int64_t>(files.temps.size());
  report.unreadable_dirs = shown_all(files.unreadable_dirs);
  report.index_damage = shown(index.inconsistency());
  return report;
}

// gc on a healthy index removes every blob no row names (a write that died before its commit, a removal
// that died between deleting the row and unlinking the blob, a rewrite that died before unlinking the old
// blob). An index SQLite finds inconsistent is refused; while rows are damaged, blobs repair could rebuild
// a row from are kept (GcReport::kept_paths) and the rest of the garbage goes.
GcReport gc_store(const std::string& dir, const GcOptions& options) {
  const std::string root = store_root(dir);
  // A dry run writes nothing (LOCK opened for reading, the index read-only): it also runs on a read-only
  // directory or file system.
  const store::ExclusiveStoreLock lock(root, "gc", "a write in flight there looks like garbage here", options.dry_run);
  // Holding the lock, no write is in flight: every temp file is dead and the row set is final.
  std::unique_ptr<SqliteIndex> opened =
      open_index(root, options.dry_run ? SqliteIndex::Mode::kReadOnly : SqliteIndex::Mode::kReadWrite);
  SqliteIndex& index = *opened;
  const std::vector<DiskRow> rows = index_rows(index, root);
  const std::string inconsistent = index.inconsistency();
  ORBIT_CHECK(inconsistent.empty(), "store " << root << ": its index " << root << "/index.sqlite is damaged ("
                                             << shown(inconsistent) << "); gc would take the blobs of damaged rows "
                                             << "for garbage: run `orbit store repair --store " << root
                                             << "` to rebuild it from the blobs, then gc");
  const std::string fingerprint = index.meta("model_fingerprint").value_or("");
  const std::set<std::string> used = referenced(root, rows);
  const BlobFiles files = scan_blobs(root);
  const RowHealth health = row_health(root, rows, files);
  GcReport report;
  report.unreadable_dirs = shown_all(files.unreadable_dirs);
  auto remove = [&](const fs::path& p, int64_t& counter) {
    std::error_code size_error, ec;
    // A symlink is removed, not what it names: it frees no bytes of its target's.
    const auto size = fs::is_symlink(fs::symlink_status(p, ec)) ? 0 : fs::file_size(p, size_error);
    if (!options.dry_run) {
      fs::remove(p, ec);
      ORBIT_CHECK(!ec, "store " << root << ": cannot remove " << p.string() << ": " << ec.message());
    }
    ++counter;
    report.freed_bytes += size_error ? 0 : static_cast<int64_t>(size);
    report.removed_paths.push_back(shown(p.string()));
  };
  for (const fs::path& p : files.temps) remove(p, report.removed_temps);
  for (const fs::path& p : files.blobs) {
    if (used.count(p.lexically_normal().string())) continue;
    const std::string name = p.filename().string();
    if (health.keys_without_blob.count(name.substr(0, name.find('.'))) ||
        (health.damaged > 0 && repair_could_restore(p, fingerprint, health))) {
      report.kept_paths.push_back(shown(p.string()));
      continue;
    }
    remove(p, report.removed_blobs);
  }
  return report;
}

namespace {

// `remote` as the index names it: a redis URL shown with its password redacted (as the journal records it; a URL
// given redacted stays as it is); other names (a backend's description) as given.
std::string journal_remote_name(const std::string& remote) { return store::redact_redis_url(remote); }

// The remotes `counts` names, for a message: "a, b" or "none".
std::string remote_names(const std::map<std::string, int64_t>& counts) {
  std::string out;
  for (const auto& [name, n] : counts) out += (out.empty() ? "" : ", ") + shown(name);
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> reset_remote_abandoned(const std::string& dir, const std::string& remote) {
  const std::string root = store_root(dir);
  const store::ExclusiveStoreLock lock(root, "reset-counts", "an open store counts into them");
  std::unique_ptr<SqliteIndex> index = open_index(root, SqliteIndex::Mode::kReadWrite);
  const std::map<std::string, int64_t> counts = index->remote_abandoned();
  const std::string name = journal_remote_name(remote);
  std::vector<std::pair<std::string, int64_t>> removed;
  for (const auto& [url, writes] : counts) {
    if (!remote.empty() && url != name) continue;
    Result<int64_t> gone = index->reset_remote_abandoned(url);
    ORBIT_CHECK(gone.is_ok(), "store " << root << ": " << gone.status().reason());
    removed.emplace_back(url, writes);
  }
  return removed;
}

int64_t forget_remote_writes(const std::string& dir, const std::string& remote, bool dry_run) {
  const std::string root = store_root(dir);
  ORBIT_CHECK(!remote.empty(), "store " << root << ": forget-remote needs the remote whose records to drop");
  // A dry run writes nothing, as gc's: LOCK opened for reading, the index read-only.
  const store::ExclusiveStoreLock lock(root, "forget-remote", "an open store with that remote re-sends from them",
                                       dry_run);
  std::unique_ptr<SqliteIndex> index =
      open_index(root, dry_run ? SqliteIndex::Mode::kReadOnly : SqliteIndex::Mode::kReadWrite);
  const std::map<std::string, int64_t> pending = index->remote_pending_counts();
  const std::string name = journal_remote_name(remote);
  const auto found = pending.find(name);
  ORBIT_CHECK(found != pending.end(), "store " << root << ": no record of writes not yet delivered to " << shown(name)
                                               << " (remotes with some: " << remote_names(pending) << ")");
  if (dry_run) return found->second;
  Result<int64_t> gone = index->forget_remote_pending(name);
  ORBIT_CHECK(gone.is_ok(), "store " << root << ": " << gone.status().reason());
  return gone.value();
}

}  // namespace orbit
