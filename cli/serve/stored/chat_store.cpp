#include "serve/stored/chat_store.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "orbit/common/error.h"
#include "serve/stored/held_retry.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace chat_rows {

constexpr const char* kFormat = "orbit-serve-chat-completions 1";

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS completions(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
    " created INTEGER NOT NULL, model TEXT NOT NULL, metadata TEXT NOT NULL, body TEXT NOT NULL,"
    " messages TEXT NOT NULL, used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS completions_created ON completions(created, seq);"
    "CREATE INDEX IF NOT EXISTS completions_used ON completions(used);"
    "CREATE TABLE IF NOT EXISTS departed(n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
    " created INTEGER NOT NULL, seq INTEGER NOT NULL);";

// The completions that leave (erased or evicted) leave their order key behind, in `departed`: the rows a
// condition on completions (appended, binding ?1) selects, copied before they are deleted.
constexpr const char* kDepart =
    "INSERT OR REPLACE INTO departed(id, created, seq) SELECT id, created, seq FROM completions WHERE ";

// The oldest departed keys past ?1 forgotten.
constexpr const char* kForgetDeparted =
    "DELETE FROM departed WHERE n IN (SELECT n FROM departed ORDER BY n "
    "LIMIT MAX(0, (SELECT COUNT(*) FROM departed) - ?1))";

// The most writes one transaction takes: a group is what queued while the one before committed.
constexpr std::size_t kMaxGroup = 64;

constexpr const char* kNextUse = "(SELECT COALESCE(MAX(used), 0) + 1 FROM completions)";

std::string metadata_text(const Metadata& metadata) { return nlohmann::json(metadata).dump(); }

Metadata metadata_of(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text).get<Metadata>();
  } catch (const std::exception& e) {
    ORBIT_FAIL(where << ": its metadata do not parse (" << e.what() << ")");
  }
}

// A held completion as its journal record holds it (held_journal.h), and back.
std::string journal_payload(const StoredCompletion& c) {
  return nlohmann::json{{"id", c.id},     {"created", c.created},  {"model", c.model}, {"metadata", c.metadata},
                        {"body", c.body}, {"messages", c.messages}}
      .dump();
}

StoredCompletion from_journal(const JournalEntry& e) {
  const nlohmann::json j = nlohmann::json::parse(e.payload);
  StoredCompletion c;
  c.id = j.at("id").get<std::string>();
  ORBIT_CHECK(c.id == e.id, "its id '" << c.id << "' is not its record's '" << e.id << "'");
  c.created = j.at("created").get<int64_t>();
  c.model = j.at("model").get<std::string>();
  c.metadata = j.at("metadata").get<Metadata>();
  c.body = j.at("body").get<std::string>();
  c.messages = j.at("messages").get<std::string>();
  return c;
}

bool holds(const Metadata& metadata, const Metadata& wanted) {
  return std::all_of(wanted.begin(), wanted.end(), [&](const auto& pair) {
    const auto it = metadata.find(pair.first);
    return it != metadata.end() && it->second == pair.second;
  });
}

}  // namespace chat_rows

ChatStore::ChatStore(ChatStoreOptions options)
    : capacity_(std::max<std::size_t>(options.capacity, 1)),
      persistent_(!options.path.empty()),
      file_(std::make_unique<SqliteFile>(
          "chat completions store", persistent_ ? options.path : ":memory:", chat_rows::kSchema, chat_rows::kFormat)),
      group_(options.group_commit ? chat_rows::kMaxGroup : 1,
             {[this](const std::vector<Write>& group) { commit(group); }, [this] { check(); }}),
      journal_(persistent_ && options.journal ? std::make_unique<HeldJournal>(options.path) : nullptr),
      pending_(options.pending_bytes, journal_.get()) {
  if (journal_) recover_held();
}

