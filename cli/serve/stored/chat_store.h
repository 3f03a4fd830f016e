// The chat completions `orbit serve` keeps when a request asks with `store: true` (OpenAI's stored chat
// completions: GET, list, messages, metadata update, DELETE under /v1/chat/completions; the wire side is
// chat_store_wire.h). No model, no HTTP here.
//
// A stored completion is its id, created time, model, metadata, the chat.completion object as it was
// returned (for a streamed one, as the stream assembled it) and the request's messages as the messages
// list returns them. At most `capacity` (4096 by default, `--max-chat-completions`) are kept; past it the
// least recently used (stored, retrieved, its messages listed, or updated; listing does not count) are
// dropped, and an id naming one is unknown (404).
//
// The records are rows of one SQLite database (sqlite_file.h), in memory without a path and, with one
// (`orbit serve --store DIR` keeps DIR/serve-chat-completions.sqlite), on disk, where they survive a
// restart and servers sharing the store see each other's:
//   completions(seq INTEGER PRIMARY KEY AUTOINCREMENT   the order of storing: ties of `created` in lists
//               id TEXT UNIQUE, created INTEGER, model TEXT,
//               metadata TEXT      a JSON object of strings
//               body TEXT          the completion object as returned, without metadata
//               messages TEXT      the request's messages (a JSON array of ChatCompletionStoreMessage)
//               used INTEGER)      a logical clock: one past the largest at each store or use
//   departed(n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, created INTEGER, seq INTEGER)
//               the order keys of the last departed_kept() completions to leave (erased or evicted): a list
//               whose `after` names one that left between two pages goes on from where it stood
//
// Writes (store_write.h): check_writable() is the check a request with store true passes before it runs;
// put() writes the completion once it was generated. Both queue in one GroupCommit (group_commit.h): puts
// that arrive together share one transaction (on disk, one sync), unless ChatStoreOptions::group_commit is
// off, and the checks among them are answered before that commit; put() returns once the transaction
// holding its completion is committed (synchronous=FULL: a crash after that keeps it). A write that fails (a
// full disk) is reported on stderr and returned. A group that fails is written again one completion at a
// time, so one too large for what is left of the disk fails alone.
//
// A completion whose write failed is held in memory for a retry (pending_writes.h), the oldest first, within
// ChatStoreOptions::pending_bytes (`--store-pending-mb`; past it it is dropped at once, StoreWrite::held
// false). retry_pending() writes the held ones that are due, in one transaction, once the store's check
// passes: after each put that committed (so under traffic the next completion stored brings them, before it
// is answered), and every second from `orbit serve`'s retry thread (store_retry.h); drain_pending() tries
// every one a last time at shutdown and names on stderr each it could not write. Until its write lands a
// held completion is not stored: GET, the list, its messages and a metadata update do not find it (404), as
// the client was told (`Orbit-Stored: false`, `Orbit-Store-Pending: true`); once it lands it is found as any
// other (its place in the list is where it was written) and survives a restart. erase() of a held id
// cancels its write (and answers true), so a deleted completion is never written afterwards.
//
// With a path, a held completion is also appended to the store's journal of held answers (held_journal.h,
// `STORE.held-<pid>` beside the database), synced before put() returns, so that a crash or `kill -9` does not
// lose it: the next ChatStore opened on the path adopts the journals no running server holds, holds their
// completions again and writes them at once (retry_pending(true)), naming on stderr each one recovered (stored,
// or held again) or lost (a record that does not parse); a torn or corrupt journal is reported naming the
// file. What lands is released from the journal; drain_pending() leaves a journaled completion it could not
// write in the journal for the next start. Where the journal cannot take a record (the same full disk) the
// completion is held in memory only (StoreWrite::journaled false).
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/stored/group_commit.h"
#include "serve/stored/live_answers.h"
#include "serve/stored/pending_writes.h"
#include "serve/stored/sqlite_file.h"
#include "serve/stored/store_write.h"

namespace orbit::serve {

using Metadata = std::map<std::string, std::string>;

struct StoredCompletion {
  std::string id;       // "chatcmpl-..."
  int64_t created = 0;  // Unix seconds, as the body has it
  std::string model;
  Metadata metadata;
  std::string body;      // the chat.completion object as returned (JSON text), without metadata
  std::string messages;  // the request's messages as GET .../messages lists them (JSON array text)
};

// What GET /v1/chat/completions asks for: a page of completions ordered by created (then by when they were
// stored), after the one `after` names, those of `model` ("" = any) whose metadata holds every pair of
// `metadata`.
struct CompletionQuery {
  bool descending = false;
  int64_t limit = 20;
  std::string after;  // "" = from the first
  std::string model;
  Metadata metadata;
};

struct CompletionPage {
  std::vector<StoredCompletion> data;  // without their messages
  bool has_more = false;
};

struct ChatStoreOptions {
  std::size_t capacity = 4096;  // completions kept; at least 1
  std::string path;             // the database file; "" = in memory
  bool group_commit = true;     // false: each put commits alone (one sync of the disk per completion)
  // Completions whose write failed held for a retry, bytes at most (body and messages); 0 holds none.
  std::size_t pending_bytes = std::size_t{64} << 20;
  bool journal = true;  // with a path: held completions are journaled (held_journal.h), and adopted at start
};

class ChatStore {
 public:
  static constexpr std::size_t kDefaultCapacity = 4096;
  // Throws orbit::Error naming the path when its database cannot be opened or is not of this format.
  explicit ChatStore(ChatStoreOptions options = {});

