#include "serve/stored/journal_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace journal_cache_io {

constexpr int64_t kNs = 1000000000;

FileStamp stamp_of(const struct stat& st) {
  return FileStamp{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                   static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec * kNs + st.st_mtim.tv_nsec,
                   st.st_ctim.tv_sec * kNs + st.st_ctim.tv_nsec};
}

// The clock the kernel stamps files with (its coarse wall clock), in ns.
int64_t coarse_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return now.tv_sec * kNs + now.tv_nsec;
}

// The bytes of the open file `fd`: "" or why they could not be read.
std::string read_all(int fd, std::string& out) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return "";
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace journal_cache_io

bool FileStamp::settled(int64_t now_ns) const {
  const bool whole_seconds = modified_ns % journal_cache_io::kNs == 0 && changed_ns % journal_cache_io::kNs == 0;
  const int64_t before = now_ns - (whole_seconds ? 2 * journal_cache_io::kNs : 0);
  return modified_ns < before && changed_ns < before;
}

JournalCache::JournalCache(std::string store_path, LinkOf link_of)
    : store_path_(std::move(store_path)),
      directory_(std::filesystem::path(store_path_).parent_path().string()),
      link_of_(std::move(link_of)) {}

void JournalCache::refresh(const std::string& own) {
  const int64_t now = journal_cache_io::coarse_now_ns();
  bool changed = list(now);
  changed = changed || own != own_;
  own_ = own;
  bool unknown = !directory_error_.empty();
  for (const std::string& file : files_) {
    if (file == own) continue;
    changed = read(file, now) || changed;
    unknown = unknown || !journals_[file].known;
  }
  unknown_ = unknown;
  if (!changed) return;
  names_.clear();
  for (const auto& [file, journal] : journals_) {
    if (file != own) names_.insert(journal.names.begin(), journal.names.end());
  }
}

bool JournalCache::list(int64_t now_ns) {
  struct stat st {};
  const bool stamped = ::stat(directory_.empty() ? "." : directory_.c_str(), &st) == 0;
  const FileStamp stamp = stamped ? journal_cache_io::stamp_of(st) : FileStamp{};
  if (stamped && directory_settled_ && stamp == directory_stamp_) return false;
  std::string error;
  std::vector<std::string> files = journal_files(store_path_, error);
  std::sort(files.begin(), files.end());
  directory_stamp_ = stamp;
  directory_settled_ = stamped && error.empty() && stamp.settled(now_ns);
  const std::string subject = "the directory of the store " + store_path_;
  if (!error.empty()) {
    report(subject, "cannot be listed (" + error + ")",
           "its held-answers journals are unknown: this server deletes no row of the store while it cannot list them");
  } else {
    reported_.erase(subject);
  }
  directory_error_ = error;
  if (files == files_) return false;
  for (auto it = journals_.begin(); it != journals_.end();) {
    it = std::binary_search(files.begin(), files.end(), it->first) ? std::next(it) : journals_.erase(it);
  }
  files_ = std::move(files);
  return true;
}

bool JournalCache::read(const std::string& file, int64_t now_ns) {
  Journal& journal = journals_[file];
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && journal.settled && journal_cache_io::stamp_of(st) == journal.stamp) {
    return false;
  }
  // Without blocking: a FIFO named like a journal has no writer, and its open (or read) would wait for one
  // forever under the store's lock. It is refused below as unreadable, unread.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) {  // gone since the listing (its server ended holding nothing): names nothing
    const bool had = !journal.names.empty() || !journal.known;
    journal = Journal{};
    return had;
  }
  if (fd < 0) return unreadable(journal, file, std::strerror(errno));
  std::string bytes;
  const auto special = [](mode_t mode) { return S_ISFIFO(mode) || S_ISCHR(mode) || S_ISBLK(mode) || S_ISSOCK(mode); };
  std::string why = ::fstat(fd, &st) != 0 ? std::strerror(errno)
                    : special(st.st_mode) ? "not a file but a FIFO, socket or device"
                                          : journal_cache_io::read_all(fd, bytes);
  ::close(fd);
  if (!why.empty()) return unreadable(journal, file, why);
  JournalNames read = journal_names(bytes, file, link_of_);
  const std::string subject = "held-answers journal " + file;
  if (!read.known) {
    report(subject, read.problem,
           "what it names is unknown: this server deletes no row of the store while it is there");
  } else if (!read.problem.empty()) {
    report(subject, read.problem, "the rows those records name are not kept");
  } else {
    reported_.erase(subject);  // whole (or torn at its end) again: a new problem is reported anew
  }
  const bool changed = read.names != journal.names || read.known != journal.known;
  journal.stamp = journal_cache_io::stamp_of(st);
  journal.settled = journal.stamp.settled(now_ns);
  journal.known = read.known;
  journal.names = std::move(read.names);
  return changed;
}

bool JournalCache::unreadable(Journal& journal, const std::string& file, const std::string& why) {
  report("held-answers journal " + file, "cannot be read (" + why + ")",
         "what it names is unknown: this server deletes no row of the store while it cannot read it");
  const bool had = journal.known;
  journal = Journal{};
  journal.known = false;  // read again at the next check
  return had;
}

void JournalCache::report(const std::string& subject, const std::string& problem, const std::string& outcome) {
  std::string& last = reported_[subject];
  if (last == problem) return;
  last = problem;
  std::fprintf(stderr, "orbit serve: %s: %s; %s\n", subject.c_str(), problem.c_str(), outcome.c_str());
}

}  // namespace orbit::serve
