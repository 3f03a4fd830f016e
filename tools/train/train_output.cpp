#include "train_output.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "orbit/common/error.h"

namespace orbit::binding {

namespace fs = std::filesystem;

namespace {

const char* const kArg = "train_binding: argument '--out'";

bool is_output_file(const std::string& name) {
  for (const char* f : kOutputFiles) {
    if (name == f) return true;
  }
  return false;
}

// fsync of a file or directory; throws orbit::Error naming it.
void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  ORBIT_CHECK(fd >= 0, path << ": cannot open to sync: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  ORBIT_CHECK(rc == 0, path << ": cannot sync: " << std::strerror(err));
}

// Swaps the directories `a` and `b` in one step where the file system can; else renames b aside, a onto b
// and the old b to a (a moment without b, and the old b restored when the second rename fails).
void swap_directories(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return;
  ORBIT_CHECK(errno == EINVAL || errno == ENOSYS,
              "cannot exchange " << a << " with " << b << ": " << std::strerror(errno));
  const std::string aside = b + ".old-" + std::to_string(::getpid());
  ORBIT_CHECK(std::rename(b.c_str(), aside.c_str()) == 0,
              "cannot move " << b << " aside to " << aside << ": " << std::strerror(errno));
  if (std::rename(a.c_str(), b.c_str()) != 0) {
    const int err = errno;
    std::rename(aside.c_str(), b.c_str());
    ORBIT_FAIL("cannot move " << a << " to " << b << ": " << std::strerror(err));
  }
  ORBIT_CHECK(std::rename(aside.c_str(), a.c_str()) == 0,
              "cannot move " << aside << " to " << a << ": " << std::strerror(errno));
}

// `out` without a trailing separator and with "." and ".." segments resolved where they can be.
std::string normalised(const std::string& out) {
  fs::path p = fs::path(out).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  const std::string name = p.filename().string();
  ORBIT_CHECK(!name.empty() && name != "." && name != "..",
              kArg << " is '" << out << "': give the directory by a name of its own (e.g. ./runs/x)");
  return p.string();
}

// Removes what killed runs left beside `out`: <out>.incomplete-<pid> and <out>.old-<pid> of processes gone.
void remove_stale_siblings(const std::string& out) {
  const fs::path parent = fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path();
  const std::string name = fs::path(out).filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    std::string digits;
    for (const char* suffix : {".incomplete-", ".old-"}) {
      const std::string prefix = name + suffix;
      if (entry.size() > prefix.size() && entry.compare(0, prefix.size(), prefix) == 0)
        digits = entry.substr(prefix.size());
    }
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to know
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

}  // namespace

OutputDir::OutputDir(const std::string& out) {
  ORBIT_CHECK(!out.empty(), kArg << " is empty (give the directory to write the checkpoint to)");
  // "--out --steps" is caught by the parser; "--out --x" left the directory out by mistake.
  ORBIT_CHECK(out.rfind("--", 0) != 0, kArg << " is '" << out << "', which reads as an option (give ./" << out
                                            << " for a directory of that name)");
  out_ = normalised(out);
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(out_, ec);
  if (!fs::exists(link)) {
    cli::check_output_argument("train_binding", "--out", out_, "the checkpoint directory");
  } else {
    ORBIT_CHECK(!fs::is_symlink(link), kArg << " (" << out_ << ") is a symbolic link: give the directory it names");
    check_existing();
  }
  // The real test of writing beside --out (a read-only or pseudo file system passes access() as root).
  const std::string probe = out_ + ".incomplete-" + std::to_string(::getpid());
  ORBIT_CHECK(::mkdir(probe.c_str(), 0755) == 0,
              kArg << ": cannot make a directory beside " << out_ << " (" << probe << "): " << std::strerror(errno));
  ::rmdir(probe.c_str());
}

void OutputDir::check_existing() const {
  std::error_code ec;
  ORBIT_CHECK(fs::is_directory(out_, ec), kArg << " (" << out_ << ") exists and is not a directory");
  bool has_log = false;
  for (const fs::directory_entry& entry : fs::directory_iterator(out_, ec)) {
    const std::string name = entry.path().filename().string();
    ORBIT_CHECK(is_output_file(name) && entry.is_regular_file(ec),
                kArg << " (" << out_ << ") holds '" << name
                     << "', which train_binding does not write: give a new or empty directory (an earlier "
                        "train_binding output, holding only config.json, model.safetensors, train_log.json and "
                        "README.md, is replaced)");
    has_log = has_log || name == "train_log.json";
  }
  ORBIT_CHECK(!ec, kArg << " (" << out_ << "): cannot list it: " << ec.message());
  ORBIT_CHECK(::access(out_.c_str(), W_OK | X_OK) == 0,
              kArg << ": cannot replace " << out_ << ": " << std::strerror(errno));
  if (fs::is_empty(out_, ec)) return;
  nlohmann::json log;
  std::ifstream in(out_ + "/train_log.json");
  if (has_log) log = nlohmann::json::parse(in, nullptr, false);
  ORBIT_CHECK(log.is_object() && log.contains("command") && log.contains("fingerprint"),
              kArg << " (" << out_
                   << ") holds a checkpoint without train_binding's train_log.json: not an earlier train_binding "
                      "output, so it is not replaced; give a new or empty directory");
}

const std::string& OutputDir::stage() {
  remove_stale_siblings(out_);
  const std::string dir = out_ + ".incomplete-" + std::to_string(::getpid());
  ORBIT_CHECK(::mkdir(dir.c_str(), 0755) == 0, dir << ": cannot make the staging directory: " << std::strerror(errno));
  staging_ = dir;
  return staging_;
}

void OutputDir::commit() {
  ORBIT_CHECK(!staging_.empty(), "OutputDir::commit before stage");
  for (const fs::directory_entry& entry : fs::directory_iterator(staging_)) sync_path(entry.path().string(), false);
  sync_path(staging_, true);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out_, ec))) {
    ORBIT_CHECK(std::rename(staging_.c_str(), out_.c_str()) == 0,
                "cannot move " << staging_ << " to " << out_ << ": " << std::strerror(errno));
  } else {
    ORBIT_CHECK(!fs::is_symlink(fs::symlink_status(out_, ec)), kArg << " (" << out_ << ") became a symbolic link");
    check_existing();
    swap_directories(staging_, out_);
    fs::remove_all(staging_, ec);  // the earlier output; left behind (and named) if it cannot be removed
    if (ec)
      std::fprintf(stderr, "train_binding: could not remove the replaced output %s: %s\n", staging_.c_str(),
                   ec.message().c_str());
  }
  staging_.clear();
  const fs::path parent = fs::path(out_).parent_path();
  sync_path(parent.empty() ? std::string(".") : parent.string(), true);
}

}  // namespace orbit::binding
