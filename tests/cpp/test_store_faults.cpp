// The chunk store, part 3: faults. Corrupt, truncated and missing blobs; disk-full, permission and
// descriptor errors injected through the I/O hooks; many threads on overlapping keys; verify and repair on
// unreadable blobs and on directories and sockets in a blob's place. Crashes are part 4 (test_store_crashes.cpp).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "inspect_verify.h"  // store/src: verify_rows
#include "orbit/common/error.h"
#include "orbit/store/blob_io.h"
#include "orbit/store/chunk_store.h"
#include "test_helpers.h"
#include "test_store_checks.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)
namespace fs = std::filesystem;

namespace {

std::string blob_path(const std::string& dir, int64_t i) {
  for (const StoreEntryInfo& e : list_store(dir)) {
    if (e.key == key(i)) return e.blob_path;
  }
  FAIL("no blob for entry " << i);
  return {};
}

int64_t temp_files(const std::string& dir) { return summarize_store(dir).temp_files; }

}  // namespace

TEST_CASE("a process forked after naming blobs names others than its parent", "[store][cpu]") {
  // A parent and child that share a store and put the same key: with the same names, the second put's rename
  // replaced the first's committed blob, and then deleted it as its own (the row found committed already).
  (void)unique_nonce();  // the parent has named a blob before the fork
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const std::string name = unique_nonce();
    const ssize_t n = ::write(pipe_fds[1], name.data(), name.size());
    ::_exit(n == static_cast<ssize_t>(name.size()) ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  char text[32] = {};
  const ssize_t n = ::read(pipe_fds[0], text, sizeof text - 1);
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(n == 16);
  const std::string parent = unique_nonce();
  CHECK(std::string(text, 16) != parent);
  CHECK(parent != unique_nonce());
}

TEST_CASE("a blob replaced by a huge file is a miss, not read whole first", "[store][cpu]") {
  // A sparse file of 1 TiB where a blob was: the read allocated its size before comparing it with the row's
  // (std::bad_alloc out of get); it is compared first now.
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStore store(disk_options(d));
  REQUIRE(store.put(key(1), test::store_test_value(1), PutOptions{StoreTier::kDisk}).is_ok());
  const std::string path = blob_path(d, 1);
  fs::resize_file(path, std::uintmax_t{1} << 40);
  Result<ValuePtr> r = store.get(key(1));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK_THAT(r.status().reason(), Contains("corrupt blob") && Contains(path) && Contains("1099511627776 != "));
  CHECK(store.stats().corrupt_reads == 1);
}

TEST_CASE("a corrupt, truncated or missing blob is a reported miss; the store stays usable", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStore store(disk_options(d));
  const PutOptions disk_only{StoreTier::kDisk};
  for (int64_t i = 1; i <= 4; ++i) REQUIRE(store.put(key(i), test::store_test_value(i), disk_only).is_ok());
  const std::string flipped = blob_path(d, 1), truncated = blob_path(d, 2), missing = blob_path(d, 3);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(flipped) / 2));
    f.put('\x55');
  }
  fs::resize_file(truncated, fs::file_size(truncated) - 100);
  fs::remove(missing);

  Result<ValuePtr> r1 = store.get(key(1));
  REQUIRE_FALSE(r1.is_ok());
  CHECK(r1.status().code() == StatusCode::kNotFound);
  CHECK_THAT(r1.status().reason(), Contains(key(1)) && Contains(flipped) && Contains("checksum"));
  CHECK_THAT(store.get(key(2)).status().reason(), Contains(key(2)) && Contains(truncated) && Contains("truncated"));
  CHECK_THAT(store.get(key(3)).status().reason(), Contains(key(3)) && Contains(missing) && Contains("cannot open"));
  const std::vector<StoreFault> faults = store.faults();
  REQUIRE(faults.size() == 3);
  CHECK(faults[0].key == key(1));
  CHECK(faults[0].path == flipped);
  CHECK(store.stats().corrupt_reads == 3);
  CHECK_FALSE(store.contains(key(1)));  // a miss from now on, not a retry storm
  store.verify_integrity(true);

  // Still usable: the intact entry reads, new entries write, a rewrite heals a corrupt one.
  CHECK(values_equal(*store.get(key(4)).value(), *test::store_test_value(4)));
  REQUIRE(store.put(key(5), test::store_test_value(5)).is_ok());
  const VerifyReport before = verify_store(d);
  CHECK(before.problems.size() == 3);
  REQUIRE(store.put(key(1), test::store_test_value(1)).is_ok());
  CHECK(values_equal(*store.get(key(1)).value(), *test::store_test_value(1)));
  CHECK_FALSE(fs::exists(flipped));  // the replaced blob is gone
  CHECK(verify_store(d).problems.size() == 2);
}

