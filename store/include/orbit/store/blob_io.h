// File I/O for the disk tier: crash-safe blob writes and whole-file reads.
//
// A blob is written to a temp file beside its final path, hashed while written, given its trailer,
// fsync'd, renamed into place and the directory fsync'd: after write_blob_file returns ok the blob
// survives a crash (SIGKILL or power loss); before, at most a temp file is left behind (gc removes it).
// Thread-safe: functions keep no state; concurrent writes use distinct temp names.
#pragma once

#include <ATen/core/Tensor.h>

#include <sys/types.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "orbit/common/status.h"
#include "orbit/store/blob_format.h"

namespace orbit::store {

// Fault injection for tests (disk full, permission errors). Empty members mean the real system call.
struct IoHooks {
  // Replaces ::write(2) for blob files: return -1 with errno set to fail.
  std::function<ssize_t(int fd, const void* data, std::size_t size)> write;
  // Replaces ::fsync(2) for blob files and their directories.
  std::function<int(int fd)> fsync;
};

struct BlobWriteResult {
  std::string checksum;  // SHA-256 hex over the file without its trailer (== the trailer)
  uint64_t bytes = 0;    // file size
};

// Writes `blob` to `final_path` (its directory must exist) through a temp file beside it (".NAME.tmp"),
// fsync'd and renamed into place; the writer holds an flock on the temp from its creation until after the
// rename. On failure removes the temp file and returns out_of_capacity (ENOSPC, EDQUOT, EFBIG: the disk is
// full or a size limit was hit) or refused (any other errno, e.g. EACCES, EROFS, EIO), with a reason naming
// the path and the error.
Status write_blob_file(const std::string& final_path, const EncodedBlob& blob, const IoHooks& hooks,
                       BlobWriteResult* result);

// Unlinks the temp files write_blob_file left in the shards of `blobs_dir` (a store's DIR/blobs) whose writer
// is gone (killed mid-write: no process holds its flock), and returns how many. Safe while other processes
// write: a live writer's temp is locked and kept. Regular files named like its temps only; failures are
// skipped (a read-only store keeps its leftovers for `orbit store gc`).
int64_t remove_dead_temps(const std::string& blobs_dir);

// Reads a whole file into a uint8 [size] CPU tensor. not_found naming the path when it is missing (or
// shrank while read) or is a FIFO, socket, device or directory (in a blob's place: opened without blocking,
// never read); refused naming the path and the error when it could not be read now (out of file
// descriptors or memory, permission, an I/O error): no proof that the file is damaged. `expected` >= 0: a file of
// another size is not_found, its reason "size S != E in the index (truncated?)", before anything is allocated or read
// (a blob replaced by a huge or sparse file would otherwise be read whole first).
Result<at::Tensor> read_file_bytes(const std::string& path, int64_t expected = -1);

// mkdir -p for `path` with each newly created directory's parent fsync'd, and the parent of a directory
// found already there fsync'd once per process (another process may have made it and not synced its entry
// yet: a file synced into it would be lost with it in a power cut). Returns refused on failure.
Status ensure_directory(const std::string& path, const IoHooks& hooks);

// A unique suffix for file names: 16 hex characters, 64 random bits drawn for each name (getrandom). No state
// is kept: a process forked after drawing names draws others than its parent (a per-process seed and counter,
// copied by fork(), gave parent and child the same names, and one's put replaced and then deleted the other's
// committed blob).
std::string unique_nonce();

// The absolute path of the blob `relative` names in store `root` when it stays inside root/blobs, whose
// canonical path (symlinks resolved) is `blobs_root`; refused naming the path otherwise (absolute, a '..'
// component, not under blobs/, a symlink, or a directory symlink leading out).
Result<std::string> confine_blob_path(const std::string& root, const std::string& blobs_root,
                                      const std::string& relative);

// strerror_r as a std::string.
std::string errno_text(int error);

// An exclusive hold (flock) on store `root`'s LOCK file, for maintenance that must see no other process
// (gc, repair); released by the destructor. Throws orbit::Error naming the store and `operation` (and
// `why`, when given) if another process has the store open, or naming the LOCK file if it cannot be opened.
// `read_only` (a dry run, which writes nothing): LOCK is opened for reading, never created, so that a read-only
// directory or file system is no obstacle; a store without one holds nothing (every open of a store makes it).
class ExclusiveStoreLock {
 public:
  ExclusiveStoreLock(const std::string& root, const std::string& operation, const std::string& why = "",
                     bool read_only = false);
  ~ExclusiveStoreLock();
  ExclusiveStoreLock(const ExclusiveStoreLock&) = delete;
  ExclusiveStoreLock& operator=(const ExclusiveStoreLock&) = delete;

 private:
  int fd_ = -1;
};

// Status for a failed system call on `path`: out_of_capacity for ENOSPC/EDQUOT/EFBIG, refused otherwise.
Status io_failure(const std::string& what, const std::string& path, int error);

}  // namespace orbit::store
