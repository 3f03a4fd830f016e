// A crash-safe record of the answers a store of `orbit serve` holds for a retry (pending_writes.h: their write
// failed after the run), so that a `kill -9`, a crash or a power cut does not lose them: each is appended,
// synced, before its client is told it is held, and the next server to start on the store replays them
// (ChatStore, ResponseStore: written into the store; what lands is released, what does not is held again).
//
// Files: one per store and server, beside the store's database: `STORE.held-<pid>` (STORE the database's
// path), locked (flock) by its server while it runs, so servers sharing a store each keep their own, and a
// server starting adopts every journal of its store that no running server holds (its server is gone):
//
//   header    "orbit-held-journal 2\n" (a journal of version 1, whose records are of kinds 1 and 2, is read too)
//   record    u32 magic 0x52444c48 | u8 kind | 3 bytes 0 | u32 id bytes | u64 payload bytes
//             | u64 check: the first 8 bytes of SHA-256 over the kind written, id and payload | id | payload
//             (integers little-endian). Kinds: 1 a hold, holding the answer (`payload`, the store's encoding);
//             3 a hold released in place (its answer landed, was deleted, or is given up): its kind byte
//             overwritten, synced, the check still that of its hold; 2 a release of the holds of its id before
//             it (appended by version 1; no longer written); 4 a hold kept as a link (keep_as_link), marked
//             in place as 3 is. The live records are the holds of kind 1 and 4 no release follows.
//
// Adoption: the adopted journals' live records are written, in order, into a new journal (a temporary file,
// locked, synced, renamed over this server's path, the directory synced), and only then are the adopted files
// removed: a crash at any point leaves every record in one file or the other (a record in both is replayed
// twice, which the stores' writes, INSERT OR IGNORE by id, make harmless). A journal whose last record is
// incomplete (a crash while it was appended: that answer's client was never told it was held) has that
// record ignored and reported; one corrupt before its end (a bad header, magic or check followed by more
// records) has the records before the damage adopted, the rest reported lost, and is kept as `FILE.corrupt`;
// each problem is a line of JournalAdoption::problems naming the file, never an exception.
//
// A release adds no byte: it marks the hold dead where it lies, so that a full disk (or a file-size limit),
// which fails every append, still takes it, and an answer deleted meanwhile is not brought back by a replay.
// A mark that fails all the same (an I/O error) is remembered and made again before the next hold and
// release and at close. A crash before then leaves the record a hold, and nothing in the file tells it from one
// still held: the next start replays it, writing an answer that landed again (by id: a no-op while its row is
// there) or bringing back one deleted meanwhile. The Responses store cannot always rebuild such a record: once
// its hold was released, the row its chain continues is no longer kept (`names`) and may have been deleted;
// since a live hold keeps that row, a record whose chain is missing a row is reported as not confirmed released
// (most likely deleted), not as lost (responses_store.h). An append that fails is cut off again, so the file
// never keeps a partial record in its middle; the caller holds that answer in memory only.
//
// Links: a record may name another, older one whose payload it needs to be rebuilt (`link_of` says which:
// the Responses store's record names the nearest held response of its chain with its own record). A hold kept
// as a link (keep_as_link) stays needed while a live record names it, holds and needed links alike; once none
// does (the holds naming it landed or were deleted), it is no longer live: its bytes are dead, and the next
// rewrite (or a start adopting the file) leaves it out. Every live link is thus reachable from a live hold.
// An id a live record names that has no record here is a row of the store's disk: names() tells the store to
// keep that row (unnamed, if the client deleted it) while it is named, and take_unnamed() when it no longer is.
// Another server sharing the store keeps it too: with a JournalShare (journal_share.h), a hold whose record
// names a row is appended only under the store's lock, which a deletion by any server takes before reading
// the other journals' records (journal_names) and holds until it commits; a start adopts under it too.
//
// Size: when no hold is live the file is cut back to its header, and when its dead bytes (released holds and
// links no live record needs) exceed its live ones plus 1 MiB (kSlack) it is rewritten: the live records copied
// in file order into a temporary file, renamed over it; where that fails, the release is marked. So the file
// stays within twice its live records plus 1 MiB, however long its holds stay live.
//
// Thread-safety: every member may be called from any thread (one mutex; each call syncs the disk under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace orbit::serve {

// One live hold read back from an adopted journal.
struct JournalEntry {
  std::string id;
  std::string payload;
  std::string file;   // the journal it was read from
  bool link = false;  // a hold kept only as a link of the holds after it (keep_as_link): not held again, its
                      // payload read only to rebuild those
};

// What a server starting found in the journals of its store that no running server held.
struct JournalAdoption {
  std::vector<JournalEntry> held;     // the live holds and the links they need, in file order (journal by journal)
  std::vector<std::string> problems;  // a torn last record or a corrupt journal: one line each, naming the file
  std::vector<std::string> files;     // the journals adopted (removed once their records were copied)
};

// The id of the record a payload names as the link it needs ("" for none, or an id with no live record here:
// a row on disk). Called under the journal's mutex, on each hold and on each adopted record; one that throws
// names none.
using LinkOf = std::function<std::string(const std::string& payload)>;

class JournalShare;

// The journals of the store at `store_path` (its directory's files "STORE.held-<digits>"), any server's; `error`
// says why the directory could not be listed ("" when it was).
std::vector<std::string> journal_files(const std::string& store_path, std::string& error);