TEST_CASE("a blob directory another process made is synced into its parent before the first file", "[store][cpu]") {
  // Process A makes blobs/79 and is descheduled before it syncs blobs/; process B finds blobs/79, writes its blob
  // there, syncs the blob and blobs/79 and commits its row; a power cut then loses the entry "79" in blobs/ and
  // B's committed blob with it (test_store_powercut met this under load). B must sync blobs/ itself, once.
  test::TempDir dir;
  const fs::path blobs = dir.path() / "blobs";
  const fs::path shard = blobs / "79";
  fs::create_directories(shard);  // A's mkdir, its parent not synced
  std::vector<std::string> synced;
  IoHooks hooks;
  hooks.fsync = [&](int fd) {
    synced.push_back(fs::read_symlink("/proc/self/fd/" + std::to_string(fd)).string());
    return ::fsync(fd);
  };
  REQUIRE(ensure_directory(shard.string(), hooks).is_ok());
  CHECK(synced == std::vector<std::string>{fs::canonical(blobs).string()});
  REQUIRE(ensure_directory(shard.string(), hooks).is_ok());  // once per process
  CHECK(synced.size() == 1);
  // Made here: blobs/ is synced for it, and blobs/'s own parent for blobs/ (found there, not yet synced here).
  REQUIRE(ensure_directory((blobs / "7a").string(), hooks).is_ok());
  CHECK(synced == std::vector<std::string>{fs::canonical(blobs).string(), fs::canonical(dir.path()).string(),
                                           fs::canonical(blobs).string()});
  REQUIRE(ensure_directory((blobs / "7a").string(), hooks).is_ok());
  CHECK(synced.size() == 3);
}

TEST_CASE("a store moved or removed while open gets no more writes at its old path", "[store][cpu]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "s").string(), moved = (dir.path() / "moved").string();
  for (const bool remove : {false, true}) {
    INFO((remove ? "removed" : "moved"));
    ChunkStoreOptions o = disk_options(path);
    o.warn_disk_errors = false;
    ChunkStore store(o);
    REQUIRE(store.put(key(1), test::store_test_value(1)).is_ok());
    if (remove) {
      fs::remove_all(path);
    } else {
      fs::rename(path, moved);
    }
    (void)store.put(key(2), test::store_test_value(2));  // kept in memory; the disk write refused
    const StoreStats stats = store.stats();
    CHECK(stats.disk_degraded);
    CHECK(stats.io_errors >= 1);
    CHECK_FALSE(fs::exists(path));  // not made again
    CHECK(store.get(key(2)).is_ok());
    if (!remove) {
      const VerifyReport report = verify_store(moved);  // the moved store is whole: one entry, nothing stray
      CHECK(report.problems.empty());
      CHECK(report.checked == 1);
      CHECK(report.unreferenced_blobs == 0);
      fs::remove_all(moved);
    }
  }
}

