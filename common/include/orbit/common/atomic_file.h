// Writing a user-named output file whole or not at all.
//
// The text goes to a temporary file beside the target (same directory, so the rename stays within one
// file system) and is renamed over it: a reader sees the old file or the new one, never a half-written
// one, and a failed write leaves the old file as it was. A target that is a character device (/dev/null, a
// terminal) is written to directly: there is no file to replace. Any other target that is not a regular file
// (a directory, a FIFO, whose open would wait for a reader, a block device, a socket) is refused
// (check_output_or_stream), never replaced. A symbolic link to a regular file is followed: the file it names is
// replaced, the link kept. Header-only.
#pragma once

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
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ORBIT_CHECK(out.good(),
                path << ": cannot write " << what << " (temporary file " << tmp << "): " << std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out.good()) {
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
