#include "serve/store_share.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace orbit::serve {

namespace {

// The pid in "serve-<pid>.lock", or -1.
int pid_of(const std::string& name) {
  const std::string head = "serve-", tail = ".lock";
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return -1;
  }
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return digits.size() > 9 ? -1 : std::stoi(digits);
}

}  // namespace

StoreShare::StoreShare(const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const int pid = pid_of(e.path().filename().string());
    if (pid < 0 || pid == getpid()) continue;
    const int fd = open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      fs::remove(e.path(), ec);  // its server is gone
    } else {
      others_.push_back(pid);
    }
    close(fd);
  }
  std::sort(others_.begin(), others_.end());
  path_ = (fs::path(dir) / ("serve-" + std::to_string(getpid()) + ".lock")).string();
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ >= 0 && flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    close(fd_);
    fd_ = -1;
  }
  if (fd_ < 0) path_.clear();
}

StoreShare::~StoreShare() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
}

std::string StoreShare::notice(const std::string& dir) const {
  if (others_.empty()) return "";
  std::string pids;
  for (int p : others_) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
  return "orbit serve: note: the store " + dir + " is in use by " +
         (others_.size() == 1 ? "another orbit serve (pid " : "other orbit serve processes (pids ") + pids +
         "): they share it (each reads the chunks the other writes)\n";
}

}  // namespace orbit::serve