TEST_CASE("disk full and permission errors are clear errors that leave the index consistent", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  auto fail_with = std::make_shared<std::atomic<int>>(0);       // errno to inject, 0 = none
  auto bytes_left = std::make_shared<std::atomic<int64_t>>(0);  // bytes written before the failure
  ChunkStoreOptions o = disk_options(d);
  o.io_hooks.write = [fail_with, bytes_left](int fd, const void* data, std::size_t size) -> ssize_t {
    if (*fail_with != 0) {
      if (*bytes_left <= 0) {
        errno = *fail_with;
        return -1;
      }
      size = std::min<std::size_t>(size, static_cast<std::size_t>(bytes_left->load()));
      *bytes_left -= static_cast<int64_t>(size);
    }
    return ::write(fd, data, size);
  };
  o.io_hooks.fsync = [fail_with](int fd) -> int {
    if (*fail_with == EIO) {
      errno = EIO;
      return -1;
    }
    return ::fsync(fd);
  };
  ChunkStore store(o);
  for (int64_t i = 1; i <= 3; ++i) REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());

  *fail_with = ENOSPC;
  *bytes_left = 10000;  // the disk fills in the middle of the blob
  // A failed disk write does not lose the value: it is kept in memory (not durable), and stats() says so.
  CHECK(store.put(key(5), test::store_test_value(5)).is_ok());
  StoreStats stats = store.stats();
  CHECK(stats.disk_degraded);
  CHECK_THAT(stats.disk_warning, Contains("No space left on device") && Contains(".tmp") && Contains(d));
  *fail_with = EROFS;
  *bytes_left = 0;
  CHECK(store.put(key(6), test::store_test_value(6)).is_ok());
  CHECK_THAT(store.stats().disk_warning, Contains("Read-only file system"));
  *fail_with = EIO;
  *bytes_left = int64_t{1} << 40;
  CHECK(store.put(key(7), test::store_test_value(7)).is_ok());
  CHECK_THAT(store.stats().disk_warning, Contains("fsync") && Contains("Input/output error"));

  CHECK(store.stats().io_errors == 3);
  for (int64_t i : {5, 6, 7}) {
    CHECK(store.residence(key(i)) == StoreTier::kHost);  // served from memory
    CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  }
  CHECK(temp_files(d) == 0);  // failed writes clean up after themselves
  store.verify_integrity(/*deep=*/true);
  CHECK(verify_store(d).clean());
  CHECK(list_store(d).size() == 3);  // nothing half-written reached the index
  for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));

  *fail_with = 0;  // space again: the next successful write makes every memory-only entry durable
  REQUIRE(store.put(key(5), test::store_test_value(5)).is_ok());
  CHECK_FALSE(store.stats().disk_degraded);
  CHECK(list_store(d).size() == 6);
  CHECK(values_equal(*store.get(key(5)).value(), *test::store_test_value(5)));
}

namespace {

// Disk-tier options whose blob writes fail with ENOSPC while *full is true.
ChunkStoreOptions filling_disk_options(const std::string& dir, const std::shared_ptr<std::atomic<bool>>& full) {
  ChunkStoreOptions o = disk_options(dir);
  o.host_budget_bytes = int64_t{64} << 20;
  o.warn_disk_errors = false;
  o.io_hooks.write = [full](int fd, const void* data, std::size_t size) -> ssize_t {
    if (*full) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, size);
  };
  return o;
}

}  // namespace

