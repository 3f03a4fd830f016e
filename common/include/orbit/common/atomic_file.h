// Writing a user-named output file whole or not at all.
//
// The text goes to a temporary file beside the target (same directory, so the rename stays within one
// file system) and is renamed over it: a reader sees the old file or the new one, never a half-written
// one, and a failed write leaves the old file as it was. The target is first checked with
// check_output_target(), so a FIFO, a device or a directory is refused instead of replaced (and a FIFO
// is never opened, which would block until a reader appears). Header-only.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"

namespace orbit {

// Replaces `path` with `text` atomically (see above). `what` names the output in messages ("the replay
// report (--json)"). Throws orbit::Error naming `path` when the target is not a regular file or the
// write or rename fails; the temporary file is removed on failure.
inline void write_file_atomically(const std::string& path, std::string_view text, const std::string& what) {
  check_output_target(path, what);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
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
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    ORBIT_FAIL(path << ": cannot move " << what << " into place: " << std::strerror(err));
  }
}

}  // namespace orbit
