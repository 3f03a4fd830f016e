// The Responses API's stored responses on disk (ResponseStore with a path, responses_store.h): one SQLite
// database beside the chunk store's index (`orbit serve --store DIR` keeps it in DIR/serve-responses.sqlite),
// so a previous_response_id names the same conversation after a restart.
//
//   meta(name TEXT PRIMARY KEY, value TEXT)   "format": "orbit-serve-responses 1"
//   responses(id TEXT PRIMARY KEY,
//             named INTEGER    1: found by id and by its read list; 0: kept only as a link of a named
//                              response's chain (dropped past the capacity, or deleted, while one continues it)
//             session TEXT     the window it ran in
//             previous TEXT    the id of the response it continued, or NULL
//             added TEXT       its input messages and its answer, a JSON array of messages
//             body TEXT        the response object as it was returned (GET /v1/responses/{id})
//             read_key TEXT    the hash of the message list the model read, with the answer
//             used INTEGER)    a logical clock (one past the largest at each insert or use): the least
//                              recently used named responses are dropped first
//
// Every write is one transaction (sqlite_file.h: WAL journal, synchronous=FULL): a crash leaves the state
// before or after it. insert() takes several responses at once (ResponseStore's group commit: one sync of
// the disk for them). A row is deleted only when it is unnamed, no row continues it and its ResponseStore does
// not keep it (keep_while: a held response's journal record names it, this server's or another's sharing the
// store, so a start rebuilding that one reads it here; held_journal.h, journal_share.h). Several servers may
// share a store: writers wait for each other up to a busy timeout (10 s).
// Thread-safety: none; ResponseStore serialises calls.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orbit/sync.h"
#include "serve/stored/sqlite_file.h"

namespace orbit::serve {

// One stored response as a row holds it.
struct ResponseRow {
  std::string id;
  bool named = true;
  std::string session;
  std::string previous;  // "" for the first of a chain
  std::vector<ChatMessage> added;
  std::string body;
  std::string read_key;
};

class ResponseDisk {
 public:
  // Opens (creating when missing) the database at `path`. Throws orbit::Error naming the path when it
  // cannot be opened or is not a responses database of this format.
  explicit ResponseDisk(const std::string& path);

  const std::string& path() const { return file_.path(); }

  // SqliteFile::check_writable: throws orbit::Error naming the path when the file cannot take a write.
  void check_writable() { file_.check_writable(); }
  // In one transaction: inserts the rows `plan` returns (named or not, as each says; a chain's links before the
  // rows that continue them), the most recently used in their order (a row whose id is already there is left
  // as it is), then unnames the least recently used named responses until at most `capacity` are named.
  // `plan` runs inside the transaction, after its write lock is taken: what it reads of this file (has(), to
  // find which links of a chain no row holds) is what the insert writes over, so another server sharing the
  // store cannot delete a link in between and leave a row whose previous is missing. Returns the ids unnamed.
  // Throws orbit::Error naming the path when it cannot write (then none of it is kept); what `plan` throws
  // rolls it back too.
  std::vector<std::string> insert(const std::function<std::vector<ResponseRow>()>& plan, int64_t capacity);
  // The row `id`, named or not; nullopt when there is none. A row that does not parse throws naming it.
  std::optional<ResponseRow> load(const std::string& id) const;
  // Whether a row (named or not) has the id `id`.
  bool has(const std::string& id) const;
  // The most recently used named response whose read list hashes to `read_key`, or "".
  std::string find_by_key(const std::string& read_key) const;
  // Makes `id` the most recently used; false when no named row has that id (never written, unnamed or evicted,
  // by this server or another sharing the store). Throws orbit::Error naming the path when it cannot write.
  bool touch(const std::string& id);
  // Makes `id` unnamed and deletes what no named response needs any more; false when it was not named.
  bool unname(const std::string& id);
  // The rows `kept` is true for are kept while unnamed and continued by no row (as links of what continues
  // them elsewhere: a held response's journal record). Called under the caller's lock, by every deletion, inside
  // its write transaction (before its commit), for each row it would delete.
  void keep_while(std::function<bool(const std::string&)> kept) { kept_ = std::move(kept); }
  // In one transaction: deletes each of `ids` (and its unnamed predecessors) that is unnamed, continued by no
  // row and no longer kept. Throws orbit::Error naming the path when it cannot write (then none is deleted).
  void collect_all(const std::vector<std::string>& ids);
  int64_t named_count() const;

 private:
  // Deletes `id` and its unnamed predecessors while nothing continues or keeps them.
  void collect(std::string id);
  void insert_row(const ResponseRow& row);  // in a transaction
  // In a transaction: unnames the least recently used named responses past `capacity`; returns their ids.
  std::vector<std::string> evict_to(int64_t capacity);

  SqliteFile file_;
  std::function<bool(const std::string&)> kept_;
};

// A message list as JSON text and back (role, content, name, tool_call_id, tool_calls).
std::string messages_to_json(const std::vector<ChatMessage>& messages);
std::vector<ChatMessage> messages_from_json(const std::string& text, const std::string& what);

}  // namespace orbit::serve