void ChatStore::recover_held() {
  report_journal(*journal_, "chat completions");
  std::vector<std::string> recovered;
  for (const JournalEntry& e : journal_->adopted().held) {
    try {
      StoredCompletion c = chat_rows::from_journal(e);
      const std::size_t bytes = c.body.size() + c.messages.size();
      pending_.adopt(e.id, std::move(c), bytes);
      recovered.push_back(e.id);
    } catch (const std::exception& error) {
      std::fprintf(stderr,
                   "orbit serve: chat completion %s in the journal %s is lost: its record does not parse (%s)\n",
                   e.id.c_str(), e.file.c_str(), error.what());
      journal_->release(e.id);
    }
  }
  if (recovered.empty()) return;
  report_recovered(pending_, recovered, retry_pending(true), "chat completion");
}

StoreWrite ChatStore::put(const StoredCompletion& c) {
  StoreWrite written = group_.submit(&c);
  if (written) {
    if (!pending_.empty()) retry_pending(false);  // the store took a write: the held ones may fit again
    return written;
  }
  const HoldOutcome held = pending_.hold(c.id, c, c.body.size() + c.messages.size(), written.error,
                                         journal_ ? chat_rows::journal_payload(c) : std::string());
  written.held = held.held;
  written.journaled = held.journaled;
  const std::string where = held.journaled ? "held in memory and in the journal " + journal_->path() +
                                                 ", its write "
                                                 "retried once the store takes writes, after a crash at the next start"
                            : held.held ? "held in memory only (" +
                                              (held.journal_error.empty() ? "no journal" : held.journal_error) +
                                              "), its write retried once the store takes writes"
                                        : "dropped: the completions held for a retry fill --store-pending-mb";
  std::fprintf(stderr, "orbit serve: chat completion %s is not stored: %s (%s)\n", c.id.c_str(), written.error.c_str(),
               where.c_str());
  return written;
}

RetryResult ChatStore::retry_pending(bool all) {
  return retry_in_turn(retry_mutex_, all, [&] { return retry_held(pending_, group_, all, "chat completion"); });
}

std::size_t ChatStore::drain_pending() {
  return drain_held(retry_mutex_, pending_, group_, journal_.get(), "chat completion");
}

StoreWrite ChatStore::check_writable() {
  if (!persistent_) return {};
  StoreWrite checked = group_.check();
  if (!checked) {
    std::fprintf(stderr, "orbit serve: the chat completions store cannot take a write: %s\n", checked.error.c_str());
  }
  return checked;
}

void ChatStore::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  file_->check_writable();
}

void ChatStore::commit(const std::vector<Write>& group) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqlTransaction t(*file_);
  for (const Write c : group) insert(*c);
  const std::string evicted =
      "seq IN (SELECT seq FROM completions ORDER BY used LIMIT MAX(0, (SELECT COUNT(*) FROM completions) - ?1))";
  SqlStatement depart(*file_, (chat_rows::kDepart + evicted).c_str());
  depart.integer(1, static_cast<int64_t>(capacity_)).step();
  SqlStatement evict(*file_, ("DELETE FROM completions WHERE " + evicted).c_str());
  evict.integer(1, static_cast<int64_t>(capacity_)).step();
  forget_departed();
  t.commit();
}

void ChatStore::insert(const StoredCompletion& c) {
  SqlStatement insert(*file_, (std::string("INSERT OR IGNORE INTO completions(id, created, model, metadata, body, "
                                           "messages, used) VALUES(?, ?, ?, ?, ?, ?, ") +
                               chat_rows::kNextUse + ")")
                                  .c_str());
  insert.text(1, c.id).integer(2, c.created).text(3, c.model).text(4, chat_rows::metadata_text(c.metadata));
  insert.text(5, c.body).text(6, c.messages).step();
}

void ChatStore::forget_departed() {
  SqlStatement forget(*file_, chat_rows::kForgetDeparted);
  forget.integer(1, static_cast<int64_t>(departed_kept())).step();
}

std::optional<std::pair<int64_t, int64_t>> ChatStore::order_key(const std::string& id) const {
  for (const char* sql :
       {"SELECT created, seq FROM completions WHERE id = ?", "SELECT created, seq FROM departed WHERE id = ?"}) {
    SqlStatement at(*file_, sql);
    at.text(1, id);
    if (at.step()) return std::make_pair(at.column_int(0), at.column_int(1));
  }
  return std::nullopt;
}

