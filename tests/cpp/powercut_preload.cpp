// A simulated disk for the power-cut test (test_store_powercut.cpp), preloaded (LD_PRELOAD) into writer
// processes, in the spirit of SQLite's crash-test VFS but below every writer (the store's blob I/O and
// SQLite alike call write/pwrite, ftruncate and fsync/fdatasync).
//
// Every write, truncation and sync of a regular file, and every sync of a directory, is appended to
// SHADOW/EVENTS (powercut_events.h) in the order it happened, so the test can rebuild the disk as a power
// cut at any moment leaves it: what was synced, plus any subset of the pages written since, each as of
// some moment before the cut (partial and reordered write-back). Syncs are numbered across every process
// sharing SHADOW (SHADOW/SEQ holds the last number); the real fsync is not called (the log is the disk).
// ORBIT_POWERCUT_SHADOW names the shadow directory; without it every call is the real one.
//
// ORBIT_POWERCUT_AT=N cuts the power at this process's Nth sync: it writes SHADOW/CUT and kills itself
// (SIGKILL) before recording that sync; every process that writes or syncs after a CUT exists kills itself
// the same way, so nothing after the cut is recorded. Each reported call runs under a mutex of this
// process and an flock of SHADOW/LOCK (one process at a time), so the log's order is the order of the
// calls themselves. The shim's own output uses raw system calls (never the hooks).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "powercut_events.h"

