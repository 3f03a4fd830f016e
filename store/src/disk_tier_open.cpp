// DiskTier (disk_tier.h): opening a store's index, and which of its rows the tier's mirror takes.
#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "blob_files.h"
#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store.h"
#include "orbit/store/disk_tier.h"

namespace orbit::store {

namespace {

bool index_is_empty(const std::string& path) {
  std::error_code ec;
  return std::filesystem::file_size(path, ec) == 0 && !ec;
}

bool index_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

bool is_index_damage(const std::exception& error) {
  const std::string text = error.what();
  for (int code : {SQLITE_CORRUPT, SQLITE_NOTADB}) {
    if (text.find(sqlite3_errstr(code)) != std::string::npos) return true;
  }
  return text.find("malformed") != std::string::npos || text.find(kSchemaDamaged) != std::string::npos;
}

void DiskTier::open_index() {
  const std::string index_path = options_.dir + "/index.sqlite";
  const std::string repair = "run `orbit store repair --store " + options_.dir + "` to rebuild the index from them";
  const auto count_blobs = [&] { return count_blob_files(options_.dir); };  // not on every open
  if (!index_exists(index_path)) {
    // A process creating the store makes its index before its first blob: blobs seen after the index was
    // missing are another process's when the index exists now (it created the store meanwhile), and an
    // index still missing after blobs were seen was lost.
    const int64_t blobs = count_blobs();
    ORBIT_CHECK(blobs == 0 || index_exists(index_path),
                "store " << options_.dir << ": index.sqlite is missing but blobs/ holds " << blobs
                         << " blobs (was the index deleted?); " << repair << ", or remove " << options_.dir
                         << "/blobs to start empty");
  } else if (index_is_empty(index_path) && count_blobs() > 0 && index_is_empty(index_path)) {
    // SQLite writes the first page of a new index before the first blob can exist, so an index still empty
    // after blobs were seen is damaged, not one another process is creating now.
    const int64_t blobs = count_blobs();
    ORBIT_FAIL("store " << options_.dir << ": " << index_path << " is empty but blobs/ holds " << blobs << " blobs; "
                        << repair);
  }
  try {
    index_ = std::make_unique<SqliteIndex>(index_path, SqliteIndex::Mode::kReadWrite);
    reindex_if_inconsistent(index_path, repair);
    const bool has_fingerprint = index_->meta("model_fingerprint").has_value();
    if (!has_fingerprint) {
      // Each read is its own snapshot: rows counted after the fingerprint was missing may be another
      // process's, which recorded the fingerprint before its first row. The meta rows were lost only when
      // the fingerprint is missing still.
      const int64_t rows = index_->count_rows();
      ORBIT_CHECK(rows == 0 || index_->meta("model_fingerprint").has_value(),
                  "store " << options_.dir << ": its index holds " << rows
                           << " entries but no model fingerprint (its meta rows were deleted); refusing "
                              "to adopt it for model "
                           << options_.model_fingerprint << ": run `orbit store repair --store " << options_.dir
                           << "`");
      // A blob is written only after its writer recorded the fingerprint: read it again once blobs were seen
      // (another process may be creating this store right now).
      const int64_t blobs = count_blobs();
      ORBIT_CHECK(blobs == 0 || index_->meta("model_fingerprint").has_value(),
                  "store " << options_.dir << ": its index holds no entries and no model fingerprint "
                           << "but blobs/ holds " << blobs << " blobs (the index was lost); " << repair);
    }
    Result<std::string> recorded = index_->set_meta_if_absent("model_fingerprint", options_.model_fingerprint);
    ORBIT_CHECK(recorded.is_ok(), "store " << options_.dir << ": " << recorded.status().reason());
    ORBIT_CHECK(recorded.value() == options_.model_fingerprint,
                "store " << options_.dir << " holds chunks of model fingerprint " << recorded.value()
                         << ", not this model's " << options_.model_fingerprint
                         << " (use another store directory for this model)");
    for (DiskRow& row : index_->rows()) {
      if (usable(row)) add_row(std::move(row));
    }
  } catch (const Error& e) {
    index_.reset();
    if (!is_index_damage(e)) throw;
    ORBIT_FAIL("store " << options_.dir << ": its index " << index_path << " is damaged (" << e.what() << "); "
                        << (count_blobs() > 0 ? repair : "remove it to start an empty store"));
  }
}

// The rows are read through the key index (ORDER BY key): an index that disagrees with its table (SQLite's
// integrity_check finds it; pages that read pass quick_check) would hide a row, show a key no row holds, and
// let a put add a second row of one key. REINDEX rebuilds the indexes from the table, which loses nothing;
// an index it does not fix is refused as damaged.
void DiskTier::reindex_if_inconsistent(const std::string& index_path, const std::string& repair) {
  const std::string found = index_->inconsistency();
  if (found.empty()) return;
  const std::string left = index_->reindex();
  ORBIT_CHECK(left.empty(), "store " << options_.dir << ": its index " << index_path << " is damaged (integrity_check: "
                                     << found << "; after REINDEX: " << left << "); " << repair);
  orbit::warn("store " + options_.dir + ": its index " + index_path + " disagreed with its table (integrity_check: " +
              found + "); REINDEX rebuilt its indexes from the table, no entry was lost");
}

bool DiskTier::usable(const DiskRow& row) {
  if (row.corrupt) return false;
  if (is_store_key(row.key)) return true;
  if (!warned_bad_keys_) {
    warned_bad_keys_ = true;
    orbit::warn("store " + options_.dir + ": its index " + options_.dir + "/index.sqlite holds a row whose key '" +
                row.key + "' is not a store key (64 lowercase hex characters: a damaged page?); such rows are left " +
                "out, their chunks recomputed; run `orbit store repair --store " + options_.dir + "` to rebuild them " +
                "from their blobs");
  }
  return false;
}

}  // namespace orbit::store
