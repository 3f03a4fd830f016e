// `orbit store repair`: rebuild a store's index from its blobs (orbit/store.h).
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "blob_files.h"
#include "blobs_root.h"
#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/blob_io.h"
#include "orbit/store/disk_tier.h"
#include "orbit/store/sqlite_index.h"
#include "shown_text.h"

namespace orbit {

namespace fs = std::filesystem;
using store::DiskRow;
using store::SqliteIndex;

namespace {

struct Found {
  DiskRow row;
  std::string fingerprint;
  fs::file_time_type mtime;
};

// Reads and verifies one blob; nullopt (with a note) when it does not verify.
std::optional<Found> inspect_blob(const std::string& root, const fs::path& path, std::vector<std::string>* notes) {
  // A directory where a blob was is damage, as a FIFO is: no later read makes it a blob, so its row goes
  // rather than the repair stopping at it. One named as a blob is moved to DIR/quarantine/ after the rows are
  // rebuilt (quarantine_directories), with whatever it holds: repair deletes no file, and this may be
  // someone's folder.
  std::error_code kind_error;
  if (fs::is_directory(fs::symlink_status(path, kind_error))) {
    notes->push_back(path.string() + ": is a directory, not a blob file");
    return std::nullopt;
  }
  Result<at::Tensor> bytes = store::read_file_bytes(path.string());
  // A blob that could not be read now is not proven bad: stop rather than drop its row.
  ORBIT_CHECK(bytes.is_ok() || bytes.status().code() != StatusCode::kRefused,
              "store repair: " << bytes.status().reason() << "; fix that and run the repair again");
  if (!bytes) {
    notes->push_back(bytes.status().reason());
    return std::nullopt;
  }
  Result<store::DecodedBlob> decoded = store::decode_blob(bytes.value(), "", path.string());
  if (!decoded) {
    notes->push_back(decoded.status().reason());
    return std::nullopt;
  }
  const store::DecodedBlob& d = decoded.value();
  if (!is_store_key(d.key)) {
    notes->push_back(path.string() + ": holds key '" + d.key + "', not a store key");
    return std::nullopt;
  }
  Found f;
  f.row.key = d.key;
  f.row.kind = d.value->kind;
  f.row.encoding = d.encoding;
  f.row.blob = fs::relative(path, root).string();
  f.row.blob_bytes = bytes.value().numel();
  f.row.value_bytes = d.value->bytes();
  f.row.checksum = d.checksum;
  f.fingerprint = d.model_fingerprint;
  std::error_code ec;
  f.mtime = fs::last_write_time(path, ec);
  return f;
}

// True when row `r` says what blob `f` holds (checksum, kind, encoding, blob and value sizes, model) and no
// read found it corrupt.
bool row_matches(const Found& f, const DiskRow& r, const std::string& fingerprint) {
  return f.row.checksum == r.checksum && f.row.kind == r.kind && f.row.encoding == r.encoding &&
         f.row.blob_bytes == r.blob_bytes && f.row.value_bytes == r.value_bytes && f.fingerprint == fingerprint &&
         !r.corrupt;
}

// Why the index at `path` is damaged (SQLite's quick_check, or the error that stopped it), or "" when it
// reads (also when it is empty or missing: a new index is made then).
std::string index_damage(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  sqlite3* db = nullptr;
  std::string damage;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    damage = db ? sqlite3_errmsg(db) : "cannot open";
  } else {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      const std::string answer = text ? reinterpret_cast<const char*>(text) : "";
      if (answer != "ok") damage = "quick_check: " + answer;
    } else if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) {
      damage = sqlite3_errmsg(db);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return damage;
}

// Moves a damaged index (and its -wal and -shm) aside as index.sqlite.damaged-<nonce>, so that a new
// index is built from the blobs; the file is kept for a post-mortem.
void set_damaged_index_aside(const std::string& root, const std::string& damage, RepairReport* report) {
  const std::string path = root + "/index.sqlite";
  const std::string aside = path + ".damaged-" + store::unique_nonce();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ec;
    if (!fs::exists(path + suffix, ec)) continue;
    fs::rename(path + suffix, aside + suffix, ec);
    ORBIT_CHECK(!ec,
                "store " << root << ": cannot move the damaged index " << path << suffix << " aside: " << ec.message());
  }
  report->notes.push_back("index " + path + " was damaged (" + damage + "): moved to " + aside +
                          "; the index is rebuilt from the blobs");
}