// What one journal's live records name as their links by `link_of`, read from its bytes: its holds and the links
// those need, as a start adopting it would keep.
struct JournalNames {
  std::set<std::string> names;
  // False when its header is not a journal's of this format (another version's, or not a journal): what it
  // names is unknown.
  bool known = true;
  // Damage, naming where: a bad header, or a record corrupt before the end (`names` holds the records before
  // it, all a start could adopt). "" for a whole file or one whose last record is torn (a crash, or an append
  // still being written): read up to the tear.
  std::string problem;
};
JournalNames journal_names(const std::string& bytes, const std::string& file, const LinkOf& link_of);

class HeldJournal {
 public:
  // Adopts the journals of the store at `store_path` whose servers are gone, then creates this server's
  // journal holding their live records (adopted(): the holds, and the links they need by `link_of`). Never
  // throws: a journal that cannot be created is reported by error() (the adopted files are then left where they
  // are, for the next start), and every hold() fails. Without `link_of` no record names another, and
  // keep_as_link() is a release. With `share` (not owned; it outlives this) the adoption runs under its lock (one
  // it cannot take is error()), and a hold whose record names a row on disk needs that lock held by the calling
  // thread (from the caller's lookup of the row): without it, it fails.
  explicit HeldJournal(const std::string& store_path, LinkOf link_of = nullptr, JournalShare* share = nullptr);
  ~HeldJournal();  // closes the journal, removing it when it holds nothing
  HeldJournal(const HeldJournal&) = delete;
  HeldJournal& operator=(const HeldJournal&) = delete;

  const JournalAdoption& adopted() const { return adopted_; }
  const std::string& path() const { return path_; }  // this server's journal
  // Why this server has no journal ("" when it has one).
  const std::string& error() const { return error_; }

  // Appends a hold of `payload` under `id`, synced; "" once it is on disk, else why (naming the file). With a
  // JournalShare, one naming a row on disk (an id with no live record here) fails unless the calling thread
  // holds its lock.
  std::string hold(const std::string& id, const std::string& payload);
  // Marks the hold of `id` a link in place, synced: its answer is no longer held (deleted by the client), but
  // the live records that name it (link_of) need its payload. It stays live, and is adopted as a
  // JournalEntry::link, while one of them does; a hold no live record names is released instead. "" or why.
  std::string keep_as_link(const std::string& id);
  // Marks the hold of `id` dead in place, synced (or cuts back or compacts the file when that leaves it
  // empty or mostly dead); the links only it needed are no longer live. "" or why. An id with no live hold here
  // (a link included) is ignored.
  std::string release(const std::string& id);
  std::size_t live() const;  // live holds in this server's journal (links not counted)
  // Whether a live record (a hold or a link) names `id` as its link (link_of): its store keeps `id` where it
  // is (the Responses store: an unnamed row on disk) while this is true, since a start needs it to rebuild them.
  bool names(const std::string& id) const;
  // The ids without a live record here (rows on disk) that some live record named and none does any more,
  // since the last call: their store may drop them now.
  std::vector<std::string> take_unnamed();

 private:
  struct Live {
    uint64_t offset = 0;       // of its record
    uint64_t bytes = 0;        // of its record, header included
    bool link = false;         // kept as a link (keep_as_link), not a hold
    std::string names;         // the id its payload names as its link (link_of; "" none)
    std::size_t named_by = 0;  // live records whose `names` is this one: a link stays live while it is > 0
  };
  void adopt(const std::string& store_path);  // the journals no server holds, then create()
  bool create();  // this server's journal, holding the adopted live records; false: error_ says why
  // Under mutex_:
  // adopted_.held cut to its holds and the links they need (the first record of each id); returns the id each
  // kept one names (link_of), in the same order.
  std::vector<std::string> keep_needed();
  void add(const std::string& id, Live record);  // live, named by it `record.names` if that is live
  void drop(const std::string& id);              // no longer live, with the links only it needed (their bytes dead)
  std::string release_locked(const std::string& id);
  bool compacted();  // the file cut back (nothing live) or rewritten (mostly dead) when due; true when done
  std::string names_of(const std::string& payload) const;
  std::string append(unsigned char kind, const std::string& id, const std::string& payload);
  std::string compact();
  std::string mark_dead(uint64_t offset);  // the hold at `offset` marked released, synced
  void settle();                           // the marks unmarked_ owes made again

  mutable std::mutex mutex_;
  const LinkOf link_of_;
  JournalShare* const share_;  // null: this server alone keeps the rows its records name
  std::string path_;
  std::string error_;
  int fd_ = -1;
  uint64_t end_ = 0;                          // the file's size: the next record goes there
  uint64_t live_bytes_ = 0;                   // the live records' bytes
  std::size_t holds_ = 0;                     // the live records that are holds
  std::map<std::string, Live> live_;          // by id
  std::vector<uint64_t> unmarked_;            // released holds whose mark failed (offsets): made again by settle()
  std::map<std::string, std::size_t> named_;  // each id live records name (Live::names), and how many do
  std::vector<std::string> unnamed_;          // take_unnamed()'s: named by none since, with no live record
  JournalAdoption adopted_;
};

}  // namespace orbit::serve
