// What the other journals of a store name (journal_share.h), kept between deletions and read again only where
// a journal changed: a deletion's check stats the store's directory and each journal, and lists the directory
// or reads a journal only when its stamp (device, inode, size, modification and change times) differs from the
// one it was read under, or that read was not settled.
//
// Why a stamp suffices: the records that name a row on disk are appended under the store's lock, which the
// check holds, and an append grows the file; a journal rewritten (compacted, or created by a start adopting
// others) is a new file renamed into place, a new inode; the changes in place (a hold marked released or kept as
// a link) only take names away; a journal created or removed changes the directory's times. And any of these
// sets its file's (or directory's) times from the kernel's clock at that moment. A stamp is settled when its
// times are before the clock read at the start of the check (CLOCK_REALTIME_COARSE, the clock file times come
// from; two seconds before it where a file system keeps whole seconds): every later change then gives another
// stamp. One that is not (written in the tick the check began) is read again at the next check, so a change in
// that same tick is not missed.
//
// A journal that cannot be read (permission, an I/O error, not a file) or whose header is not this format's
// keeps every row while it stays so, and is reported once (stderr, naming the file and the cause); one corrupt
// before its end is read up to the damage (what a start adopts of it) and reported once; a torn last record (a
// crash, or an append being written) is read up to the tear and not reported.
//
// Thread-safety: none; its JournalShare calls it under the store's lock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "serve/stored/held_journal.h"

namespace orbit::serve {

// What a file's stat says of its contents: another stamp, other bytes perhaps.
struct FileStamp {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t modified_ns = 0;
  int64_t changed_ns = 0;
  bool operator==(const FileStamp& o) const {
    return device == o.device && inode == o.inode && size == o.size && modified_ns == o.modified_ns &&
           changed_ns == o.changed_ns;
  }
  bool operator!=(const FileStamp& o) const { return !(*this == o); }
  // Whether any later change of the file gives another stamp: its times are before `now_ns` (the coarse
  // clock at the start of the check), with two seconds' margin where they are whole seconds.
  bool settled(int64_t now_ns) const;
};

class JournalCache {
 public:
  JournalCache(std::string store_path, LinkOf link_of);

  // Brings what the journals of the store other than `own` (a path; "" none) name up to date: the directory
  // listed again when its stamp changed, a journal read again when its stamp changed. Under the store's lock.
  void refresh(const std::string& own);
  // After refresh(): whether a journal other than `own` names `id`, or one could not be read (every row kept).
  bool keeps(const std::string& id) const { return unknown_ || names_.count(id) != 0; }

 private:
  struct Journal {
    FileStamp stamp;
    bool settled = false;  // read under a settled stamp: not read again while its stamp stays
    bool known = true;     // read, and of this format: `names` is all it names
    std::set<std::string> names;
  };
  bool list(int64_t now_ns);                           // the directory listed again if due; true: it changed
  bool read(const std::string& file, int64_t now_ns);  // `file` read again if due; true: what it names changed
  bool unreadable(Journal& journal, const std::string& file, const std::string& why);
  // One stderr line "orbit serve: SUBJECT: PROBLEM; OUTCOME", unless the last one of `subject` said `problem`.
  void report(const std::string& subject, const std::string& problem, const std::string& outcome);

  const std::string store_path_;
  const std::string directory_;
  const LinkOf link_of_;
  FileStamp directory_stamp_;
  bool directory_settled_ = false;
  std::string directory_error_;                  // why the last listing failed ("" none)
  std::vector<std::string> files_;               // the journals listed, sorted
  std::map<std::string, Journal> journals_;      // by path: those of files_ read so far
  std::string own_;                              // the journal the names leave out
  std::set<std::string> names_;                  // the union of the other journals' names
  bool unknown_ = false;                         // a journal (or the directory) could not be read
  std::map<std::string, std::string> reported_;  // by subject (a journal, the directory): the problem reported
};

}  // namespace orbit::serve