  // Keeps `completion` (the most recently used; an id already stored is left as it is) and drops the least
  // recently used past the capacity; returns once it is committed. A failure (reported on stderr) says why,
  // and whether the completion is held for a retry (StoreWrite::held). A put that committed while others are
  // held retries those that are due (retry_pending(false)) before it returns.
  StoreWrite put(const StoredCompletion& completion);
  // Whether the store takes a write now (SqliteFile::check_writable; queued with the puts, and answered
  // before the commit of those it joins, without waiting for their sync). Always ok in memory.
  StoreWrite check_writable();
  // The completion stored under `id` (now the most recently used), or nullopt.
  std::optional<StoredCompletion> get(const std::string& id);
  // A page of completions (without their messages), after the place of the one `after` names: a stored
  // completion, or one that left (erased or evicted) while its order key is kept, so that a client paging
  // through the list goes on past a completion deleted or evicted between its pages. nullopt when `after`
  // names neither (never stored here, or left longer ago than departed_kept() departures).
  std::optional<CompletionPage> list(const CompletionQuery& query) const;
  // Replaces the metadata of `id` (now the most recently used); the completion as updated, or nullopt when
  // none is stored under it.
  std::optional<StoredCompletion> update_metadata(const std::string& id, const Metadata& metadata);
  // false when none is stored or held under `id` (a held one's write is cancelled; a retry in flight lands
  // first, and is then deleted).
  bool erase(const std::string& id);
  // Writes the held completions due now (`all`: every one, waiting for a retry in flight; else only those
  // whose backoff has passed, and nothing when another retry runs) once the store's check passes. Returns
  // what it attempted and wrote; each written is logged on stderr and counted retried.
  RetryResult retry_pending(bool all);
  // At shutdown: retry_pending(true), then every completion still held is let go, each named on stderr with
  // why: one in the journal stays there for the next start, one held in memory only is lost. Returns how many
  // were lost.
  std::size_t drain_pending();
  PendingStats pending() const { return pending_.stats(); }
  std::size_t size() const;
  // How many departed completions' order keys are kept (the most recent): four times the capacity.
  std::size_t departed_kept() const { return 4 * capacity_; }
  bool persistent() const { return persistent_; }
  // Completions committed (items), the transactions that held them (commits) and writes that failed (a put's
  // or a retry's: pending() says what is held).
  StoreWrites writes() const { return group_.writes(); }
  // Writes (puts and checks) waiting or being written now: for tests that wait until a group has formed.
  std::size_t queued() const { return group_.queued(); }
  // The completions with store true still being generated (live_answers.h): GET, the messages list and a metadata
  // update of one answer 409 (a chat completion has no in-progress form), DELETE deletes it (nothing is stored when
  // it ends).
  LiveAnswers<void>& live() { return live_; }

 private:
  // A queued put: the completion, alive until its put returns.
  using Write = const StoredCompletion*;
  void commit(const std::vector<Write>& group);  // GroupCommit's: one transaction; takes mutex_
  void check();                                  // GroupCommit's: SqliteFile::check_writable; takes mutex_
  void insert(const StoredCompletion& c);        // under mutex_, in a transaction
  void touch(const std::string& id);             // under mutex_
  std::optional<StoredCompletion> read(const std::string& id);  // get's read (and touch), under mutex_
  void forget_departed();  // under mutex_: the departed keys past departed_kept(), oldest first
  void recover_held();     // at construction: the adopted journals' completions written
  // Under mutex_: (created, seq) of `id`, stored or departed; nullopt when neither.
  std::optional<std::pair<int64_t, int64_t>> order_key(const std::string& id) const;

  std::size_t capacity_;
  bool persistent_;
  mutable std::mutex mutex_;
  std::unique_ptr<SqliteFile> file_;
  GroupCommit<Write> group_;
  std::unique_ptr<HeldJournal> journal_;  // with a path and ChatStoreOptions::journal; before pending_, which uses it
  PendingWrites<StoredCompletion> pending_;
  std::mutex retry_mutex_;  // one retry at a time; erase() waits for it (taken before mutex_)
  LiveAnswers<void> live_;
};

}  // namespace orbit::serve
