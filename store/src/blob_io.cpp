#include "orbit/store/blob_io.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include "blobs_root.h"
#include "orbit/common/error.h"
#include "orbit/common/sha256.h"

namespace orbit::store {

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

int do_fsync(const IoHooks& hooks, int fd) { return hooks.fsync ? hooks.fsync(fd) : ::fsync(fd); }

// Writes all of [data, data + size); returns 0 or the errno of the failure.
int write_all(const IoHooks& hooks, int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const std::size_t step = size < (std::size_t{1} << 30) ? size : (std::size_t{1} << 30);
    const ssize_t n = hooks.write ? hooks.write(fd, p, step) : ::write(fd, p, step);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

int fsync_directory(const IoHooks& hooks, const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  return do_fsync(hooks, fd.get()) == 0 ? 0 : errno;
}

}  // namespace

std::string errno_text(int error) {
  char buffer[256];
  // GNU strerror_r returns the message (possibly not in buffer).
  return std::string(strerror_r(error, buffer, sizeof buffer));
}

ExclusiveStoreLock::ExclusiveStoreLock(const std::string& root, const std::string& operation, const std::string& why,
                                       bool read_only) {
  const std::string lock_path = root + "/LOCK";
  // flock needs no write access: a read-only descriptor takes the same exclusive hold.
  fd_ = read_only ? ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC)
                  : ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0 && read_only && errno == ENOENT) return;  // no LOCK: no process has the store open
  ORBIT_CHECK(fd_ >= 0, "store " << root << ": cannot open " << lock_path << ": " << errno_text(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    // flock conflicts between open files, not processes: an engine of this process holds it as well.
    ORBIT_CHECK(false, "store " << root
                                << " is open (an engine or store in this or another process holds it); close it before "
                                << operation << " (" << lock_path << ")" << (why.empty() ? "" : ": " + why));
  }
}

ExclusiveStoreLock::~ExclusiveStoreLock() {
  if (fd_ >= 0) ::close(fd_);
}

Status io_failure(const std::string& what, const std::string& path, int error) {
  const std::string reason = what + " " + path + ": " + errno_text(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) return Status::out_of_capacity(reason);
  return Status::refused(reason);
}

