#include "blob_files.h"

#include "orbit/common/error.h"

namespace orbit::store {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& name, const char* suffix, std::size_t n) {
  return name.size() > n && name.compare(name.size() - n, n, suffix) == 0;
}

// Lists `dir` into `out`, descending into its directories, never into one in a blob's place (repair drops its
// row, and gc must not take what it holds for dead temp files or blobs). A directory that cannot be listed is
// recorded, not skipped unseen.
void scan_directory(const fs::path& dir, BlobFiles& out) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    std::error_code type_error;
    if (!entry.is_symlink(type_error) && entry.is_directory(type_error)) {
      if (entry.path().extension() == ".blob") {
        out.blob_dirs.push_back(entry.path());
      } else {
        scan_directory(entry.path(), out);
      }
      continue;
    }
    if (!entry.is_regular_file(type_error)) continue;
    const std::string name = entry.path().filename().string();
    if (ends_with(name, ".tmp", 4)) {
      out.temps.push_back(entry.path());
    } else if (ends_with(name, ".blob", 5)) {
      out.blobs.push_back(entry.path());
    }
  }
  if (ec) out.unreadable_dirs.push_back(dir.string() + ": " + ec.message());
}

}  // namespace

BlobFiles scan_blobs(const std::string& root) {
  BlobFiles out;
  std::error_code ec;
  const fs::path blobs = fs::path(root) / "blobs";
  if (fs::is_directory(blobs, ec)) scan_directory(blobs, out);
  return out;
}

int64_t count_blob_files(const std::string& root) {
  const BlobFiles files = scan_blobs(root);
  ORBIT_CHECK(files.unreadable_dirs.empty(),
              "store " << root << ": cannot list " << files.unreadable_dirs.front()
                       << ", so whether blobs are there is unknown; make it readable by this user and try again");
  return static_cast<int64_t>(files.blobs.size());
}

}  // namespace orbit::store
