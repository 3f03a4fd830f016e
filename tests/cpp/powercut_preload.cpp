// A simulated disk for the power-cut test (test_store_powercut.cpp), preloaded (LD_PRELOAD) into writer
// processes: the only data that survives a cut is what was synced, in the spirit of SQLite's crash-test
// VFS but below every writer (the store's blob I/O and SQLite alike call fsync/fdatasync).
//
//   fsync(fd), fdatasync(fd) on a regular file   its whole content now  → SHADOW/<seq>.f<inode>
//                            on a directory      its entries now        → SHADOW/<seq>.d<inode>
//                                                                          ("name\tinode\tD|F" lines)
//
// <seq> counts syncs across every process sharing SHADOW (SHADOW/SEQ holds the last one), so the disk as
// a power cut right after sync k leaves it is, for every inode, its newest record with seq <= k.
// The real fsync is not called (the shadow is the disk). ORBIT_POWERCUT_SHADOW names the shadow
// directory; without it every call is the real one. ORBIT_POWERCUT_AT=N cuts the power at this process's
// Nth sync: it writes SHADOW/CUT and kills itself (SIGKILL) before recording that sync; every process
// that syncs after a CUT exists kills itself the same way, so nothing synced after the cut is recorded.
// Records are written under an flock of SHADOW/LOCK (one writer at a time across processes) to a temp
// file renamed into place.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::atomic<long> g_syncs{0};

bool write_whole(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
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

// Appends what `fd` reads from offset 0 on; false when it cannot be read (a write-only descriptor).
bool read_all(int fd, std::string* out) {
  char buffer[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buffer, static_cast<std::size_t>(n));
    at += n;
  }
}

// The file's whole content. Read through the writer's own descriptor when it can: opening and closing
// another descriptor of the file would drop every POSIX lock this process holds on it (SQLite's). A
// write-only descriptor (a blob being written, which nobody locks) is reopened for reading.
std::string file_bytes(int fd) {
  std::string out;
  if (read_all(fd, &out)) return out;
  out.clear();
  const int in = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0 || !read_all(in, &out)) ::abort();  // a file we cannot read: the test cannot model it
  ::close(in);
  return out;
}

std::string dir_entries(int fd) {
  const int copy = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (dir == nullptr) ::abort();
  std::string out;
  while (dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // removed meanwhile
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) continue;
    out += std::string(e->d_name) + "\t" + std::to_string(st.st_ino) + "\t" + (S_ISDIR(st.st_mode) ? "D" : "F") + "\n";
  }
  ::closedir(dir);
  return out;
}

long last_seq(const std::string& shadow) {
  const int fd = ::open((shadow + "/SEQ").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32] = {0};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return n > 0 ? std::atol(text) : 0;
}

int record_sync(int fd) {
  const char* shadow_env = std::getenv("ORBIT_POWERCUT_SHADOW");
  if (shadow_env == nullptr) return -2;  // not simulating: the caller does the real sync
  const std::string shadow = shadow_env;
  const int lock = ::open((shadow + "/LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) ::abort();
  const char* at = std::getenv("ORBIT_POWERCUT_AT");
  const long n = g_syncs.fetch_add(1) + 1;
  struct stat cut {};
  const bool already_cut = ::stat((shadow + "/CUT").c_str(), &cut) == 0;
  if (already_cut || (at != nullptr && n >= std::atol(at))) {
    if (!already_cut) put_record(shadow, "CUT", std::to_string(::getpid()) + "\n");
    ::kill(::getpid(), SIGKILL);  // the power is off: this sync never completes
    ::pause();
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(lock);
    errno = EBADF;
    return -1;
  }
  const long seq = last_seq(shadow) + 1;
  if (S_ISDIR(st.st_mode)) {
    put_record(shadow, std::to_string(seq) + ".d" + std::to_string(st.st_ino), dir_entries(fd));
  } else if (S_ISREG(st.st_mode)) {
    put_record(shadow, std::to_string(seq) + ".f" + std::to_string(st.st_ino), file_bytes(fd));
  }
  put_record(shadow, "SEQ", std::to_string(seq));
  ::close(lock);  // releases the flock
  return 0;
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