std::string unique_nonce() {
  uint64_t value = 0;
  ssize_t got = -1;
  do {
    got = ::getrandom(&value, sizeof value, 0);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof value)) {  // no getrandom (an old kernel): the C++ library's device
    std::random_device device;
    value = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

namespace {

// Creates `temp` (O_EXCL) and takes its writer's flock, held until the fd closes (after the rename): how
// remove_dead_temps() tells a live write from a dead one's leftover. A temp that a sweep unlinked between
// this open and the flock (it took the flock first) is created again. -1 with errno set on failure.
int create_locked_temp(const std::string& temp) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return -1;
    int locked = 0;
    while ((locked = ::flock(fd.get(), LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (locked != 0) {
      const int error = errno;
      ::unlink(temp.c_str());
      errno = error;
      return -1;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      const int error = errno;
      ::unlink(temp.c_str());
      errno = error;
      return -1;
    }
    if (st.st_nlink > 0) return fd.release();
    // swept meanwhile: the name is free again, make it anew
  }
  errno = EAGAIN;
  return -1;
}

}  // namespace

Status write_blob_file(const std::string& final_path, const EncodedBlob& blob, const IoHooks& hooks,
                       BlobWriteResult* result) {
  const std::filesystem::path target(final_path);
  const std::string dir = target.parent_path().string();
  const std::string temp = (target.parent_path() / ("." + target.filename().string() + ".tmp")).string();
  // The fd (and its flock) stays open until the temp is renamed, so a sweep never takes it for a dead one.
  Fd fd(create_locked_temp(temp));
  if (fd.get() < 0) return io_failure("disk tier: cannot create", temp, errno);
  auto fail = [&](const char* what, int error) {
    ::unlink(temp.c_str());
    ::close(fd.release());
    return io_failure(what, temp, error);
  };
  Sha256 hash;
  int error = write_all(hooks, fd.get(), blob.head.data(), blob.head.size());
  hash.update(blob.head.data(), blob.head.size());
  for (std::size_t i = 0; i < blob.pieces.size() && error == 0; ++i) {
    error = write_all(hooks, fd.get(), blob.pieces[i].first, blob.pieces[i].second);
    hash.update(blob.pieces[i].first, blob.pieces[i].second);
  }
  if (error != 0) return fail("disk tier: cannot write", error);
  const std::string checksum = hash.hex_digest();
  error = write_all(hooks, fd.get(), checksum.data(), checksum.size());
  if (error != 0) return fail("disk tier: cannot write", error);
  if (do_fsync(hooks, fd.get()) != 0) return fail("disk tier: cannot fsync", errno);
  if (::rename(temp.c_str(), final_path.c_str()) != 0) return fail("disk tier: cannot rename into", errno);
  if (::close(fd.release()) != 0) {
    const int e = errno;
    ::unlink(final_path.c_str());
    return io_failure("disk tier: cannot close", final_path, e);
  }
  if ((error = fsync_directory(hooks, dir)) != 0) {
    // The blob is complete but its name may not survive a power loss: undo, so no row ever names it.
    ::unlink(final_path.c_str());
    return io_failure("disk tier: cannot fsync directory", dir, error);
  }
  result->checksum = checksum;
  result->bytes = blob.size();
  return Status::ok();
}

int64_t remove_dead_temps(const std::string& blobs_dir) {
  int64_t removed = 0;
  std::error_code ec;
  for (const auto& shard : std::filesystem::directory_iterator(blobs_dir, ec)) {
    std::error_code shard_error;
    // Only the two-hex-digit shards blob writes use; a directory in a blob's place is never looked into.
    const std::string shard_name = shard.path().filename().string();
    if (shard_name.size() != 2 || !shard.is_directory(shard_error) || shard.is_symlink(shard_error)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(shard.path(), shard_error)) {
      const std::string name = entry.path().filename().string();
      const bool temp = name.size() > 10 && name[0] == '.' && name.compare(name.size() - 9, 9, ".blob.tmp") == 0;
      if (!temp) continue;
      // O_NOFOLLOW | O_NONBLOCK: a symlink or a FIFO under that name is not a temp of ours and is left alone.
      Fd fd(::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
      struct stat st {};
      if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its writer lives
      // Ours now: its writer died (or has not taken the flock yet: create_locked_temp makes it again).
      if (::unlink(entry.path().c_str()) == 0) ++removed;
    }
  }
  return removed;
}

namespace {

// A failed open/stat/read of `path`: not_found when the file is not there, refused (transient, or at least
// not a proof of damage: EMFILE, ENFILE, ENOMEM, EACCES, EIO, ...) otherwise.
Status read_failure(const char* what, const std::string& path, int error) {
  const std::string reason = std::string(what) + " " + path + ": " + errno_text(error);
  if (error == ENOENT || error == ENOTDIR) return Status::not_found(reason);
  return Status::refused(reason);
}

// What a file of mode `mode` that is not a regular file is, for a message.
const char* file_type_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

}  // namespace

Result<at::Tensor> read_file_bytes(const std::string& path, int64_t expected) {
  // O_NONBLOCK: a FIFO put where a blob was must not block the open until a writer comes (it is reported
  // below); it changes nothing for a regular file.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int error = errno;
    // open() refuses a socket (and a device without its driver) with ENXIO: damage, as below, not a failed read.
    struct stat special {};
    if (error == ENXIO && ::stat(path.c_str(), &special) == 0 && !S_ISREG(special.st_mode) &&
        !S_ISDIR(special.st_mode)) {
      return Status::not_found("cannot read " + path + ": it is " + file_type_name(special.st_mode) +
                               ", not a blob file");
    }
    return read_failure("cannot open", path, error);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return read_failure("cannot stat", path, errno);
  // A FIFO, socket, device or directory where a blob was is damage, not a failed read: it will not read next
  // time either, so it is not_found (marked corrupt, recomputed and written again under a new name; verify
  // calls it bad; repair drops its row and moves a directory to DIR/quarantine/). A directory's read() would
  // fail with EISDIR, which taken as a failed read kept the entry, and verify's report of it, for good.
  if (!S_ISREG(st.st_mode)) {
    return Status::not_found("cannot read " + path + ": it is " + file_type_name(st.st_mode) + ", not a blob file");
  }
  if (expected >= 0 && static_cast<int64_t>(st.st_size) != expected) {
    return Status::not_found("size " + std::to_string(st.st_size) + " != " + std::to_string(expected) +
                             " in the index (truncated?)");
  }
  at::Tensor bytes = at::empty({static_cast<int64_t>(st.st_size)}, at::TensorOptions().dtype(at::kByte));
  char* p = static_cast<char*>(bytes.data_ptr());
  std::size_t left = static_cast<std::size_t>(st.st_size);
  while (left > 0) {
    const ssize_t n = ::read(fd.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return read_failure("cannot read", path, errno);
    if (n == 0) return Status::not_found("cannot read " + path + ": file shrank while reading");
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return bytes;
}

namespace {

// The directories whose entry in their parent this process has synced. A directory that exists is not yet
// durable: another process (or thread) may have made it and not yet synced its parent, and a file written
// into it and synced is lost with it in a power cut. So each directory's parent is synced once by every
// process that writes under it, before its first file. (orbit never removes a blob directory: gc and repair
// remove files only.)
class SyncedDirectories {
 public:
  bool contains(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    return synced_.count(path) != 0;
  }
  void add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    synced_.insert(path);
  }

 private:
  std::mutex mutex_;
  std::set<std::string> synced_;
};

SyncedDirectories& synced_directories() {
  static SyncedDirectories* directories = new SyncedDirectories();  // outlives every static store
  return *directories;
}

}  // namespace

Status ensure_directory(const std::string& path, const IoHooks& hooks) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (exists && synced_directories().contains(path)) return Status::ok();
  const std::filesystem::path p(path);
  if (!exists) {
    if (p.has_parent_path() && p.parent_path() != p) {
      Status parent = ensure_directory(p.parent_path().string(), hooks);
      if (!parent) return parent;
    }
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return io_failure("cannot create directory", path, errno);
    }
  }
  if (p.has_parent_path()) {
    const int error = fsync_directory(hooks, p.parent_path().string());
    if (error != 0) return io_failure("cannot fsync directory", p.parent_path().string(), error);
  }
  synced_directories().add(path);
  return Status::ok();
}

Result<std::string> confine_blob_path(const std::string& root, const std::string& blobs_root,
                                      const std::string& relative) {
  namespace fs = std::filesystem;
  const fs::path rel(relative);
  auto refuse = [&](const std::string& why) {
    return Status::refused("store " + root + ": blob path '" + relative + "' " + why +
                           " (every blob must stay inside " + root + "/blobs)");
  };
  if (relative.empty() || rel.is_absolute()) return refuse("is absolute or empty");
  for (const fs::path& part : rel) {
    if (part == "..") return refuse("contains '..'");
  }
  if (relative.compare(0, 6, "blobs/") != 0) return refuse("is not under blobs/");
  const std::string path = root + "/" + relative;
  std::error_code ec;
  const std::string parent = fs::weakly_canonical(fs::path(path).parent_path(), ec).string();
  if (ec) return refuse("cannot be resolved: " + ec.message());
  if (parent != blobs_root && parent.compare(0, blobs_root.size() + 1, blobs_root + "/") != 0) {
    return refuse("leads out of the store through a symlink (to " + parent + ")");
  }
  if (fs::is_symlink(fs::symlink_status(path, ec))) return refuse("is a symlink");
  return path;
}

Result<std::string> resolve_blobs_root(const std::string& root) {
  namespace fs = std::filesystem;
  const std::string blobs = root + "/blobs";
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(blobs, ec);
  if (ec || !fs::exists(link)) return Status::not_found("store " + root + ": " + blobs + " does not exist");
  if (fs::is_symlink(link)) {
    const std::string target = fs::read_symlink(blobs, ec).string();
    return Status::refused("store " + root + ": " + blobs + " is a symlink (to " + target +
                           "); blobs must be a directory inside the store, so that no write or removal leaves it");
  }
  const fs::path inside = fs::canonical(root, ec) / "blobs";
  if (ec) return Status::refused("store " + root + ": cannot resolve " + root + ": " + ec.message());
  const fs::path resolved = fs::canonical(blobs, ec);
  if (ec) return Status::refused("store " + root + ": cannot resolve " + blobs + ": " + ec.message());
  if (resolved != inside) {
    return Status::refused("store " + root + ": " + blobs + " resolves to " + resolved.string() +
                           ", not a directory inside the store");
  }
  if (!fs::is_directory(resolved)) {
    return Status::refused("store " + root + ": " + blobs + " is not a directory (it is " +
                           (fs::is_regular_file(resolved) ? "a regular file" : "neither a file nor a directory") +
                           "); move it aside");
  }
  return resolved.string();
}

}  // namespace orbit::store
