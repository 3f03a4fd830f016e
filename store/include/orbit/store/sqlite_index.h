// The disk tier's index: one SQLite database (WAL journal, synchronous=FULL) in the store directory.
//
//   meta(name TEXT PRIMARY KEY, value TEXT)      "format_version", "model_fingerprint"
//   entries(key TEXT PRIMARY KEY, kind, encoding, blob (path relative to the store), blob_bytes,
//           value_bytes, checksum, pinned, corrupt, hits, last_access, recompute_cost, expected_reuse)
//
// A row is committed only after its blob is durable (blob_io.h), so every row names a complete blob.
// Writes are single transactions (an upsert that replaces a row returns the old blob for deletion after
// the commit), so a crash or a failed write (disk full, read-only file) leaves the previous state intact.
// Thread-safety: none; one owner (the disk tier serialises calls). Several processes may read at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store.h"

struct sqlite3;

namespace orbit::store {

struct DiskRow {
  std::string key;
  EntryKind kind = EntryKind::kOther;
  BlobEncoding encoding = BlobEncoding::kExact;
  std::string blob;  // path relative to the store directory
  int64_t blob_bytes = 0;
  int64_t value_bytes = 0;
  std::string checksum;
  bool pinned = false;
  bool corrupt = false;
  int64_t hits = 0;
  int64_t last_access = 0;  // the store's logical clock (monotonic across reopenings)
  double recompute_cost = 1.0;
  double expected_reuse = 1.0;
};

struct AccessUpdate {
  std::string key;
  int64_t hits = 0;
  int64_t last_access = 0;
};

class SqliteIndex {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  // Opens `path` (kReadWrite creates it and the schema). Throws orbit::Error naming the path when the file
  // cannot be opened, is not an orbit index, or was written by a newer format.
  SqliteIndex(const std::string& path, Mode mode);
  ~SqliteIndex();
  SqliteIndex(const SqliteIndex&) = delete;
  SqliteIndex& operator=(const SqliteIndex&) = delete;

  const std::string& path() const { return path_; }

  // Reads throw orbit::Error (a broken index is bad input, DESIGN.md §8).
  std::optional<std::string> meta(const std::string& name) const;
  std::vector<DiskRow> rows() const;
  std::optional<DiskRow> row(const std::string& key) const;

  // Writes return refused / out_of_capacity (SQLITE_FULL) naming the index on failure; nothing changes then.
  Status set_meta(const std::string& name, const std::string& value);
  // Inserts or replaces the row for row.key; `replaced_blob` receives the replaced row's blob (or "").
  Status upsert(const DiskRow& row, std::string* replaced_blob);
  // Deletes the row; `blob` receives its blob path ("" when there was no row).
  Status erase(const std::string& key, std::string* blob);
  // Flags the row corrupt if it still names `blob` (a rewrite in between is left alone).
  Status mark_corrupt(const std::string& key, const std::string& blob);
  Status set_pinned(const std::string& key, bool pinned);
  // One transaction for many rows (missing keys are skipped).
  Status update_access(const std::vector<AccessUpdate>& updates);

 private:
  void exec_or_throw(const char* sql) const;
  Status exec_status(const char* sql, const char* what);
  Status failure(int code, const char* what) const;

  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace orbit::store
