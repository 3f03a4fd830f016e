#include "serve/stored/held_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "orbit/common/sha256.h"
#include "serve/stored/journal_share.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace held_journal_io {

namespace fs = std::filesystem;

constexpr char kHeader[] = "orbit-held-journal 2\n";
constexpr char kHeaderV1[] = "orbit-held-journal 1\n";  // read: its records are of kinds 1 and 2 only
constexpr std::size_t kHeaderBytes = sizeof(kHeader) - 1;
static_assert(sizeof(kHeaderV1) == sizeof(kHeader), "both versions' headers are read as kHeaderBytes");
constexpr uint32_t kMagic = 0x52444c48;
constexpr std::size_t kRecordHead = 28;  // magic, kind and padding, id bytes, payload bytes, check
constexpr unsigned char kHold = 1, kRelease = 2, kDead = 3, kLink = 4;
constexpr std::size_t kKindAt = 4;              // the kind's byte within a record
constexpr uint64_t kSlack = uint64_t{1} << 20;  // dead bytes tolerated past the live ones before a rewrite

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const std::string& in, std::size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(in[at + i]);
  return value;
}

uint64_t check_of(unsigned char kind, const std::string& id, const char* payload, std::size_t payload_bytes) {
  Sha256 h;
  h.update(&kind, 1).update(id).update(payload, payload_bytes);
  const Sha256::Digest d = h.digest();
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | d[static_cast<std::size_t>(i)];
  return value;
}

// A record's check covers the kind it was written as: a hold marked dead in place keeps its hold's check.
unsigned char written_kind(unsigned char kind) { return kind == kDead || kind == kLink ? kHold : kind; }

std::string record(unsigned char kind, const std::string& id, const std::string& payload) {
  std::string out;
  out.reserve(kRecordHead + id.size() + payload.size());
  put_le(out, kMagic, 4);
  put_le(out, kind, 4);
  put_le(out, id.size(), 4);
  put_le(out, payload.size(), 8);
  put_le(out, check_of(kind, id, payload.data(), payload.size()), 8);
  out += id;  // into the room reserved: `out + id + payload` would copy the payload into a string grown again
  out += payload;
  return out;
}

std::string errno_text(const std::string& what, const std::string& path) {
  return "held-answers journal " + path + ": " + what + ": " + std::strerror(errno);
}

// Writes all of `data` at `offset`; "" or why.
std::string write_at(int fd, const std::string& data, uint64_t offset, const std::string& path) {
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_text("cannot write", path);
    done += static_cast<std::size_t>(n);
  }
  return ::fdatasync(fd) == 0 ? "" : errno_text("cannot sync", path);
}

// Writes `bytes` to the new file `fd` at `temporary` under an exclusive lock (taken before the file has its name,
// so a server starting meanwhile never adopts it) and renames it to `path`: "" or why, and on failure `fd` is
// closed and the temporary file removed.
std::string replace_locked(int fd, const std::string& bytes, const std::string& temporary, const std::string& path) {
  std::string why =
      ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? write_at(fd, bytes, 0, temporary) : errno_text("cannot lock", temporary);
  if (why.empty() && ::rename(temporary.c_str(), path.c_str()) != 0) why = errno_text("cannot rename", temporary);
  if (!why.empty()) {
    ::close(fd);
    ::unlink(temporary.c_str());
  }
  return why;
}

