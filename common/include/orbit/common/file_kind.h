// What kind of file a user-given path names, checked before it is opened or replaced.
//
// Opening a FIFO for reading blocks until a writer appears, and renaming a temporary file over a device
// or a FIFO replaces that special file (as root, `--out /dev/null` would destroy /dev/null). Inputs and
// outputs named by the user are therefore checked first. Header-only.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "orbit/common/error.h"

namespace orbit {

// "a directory", "a FIFO", "a character device", ... for a stat() mode.
inline const char* file_kind_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Throws orbit::Error unless `path` (following symlinks) is an existing regular file. `what` names the
// input in the message ("the trace file", "config.json"). Call before opening: never blocks.
inline void check_regular_input(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    ORBIT_FAIL(path << ": cannot open " << what << ": " << std::strerror(err));
  }
  ORBIT_CHECK(S_ISREG(st.st_mode),
              path << ": " << what << " must be a regular file, but this is " << file_kind_name(st.st_mode));
}

// Throws orbit::Error when `path` exists (following symlinks) and is not a regular file, so that writing
// a temporary file and renaming it over `path` cannot replace a device, a FIFO or a directory. A missing
// path is fine (it will be created). `what` names the output in the message ("the trace file").
inline void check_output_target(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing (or unreachable: the write will say why)
  ORBIT_CHECK(S_ISREG(st.st_mode), path << ": refusing to write " << what << " over " << file_kind_name(st.st_mode)
                                        << " (only a regular file is replaced)");
}

// True when `path` exists (following symlinks) as a character device (/dev/null, a terminal): an output is
// written to it as it is, never replaced. A FIFO is not one: its open waits for a reader, maybe forever.
inline bool is_stream_target(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// check_output_target, except that a character device (is_stream_target) is accepted: for outputs written
// with write_file_atomically (atomic_file.h), which writes one directly.
inline void check_output_or_stream(const std::string& path, const std::string& what) {
  if (!is_stream_target(path)) check_output_target(path, what);
}

}  // namespace orbit
