#include "serve/responses_disk.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include "orbit/common/error.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace response_rows {

constexpr const char* kFormat = "orbit-serve-responses 1";

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS responses(id TEXT PRIMARY KEY, named INTEGER NOT NULL, session TEXT NOT NULL,"
    " previous TEXT, added TEXT NOT NULL, body TEXT NOT NULL, read_key TEXT NOT NULL, used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS responses_key ON responses(read_key, used) WHERE named = 1;"
    "CREATE INDEX IF NOT EXISTS responses_used ON responses(used);"
    "CREATE INDEX IF NOT EXISTS responses_previous ON responses(previous);";

// One prepared statement, finalized on scope exit. Errors throw naming the database.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& text(int at, const std::string& value) {
    sqlite3_bind_text(stmt_, at, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& integer(int at, int64_t value) {
    sqlite3_bind_int64(stmt_, at, value);
    return *this;
  }
  Statement& null(int at) {
    sqlite3_bind_null(stmt_, at);
    return *this;
  }
  // True while there is a row.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("step");
    return false;
  }
  std::string column_text(int at) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, at));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, at))) : std::string();
  }
  int64_t column_int(int at) const { return sqlite3_column_int64(stmt_, at); }

 private:
  [[noreturn]] void fail(const char* what) const {
    ORBIT_FAIL("responses store " << path_ << ": " << what << " failed: " << sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

// A transaction: committed by commit(), rolled back when left without it (an exception).
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) { run("BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    run("COMMIT");
    done_ = true;
  }

 private:
  void run(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) == SQLITE_OK) return;
    const std::string why = message ? message : "unknown error";
    sqlite3_free(message);
    ORBIT_FAIL("responses store " << path_ << ": " << sql << " failed: " << why);
  }
  sqlite3* db_;
  const std::string& path_;
  bool done_ = false;
};

nlohmann::json message_json(const ChatMessage& m) {
  ORBIT_CHECK(m.parts.empty(), "responses store: a message with chunk parts cannot be stored");
  nlohmann::json j{{"role", m.role}, {"content", m.content}};
  if (m.name) j["name"] = *m.name;
  if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
  if (!m.tool_calls.empty()) {
    j["tool_calls"] = nlohmann::json::array();
    for (const ChatToolCall& c : m.tool_calls)
      j["tool_calls"].push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  }
  return j;
}

ChatMessage message_of(const nlohmann::json& j) {
  ChatMessage m;
  m.role = j.at("role").get<std::string>();
  m.content = j.at("content").get<std::string>();
  if (j.contains("name")) m.name = j["name"].get<std::string>();
  if (j.contains("tool_call_id")) m.tool_call_id = j["tool_call_id"].get<std::string>();
  if (j.contains("tool_calls")) {
    for (const auto& c : j["tool_calls"]) {
      m.tool_calls.push_back(ChatToolCall{c.at("id").get<std::string>(), c.at("name").get<std::string>(),
                                          c.at("arguments").get<std::string>()});
    }
  }
  return m;
}

}  // namespace response_rows

using response_rows::Statement;

std::string messages_to_json(const std::vector<ChatMessage>& messages) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back(response_rows::message_json(m));
  return list.dump();
}

std::vector<ChatMessage> messages_from_json(const std::string& text, const std::string& what) {
  std::vector<ChatMessage> out;
  try {
    const nlohmann::json list = nlohmann::json::parse(text);
    ORBIT_CHECK(list.is_array(), "not an array");
    for (const auto& m : list) out.push_back(response_rows::message_of(m));
  } catch (const std::exception& e) {
    ORBIT_FAIL(what << ": its messages do not parse (" << e.what() << ")");
  }
  return out;
}

ResponseDisk::ResponseDisk(const std::string& path) : path_(path) {
  const int rc =
      sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    ORBIT_FAIL("responses store " << path << ": cannot open: " << message);
  }
  try {
    sqlite3_busy_timeout(db_, 10000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec(response_rows::kSchema);
    exec("INSERT OR IGNORE INTO meta(name, value) VALUES('format', 'orbit-serve-responses 1')");
    Statement format(db_, path_, "SELECT value FROM meta WHERE name = 'format'");
    const std::string found = format.step() ? format.column_text(0) : std::string();
    ORBIT_CHECK(found == response_rows::kFormat,
                "responses store " << path << ": format '" << found << "' is not '" << response_rows::kFormat << "'");
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

ResponseDisk::~ResponseDisk() { sqlite3_close(db_); }

void ResponseDisk::exec(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) == SQLITE_OK) return;
  const std::string why = message ? message : sqlite3_errmsg(db_);
  sqlite3_free(message);
  ORBIT_FAIL("responses store " << path_ << ": " << why);
}