void sync_dir(const std::string& path) {
  const int fd = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The live holds of one journal's bytes (a hold no release follows, oldest first), and what was wrong.
struct Parsed {
  std::vector<JournalEntry> held;
  std::string problem;   // "" when the file is whole
  bool corrupt = false;  // damage before its end (else at most a torn last record)
  bool foreign = false;  // with corrupt: its header is not a journal's of this format (no record read)
};

Parsed parse(const std::string& bytes, const std::string& file) {
  Parsed out;
  if (bytes.size() < kHeaderBytes ||
      (bytes.compare(0, kHeaderBytes, kHeader) != 0 && bytes.compare(0, kHeaderBytes, kHeaderV1) != 0)) {
    out.corrupt = out.foreign = !bytes.empty();
    if (out.corrupt) out.problem = "its header is not \"orbit-held-journal 2\" (or 1): not a journal of this format";
    return out;
  }
  std::vector<JournalEntry> order;  // holds and links, then erased by releases
  std::size_t at = kHeaderBytes;
  while (at < bytes.size()) {
    const std::size_t left = bytes.size() - at;
    const bool whole_head = left >= kRecordHead;
    const uint64_t id_bytes = whole_head ? get_le(bytes, at + 8, 4) : 0;
    const uint64_t payload_bytes = whole_head ? get_le(bytes, at + 12, 8) : 0;
    if (!whole_head || payload_bytes > left || id_bytes + payload_bytes > left - kRecordHead) {
      out.problem = "its last record is incomplete (" + std::to_string(left) + " bytes at byte " + std::to_string(at) +
                    ": a crash while it was appended): ignored";
      break;
    }
    const unsigned char kind = static_cast<unsigned char>(bytes[at + kKindAt]);
    const std::string id = bytes.substr(at + kRecordHead, id_bytes);
    const char* payload = bytes.data() + at + kRecordHead + id_bytes;
    const std::size_t end = at + kRecordHead + id_bytes + payload_bytes;
    const bool valid = get_le(bytes, at, 4) == kMagic && kind >= kHold && kind <= kLink &&
                       get_le(bytes, at + 20, 8) == check_of(written_kind(kind), id, payload, payload_bytes);
    if (!valid) {
      out.corrupt = end < bytes.size();
      out.problem = out.corrupt ? "it is corrupt at byte " + std::to_string(at) +
                                      " (a record whose magic, kind or check is wrong): the records from there on "
                                      "are lost"
                                : "its last record is damaged (byte " + std::to_string(at) +
                                      ": a crash while it was appended): ignored";
      break;
    }
    if (kind == kHold || kind == kLink) {
      order.push_back(JournalEntry{id, std::string(payload, payload_bytes), file, kind == kLink});
    } else if (kind == kRelease) {
      for (auto it = order.begin(); it != order.end();) it = it->id == id ? order.erase(it) : std::next(it);
    }
    at = end;
  }
  std::map<std::string, bool> seen;  // a hold written twice (adopted twice) counts once
  for (JournalEntry& e : order) {
    if (seen.emplace(e.id, true).second) out.held.push_back(std::move(e));
  }
  return out;
}

// The journals of the store at `store_path`: "STORE.held-<digits>". A directory that cannot be listed gives
// none, and sets `error` when given.
std::vector<fs::path> journals_of(const std::string& store_path, std::error_code* error = nullptr) {
  const fs::path store(store_path);
  const std::string head = store.filename().string() + ".held-";
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path dir = store.parent_path();  // "" for a store named without one: the working directory
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) continue;
    if (name.find_first_not_of("0123456789", head.size()) != std::string::npos) continue;
    out.push_back(dir / name);  // written as the store's path is, so a server's own journal compares equal
  }
  if (error != nullptr) *error = ec;
  return out;
}

// Opens and locks `path` when no running server holds it (and it is still the file at that path): its fd, or -1.
// A FIFO, socket or device named like a journal is no server's journal: -1, and *not_file says what it is
// (opened without blocking and never read: a FIFO's read waits for a writer forever, and hung the start).
int lock_unheld(const fs::path& path, std::string* not_file) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat opened {};
  struct stat named {};
  if (::fstat(fd, &opened) == 0 && !S_ISREG(opened.st_mode)) {
    ::close(fd);
    *not_file = S_ISFIFO(opened.st_mode) ? "a FIFO" : S_ISSOCK(opened.st_mode) ? "a socket" : "a device";
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::fstat(fd, &opened) != 0 || ::stat(path.c_str(), &named) != 0 ||
      opened.st_ino != named.st_ino) {
    ::close(fd);  // held by its server, or removed by another server that adopted it first
    return -1;
  }
  return fd;
}

