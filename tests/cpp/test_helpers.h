// Shared helpers for the C++ tests: temp directories, the bundled model path, small utilities.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace orbit::test {

inline std::string stories_path() { return std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin"; }

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("orbit-test-" + std::to_string(stamp) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The largest |a[i] - b[i]| (logits rows, KV values); throws when the sizes differ.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("max_abs_diff: sizes differ");
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

// The largest |a − b| over the keys and values of layers from `from_layer` on (a chunk's content: one {k, v} per
// layer).
template <class Layers>
double content_diff(const Layers& a, const Layers& b, std::size_t from_layer = 0) {
  double worst = 0.0;
  for (std::size_t l = from_layer; l < a.size(); ++l) {
    worst = std::max({worst, max_abs_diff(a[l].k, b[l].k), max_abs_diff(a[l].v, b[l].v)});
  }
  return worst;
}

// n token ids drawn uniformly from [1, vocab).
template <class Rng>
std::vector<int64_t> random_tokens(Rng& rng, int64_t n, int64_t vocab = 512) {
  std::uniform_int_distribution<int64_t> d(1, vocab - 1);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace orbit::test

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>

namespace orbit::test {

struct CliRun {
  int status = -1;  // exit status (-1 when killed by a signal)
  std::string out;  // stdout and stderr together
};

// Runs a shell command and captures its output and exit status.
inline CliRun run_command(const std::string& command) {
  CliRun r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// What to put before a command so that file modes bind it: as root (who writes through them) "setpriv ..." that runs
// it as nobody, otherwise "". Throws std::runtime_error as root without setpriv.
inline std::string as_unprivileged() {
  if (::geteuid() != 0) return "";
  if (run_command("command -v setpriv").status != 0) {
    throw std::runtime_error("running as root, and no setpriv to run a command as nobody");
  }
  return "setpriv --reuid=65534 --regid=65534 --clear-groups ";
}

// Takes the write bits (owner, group, others) off `dir` and everything below it, or (`writable`) gives them back.
inline void set_tree_writable(const std::string& dir, bool writable) {
  namespace fs = std::filesystem;
  const auto bits = fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write;
  const fs::perm_options how = writable ? fs::perm_options::add : fs::perm_options::remove;
  for (const auto& e : fs::recursive_directory_iterator(dir)) fs::permissions(e.path(), bits, how);
  fs::permissions(dir, bits, how);
}

#ifdef ORBIT_CLI_PATH
// Runs the built `orbit` CLI with `args` (a shell fragment).
inline CliRun cli(const std::string& args) { return run_command(std::string(ORBIT_CLI_PATH) + " " + args); }
#endif

}  // namespace orbit::test
