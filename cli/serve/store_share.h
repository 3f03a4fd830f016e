// Which servers use a store directory. Two servers may share one `--store` (each reads the chunks the other
// writes); this makes that visible: each server holds an exclusive lock on its own file
// DIR/serve-<pid>.lock for its lifetime, so a server starting finds the others as the files it cannot lock
// (a file it can lock is left by a server that ended without removing it: removed).
//
// Thread-safety: construct and destroy on one thread.
#pragma once

#include <string>
#include <vector>

namespace orbit::serve {

class StoreShare {
 public:
  // "" (no store): nothing. Never throws: a directory it cannot mark is reported as not shared.
  explicit StoreShare(const std::string& dir);
  ~StoreShare();
  StoreShare(const StoreShare&) = delete;
  StoreShare& operator=(const StoreShare&) = delete;

  // The pids of the other servers that held the directory when this one marked it.
  const std::vector<int>& others() const { return others_; }
  // A line for stderr naming them, or "" when none.
  std::string notice(const std::string& dir) const;

 private:
  std::string path_;  // this server's lock file ("" when none)
  int fd_ = -1;
  std::vector<int> others_;
};

}  // namespace orbit::serve
