// The files under a store's blobs/ directory, listed by everything that counts or reads them all (ls, stat, verify,
// gc, repair, the disk tier's check of a missing index). Internal to orbit::store.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace orbit::store {

struct BlobFiles {
  std::vector<std::filesystem::path> blobs;      // *.blob files (a symlink to a file counts under its own name)
  std::vector<std::filesystem::path> temps;      // *.tmp files (writes that never completed)
  std::vector<std::filesystem::path> blob_dirs;  // directories in a blob's place (*.blob), never looked into
  // Directories under blobs/ (blobs/ itself included) that could not be listed ("<path>: <reason>"): what they
  // hold is in none of the lists above, so a count or a rebuild from these lists would read as complete.
  std::vector<std::string> unreadable_dirs;
};

// Lists `root`/blobs recursively (symlinked directories are not followed). Empty lists when there is no blobs/.
BlobFiles scan_blobs(const std::string& root);

// The number of *.blob files under `root`/blobs, for a check that refuses to open a store whose index was lost
// while blobs remain. Throws orbit::Error naming the first directory that cannot be listed: the count cannot
// say "no blobs" then, and a store opened as empty over them would let gc remove them.
int64_t count_blob_files(const std::string& root);

}  // namespace orbit::store