// `held` cut to its holds and the links they need (the first record of each id); returns the id each kept one
// names (`names_of`), in the same order.
std::vector<std::string> keep_needed(std::vector<JournalEntry>& held,
                                     const std::function<std::string(const std::string&)>& names_of) {
  std::map<std::string, std::size_t> at;  // id -> index: a record adopted twice (from two files) counts once
  std::vector<std::string> names(held.size());
  std::vector<bool> keep(held.size(), false);
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (!at.emplace(held[i].id, i).second) continue;
    names[i] = names_of(held[i].payload);
  }
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (held[i].link || at[held[i].id] != i) continue;
    keep[i] = true;
    // The links it names, each naming the next, up to a hold (kept by its own turn) or one kept already.
    for (auto next = at.find(names[i]); next != at.end() && held[next->second].link && !keep[next->second];
         next = at.find(names[next->second])) {
      keep[next->second] = true;
    }
  }
  std::vector<JournalEntry> kept;
  std::vector<std::string> kept_names;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (!keep[i]) continue;
    kept.push_back(std::move(held[i]));
    kept_names.push_back(std::move(names[i]));
  }
  held = std::move(kept);
  return kept_names;
}

}  // namespace held_journal_io

std::vector<std::string> journal_files(const std::string& store_path, std::string& error) {
  std::error_code ec;
  std::vector<std::string> out;
  for (const held_journal_io::fs::path& file : held_journal_io::journals_of(store_path, &ec)) {
    out.push_back(file.string());
  }
  error = ec ? ec.message() : std::string();
  return out;
}

JournalNames journal_names(const std::string& bytes, const std::string& file, const LinkOf& link_of) {
  namespace io = held_journal_io;
  JournalNames out;
  io::Parsed parsed = io::parse(bytes, file);
  out.known = !parsed.foreign;
  if (parsed.corrupt) out.problem = parsed.problem;  // a torn last record is not damage: read up to the tear
  if (!link_of) return out;
  const auto names_of = [&](const std::string& payload) {
    try {
      return link_of(payload);
    } catch (const std::exception&) {
      return std::string();  // names nothing, as at adoption
    }
  };
  for (std::string& name : io::keep_needed(parsed.held, names_of)) {
    if (!name.empty()) out.names.insert(std::move(name));
  }
  return out;
}

HeldJournal::HeldJournal(const std::string& store_path, LinkOf link_of, JournalShare* share)
    : link_of_(std::move(link_of)), share_(share) {
  path_ = store_path + ".held-" + std::to_string(::getpid());
  if (share_ == nullptr) {
    adopt(store_path);
    return;
  }
  // Under the store's lock: a deletion by another server reads the records being moved in one file or the other.
  if (std::string why = share_->lock(); !why.empty()) {
    error_ = why + " (no journal: answers are held in memory only)";
    return;
  }
  const JournalShareScope locked(share_);
  adopt(store_path);
}

void HeldJournal::adopt(const std::string& store_path) {
  namespace io = held_journal_io;
  std::vector<int> locked;  // the adopted files, locked until they are removed
  for (const io::fs::path& file : io::journals_of(store_path)) {
    std::string not_file;
    const int fd = io::lock_unheld(file, &not_file);
    if (!not_file.empty()) {
      adopted_.problems.push_back("held-answers journal " + file.string() + ": not a file but " + not_file +
                                  ", so no server's journal: not read, left as it is");
    }
    if (fd < 0) continue;
    locked.push_back(fd);
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    io::Parsed parsed = io::parse(bytes, file.string());
    adopted_.files.push_back(file.string());
    for (JournalEntry& e : parsed.held) adopted_.held.push_back(std::move(e));
    if (parsed.problem.empty()) continue;
    std::string line = "held-answers journal " + file.string() + ": " + parsed.problem;
    if (parsed.corrupt) {
      std::error_code ec;
      io::fs::rename(file, file.string() + ".corrupt", ec);
      line += ec ? " (it could not be set aside: " + ec.message() + ")"
                 : "; the file is kept as " + file.string() + ".corrupt";
    }
    adopted_.problems.push_back(line);
  }
  if (create()) {
    for (const std::string& file : adopted_.files) {
      std::error_code ec;
      if (file != path_) io::fs::remove(file, ec);  // its records are in this server's journal now
    }
    io::sync_dir(path_);
  }
  for (const int fd : locked) ::close(fd);
}