// A completion's place in the LRU order is a hint: a read whose update cannot be written (a full or read-only
// disk) still answers, and says so on stderr.
void ChatStore::touch(const std::string& id) {
  try {
    SqlStatement s(*file_,
                   (std::string("UPDATE completions SET used = ") + chat_rows::kNextUse + " WHERE id = ?").c_str());
    s.text(1, id).step();
  } catch (const Error& e) {
    std::fprintf(stderr, "orbit serve: chat completion %s is served without updating its use: %s\n", id.c_str(),
                 e.what());
  }
}

std::optional<StoredCompletion> ChatStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return read(id);
}

std::optional<StoredCompletion> ChatStore::read(const std::string& id) {
  SqlStatement s(*file_, "SELECT created, model, metadata, body, messages FROM completions WHERE id = ?");
  s.text(1, id);
  if (!s.step()) return std::nullopt;
  StoredCompletion c;
  c.id = id;
  c.created = s.column_int(0);
  c.model = s.column_text(1);
  c.metadata = chat_rows::metadata_of(s.column_text(2), file_->label() + ": completion '" + id + "'");
  c.body = s.column_text(3);
  c.messages = s.column_text(4);
  touch(id);
  return c;
}

std::optional<CompletionPage> ChatStore::list(const CompletionQuery& query) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t created = 0, seq = 0;
  if (!query.after.empty()) {
    const std::optional<std::pair<int64_t, int64_t>> key = order_key(query.after);
    if (!key) return std::nullopt;
    std::tie(created, seq) = *key;
  }
  const char* sql = query.descending
                        ? "SELECT id, created, model, metadata, body FROM completions WHERE (?1 = 0 OR (created, seq) "
                          "< (?2, ?3)) AND (?4 = '' OR model = ?4) ORDER BY created DESC, seq DESC"
                        : "SELECT id, created, model, metadata, body FROM completions WHERE (?1 = 0 OR (created, seq) "
                          "> (?2, ?3)) AND (?4 = '' OR model = ?4) ORDER BY created, seq";
  SqlStatement s(*file_, sql);
  s.integer(1, query.after.empty() ? 0 : 1).integer(2, created).integer(3, seq).text(4, query.model);
  CompletionPage page;
  while (s.step()) {
    StoredCompletion c;
    c.id = s.column_text(0);
    c.metadata = chat_rows::metadata_of(s.column_text(3), file_->label() + ": completion '" + c.id + "'");
    if (!chat_rows::holds(c.metadata, query.metadata)) continue;
    if (static_cast<int64_t>(page.data.size()) == query.limit) {
      page.has_more = true;
      break;
    }
    c.created = s.column_int(1);
    c.model = s.column_text(2);
    c.body = s.column_text(4);
    page.data.push_back(std::move(c));
  }
  return page;
}

// The answer is read under the same lock as the update: another update, or a delete, between the two would
// have answered this call with that one's metadata, or a 404 for an update that was made.
std::optional<StoredCompletion> ChatStore::update_metadata(const std::string& id, const Metadata& metadata) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqlStatement s(*file_, "UPDATE completions SET metadata = ? WHERE id = ?");
  s.text(1, chat_rows::metadata_text(metadata)).text(2, id).step();
  if (file_->changes() == 0) return std::nullopt;
  return read(id);
}

bool ChatStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> turn(retry_mutex_);  // a retry in flight lands first: deleted below
  const bool was_held = pending_.forget(id);
  std::lock_guard<std::mutex> lock(mutex_);
  SqlTransaction t(*file_);
  SqlStatement depart(*file_, (std::string(chat_rows::kDepart) + "id = ?1").c_str());
  depart.text(1, id).step();
  SqlStatement s(*file_, "DELETE FROM completions WHERE id = ?");
  s.text(1, id).step();
  const bool erased = file_->changes() > 0;
  forget_departed();
  t.commit();
  return erased || was_held;
}

std::size_t ChatStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SqlStatement s(*file_, "SELECT COUNT(*) FROM completions");
  return s.step() ? static_cast<std::size_t>(s.column_int(0)) : 0;
}

}  // namespace orbit::serve