void ResponseDisk::insert(const ResponseRow& row) {
  Statement s(db_, path_,
              "INSERT OR IGNORE INTO responses(id, named, session, previous, added, body, read_key, used) "
              "VALUES(?, 1, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(used), 0) + 1 FROM responses))");
  s.text(1, row.id).text(2, row.session);
  if (row.previous.empty()) {
    s.null(3);
  } else {
    s.text(3, row.previous);
  }
  s.text(4, messages_to_json(row.added)).text(5, row.body).text(6, row.read_key);
  s.step();
}

std::optional<ResponseRow> ResponseDisk::load(const std::string& id) const {
  Statement s(db_, path_,
              "SELECT named, session, COALESCE(previous, ''), added, body, read_key FROM responses WHERE id = ?");
  s.text(1, id);
  if (!s.step()) return std::nullopt;
  ResponseRow row;
  row.id = id;
  row.named = s.column_int(0) != 0;
  row.session = s.column_text(1);
  row.previous = s.column_text(2);
  row.added = messages_from_json(s.column_text(3), "responses store " + path_ + ": response '" + id + "'");
  row.body = s.column_text(4);
  row.read_key = s.column_text(5);
  return row;
}

std::string ResponseDisk::find_by_key(const std::string& read_key) const {
  Statement s(db_, path_, "SELECT id FROM responses WHERE named = 1 AND read_key = ? ORDER BY used DESC LIMIT 1");
  s.text(1, read_key);
  return s.step() ? s.column_text(0) : std::string();
}

void ResponseDisk::touch(const std::string& id) {
  Statement s(db_, path_, "UPDATE responses SET used = (SELECT MAX(used) + 1 FROM responses) WHERE id = ?");
  s.text(1, id);
  s.step();
}

void ResponseDisk::collect(std::string id) {
  while (!id.empty()) {
    Statement row(db_, path_, "SELECT named, COALESCE(previous, '') FROM responses WHERE id = ?");
    row.text(1, id);
    if (!row.step() || row.column_int(0) != 0) return;
    const std::string previous = row.column_text(1);
    Statement continued(db_, path_, "SELECT 1 FROM responses WHERE previous = ? LIMIT 1");
    continued.text(1, id);
    if (continued.step()) return;
    Statement erase(db_, path_, "DELETE FROM responses WHERE id = ?");
    erase.text(1, id);
    erase.step();
    id = previous;
  }
}

bool ResponseDisk::unname(const std::string& id) {
  response_rows::Transaction t(db_, path_);
  Statement s(db_, path_, "UPDATE responses SET named = 0 WHERE id = ? AND named = 1");
  s.text(1, id);
  s.step();
  const bool was_named = sqlite3_changes(db_) > 0;
  if (was_named) collect(id);
  t.commit();
  return was_named;
}

std::vector<std::string> ResponseDisk::evict_to(int64_t capacity) {
  std::vector<std::string> evicted;
  const int64_t excess = named_count() - capacity;
  if (excess <= 0) return evicted;
  response_rows::Transaction t(db_, path_);
  {
    Statement oldest(db_, path_, "SELECT id FROM responses WHERE named = 1 ORDER BY used LIMIT ?");
    oldest.integer(1, excess);
    while (oldest.step()) evicted.push_back(oldest.column_text(0));
  }
  for (const std::string& id : evicted) {
    Statement s(db_, path_, "UPDATE responses SET named = 0 WHERE id = ?");
    s.text(1, id);
    s.step();
    collect(id);
  }
  t.commit();
  return evicted;
}

int64_t ResponseDisk::named_count() const {
  Statement s(db_, path_, "SELECT COUNT(*) FROM responses WHERE named = 1");
  return s.step() ? s.column_int(0) : 0;
}

}  // namespace orbit::serve
