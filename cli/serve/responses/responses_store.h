// The responses `orbit serve` keeps for the Responses API: what a later request's previous_response_id
// names (its conversation, and the window it ran in), and what GET /v1/responses/{id} returns, bounded.
//
// A stored response holds only what it added to its conversation (this request's input messages, its
// instructions excluded, and its answer as an assistant message) and a reference to the response it
// continued, so a chain of n responses costs its messages once, not n times. At most `capacity` responses
// (4096 by default) are kept by id; past it the least recently used (named, stored or continued) is dropped,
// and a later previous_response_id naming it is unknown (404). A dropped or deleted response that a kept one
// continued stays as part of that one's conversation, without its id.
//
// With a path (`orbit serve --store DIR`) the responses are kept on disk (responses_disk.h) and survive a
// restart; memory holds the most recently used of them (at most kMemoryCapacity), the rest are read back when
// named. A request with store true checks the disk takes a write before it runs (check_writable); a write of
// the response that still fails (the disk filled meanwhile) is reported on stderr and returned (store_write.h
// says what the client is told), and the response is held for a retry (pending_writes.h, within
// ResponseStoreOptions::pending_bytes, `--store-pending-mb`): retry_pending() writes the held ones that are
// due once the disk's check passes, after each put that committed and every second from `orbit serve`'s
// retry thread (store_retry.h), and drain_pending() tries each a last time at shutdown. Meanwhile the held
// response is served from memory, as any other: GET finds it and previous_response_id continues it (memory
// keeps it past its LRU bound while it is held); a response put on disk that continues a held one (or one
// deleted meanwhile) writes that one first in its own transaction (named if held, else as an unnamed link),
// so a row's previous is always on disk and a chain read back after a restart is whole; the held one has
// then landed. Such a put checks first that the disk takes a write (check_writable's), so while it takes none
// the put is held at once, at a cost that does not grow with the held chain's length. DELETE of a held response cancels
// its write. One the retry could not hold (no room) or write by shutdown is in memory only, until a restart. Puts and
// checks queue in one GroupCommit (group_commit.h), as the chat completions store's do: responses put
// together share one transaction and one sync of the disk (at most 64; one each with
// ResponseStoreOptions::group_commit off), put() returns once the transaction holding its response committed
// (a crash after that keeps it), a group that fails is written again one response at a time, and a check is
// answered before the commit of the puts it queued with. Without a path nothing survives a restart. Servers sharing a
// store see each other's responses: one held in memory is served only while its row is still named on disk (another
// server may have deleted or evicted it), and a read whose recency update fails (a full or read-only disk) still
// answers from memory.
//
// With a path, a held response is also appended to the store's journal of held answers (held_journal.h,
// `STORE.held-<pid>`), synced before put() returns, with the links of its chain no row holds back to the
// nearest held one with its own record, which it names by id (so a held chain's journal grows with its
// length, not its square): a crash or `kill -9` does not lose it. erase() of a held response keeps its record
// as a link (HeldJournal::keep_as_link) while a live record names it, so that a held response continuing it is
// still written whole, the deleted one as an unnamed link; once none does, the journal's next rewrite drops it,
// so the journal stays bounded however long a store stays unwritable. A row on disk that a live record names (the
// nearest link of its chain on disk: one never held, or one held that landed since) is kept while one does,
// unnamed if it is deleted or evicted meanwhile (ResponseDisk::keep_while), and collected once none does. Another
// server sharing the store keeps it too: its deletions read the other servers' journals first (journal_share.h: under
// the store's lock, which a held put takes from its disk lookups to its record's sync). The next ResponseStore opened
// on the path adopts the journals no running server holds, rebuilds each response (its chain from the journal and the
// disk, the records its links name rebuilt first in a loop, so a chain of any length), holds it again (served from
// memory, as any held one) and writes it at once, naming on stderr each one recovered (stored, or held again), lost
// (a record that does not parse) or not confirmed released (a chain whose link is gone: since a live hold keeps
// its chain's rows, most likely a response deleted whose release mark failed before a crash, held_journal.h); a
// torn or corrupt journal is reported naming the file.
// drain_pending() leaves a journaled response it could not write in the journal for the next start. Where the journal
// cannot take a record the response is held in memory only (StoreWrite::journaled false).
//
// Besides ids, the store finds the response a request continues without naming it, as agents that resend
// the whole history do (the OpenAI Agents SDK by default): continued_by() returns the stored response whose
// conversation, as the model read it and with its answer, is the longest prefix of the request's message
// list. Those conversations are indexed by a chain of SHA-256 hashes over the messages (role, content,
// name, tool_call_id, tool calls with their ids), one per prefix.
//
// Thread-safety: every member may be called from any thread. A StoredResponse is immutable once put.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "orbit/sync.h"
#include "serve/responses/responses_disk.h"
#include "serve/stored/group_commit.h"
#include "serve/stored/journal_share.h"
#include "serve/stored/live_answers.h"
#include "serve/stored/pending_writes.h"
#include "serve/stored/store_write.h"