bool HeldJournal::create() {
  namespace io = held_journal_io;
  const std::string temporary = path_ + ".tmp";
  const int fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error_ = io::errno_text("cannot create", temporary);
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<std::string> names = keep_needed();
  std::string bytes(io::kHeader, io::kHeaderBytes);
  for (std::size_t i = 0; i < adopted_.held.size(); ++i) {
    const JournalEntry& e = adopted_.held[i];
    std::string r = io::record(io::kHold, e.id, e.payload);
    if (e.link) r[io::kKindAt] = static_cast<char>(io::kLink);
    add(e.id, Live{bytes.size(), r.size(), e.link, names[i]});
    bytes += r;
  }
  // Counted again once all are in: a record written before the one it names (by an older rewrite) counts too.
  for (auto& [id, record] : live_) record.named_by = 0;
  for (auto& [id, record] : live_) {
    if (const auto named = live_.find(record.names); named != live_.end()) ++named->second.named_by;
  }
  if (std::string why = io::replace_locked(fd, bytes, temporary, path_); !why.empty()) {
    error_ = why;
    live_.clear();
    named_.clear();
    live_bytes_ = 0;
    holds_ = 0;
    return false;
  }
  fd_ = fd;
  end_ = bytes.size();
  return true;
}

std::vector<std::string> HeldJournal::keep_needed() {
  return held_journal_io::keep_needed(adopted_.held, [this](const std::string& payload) { return names_of(payload); });
}

std::string HeldJournal::names_of(const std::string& payload) const {
  if (!link_of_) return "";
  try {
    return link_of_(payload);
  } catch (const std::exception&) {
    return "";  // a payload that does not parse names nothing: its store reports that record lost
  }
}

void HeldJournal::add(const std::string& id, Live record) {
  if (const auto named = live_.find(record.names); named != live_.end()) ++named->second.named_by;
  if (!record.names.empty()) ++named_[record.names];
  live_bytes_ += record.bytes;
  if (!record.link) ++holds_;
  live_[id] = std::move(record);
}

void HeldJournal::drop(const std::string& id) {
  for (auto it = live_.find(id); it != live_.end();) {
    const Live gone = std::move(it->second);
    live_.erase(it);
    live_bytes_ -= gone.bytes;
    if (!gone.link) --holds_;
    if (const auto named = named_.find(gone.names); named != named_.end() && --named->second == 0) {
      named_.erase(named);
      if (live_.count(gone.names) == 0) unnamed_.push_back(gone.names);  // a row of the store's: it may go now
    }
    it = live_.find(gone.names);
    // The link it named goes too when no other live record names it.
    if (it == live_.end() || --it->second.named_by > 0 || !it->second.link) return;
  }
}

HeldJournal::~HeldJournal() {
  if (fd_ < 0) return;
  if (holds_ == 0) {
    ::unlink(path_.c_str());
  } else {
    settle();
  }
  ::close(fd_);
}

std::size_t HeldJournal::live() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holds_;
}

bool HeldJournal::names(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return named_.count(id) != 0;
}

std::vector<std::string> HeldJournal::take_unnamed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(unnamed_, {});
}

std::string HeldJournal::hold(const std::string& id, const std::string& payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) return error_;
  if (live_.count(id) != 0) return "";
  std::string names = names_of(payload);
  // A row on disk it names is kept by the other servers only if they read this record before they delete it.
  if (share_ != nullptr && !names.empty() && live_.count(names) == 0 && !share_->held()) {
    return "held-answers journal " + path_ + ": not recorded: it names the row '" + names +
           "' without the store's journals locked, so another server sharing the store could delete that row";
  }
  settle();
  const uint64_t at = end_;
  std::string why = append(held_journal_io::kHold, id, payload);
  if (why.empty()) add(id, Live{at, end_ - at, false, std::move(names)});
  return why;
}

std::string HeldJournal::release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_locked(id);
}