namespace {

using orbit::powercut::EventType;

std::atomic<long> g_syncs{0};
std::mutex g_mu;  // an flock is held per open file description: threads of one process take this first
int g_lock_fd = -1, g_log_fd = -1;
pid_t g_owner = 0;  // the process that opened the two descriptors (a forked child opens its own)

ssize_t raw_write(int fd, const void* p, std::size_t n) { return static_cast<ssize_t>(::syscall(SYS_write, fd, p, n)); }

bool write_whole(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = raw_write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

void put_record(const std::string& shadow, const std::string& name, const std::string& bytes) {
  const std::string temp = shadow + "/." + name + "." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ::abort();
  if (!write_whole(fd, bytes.data(), bytes.size())) ::abort();
  ::close(fd);
  if (::rename(temp.c_str(), (shadow + "/" + name).c_str()) != 0) ::abort();
}

long last_seq(const std::string& shadow) {
  const int fd = ::open((shadow + "/SEQ").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32] = {0};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return n > 0 ? std::atol(text) : 0;
}

[[noreturn]] void power_off() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

// Holds the disk (this process's mutex, then the flock) for one reported call; the power is off (this
// process dies) when a cut happened already. errno is kept as the caller left it.
class Held {
 public:
  explicit Held(const std::string& shadow) : shadow_(shadow), lock_(g_mu) {
    const int saved = errno;
    if (g_owner != ::getpid()) {
      g_lock_fd = ::open((shadow + "/LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      g_log_fd = ::open((shadow + "/EVENTS").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (g_lock_fd < 0 || g_log_fd < 0) ::abort();
      g_owner = ::getpid();
    }
    if (::flock(g_lock_fd, LOCK_EX) != 0) ::abort();
    struct stat cut {};
    if (::stat((shadow + "/CUT").c_str(), &cut) == 0) power_off();
    errno = saved;
  }
  ~Held() {
    const int saved = errno;
    ::flock(g_lock_fd, LOCK_UN);
    errno = saved;
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

  void log(EventType type, const std::string& id, int64_t seq, int64_t offset, const void* data, std::size_t n) {
    const int saved = errno;
    const std::string record = orbit::powercut::encode_event(type, id, seq, offset, data, n);
    if (!write_whole(g_log_fd, record.data(), record.size())) ::abort();
    errno = saved;
  }
  const std::string& shadow() const { return shadow_; }

 private:
  std::string shadow_;
  std::lock_guard<std::mutex> lock_;
};

const char* shadow_dir() { return std::getenv("ORBIT_POWERCUT_SHADOW"); }

// The id of `fd` when it is a regular file and the disk is simulated; "" otherwise (a pipe, a socket,
// stdout on a terminal: not the disk).
std::string regular_file(int fd) {
  if (shadow_dir() == nullptr) return "";
  const int saved = errno;
  unsigned mode = 0;
  std::string id = orbit::powercut::fd_id(fd, &mode);
  errno = saved;
  return S_ISREG(mode) ? id : std::string();
}

int record_sync(int fd) {
  const char* shadow_env = shadow_dir();
  if (shadow_env == nullptr) return -2;  // not simulating: the caller does the real sync
  Held held(shadow_env);
  const char* at = std::getenv("ORBIT_POWERCUT_AT");
  const long n = g_syncs.fetch_add(1) + 1;
  if (at != nullptr && n >= std::atol(at)) {
    put_record(held.shadow(), "CUT", std::to_string(::getpid()) + "\n");
    power_off();  // the power is off: this sync never completes
  }
  unsigned mode = 0;
  const std::string id = orbit::powercut::fd_id(fd, &mode);
  if (id.empty()) {
    errno = EBADF;
    return -1;
  }
  const long seq = last_seq(held.shadow()) + 1;
  if (S_ISDIR(mode)) {
    std::string listing;
    if (!orbit::powercut::directory_listing(fd, &listing)) ::abort();
    held.log(EventType::kDirSync, id, seq, 0, listing.data(), listing.size());
  } else if (S_ISREG(mode)) {
    held.log(EventType::kSync, id, seq, 0, nullptr, 0);
  }
  put_record(held.shadow(), "SEQ", std::to_string(seq));
  return 0;
}

// Runs `write` (a real write at `offset`) with the disk held and logs the bytes it wrote.
template <class Write>
ssize_t logged_write(int fd, const void* data, int64_t offset, Write&& write) {
  const std::string id = regular_file(fd);
  if (id.empty()) return write();
  Held held(shadow_dir());
  const ssize_t n = write();
  if (n > 0) held.log(EventType::kWrite, id, 0, offset, data, static_cast<std::size_t>(n));
  return n;
}

// Where a write() through `fd` lands: its offset, or the end of the file for O_APPEND.
int64_t current_offset(int fd) {
  const int saved = errno;
  int64_t at = ::lseek(fd, 0, SEEK_CUR);
  if (::fcntl(fd, F_GETFL) & O_APPEND) {
    struct stat st {};
    at = ::fstat(fd, &st) == 0 ? st.st_size : at;
  }
  errno = saved;
  return at;
}

int logged_truncate(int fd, int64_t length) {
  const std::string id = regular_file(fd);
  if (id.empty()) return static_cast<int>(::syscall(SYS_ftruncate, fd, length));
  Held held(shadow_dir());
  const int r = static_cast<int>(::syscall(SYS_ftruncate, fd, length));
  if (r == 0) held.log(EventType::kTruncate, id, 0, length, nullptr, 0);
  return r;
}

}  // namespace

extern "C" int fsync(int fd) {
  const int r = record_sync(fd);
  return r == -2 ? static_cast<int>(::syscall(SYS_fsync, fd)) : r;
}

extern "C" int fdatasync(int fd) {
  const int r = record_sync(fd);
  return r == -2 ? static_cast<int>(::syscall(SYS_fdatasync, fd)) : r;
}

extern "C" ssize_t write(int fd, const void* data, size_t n) {
  if (shadow_dir() == nullptr) return raw_write(fd, data, n);
  // The offset is read with the disk held: no other reported write moves it meanwhile.
  const std::string id = regular_file(fd);
  if (id.empty()) return raw_write(fd, data, n);
  Held held(shadow_dir());
  const int64_t at = current_offset(fd);
  const ssize_t w = raw_write(fd, data, n);
  if (w > 0) held.log(EventType::kWrite, id, 0, at, data, static_cast<std::size_t>(w));
  return w;
}

extern "C" ssize_t pwrite(int fd, const void* data, size_t n, off_t offset) {
  return logged_write(fd, data, offset,
                      [&] { return static_cast<ssize_t>(::syscall(SYS_pwrite64, fd, data, n, offset)); });
}

extern "C" ssize_t pwrite64(int fd, const void* data, size_t n, off64_t offset) {
  return logged_write(fd, data, offset,
                      [&] { return static_cast<ssize_t>(::syscall(SYS_pwrite64, fd, data, n, offset)); });
}

// Gathered writes are logged as one write of the concatenated buffers.
extern "C" ssize_t writev(int fd, const struct iovec* iov, int count) {
  std::string joined;
  if (!regular_file(fd).empty()) {
    for (int i = 0; i < count; ++i) joined.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    return write(fd, joined.data(), joined.size());
  }
  return static_cast<ssize_t>(::syscall(SYS_writev, fd, iov, count));
}

extern "C" int ftruncate(int fd, off_t length) { return logged_truncate(fd, length); }

extern "C" int ftruncate64(int fd, off64_t length) { return logged_truncate(fd, length); }