namespace orbit::serve {

struct StoredResponse {
  std::string id;       // "resp_..."
  std::string session;  // the window it ran in: a request continuing it runs there too
  // Its input messages (instructions excluded: they are not carried over) and its answer as an assistant
  // message (content and tool_calls, as a client sends it back).
  std::vector<ChatMessage> added;
  std::shared_ptr<StoredResponse> previous;  // the response it continued; null for the first of a chain
  std::string body;                          // the response object as returned (JSON text)

  // The conversation up to and including this response: the previous one's, then `added`.
  std::vector<ChatMessage> conversation() const;
  ~StoredResponse();  // releases a long chain one link at a time (no recursion)
};

struct ResponseStoreOptions {
  std::size_t capacity = 4096;  // responses kept by id (on disk with a path, else in memory); at least 1
  std::string path;             // the database file (responses_disk.h); "" = memory only
  bool group_commit = true;     // false: each put commits alone (one sync of the disk per response)
  // Responses whose write failed held for a retry, bytes at most (body and messages); 0 holds none.
  std::size_t pending_bytes = std::size_t{64} << 20;
  bool journal = true;  // with a path: held responses are journaled (held_journal.h), and adopted at start
  // For tests: runs at the start of each disk commit, under the store's lock, before the write's transaction
  // (where another connection to the file may still write).
  std::function<void()> before_disk_write;
};

class ResponseStore {
 public:
  static constexpr std::size_t kDefaultCapacity = 4096;
  static constexpr std::size_t kMemoryCapacity = 4096;  // held in memory at most, with a path
  // Throws orbit::Error naming the path when its database cannot be opened.
  explicit ResponseStore(ResponseStoreOptions options = {});

  // A new response id: "resp_" and 32 random hex digits.
  std::string new_id();
  // Keeps `response` under its id, most recently used. `read` is the message list the model read for it
  // (instructions included) followed by its answer: the key continued_by() finds it by.
  // Returns whether it was written to disk (always ok without a path); a failure says why and whether the
  // response is held for a retry (StoreWrite::held; it is in memory either way). A put that committed while
  // others are held retries those that are due (retry_pending(false)) before it returns.
  StoreWrite put(std::shared_ptr<StoredResponse> response, const std::vector<ChatMessage>& read);
  // Whether the disk takes a write now (SqliteFile::check_writable; queued with the puts, and answered before
  // the commit of those it joins, without waiting for their sync). Always ok without a path.
  StoreWrite check_writable();
  // The response stored under `id` (now the most recently used), or null.
  std::shared_ptr<StoredResponse> get(const std::string& id);
  // The stored response whose `read` list is the longest prefix of `messages` (all of it included), or null.
  std::shared_ptr<StoredResponse> continued_by(const std::vector<ChatMessage>& messages);
  // Forgets the id `id` (DELETE /v1/responses/{id}); false when no response is stored under it. A response
  // that continues it keeps its conversation. A held one's write is cancelled (a retry in flight lands first).
  bool erase(const std::string& id);
  // Writes the held responses due now (`all`: every one, waiting for a retry in flight; else only those whose
  // backoff has passed, and nothing when another retry runs) once the disk's check passes. Returns what it
  // attempted and wrote; each written is logged on stderr and counted retried.
  RetryResult retry_pending(bool all);
  // At shutdown: retry_pending(true), then every response still held is let go, each named on stderr with
  // why: one in the journal stays there for the next start, one held in memory only is lost (in memory until
  // the process ends). Returns how many were lost.
  std::size_t drain_pending();
  PendingStats pending() const { return pending_.stats(); }
  std::size_t size() const;  // responses kept by id
  bool persistent() const { return disk_ != nullptr; }
  // Responses written to disk (items), the transactions that wrote them (commits) and writes that failed (a
  // put's or a retry's: pending() says what is held); all 0 without a path.
  StoreWrites writes() const { return group_.writes(); }
  // Writes (puts and checks) waiting or being written now: for tests that wait until a group has formed.
  std::size_t queued() const { return group_.queued(); }
  // The responses with store true still running (live_answers.h), each shown meanwhile as a StoredResponse
  // whose body is the response with status "in_progress" and whose `added` is its input and an empty answer:
  // GET returns that body, input_items lists that input, DELETE deletes it (nothing is stored when it ends), and
  // previous_response_id naming it is refused as in progress (responses_run.h).
  LiveAnswers<StoredResponse>& live() { return live_; }