TEST_CASE("entries put while the disk was full are written back when it frees up", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  auto full = std::make_shared<std::atomic<bool>>(false);
  {
    ChunkStore store(filling_disk_options(d, full));
    REQUIRE(store.put(key(1), test::store_test_value(1)).is_ok());
    *full = true;
    for (int64_t i = 2; i <= 6; ++i) REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
    CHECK(store.memory_only_entries() == 5);
    const Status pending = store.flush();  // what close() would lose now
    CHECK(pending.code() == StatusCode::kOutOfCapacity);
    CHECK_THAT(pending.reason(),
               Contains("5 entries are held only in memory") && Contains("No space left") && Contains(d));

    *full = false;  // space again: the next write brings the other five along before the flag clears
    REQUIRE(store.put(key(7), test::store_test_value(7)).is_ok());
    CHECK_FALSE(store.stats().disk_degraded);
    CHECK(store.memory_only_entries() == 0);
    CHECK(list_store(d).size() == 7);

    *full = true;  // and once more, recovered by flush() alone (what close() runs) with no later put
    for (int64_t i = 8; i <= 9; ++i) REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
    *full = false;
    CHECK(store.flush().is_ok());
    CHECK_FALSE(store.stats().disk_degraded);
    store.verify_integrity(true);
  }
  ChunkStore reopened(disk_options(d));
  for (int64_t i = 1; i <= 9; ++i) {
    Result<ValuePtr> v = reopened.get(key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  CHECK(verify_store(d).clean());
}

TEST_CASE("flush() names the entries memory had to drop before the disk took them", "[store][cpu]") {
  test::TempDir dir;
  auto full = std::make_shared<std::atomic<bool>>(true);
  ChunkStoreOptions o = filling_disk_options(dir.path().string(), full);
  o.host_budget_bytes = 3 << 20;  // one 2 MiB test value at a time
  ChunkStore store(o);
  REQUIRE(store.put(key(5), test::store_test_value(5)).is_ok());
  REQUIRE(store.put(key(10), test::store_test_value(10)).is_ok());  // evicts 5, which no disk took
  CHECK(store.memory_only_entries() == 1);
  const Status s = store.flush();
  REQUIRE_FALSE(s.is_ok());
  CHECK_THAT(s.reason(), Contains("1 entries are held only in memory") && Contains("1 more left memory"));
}

TEST_CASE("a full disk keeps serving from memory: a second pass encodes nothing", "[store][cpu]") {
  // A store whose every disk write fails (a full file system): the host tier keeps what was put.
  test::TempDir dir;
  ChunkStoreOptions o = disk_options(dir.path().string());
  o.host_budget_bytes = int64_t{64} << 20;  // room for all 20 (the default budget is 1 GiB)
  o.warn_disk_errors = false;
  o.io_hooks.write = [](int, const void*, std::size_t) -> ssize_t {
    errno = ENOSPC;
    return -1;
  };
  ChunkStore store(o);
  for (int64_t i = 1; i <= 20; ++i) CHECK(store.put(key(i), test::store_test_value(i)).is_ok());
  int64_t hits = 0;
  for (int64_t i = 1; i <= 20; ++i) hits += store.get(key(i)).is_ok() ? 1 : 0;
  CHECK(hits == 20);
  CHECK(store.stats().io_errors == 20);
  CHECK(store.stats().disk_degraded);
}

namespace {

// Holds every file descriptor the process may still open (its soft RLIMIT_NOFILE lowered to a few above
// those in use) until destroyed: each open() in between fails with EMFILE.
class FdExhaustion {
 public:
  FdExhaustion() {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    int64_t open_now = 0;
    for (const auto& entry : fs::directory_iterator("/proc/self/fd")) open_now += entry.path().empty() ? 0 : 1;
    struct rlimit lowered = saved_;
    lowered.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, static_cast<rlim_t>(open_now + 64));
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
    for (;;) {
      const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      fds_.push_back(fd);
    }
    REQUIRE(errno == EMFILE);
  }
  ~FdExhaustion() {
    for (int fd : fds_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  struct rlimit saved_ {};
  std::vector<int> fds_;
};

}  // namespace

TEST_CASE("a read that runs out of file descriptors is a miss that marks nothing corrupt", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStore store(disk_options(d));
  REQUIRE(store.put(key(1), test::store_test_value(1), PutOptions{StoreTier::kDisk}).is_ok());
  Status miss;
  {
    FdExhaustion exhausted;
    miss = store.get(key(1)).status();
  }
  CHECK(miss.code() == StatusCode::kNotFound);
  CHECK_THAT(miss.reason(), Contains("Too many open files") && Contains("kept"));
  CHECK(store.faults().empty());
  CHECK(store.stats().corrupt_reads == 0);
  CHECK(store.stats().unreadable_reads == 1);  // counted apart
  for (const StoreEntryInfo& e : list_store(d)) CHECK_FALSE(e.marked_corrupt);
  Result<ValuePtr> again = store.get(key(1));  // the descriptors are back: the entry is still there
  REQUIRE(again.is_ok());
  CHECK(values_equal(*again.value(), *test::store_test_value(1)));
  ChunkStore other(disk_options(d));  // and another process's view of the shared index agrees
  CHECK(other.get(key(1)).is_ok());
}

TEST_CASE("many threads storing and loading overlapping keys see whole values only", "[store][cpu][thread]") {
  test::TempDir dir;
  for (const bool with_disk : {false, true}) {
    ChunkStoreOptions o;
    o.model_fingerprint = test::kStoreTestFingerprint;
    o.dir = with_disk ? dir.path().string() : "";
    o.host_budget_bytes = 256 << 10;  // churn: demotions and promotions race with reads
    ChunkStore store(o);
    // Value of (key k, version v): two tensors filled with k·1000 + v; a torn read would mix versions.
    auto value = [](int64_t k, int64_t v) {
      const int64_t rows = 50 + 40 * (k % 5);
      const double x = static_cast<double>(k * 1000 + v);
      return make_value(EntryKind::kOther, {{"a", at::full({rows, 64}, x)}, {"b", at::full({rows + 1, 64}, x)}});
    };
    std::atomic<int64_t> hits{0}, misses{0}, bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
        for (int step = 0; step < 400; ++step) {
          const int64_t k = std::uniform_int_distribution<int64_t>(0, 15)(rng);
          const int op = std::uniform_int_distribution<int>(0, 19)(rng);
          try {
            if (op < 6) {
              PutOptions p;
              p.replace = op < 2;
              const Status s = store.put(key(k), value(k, step % 50), p);
              // Without a disk a full host tier (pins held by other threads) may refuse; nothing else fails.
              if (!s && !(s.code() == StatusCode::kOutOfCapacity && !with_disk)) ++bad;
            } else if (op < 18) {
              Result<ValuePtr> r = store.get(key(k));
              if (!r) {
                ++misses;
                continue;
              }
              ++hits;
              const at::Tensor& a = r.value()->at("a");
              const at::Tensor& b = r.value()->at("b");
              const double x = a[0][0].item<double>();
              const bool whole = a.eq(x).all().item<bool>() && b.eq(x).all().item<bool>() &&
                                 static_cast<int64_t>(x) / 1000 == k && a.size(0) == 50 + 40 * (k % 5);
              if (!whole) ++bad;
            } else if (op == 18) {
              (void)store.erase(key(k));
            } else {
              (void)store.pin(key(k));
              (void)store.unpin(key(k));
            }
          } catch (const std::exception&) {
            ++bad;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    INFO("with_disk " << with_disk);
    CHECK(bad == 0);
    CHECK(hits > 0);
    CHECK(store.faults().empty());
    store.verify_integrity(/*deep=*/true);
    if (with_disk) CHECK(store.stats().tiers[1].evictions > 0);
  }
  CHECK(verify_store(dir.path().string()).clean());
}

TEST_CASE("verify tells a blob it could not read from a bad one", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 2, PutOptions{StoreTier::kDisk});
  SqliteIndex index(d + "/index.sqlite", SqliteIndex::Mode::kReadOnly);
  const std::string fingerprint = index.meta("model_fingerprint").value_or("");
  const std::optional<DiskRow> row = index.row(key(1));
  REQUIRE(row);
  VerifyReport r;
  {
    FdExhaustion exhausted;  // key 1's blob cannot be opened now (EMFILE): that proves nothing about it
    r = verify_rows(index, d, fingerprint, {*row});
  }
  CHECK(r.checked == 1);
  REQUIRE(r.unreadable.size() == 1);
  CHECK(r.unreadable[0].key == key(1));
  CHECK_THAT(r.unreadable[0].reason, Contains("cannot open") && Contains("Too many open files"));
  CHECK(r.problems.empty());
  CHECK_FALSE(r.clean());
  fs::remove(blob_path(d, 2));  // a blob that is gone is bad
  r = verify_store(d);
  CHECK(r.checked == 2);
  CHECK(r.unreadable.empty());
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].key == key(2));
  CHECK_THAT(r.problems[0].reason, Contains("missing"));
}

// A directory in a blob's place was called unreadable (read() fails with EISDIR, which proves nothing of a file):
// verify said "verify again" on every run, and an engine kept the entry, a miss on every read, for good.
TEST_CASE("a directory in a blob's place is damage: verify names repair, repair moves it to quarantine/",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 8, PutOptions{StoreTier::kDisk});
  const std::string folder = blob_path(d, 5);
  const std::string name = fs::path(folder).filename().string();
  fs::remove(folder);
  fs::create_directory(folder);
  // What someone keeps there; a .tmp and a .blob inside look like the store's own files to a scan.
  const std::vector<std::string> mine = {"notes.txt", "draft.tmp", "copy.blob"};
  for (const std::string& p : mine) std::ofstream(folder + "/" + p) << "mine";

  const VerifyReport v = verify_store(d);
  CHECK(v.checked == 8);
  CHECK(v.unreadable.empty());
  REQUIRE(v.problems.size() == 1);
  CHECK(v.problems[0].key == key(5));
  CHECK_THAT(v.problems[0].reason, Contains("it is a directory, not a blob file") &&
                                       Contains("repair drops its row and moves it to " + d + "/quarantine/"));
  if (fs::exists(ORBIT_CLI_PATH)) {  // the sanitizer builds have no CLI
    const test::CliRun run = test::cli("store verify --store " + d);
    INFO(run.out);
    CHECK(run.status == 1);
    CHECK_THAT(run.out, Contains("BAD " + key(5)) && Contains("run `orbit store repair --store " + d + "`"));
  }

  const RepairReport r = repair_store(d);
  CHECK(r.rows_dropped == 1);
  CHECK(r.rows_restored == 0);
  CHECK(r.blobs_rejected == 0);  // copy.blob inside the directory is not taken for a blob
  REQUIRE(r.notes.size() == 2);
  CHECK_THAT(r.notes[0], Contains("dropped row " + key(5)) && Contains(folder + ": is a directory"));
  CHECK(r.notes[1] ==
        "moved the directory " + folder + " (not a blob file) to " + d + "/quarantine/" + name + " with what it holds");
  CHECK_FALSE(fs::exists(folder));
  for (const std::string& p : mine) CHECK(fs::exists(d + "/quarantine/" + name + "/" + p));
  const VerifyReport after = verify_store(d);
  CHECK(after.checked == 7);
  CHECK(after.clean());
  CHECK(after.unreferenced_blobs == 0);
  CHECK(after.temp_files == 0);
  CHECK(gc_store(d, GcOptions{}).removed_paths.empty());
  for (const std::string& p : mine) CHECK(fs::exists(d + "/quarantine/" + name + "/" + p));
  const RepairReport again = repair_store(d);  // nothing left to do
  CHECK(again.notes.empty());
  CHECK(again.rows_dropped == 0);
  ChunkStore store(disk_options(d));
  CHECK_FALSE(store.contains(key(5)));
  for (int64_t i = 1; i <= 8; ++i) {
    if (i == 5) continue;
    Result<ValuePtr> got = store.get(key(i));
    REQUIRE(got.is_ok());
    CHECK(values_equal(*got.value(), *test::store_test_value(i)));
  }
}

TEST_CASE("an engine's read of a directory in a blob's place marks the entry corrupt; written again, it reads",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3, PutOptions{StoreTier::kDisk});
  const std::string folder = blob_path(d, 2);
  fs::remove(folder);
  fs::create_directory(folder);
  {
    ChunkStore store(disk_options(d));
    const Status miss = store.get(key(2)).status();
    CHECK(miss.code() == StatusCode::kNotFound);
    CHECK_THAT(miss.reason(), Contains("it is a directory, not a blob file"));
    CHECK(store.stats().corrupt_reads == 1);  // it was a miss that kept the entry, on every read
    REQUIRE(store.put(key(2), test::store_test_value(2), PutOptions{StoreTier::kDisk}).is_ok());
    Result<ValuePtr> got = store.get(key(2));
    REQUIRE(got.is_ok());
    CHECK(values_equal(*got.value(), *test::store_test_value(2)));
  }
  const VerifyReport v = verify_store(d);
  CHECK(v.clean());
  CHECK(v.checked == 3);
  CHECK(blob_path(d, 2) != folder);  // written under a new name; the directory no row names is repair's
  const RepairReport r = repair_store(d);
  CHECK(r.rows_dropped == 0);
  REQUIRE(r.notes.size() == 1);
  CHECK_THAT(r.notes[0], Contains("moved the directory " + folder));
  CHECK_FALSE(fs::exists(folder));
  CHECK(verify_store(d).clean());
}

