// The simulated disk's event log: powercut_preload.cpp appends to it inside the writer processes, the
// power-cut test (test_store_powercut.cpp) seeds it and replays it into the disk a cut leaves.
//
// SHADOW/EVENTS is a sequence of records, each an EventHeader, then `id_bytes` bytes of the file's id,
// then `length` bytes of data, appended in the order the events happened (under an flock of
// SHADOW/LOCK, which every writer process takes around each write and sync it reports):
//
//   type  kWrite     `length` bytes written at `offset` of the file
//         kTruncate  the file's size set to `offset`
//         kSync      fsync/fdatasync of a regular file: every event of the file before it is durable;
//                    `seq` is the sync's number (counted across every process sharing SHADOW)
//         kDirSync   fsync/fdatasync of a directory: its entries now are durable; the data is the
//                    listing, one "name\tid\tD|F\n" line an entry (directories and regular files only)
//
// A file's id is its inode number and birth time, so a renamed file keeps its id and a new file that
// reuses a freed inode number gets another.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace orbit::powercut {

enum class EventType : uint8_t { kWrite = 'W', kTruncate = 'T', kSync = 'S', kDirSync = 'D' };

constexpr uint32_t kEventMagic = 0x54554350;  // "PCUT"

struct EventHeader {
  uint32_t magic = kEventMagic;
  EventType type = EventType::kWrite;
  uint8_t id_bytes = 0;
  uint16_t unused = 0;
  int64_t seq = 0;     // kSync, kDirSync: the sync's number; 0 otherwise
  int64_t offset = 0;  // kWrite: where the data went; kTruncate: the new size
  int64_t length = 0;  // bytes of data after the id
};

// The record for one event, ready to append.
inline std::string encode_event(EventType type, const std::string& id, int64_t seq, int64_t offset, const void* data,
                                std::size_t length) {
  EventHeader h;
  h.type = type;
  h.id_bytes = static_cast<uint8_t>(id.size());
  h.seq = seq;
  h.offset = offset;
  h.length = static_cast<int64_t>(length);
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  out += id;
  out.append(static_cast<const char*>(data), length);
  return out;
}

// The id of `name` under `dirfd` (AT_EMPTY_PATH with "" names the descriptor itself); its st_mode in *mode.
// "" when it cannot be read.
inline std::string file_id(int dirfd, const char* name, int flags, unsigned* mode) {
  struct statx st {};
  if (::statx(dirfd, name, flags | AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO | STATX_BTIME, &st) != 0) return "";
  *mode = st.stx_mode;
  std::string id = std::to_string(st.stx_ino);
  if (st.stx_mask & STATX_BTIME) {
    id += "." + std::to_string(st.stx_btime.tv_sec) + "." + std::to_string(st.stx_btime.tv_nsec);
  }
  return id;
}

inline std::string fd_id(int fd, unsigned* mode) { return file_id(fd, "", AT_EMPTY_PATH, mode); }

// The directory open as `fd` as a kDirSync listing; false when it cannot be read.
inline bool directory_listing(int fd, std::string* out) {
  const int copy = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (dir == nullptr) {
    if (copy >= 0) ::close(copy);
    return false;
  }
  out->clear();
  while (dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    unsigned mode = 0;
    const std::string id = file_id(::dirfd(dir), e->d_name, 0, &mode);
    if (id.empty()) continue;  // removed meanwhile
    if (!S_ISDIR(mode) && !S_ISREG(mode)) continue;
    *out += std::string(e->d_name) + "\t" + id + "\t" + (S_ISDIR(mode) ? "D" : "F") + "\n";
  }
  ::closedir(dir);
  return true;
}

}  // namespace orbit::powercut