std::string HeldJournal::release_locked(const std::string& id) {
  const auto it = live_.find(id);
  if (fd_ < 0 || it == live_.end() || it->second.link) return "";
  const uint64_t offset = it->second.offset;
  drop(id);
  if (compacted()) return "";
  // Marked dead where it lies: no byte is added, so a full disk takes it. The links it alone needed stay
  // marked as links: a start adopting the file leaves them out.
  std::string why = mark_dead(offset);
  if (!why.empty()) unmarked_.push_back(offset);  // a replay would hold it again until it is marked
  settle();
  return why;
}

std::string HeldJournal::keep_as_link(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(id);
  if (fd_ < 0 || it == live_.end() || it->second.link) return "";
  if (it->second.named_by == 0) return release_locked(id);  // no live record needs it
  namespace io = held_journal_io;
  std::string why =
      io::write_at(fd_, std::string(1, static_cast<char>(io::kLink)), it->second.offset + io::kKindAt, path_);
  if (why.empty()) {
    it->second.link = true;
    --holds_;  // a live record names it, and that one is a hold or a link a hold needs: holds_ stays above 0
  }
  return why;
}

bool HeldJournal::compacted() {
  return (live_.empty() || end_ > 2 * live_bytes_ + held_journal_io::kSlack) && compact().empty();
}

std::string HeldJournal::mark_dead(uint64_t offset) {
  namespace io = held_journal_io;
  return io::write_at(fd_, std::string(1, static_cast<char>(io::kDead)), offset + io::kKindAt, path_);
}

void HeldJournal::settle() {
  for (auto it = unmarked_.begin(); it != unmarked_.end() && fd_ >= 0;) {
    it = mark_dead(*it).empty() ? unmarked_.erase(it) : std::next(it);
  }
}

std::string HeldJournal::append(unsigned char kind, const std::string& id, const std::string& payload) {
  namespace io = held_journal_io;
  const std::string why = io::write_at(fd_, io::record(kind, id, payload), end_, path_);
  if (why.empty()) {
    end_ += io::kRecordHead + id.size() + payload.size();
    return why;
  }
  // What was written of it is cut off, so that the next record follows the last whole one.
  if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
    const std::string cut = io::errno_text("cannot cut a partial record", path_);
    ::close(fd_);
    fd_ = -1;
    error_ = cut + " (journal closed: answers are held in memory only)";
    return why + "; " + error_;
  }
  return why;
}

// The live records copied into a new file that takes the journal's name; on failure the old one stays.
std::string HeldJournal::compact() {
  namespace io = held_journal_io;
  if (live_.empty()) {
    if (::ftruncate(fd_, static_cast<off_t>(io::kHeaderBytes)) != 0 || ::fdatasync(fd_) != 0) {
      return io::errno_text("cannot cut back to its header", path_);
    }
    end_ = io::kHeaderBytes;
    unmarked_.clear();  // cut off with the rest
    return "";
  }
  // In file order, so that the records stay oldest first.
  std::vector<std::pair<uint64_t, const std::string*>> order;
  order.reserve(live_.size());
  for (const auto& [id, at] : live_) order.emplace_back(at.offset, &id);
  std::sort(order.begin(), order.end());
  std::string bytes(io::kHeader, io::kHeaderBytes);
  std::map<std::string, Live> moved;
  for (const auto& [offset, id] : order) {
    const Live& at = live_.at(*id);
    std::string r(at.bytes, '\0');
    if (::pread(fd_, r.data(), r.size(), static_cast<off_t>(offset)) != static_cast<ssize_t>(r.size())) {
      return io::errno_text("cannot read back a record", path_);
    }
    Live& record = moved[*id] = at;
    record.offset = bytes.size();
    bytes += r;
  }
  const std::string temporary = path_ + ".tmp";
  const int fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io::errno_text("cannot create", temporary);
  if (std::string why = io::replace_locked(fd, bytes, temporary, path_); !why.empty()) return why;
  io::sync_dir(path_);
  ::close(fd_);
  fd_ = fd;
  end_ = bytes.size();
  live_ = std::move(moved);
  unmarked_.clear();  // the new file holds the live records only
  return "";
}

}  // namespace orbit::serve