TEST_CASE("a socket in a blob's place is damage: verify calls it bad, a read a miss, repair drops its row",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3, PutOptions{StoreTier::kDisk});
  // open() refuses a socket with ENXIO (it used to be taken for a failed read: verify UNREADABLE, repair
  // stopped). Bound at a short path (sun_path holds 108 bytes), then moved into the blob's place.
  const std::string blob = blob_path(d, 2), bound = d + "/s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", bound.c_str());
  REQUIRE(bound.size() < sizeof(address.sun_path));
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  ::close(fd);
  fs::remove(blob);
  fs::rename(bound, blob);

  const VerifyReport v = verify_store(d);
  CHECK(v.unreadable.empty());
  REQUIRE(v.problems.size() == 1);
  CHECK(v.problems[0].key == key(2));
  CHECK_THAT(v.problems[0].reason, Contains("it is a socket, not a blob file"));
  {
    ChunkStore store(disk_options(d));
    CHECK(store.get(key(2)).status().code() == StatusCode::kNotFound);
    CHECK(values_equal(*store.get(key(3)).value(), *test::store_test_value(3)));
  }
  const RepairReport r = repair_store(d);
  CHECK(r.rows_dropped <= 1);  // the read above may have dropped the row already
  CHECK(verify_store(d).clean());
  CHECK(list_store(d).size() == 2);
}