// Opens the index for repair; one whose schema SQLite reads but this build cannot (a table lost a column) is
// set aside and rebuilt like a malformed one.
std::unique_ptr<SqliteIndex> open_for_repair(const std::string& root, RepairReport* report) {
  std::unique_ptr<SqliteIndex> opened;
  try {
    opened = std::make_unique<SqliteIndex>(root + "/index.sqlite", SqliteIndex::Mode::kRepair);
  } catch (const Error& e) {
    if (!store::is_index_damage(e)) throw;
    set_damaged_index_aside(root, e.what(), report);
    opened = std::make_unique<SqliteIndex>(root + "/index.sqlite", SqliteIndex::Mode::kRepair);
  }
  if (!opened->damaged_version().empty()) {
    report->notes.push_back("index " + opened->path() + ": its format version '" + opened->damaged_version() +
                            "' was damaged (not a number): set to " + std::to_string(store::kBlobFormatVersion) +
                            ", the format every restored blob is checked to have");
  }
  return opened;
}

// An index whose pages read (quick_check passes) but whose indexes disagree with the table (a key byte
// flipped in the key index only: integrity_check finds it, quick_check does not) is reindexed from the
// table; one REINDEX does not fix (two rows of one key) is set aside and rebuilt from the blobs.
std::unique_ptr<SqliteIndex> reindex_if_inconsistent(const std::string& root, std::unique_ptr<SqliteIndex> opened,
                                                     RepairReport* report) {
  const std::string found = opened->inconsistency();
  if (found.empty()) return opened;
  const std::string left = opened->reindex();
  if (left.empty()) {
    report->index_reindexed = true;
    report->notes.push_back("index " + root + "/index.sqlite was inconsistent (integrity_check: " + found +
                            "): REINDEX rebuilt its indexes from the table");
    return opened;
  }
  opened.reset();
  set_damaged_index_aside(root, found + "; " + left, report);
  return open_for_repair(root, report);
}

// The store directory `dir` as an absolute path without a trailing '/', checked to hold a blobs/ directory
// that is not a symlink.
std::string repair_root(const std::string& dir) {
  ORBIT_CHECK(!dir.empty(), "store repair: the store directory is empty (give --store DIR)");
  std::error_code ec;
  std::string root = fs::absolute(dir, ec).lexically_normal().string();
  ORBIT_CHECK(!ec, "store " << dir << ": cannot resolve the path: " << ec.message());
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  ORBIT_CHECK(fs::exists(root, ec), "store " << root << ": does not exist");
  ORBIT_CHECK(fs::is_directory(root, ec), "store " << root << ": is a file, not a store directory");
  ORBIT_CHECK(fs::is_directory(root + "/blobs", ec), "store " << root << ": no blobs/ directory: nothing to repair");
  const Result<std::string> blobs = store::resolve_blobs_root(root);  // a symlinked blobs/ is refused
  ORBIT_CHECK(blobs.is_ok(), blobs.status().reason());
  return root;
}

// What the blobs under root/blobs hold: the newest verified blob of every key, and the model fingerprints
// of all of them.
struct BlobScan {
  std::map<std::string, Found> best;
  std::set<std::string> fingerprints;
  std::vector<fs::path> directories;  // directories named as blobs (*.blob), never looked into
};

