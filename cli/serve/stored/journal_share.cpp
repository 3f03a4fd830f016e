#include "serve/stored/journal_share.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace orbit::serve {

JournalShare::JournalShare(const std::string& store_path, LinkOf link_of)
    : lock_path_(store_path + ".held.lock"), cache_(store_path, std::move(link_of)) {
  fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fd_ = ::open(lock_path_.c_str(), O_RDONLY | O_CLOEXEC);  // made by another server: a lock still
  if (fd_ < 0) error_ = "held-answers journals' lock " + lock_path_ + ": cannot open: " + std::strerror(errno);
}

JournalShare::~JournalShare() {
  if (fd_ >= 0) ::close(fd_);  // the file stays: removing it would let two servers lock two files
}

std::string JournalShare::lock() {
  if (fd_ < 0) return error_;
  mutex_.lock();
  int locked = -1;
  while ((locked = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const std::string why = "held-answers journals' lock " + lock_path_ + ": cannot lock: " + std::strerror(errno);
    mutex_.unlock();
    return why;
  }
  std::lock_guard<std::mutex> owner(owner_mutex_);
  owner_ = std::this_thread::get_id();
  return "";
}

void JournalShare::unlock() {
  {
    std::lock_guard<std::mutex> owner(owner_mutex_);
    if (owner_ != std::this_thread::get_id()) return;
    owner_ = std::thread::id();
  }
  fresh_ = false;  // a record added once the lock is gone is not in what was read
  ::flock(fd_, LOCK_UN);
  mutex_.unlock();
}

bool JournalShare::held() const {
  std::lock_guard<std::mutex> owner(owner_mutex_);
  return owner_ == std::this_thread::get_id();
}

bool JournalShare::named_elsewhere(const std::string& id, const std::string& own) {
  if (!held() && !lock().empty()) return true;  // not knowing what the others need, keep it
  if (!fresh_ || own_ != own) {
    cache_.refresh(own);
    own_ = own;
    fresh_ = true;
  }
  return cache_.keeps(id);
}

}  // namespace orbit::serve
