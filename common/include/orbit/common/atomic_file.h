// Writing a user-named output file whole or not at all.
//
// The text goes to a temporary file beside the target (same directory, so the rename stays within one
// file system) and is renamed over it: a reader sees the old file or the new one, never a half-written
// one, and a failed write leaves the old file as it was. A target that is a character device (/dev/null, a
// terminal) is written to directly: there is no file to replace. Any other target that is not a regular file
// (a directory, a FIFO, whose open would wait for a reader, a block device, a socket) is refused
// (check_output_or_stream), never replaced. A symbolic link to a regular file is followed: the file it names is
// replaced, the link kept. A file replaced keeps its permission bits (and its owner where the writer may set it);
// being a new file, it no longer shares the old one's hard links. A temporary file a killed writer left beside the
// target is removed by the next write of it. Header-only.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"

namespace orbit {

// The file `target` replaces (when there is one) lends `tmp` its permission bits (a report made private stays
// private) and, where this process may set them, its owner and group.
inline void keep_mode_and_owner(const std::string& target, const std::string& tmp) {
  struct stat old {};
  if (::stat(target.c_str(), &old) != 0) return;  // a new file: the umask's mode, as any file created
  ::chmod(tmp.c_str(), old.st_mode & 07777);
  if (::chown(tmp.c_str(), old.st_uid, old.st_gid) != 0) {
    // Only root (or the owner, for a group it is in) may: the file is then the writer's, with the old mode.
  }
}

// Whether `file`'s data reached the disk (fsync), so that the rename never makes a file whose data a crash
// would lose; errno says why not.
inline bool synced(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  errno = err;
  return ok;
}

// Removes the temporary files beside `target` that writers of it which are gone left (`target`.tmp.<pid>, the pid
// no process's now: one killed while it wrote); a live writer's is left alone. Best effort: errors are ignored.
inline void remove_stale_temporaries(const std::string& target) {
  namespace fs = std::filesystem;
  const fs::path path(target);
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  fs::directory_iterator it(path.has_parent_path() ? path.parent_path() : fs::path("."), ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to know
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

// Replaces `path` with `text` atomically, or writes a character device (see above). `what` names the output in
// messages ("the replay report (--json)"). Throws orbit::Error naming `path` when the target is neither a
// regular file nor a character device, or the write or rename fails; the temporary file is removed on failure.
inline void write_file_atomically(const std::string& path, std::string_view text, const std::string& what) {
  check_output_or_stream(path, what);
  if (is_stream_target(path)) {
    std::ofstream out(path, std::ios::binary);
    ORBIT_CHECK(out.good(), path << ": cannot open " << what << ": " << std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    ORBIT_CHECK(out.good(), path << ": write error on " << what << ": " << std::strerror(errno));
    return;
  }
  std::error_code missing;
  const std::filesystem::path real = std::filesystem::canonical(path, missing);  // what a symbolic link names
  const std::string target = missing ? path : real.string();
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  remove_stale_temporaries(target);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ORBIT_CHECK(out.good(),
                path << ": cannot write " << what << " (temporary file " << tmp << "): " << std::strerror(errno));
    keep_mode_and_owner(target, tmp);  // before the text goes in: a private file's text is never readable by others
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out.good() || !synced(tmp)) {
      const int err = errno;
      std::remove(tmp.c_str());
      ORBIT_FAIL(path << ": write error on " << what << ": " << std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    ORBIT_FAIL(path << ": cannot move " << what << " into place: " << std::strerror(err));
  }
}

}  // namespace orbit
