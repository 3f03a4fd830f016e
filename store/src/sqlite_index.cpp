#include "orbit/store/sqlite_index.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/blob_io.h"
#include "shown_text.h"
#include "sqlite_stmt.h"

namespace orbit::store {

namespace {

const char* kSchema =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS entries("
    "  key TEXT PRIMARY KEY, kind INTEGER NOT NULL, encoding INTEGER NOT NULL, blob TEXT NOT NULL,"
    "  blob_bytes INTEGER NOT NULL, value_bytes INTEGER NOT NULL, checksum TEXT NOT NULL,"
    "  pinned INTEGER NOT NULL DEFAULT 0, corrupt INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0,"
    "  last_access INTEGER NOT NULL DEFAULT 0, recompute_cost REAL NOT NULL DEFAULT 1,"
    "  expected_reuse REAL NOT NULL DEFAULT 1);"
    "CREATE TABLE IF NOT EXISTS leases(key TEXT NOT NULL, owner TEXT NOT NULL, kind INTEGER NOT NULL,"
    "  expires INTEGER NOT NULL, PRIMARY KEY(key, owner, kind));"
    "CREATE TABLE IF NOT EXISTS remote_pending(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,"
    "  remote TEXT NOT NULL, kind INTEGER NOT NULL DEFAULT 0, UNIQUE(key, remote));";

// remote_pending's kind column (0 a write, 1 an erase), added after the table: an index made before it gets it
// when opened for writing, its records being writes (all an older build recorded).
const char* kAddPendingKind = "ALTER TABLE remote_pending ADD COLUMN kind INTEGER NOT NULL DEFAULT 0";

// The tables and columns this build reads (kSchema makes them). leases and remote_pending may be absent:
// stores written before they existed get them when opened for writing (remote_pending's kind column likewise:
// kAddPendingKind; not listed here, so its absence is not damage).
struct TableSpec {
  const char* name;
  std::vector<const char*> columns;
};
const TableSpec kTables[] = {
    {"meta", {"name", "value"}},
    {"entries",
     {"key", "kind", "encoding", "blob", "blob_bytes", "value_bytes", "checksum", "pinned", "corrupt", "hits",
      "last_access", "recompute_cost", "expected_reuse"}},
    {"leases", {"key", "owner", "kind", "expires"}},
    {"remote_pending", {"seq", "key", "remote"}},
};

// A file name as an SQLite URI path (RFC 3986 percent-encoding of everything but unreserved and '/').
std::string uri_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// How long opening waits out other processes that open or write the same index at the same moment.
constexpr std::chrono::seconds kOpenRetryWindow{30};

bool is_busy(int rc) {
  rc &= 0xff;
  return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

// Runs `attempt` (which returns an SQLite result code) again while it reports SQLITE_BUSY or SQLITE_LOCKED,
// with jittered exponential pauses (1 to 50 ms), until kOpenRetryWindow has passed; returns the last code.
// The busy timeout does not cover every wait at open: SQLite returns SQLITE_BUSY at once, without calling
// the busy handler, when switching a new database to WAL meets another connection's lock, when a reader's
// upgrade to writer could deadlock, and when a WAL snapshot went stale (SQLITE_BUSY_SNAPSHOT).
template <class Attempt>
int retry_while_busy(Attempt&& attempt) {
  const auto deadline = std::chrono::steady_clock::now() + kOpenRetryWindow;
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::chrono::microseconds pause{1000};
  for (;;) {
    const int rc = attempt();
    if (!is_busy(rc) || std::chrono::steady_clock::now() >= deadline) return rc;
    std::uniform_int_distribution<int64_t> jitter(pause.count() / 2, pause.count());
    std::this_thread::sleep_for(std::chrono::microseconds(jitter(rng)));
    pause = std::min(pause * 2, std::chrono::microseconds{50000});
  }
}

}  // namespace

// What an index's schema holds of kTables.
struct SqliteIndex::SchemaState {
  bool empty = true;              // no table at all: a new index (or one being created)
  std::set<std::string> missing;  // tables of kTables it lacks
  std::string damage;             // a table of kTables without one of its columns, or ""
  bool pending_kind = true;       // remote_pending has its kind column (or is missing: kSchema makes it whole)
  // Tables, none of them one of kTables: another program's database, never an orbit index (not even a damaged
  // one: every index has its meta and entries tables from its first open). The first few, for a message.
  std::vector<std::string> foreign_tables;
};

void SqliteIndex::open(const std::string& uri, int flags) {
  const int rc = sqlite3_open_v2(uri.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    // SQLite's "unable to open database file" does not say why; the system's error does (permission denied).
    const int system_error = db_ ? sqlite3_system_errno(db_) : 0;
    if (system_error != 0) message += std::string(" (") + std::strerror(system_error) + ")";
    sqlite3_close(db_);
    db_ = nullptr;
    ORBIT_FAIL("store index " << path_ << ": cannot open: " << message);
  }
  sqlite3_busy_timeout(db_, 10000);
}

void SqliteIndex::refuse_unread_wal(const std::string& why) const {
  // A WAL of no more than its 32-byte header holds no frame, so no commit.
  constexpr std::uintmax_t kWalHeaderBytes = 32;
  const std::string wal = path_ + "-wal";
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(wal, ec);
  if (ec || bytes <= kWalHeaderBytes) return;
  ORBIT_FAIL("store index " << path_ << ": cannot be read read-only here: its write-ahead log " << wal << " holds "
                            << bytes << " bytes (commits not yet copied into the index), and SQLite reads it only "
                            << "through " << path_ << "-shm, which it could not open or create (" << why
                            << "); reading the index without the log would miss those commits. Run this as a user "
                               "who can write the store's directory (the store's owner): SQLite then reads the log");
}

SqliteIndex::SqliteIndex(const std::string& path, Mode mode) : path_(path) {
  if (mode == Mode::kReadOnly) {
    open(uri_path(path) + "?mode=ro", SQLITE_OPEN_READONLY);
    // In WAL mode even a reader needs the -shm file; on a read-only directory or file system SQLite cannot
    // create it ("attempt to write a readonly database"). Nobody can write the index there either, so it
    // is read as immutable.
    // Only a refusal to read falls back: a busy index (another process creating or recovering it) is waited
    // for, since reading a changing index as immutable could return torn state.
    const int rc = retry_while_busy(
        [&] { return sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr); });
    if (rc != SQLITE_OK) {
      const std::string why = sqlite3_errmsg(db_);
      sqlite3_close(db_);
      db_ = nullptr;
      // An immutable read ignores the WAL, so commits a writer left in it would be missing from every read.
      refuse_unread_wal(why);
      open(uri_path(path) + "?mode=ro&immutable=1", SQLITE_OPEN_READONLY);
    }
  } else {
    open(uri_path(path), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  }
  try {
    if (mode != Mode::kReadOnly) {
      // Another program's database is refused before anything is written to it (switching it to WAL would).
      refuse_foreign(read_schema());
      // Idempotent, so a busy attempt is simply made again (several processes may create the same store
      // at once).
      exec_retrying_or_throw("PRAGMA journal_mode=WAL");
      exec_or_throw("PRAGMA synchronous=FULL");
      ensure_schema(mode);
    } else {
      const SchemaState state = read_schema();
      // A reader makes no table, so one it finds none in has no meta rows to read (an index being created,
      // or one whose WAL, holding its first commits, was lost).
      ORBIT_CHECK(!state.empty, "store index " << path << ": " << kNoTables
                                               << " (not an orbit store yet, or its first commits were lost)");
      check_schema(state, mode);
    }
    check_format_version(mode);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

SqliteIndex::~SqliteIndex() { sqlite3_close(db_); }

// The index's format version: a new index gets this build's; one that holds entries but lost its meta rows is
// refused (repair restores them); one whose value is no number was damaged (no build writes that): refused,
// and rewritten by repair, whose rows come from blobs that each carry and check their own format version.
void SqliteIndex::check_format_version(Mode mode) {
  auto version = meta("format_version");
  if (!version && mode != Mode::kReadOnly) {
    // A new index gets its version; one that holds entries but lost its meta rows is not adopted. Entries
    // counted after the version was missing may be another process's, which set the version before its
    // first entry (each read is its own snapshot): the version is read again before calling it lost.
    const int64_t rows = mode == Mode::kRepair ? 0 : count_rows();
    if (rows > 0) version = meta("format_version");
    ORBIT_CHECK(rows == 0 || version.has_value(), "store index "
                                                      << path_ << ": holds " << rows
                                                      << " entries but no format version (its meta rows were deleted); "
                                                         "refusing to adopt it: run `orbit store repair` on the store");
    if (!version) {
      Result<std::string> set = set_meta_if_absent("format_version", std::to_string(kBlobFormatVersion));
      ORBIT_CHECK(set.is_ok(), "store index " << path_ << ": " << set.status().reason());
      version = set.value();
    }
  }
  // A reader sets nothing: an index that holds entries without a version lost its meta rows (repair restores them).
  ORBIT_CHECK(version.has_value(), "store index " << path_ << ": "
                                                  << (count_rows() > 0 ? "holds entries but no format version (its "
                                                                         "meta rows were deleted): run `orbit store "
                                                                         "repair` on the store"
                                                                       : "not an orbit store (no format_version)"));
  const bool damaged = version->empty() || version->size() > 9 ||
                       !std::all_of(version->begin(), version->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (damaged && mode == Mode::kRepair) {
    const Status set = set_meta("format_version", std::to_string(kBlobFormatVersion));
    ORBIT_CHECK(set.is_ok(), "store index " << path_ << ": " << set.reason());
    damaged_version_ = *version;
    version = std::to_string(kBlobFormatVersion);
  }
  ORBIT_CHECK(!damaged || mode == Mode::kRepair,
              "store index " << path_ << ": its format version '" << store::shown(*version)
                             << "' is damaged (not a number, which no build writes): run `orbit store repair` on "
                                "the store (it restores the version and checks every blob's own)");
  ORBIT_CHECK(*version == std::to_string(kBlobFormatVersion), "store index " << path_ << ": format version " << *version
                                                                             << " is not supported (this build reads "
                                                                             << kBlobFormatVersion << ")");
}

SqliteIndex::SchemaState SqliteIndex::read_schema() const {
  SchemaState state;
  const int rc = retry_while_busy([&] {
    state = SchemaState{};
    sqlite3_stmt* raw = nullptr;
    int code = sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type = 'table'", -1, &raw, nullptr);
    std::set<std::string> tables;
    if (code == SQLITE_OK) {
      while ((code = sqlite3_step(raw)) == SQLITE_ROW) {
        tables.insert(reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)));
      }
    }
    sqlite3_finalize(raw);
    if (code != SQLITE_DONE) return code;
    state.empty = tables.empty();
    const bool ours = std::any_of(std::begin(kTables), std::end(kTables),
                                  [&](const TableSpec& table) { return tables.count(table.name) > 0; });
    for (auto it = tables.begin(); !ours && it != tables.end() && state.foreign_tables.size() < 5; ++it) {
      state.foreign_tables.push_back(*it);
    }
    if (!ours && tables.size() > 5) state.foreign_tables.push_back("...");
    for (const TableSpec& table : kTables) {
      if (!tables.count(table.name)) {
        state.missing.insert(table.name);
        continue;
      }
      std::set<std::string> columns;
      code = sqlite3_prepare_v2(db_, "SELECT name FROM pragma_table_info(?1)", -1, &raw, nullptr);
      if (code == SQLITE_OK) {
        sqlite3_bind_text(raw, 1, table.name, -1, SQLITE_STATIC);
        while ((code = sqlite3_step(raw)) == SQLITE_ROW) {
          columns.insert(reinterpret_cast<const char*>(sqlite3_column_text(raw, 0)));
        }
      }
      sqlite3_finalize(raw);
      if (code != SQLITE_DONE) return code;
      if (std::string(table.name) == "remote_pending") state.pending_kind = columns.count("kind") > 0;
      for (const char* column : table.columns) {
        if (state.damage.empty() && !columns.count(column)) {
          state.damage = std::string("the ") + table.name + " table has no column " + column;
        }
      }
    }
    return SQLITE_OK;
  });
  ORBIT_CHECK(rc == SQLITE_OK, "store index " << path_ << ": reading its schema: " << sqlite3_errmsg(db_));
  return state;
}

void SqliteIndex::refuse_foreign(const SchemaState& state) const {
  if (state.foreign_tables.empty()) return;
  std::string tables;
  for (const std::string& t : state.foreign_tables) tables += (tables.empty() ? "" : ", ") + t;
  ORBIT_FAIL("store index " << path_ << ": " << kForeignDatabase << " (its tables: " << tables
                            << "); left untouched: move it out of the store directory, or give another one");
}

void SqliteIndex::check_schema(const SchemaState& state, Mode mode) const {
  if (state.empty) return;  // a new index: made by a writer, refused by a reader (no format version)
  refuse_foreign(state);
  // A table that lost a column cannot be read. An index that has tables but no entries table lost it
  // (every store has one from its first open): opened as is, it would read as an empty store, whose
  // blobs gc would then delete as garbage. Repair makes the table again and restores its rows.
  std::string damage = state.damage;
  if (damage.empty() && state.missing.count("entries") && mode != Mode::kRepair) {
    damage = "the entries table is missing";
  }
  ORBIT_CHECK(damage.empty(), "store index " << path_ << ": " << kSchemaDamaged << " (" << damage << ")");
}

void SqliteIndex::ensure_schema(Mode mode) {
  SchemaState state = read_schema();
  check_schema(state, mode);
  if (state.missing.empty() && state.pending_kind) return;
  // The missing tables (and column) are made in one transaction, after looking again inside it, so that a
  // process opening the index while another creates it never sees a part of the schema (and calls it damaged).
  exec_retrying_or_throw("BEGIN IMMEDIATE");
  Transaction tx(db_);
  state = read_schema();
  check_schema(state, mode);
  exec_or_throw(kSchema);
  if (!state.pending_kind) exec_or_throw(kAddPendingKind);
  exec_or_throw("COMMIT");
  tx.committed();
}

void SqliteIndex::exec_or_throw(const char* sql) const {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  const std::string message = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  ORBIT_CHECK(rc == SQLITE_OK, "store index " << path_ << ": '" << sql << "' failed: " << message);
}

void SqliteIndex::exec_retrying_or_throw(const char* sql) const {
  std::string message;
  const int rc = retry_while_busy([&] {
    char* error = nullptr;
    const int code = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
    message = error ? error : sqlite3_errstr(code);
    sqlite3_free(error);
    return code;
  });
  ORBIT_CHECK(rc == SQLITE_OK, "store index " << path_ << ": '" << sql << "' failed: " << message
                                              << (is_busy(rc) ? " (still busy after 30 s of retries)" : ""));
}

Status SqliteIndex::failure(int code, const char* what) const {
  const int call_errno = errno;  // the callers come straight from the failed SQLite call
  std::string reason = "store index " + path_ + ": " + what + ": " + sqlite3_errmsg(db_);
  // SQLite says "disk I/O error" for any failed read or write of its files, and sqlite3_system_errno() is 0 for a
  // failed write to the WAL (SQLite 3.40); the errno that write left says which: a file-size limit, a full disk
  // or quota, a read-only file system, a device error. Only those: another errno may be a benign failed call.
  const int primary = code & 0xff;
  int os_error = 0;
  if (primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN) {
    os_error = sqlite3_system_errno(db_);
    const bool write_errno =
        call_errno == ENOSPC || call_errno == EDQUOT || call_errno == EFBIG || call_errno == EROFS || call_errno == EIO;
    if (os_error == 0 && write_errno) os_error = call_errno;
  }
  if (os_error != 0) reason += " (" + errno_text(os_error) + ")";
  if (primary == SQLITE_FULL || os_error == ENOSPC || os_error == EDQUOT || os_error == EFBIG) {
    return Status::out_of_capacity(reason);
  }
  return Status::refused(reason);
}

bool SqliteIndex::checkpoint() {
  int wal_frames = -1, copied = -1;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &wal_frames, &copied);
  return rc == SQLITE_OK && wal_frames == copied;
}

Status SqliteIndex::begin_write(const char* what) {
  return batch_ ? Status::ok() : exec_status("BEGIN IMMEDIATE", what);
}

Status SqliteIndex::commit_write(const char* what) { return batch_ ? Status::ok() : exec_status("COMMIT", what); }

Status SqliteIndex::in_transaction(const std::function<Status()>& body) {
  ORBIT_CHECK(!batch_, "store index " << path_ << ": in_transaction does not nest");
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning a transaction");
  if (!begin) return begin;
  Transaction tx(db_);  // rolls back on an error or an exception of `body`
  struct Batch {
    bool& open;
    explicit Batch(bool& flag) : open(flag) { open = true; }
    ~Batch() { open = false; }
  } batch(batch_);
  Status done = body();
  if (!done) return done;
  Status commit = exec_status("COMMIT", "committing a transaction");
  if (commit) tx.committed();
  return commit;
}

Status SqliteIndex::exec_status(const char* sql, const char* what) {
  errno = 0;  // failure() reads what the failed write left
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::ok() : failure(rc, what);
}

std::optional<std::string> SqliteIndex::meta(const std::string& name) const {
  Stmt s(db_, "SELECT value FROM meta WHERE name = ?1", path_);
  const int rc = retry_while_busy([&] {
    s.reset();
    s.bind(1, name);
    return s.step();
  });
  if (rc == SQLITE_ROW) return s.text(0);
  ORBIT_CHECK(rc == SQLITE_DONE, "store index " << path_ << ": reading meta '" << name << "': " << sqlite3_errmsg(db_));
  return std::nullopt;
}

Status SqliteIndex::set_meta(const std::string& name, const std::string& value) {
  Stmt s(db_, "INSERT OR REPLACE INTO meta(name, value) VALUES(?1, ?2)", path_);
  s.bind(1, name).bind(2, value);
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "writing meta");
}

Result<std::string> SqliteIndex::set_meta_if_absent(const std::string& name, const std::string& value) {
  Stmt s(db_, "INSERT OR IGNORE INTO meta(name, value) VALUES(?1, ?2)", path_);
  const int rc = retry_while_busy([&] {
    s.reset();
    s.bind(1, name).bind(2, value);
    return s.step();
  });
  if (rc != SQLITE_DONE) return failure(rc, "writing meta");
  const auto now = meta(name);
  if (!now) return Status::refused("store index " + path_ + ": meta '" + name + "' vanished after writing it");
  return *now;
}

std::string SqliteIndex::inconsistency() const {
  std::string found;
  const auto add = [&](const std::string& line) { found += (found.empty() ? "" : "; ") + line; };
  Stmt s(db_, "PRAGMA integrity_check(3)", path_);
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) {
    const std::string line = s.text(0);
    if (line != "ok") add(line);
  }
  if (rc != SQLITE_DONE) add(sqlite3_errmsg(db_));
  return found;
}

std::string SqliteIndex::reindex() {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, "REINDEX", nullptr, nullptr, &error);
  const std::string message = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return rc == SQLITE_OK ? inconsistency() : "REINDEX: " + message;
}

Status SqliteIndex::probe_commit() {
  const char* what = "probing whether the index takes a commit";
  Status begin = exec_status("BEGIN IMMEDIATE", what);
  if (!begin) return begin;
  Transaction tx(db_);
  // Written and deleted in one transaction: the meta page still goes to the WAL at the commit (the write the probe
  // asks the index to take), and no row stays behind (a row an older build left, a count of probes, goes too).
  Status wrote = exec_status(
      "INSERT OR REPLACE INTO meta(name, value) VALUES('commit_probe', '1'); "
      "DELETE FROM meta WHERE name = 'commit_probe'",
      what);
  if (!wrote) return wrote;
  Status commit = exec_status("COMMIT", what);
  if (commit) tx.committed();
  return commit;
}

}  // namespace orbit::store