// Reads every *.blob file under root/blobs (symlinks are not followed: only files inside blobs/ count),
// counting them and the ones rejected in `report`. Refuses, before anything is changed, when a directory there
// cannot be listed: the rows of the blobs it holds would be dropped as missing, and gc would then remove them.
BlobScan find_verified_blobs(const std::string& root, RepairReport* report) {
  const store::BlobFiles files = store::scan_blobs(root);
  ORBIT_CHECK(files.unreadable_dirs.empty(),
              "store " << root << ": cannot list " << files.unreadable_dirs.front()
                       << "; repair rebuilds the index from every blob and would drop the rows of the blobs there: "
                          "make it readable by this user and run repair again (nothing was changed)");
  BlobScan scan;
  scan.directories = files.blob_dirs;  // a directory in a blob's place: its row goes below, then it is moved aside
  for (const fs::path& path : files.blobs) {
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(path, ec))) continue;
    ++report->blobs_scanned;
    std::optional<Found> f = inspect_blob(root, path, &report->notes);
    if (!f) {
      ++report->blobs_rejected;
      continue;
    }
    scan.fingerprints.insert(f->fingerprint);
    auto newest = scan.best.find(f->row.key);
    if (newest == scan.best.end() || newest->second.mtime < f->mtime) scan.best[f->row.key] = std::move(*f);
  }
  return scan;
}

// The store's model fingerprint: the index's while a verified blob holds it (or none verifies); else the one
// fingerprint its blobs share, written back (report->meta_restored, a note): an index that lost it, or holds
// one no blob has (a damaged meta row), would otherwise have every good row dropped. Throws when the blobs name
// several models and none is the index's, or none verifies while the index has rows and no fingerprint.
std::string restore_fingerprint(SqliteIndex& index, const std::string& root, const BlobScan& scan,
                                RepairReport* report) {
  const std::string indexed = index.meta("model_fingerprint").value_or("");
  const std::set<std::string>& fingerprints = scan.fingerprints;
  if (!indexed.empty() && (fingerprints.empty() || fingerprints.count(indexed) > 0)) return indexed;
  ORBIT_CHECK(fingerprints.size() <= 1, "store " << root << ": its blobs belong to " << fingerprints.size()
                                                 << " model fingerprints"
                                                 << (indexed.empty() ? "" : ", none the index's " + indexed)
                                                 << "; cannot tell which one the store is for");
  ORBIT_CHECK(!fingerprints.empty() || index.count_rows() == 0,
              "store " << root << ": no blob verifies, so the model fingerprint cannot be restored");
  if (fingerprints.empty()) return indexed;
  const std::string& fingerprint = *fingerprints.begin();
  if (indexed.empty()) {
    Result<std::string> set = index.set_meta_if_absent("model_fingerprint", fingerprint);
    ORBIT_CHECK(set.is_ok(), "store " << root << ": " << set.status().reason());
  } else {
    const Status set = index.set_meta("model_fingerprint", fingerprint);
    ORBIT_CHECK(set.is_ok(), "store " << root << ": " << set.reason());
    report->notes.push_back("the index named model fingerprint " + indexed + ", which no blob holds; every one of " +
                            std::to_string(scan.best.size()) + " verified keys holds " + fingerprint +
                            ": the index names it again");
  }
  report->meta_restored = true;
  return fingerprint;
}

// Erases the rows whose blob is missing, corrupt, outside the store or of another model (report->rows_dropped,
// a note each). Returns the keys of the rows kept.
std::set<std::string> drop_bad_rows(SqliteIndex& index, const std::string& root, const BlobScan& scan,
                                    const std::string& fingerprint, RepairReport* report) {
  const std::string confined_root = fs::canonical(root + "/blobs").string();
  std::set<std::string> good;
  for (const DiskRow& r : index.rows()) {
    Result<std::string> path = store::confine_blob_path(root, confined_root, r.blob);
    std::string why;
    if (!path) {
      why = path.status().reason();
    } else {
      auto it = scan.best.find(r.key);
      if (it != scan.best.end() && it->second.row.blob == r.blob && row_matches(it->second, r, fingerprint)) {
        good.insert(r.key);
        continue;
      }
      std::vector<std::string> notes;
      std::optional<Found> f = inspect_blob(root, path.value(), &notes);
      if (f && f->row.key == r.key && row_matches(*f, r, fingerprint)) {
        good.insert(r.key);
        continue;
      }
      why = notes.empty() ? "its blob " + path.value() + " does not match the row" : notes.front();
    }
    std::string ignored;
    Status erased = index.erase(r.key, &ignored);
    ORBIT_CHECK(erased.is_ok(), "store " << root << ": " << erased.reason());
    ++report->rows_dropped;
    report->notes.push_back("dropped row " + r.key + ": " + why);
  }
  return good;
}