 private:
  struct Entry {
    std::shared_ptr<StoredResponse> response;
    std::list<std::string>::iterator recency;  // its place in recency_
    std::string key;                           // the hash of its read list
    bool on_disk = false;                      // its row was written (else it is held in memory only)
  };
  // A queued put: alive until its put returns.
  struct Pending {
    std::shared_ptr<StoredResponse> response;
    std::string key;  // the hash of its read list
  };
  void commit(const std::vector<const Pending*>& group);  // GroupCommit's: one transaction; takes mutex_
  // Under mutex_: the rows `group` writes, each preceded by the links of its chain not on disk (oldest first),
  // and those links.
  std::vector<ResponseRow> rows_of(const std::vector<const Pending*>& group,
                                   std::vector<std::shared_ptr<StoredResponse>>& carried);
  // Under mutex_: whether a response of `group` continues one no row holds (held, or deleted while held).
  bool carries_links(const std::vector<const Pending*>& group);
  void recover_held();  // at construction: the adopted journals' responses held and written
  // Under mutex_: `p` as its journal record holds it, with the links of its chain no row holds.
  std::string journal_payload(const Pending& p);
  // What recover_held rebuilds from the adopted records: the responses by id (the links they share), the
  // records by id (holds and links), and the ids whose record is being rebuilt (not followed twice).
  struct Rebuilt {
    std::map<std::string, std::shared_ptr<StoredResponse>> responses;
    std::map<std::string, const JournalEntry*> entries;
    std::set<std::string> building;
    // When from_journal returns null: the id a chain continues that neither the store nor the journal holds.
    // A live hold's record keeps what it continues (ResponseDisk::keep_while), so this is, short of a database
    // replaced or damaged, a record whose release mark failed before a crash (held_journal.h): its response was
    // deleted (or stored, then deleted or evicted) and the row it continued collected since.
    std::string gone;
  };
  // Under mutex_: the response of journal record `e`, its chain linked to the responses `built` has (and
  // added to it), to those rebuilt first from the records its links name by id (one after another, without
  // recursion, however long the chain), or read from disk; `key` is set to its read list's hash. Throws when
  // it does not parse; null when a response of its chain continues one that is nowhere (built.gone names it).
  std::shared_ptr<StoredResponse> from_journal(const JournalEntry& e, Rebuilt& built, std::string& key);
  // Under mutex_: from_journal's step for one record (`record`, `e`'s payload parsed) whose named link, if
  // it has a record, is in `built` already; null as from_journal.
  std::shared_ptr<StoredResponse> from_record(const JournalEntry& e, const nlohmann::json& record, Rebuilt& built,
                                              std::string& key);
  // The stderr line for record `e`, not recovered since its chain continues `gone`, which is nowhere: most likely
  // a response released already whose release mark did not reach the journal, so not said to be lost.
  static void report_unconfirmed(const JournalEntry& e, const std::string& gone);
  // Under mutex_ (and a JournalShareScope, ended after it): deletes the unnamed rows on disk that held responses'
  // journal records named and none does any more (HeldJournal::take_unnamed), unless another row or another
  // server's journal needs them; kept for the next call when it fails.
  void collect_unnamed();
  void check();  // GroupCommit's: the disk's check; takes mutex_
  // Under mutex_:
  void touch(Entry& entry);
  // In memory, newest; `on_disk`: its row was written.
  void remember(std::shared_ptr<StoredResponse> response, const std::string& key, bool on_disk);
  void forget(const std::string& id);  // from memory only
  void trim_memory();  // forgets the least recently used past the memory's bound, but those held for a retry
  std::shared_ptr<StoredResponse> load(const std::string& id);  // from disk, sharing the links memory holds
  std::shared_ptr<StoredResponse> find(const std::string& id);  // memory, else disk; touched
  // Touches `id` on disk; false when another server has since deleted or evicted it there.
  bool still_on_disk(const std::string& id);

  std::size_t capacity_;
  std::unique_ptr<ResponseDisk> disk_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> by_id_;
  std::map<std::string, std::string> by_key_;                   // read-list hash -> id
  std::list<std::string> recency_;                              // ids, most recently used first
  std::map<std::string, std::weak_ptr<StoredResponse>> links_;  // responses read from or put on disk, by id
  std::size_t links_limit_ = 1024;                              // links_'s size that prunes it next
  std::mt19937_64 random_;
  GroupCommit<const Pending*> group_;
  std::unique_ptr<JournalShare> share_;   // with a path: what the servers sharing it agree on; before journal_
  std::unique_ptr<HeldJournal> journal_;  // with a path and ResponseStoreOptions::journal; before pending_
  PendingWrites<Pending> pending_;
  const std::function<void()> before_disk_write_;
  std::mutex retry_mutex_;  // one retry at a time; erase() waits for it (taken before mutex_)
  // A held put's journal record made and held, erase() and commit(), one at a time (after retry_mutex_,
  // before mutex_): a record never names a held response released, or a row deleted, in between.
  std::mutex journal_turn_;
  std::vector<std::string> unnamed_;  // collect_unnamed()'s ids whose deletion failed: tried again (mutex_)
  LiveAnswers<StoredResponse> live_;
};

}  // namespace orbit::serve