// gc --dry-run took the exclusive lock by creating LOCK for writing and opened the index read-write, so on a
// read-only directory it was refused ("cannot open DIR/LOCK: Permission denied") though it writes nothing. Root
// writes through file modes, so as root the CLI runs as nobody (setpriv), for whom the modes hold.
TEST_CASE("gc --dry-run lists a read-only store's garbage and writes nothing; gc itself is refused there",
          "[store][cpu]") {
  if (!fs::exists(ORBIT_CLI_PATH)) {
    WARN("no orbit CLI at " << ORBIT_CLI_PATH << " in this build: gc --dry-run on a read-only store is not checked");
    return;
  }
  const std::string as_other = test::as_unprivileged();  // who runs the CLI: this user, or nobody for root
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3, PutOptions{StoreTier::kDisk});
  const std::string sub = fs::path(blob_path(d, 1)).parent_path().string();
  const std::string orphan = sub + "/" + key(9) + ".00000000000000aa.blob", temp = sub + "/." + key(9) + ".blob.tmp";
  std::ofstream(orphan) << "a blob no row names";
  std::ofstream(temp) << "a write that never completed";
  test::set_tree_writable(d, false);
  std::set<std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(d)) before.insert(e.path().string());

  const test::CliRun dry = test::run_command(as_other + ORBIT_CLI_PATH + " store gc --dry-run --store " + d);
  INFO(dry.out);
  CHECK(dry.status == 0);
  CHECK_THAT(dry.out, Contains("would remove " + temp) && Contains("would remove " + orphan) &&
                          Contains("(dry run) 1 unreferenced blobs, 1 temp files"));
  const test::CliRun gc = test::run_command(as_other + ORBIT_CLI_PATH + " store gc --store " + d);
  INFO(gc.out);
  CHECK(gc.status != 0);
  CHECK_THAT(gc.out, Contains("cannot open " + d + "/LOCK"));
  std::set<std::string> after;
  for (const auto& e : fs::recursive_directory_iterator(d)) after.insert(e.path().string());
  CHECK(after == before);
  test::set_tree_writable(d, true);
}

}  // namespace ORBIT_TEST_FILE