// Writes a row for every key's newest blob the index did not keep (report->rows_restored); a blob of another
// model than `fingerprint` is rejected instead.
void restore_rows(SqliteIndex& index, const std::string& root, const BlobScan& scan, const std::set<std::string>& good,
                  const std::string& fingerprint, RepairReport* report) {
  for (const auto& [key, f] : scan.best) {
    if (good.count(key)) continue;
    if (f.fingerprint != fingerprint) {
      ++report->blobs_rejected;
      report->notes.push_back(root + "/" + f.row.blob + ": blob of model " + f.fingerprint + ", not " + fingerprint);
      continue;
    }
    std::string replaced;
    Status s = index.upsert(f.row, &replaced);
    ORBIT_CHECK(s.is_ok(), "store " << root << ": " << s.reason());
    ++report->rows_restored;
  }
}

// Moves every directory named as a blob to DIR/quarantine/ (under its own name, or with a nonce added when that
// is taken), with what it holds, a note each: no read makes it a blob, and left in blobs/ it would keep a name
// the store's blobs have. One that cannot be moved (blobs/ on another file system) is left, with a note.
void quarantine_directories(const std::string& root, const BlobScan& scan, RepairReport* report) {
  const fs::path quarantine = fs::path(root) / "quarantine";
  for (const fs::path& dir : scan.directories) {
    std::error_code ec;
    fs::create_directory(quarantine, ec);
    fs::path to = quarantine / dir.filename();
    if (fs::exists(fs::symlink_status(to, ec))) to += "." + store::unique_nonce();
    fs::rename(dir, to, ec);
    report->notes.push_back(ec ? "cannot move the directory " + dir.string() + " (not a blob file) to " + to.string() +
                                     ": " + ec.message() + "; left in place"
                               : "moved the directory " + dir.string() + " (not a blob file) to " + to.string() +
                                     " with what it holds");
  }
}

}  // namespace

RepairReport repair_store(const std::string& dir) {
  const std::string root = repair_root(dir);
  const store::ExclusiveStoreLock lock(root, "repair");

  RepairReport report;
  const BlobScan scan = find_verified_blobs(root, &report);
  const std::string damage = index_damage(root + "/index.sqlite");
  if (!damage.empty()) set_damaged_index_aside(root, damage, &report);
  std::unique_ptr<SqliteIndex> opened = reindex_if_inconsistent(root, open_for_repair(root, &report), &report);
  SqliteIndex& index = *opened;
  // One transaction: a repair killed (or failed) part way leaves the index as it found it, never the
  // fingerprint with part of the rows, which a store would open as whole and whose missing rows' blobs gc
  // would then take for garbage.
  const Status rebuilt = index.in_transaction([&] {
    const std::string fingerprint = restore_fingerprint(index, root, scan, &report);
    report.model_fingerprint = fingerprint;
    const std::set<std::string> good = drop_bad_rows(index, root, scan, fingerprint, &report);
    restore_rows(index, root, scan, good, fingerprint, &report);
    return Status::ok();
  });
  ORBIT_CHECK(rebuilt.is_ok(), "store " << root << ": " << rebuilt.reason());
  quarantine_directories(root, scan, &report);                       // after the commit: no row names them now
  for (std::string& note : report.notes) note = store::shown(note);  // a damaged row's key may hold any bytes
  return report;
}

}  // namespace orbit
