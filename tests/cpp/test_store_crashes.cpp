// The chunk store, part 4: crashes, in child processes. A real RLIMIT_FSIZE met by a blob, by the index, and
// by the index's WAL; a writer killed inside its blob write (its temp file); SIGKILL at random points of a
// stream of writes, many times: every committed entry survives.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "orbit/store/chunk_store.h"
#include "orbit/store/sqlite_index.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_checks.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)

namespace {

// Runs store_kill_child with `args` to its end; REQUIREs that it started and exited with status 0; returns the
// lines it wrote.
std::vector<std::string> child_lines(const std::vector<std::string>& args) {
  test::ChildProcess child(ORBIT_STORE_CHILD_PATH, args);
  REQUIRE(child.started());
  std::vector<std::string> lines;
  std::string line;
  while (child.next_line(&line)) lines.push_back(line);
  const int status = child.wait();
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return lines;
}

}  // namespace

TEST_CASE("a real file-size limit (RLIMIT_FSIZE) in a child fails one put and corrupts nothing", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // 1.5 MiB: value 5 (2 MiB) cannot be written.
  const std::vector<std::string> lines = child_lines({"fsize", d, "1", std::to_string(3 << 19)});
  REQUIRE(lines.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(lines[static_cast<size_t>(i)] == std::to_string(i + 1) + " ok");
  // The put itself succeeds (kept in memory); the store reports the degraded disk with path and reason.
  CHECK_THAT(lines[4], Contains("5 degraded") && Contains("File too large") && Contains(d));
  ChunkStore store(disk_options(d));
  store.verify_integrity(true);
  for (int64_t i = 1; i <= 4; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  CHECK_FALSE(store.contains(key(5)));  // it was never durable
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  CHECK(report.temp_files == 0);
}

// The same limit met by the index first (values under 128 KiB, the WAL grows past 256 KiB): SQLite's own message
// is only "disk I/O error", so the warning must carry the system's error to say what ran out.
TEST_CASE("an index write the file-size limit refuses names the index and the cause; nothing committed is lost",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const std::vector<std::string> lines = child_lines({"fsize", d, "1", std::to_string(256 << 10), "small"});
  REQUIRE(lines.size() >= 2);
  std::vector<int64_t> committed;
  for (size_t n = 0; n + 1 < lines.size(); ++n) {
    INFO(lines[n]);
    REQUIRE(lines[n].size() > 3);
    REQUIRE(lines[n].compare(lines[n].size() - 3, 3, " ok") == 0);
    committed.push_back(std::stoll(lines[n]));
  }
  // The put whose row could not commit is kept in memory; the warning names the index and what the system said.
  const std::string& last = lines.back();
  CHECK_THAT(last, Contains(" degraded ") && Contains(d + "/index.sqlite") && Contains("committing a row") &&
                       Contains("File too large"));
  // The refused put's value was kept in memory and written back by the close's flush: the failed commit's
  // checkpoint let the WAL start over (before, it was never durable). It reads back after the committed ones.
  std::vector<int64_t> stored = committed;
  stored.push_back(std::stoll(last));
  const VerifyReport report = test::reopen_and_verify(d, stored);
  CHECK(report.temp_files == 0);
  CHECK(report.unreferenced_blobs == 0);  // the blob of the refused row was removed
}

// The same limit, and puts after the degraded one: SQLite checkpoints only after a commit, so a WAL at the limit
// refused every later commit and the store stayed degraded until it was reopened (old: every later put
// "degraded", 7 memory-only entries). The index now checkpoints after a write refused for want of space: the next
// put commits, writes the memory-only entry back, and the store is durable again in the same process.
TEST_CASE("a store whose index WAL hit the file-size limit takes writes again at the next put, without a reopen",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const std::vector<std::string> lines = child_lines({"fsize", d, "1", std::to_string(256 << 10), "small", "6"});
  size_t degraded = 0;
  while (degraded < lines.size() && lines[degraded].find(" degraded ") == std::string::npos) ++degraded;
  REQUIRE(degraded < lines.size());
  INFO(lines[degraded]);
  CHECK_THAT(lines[degraded], Contains("committing a row") && Contains("File too large"));
  REQUIRE(lines.size() == degraded + 6 + 3);  // the six later puts, memory-only, flush
  std::vector<int64_t> stored;
  for (size_t n = 0; n <= degraded + 6; ++n) stored.push_back(std::stoll(lines[n]));
  // The next put commits (its failed predecessor's checkpoint let the WAL start over) and the store is no longer
  // degraded; the last is checked, as a checkpoint a concurrent reader stopped is run again by the next refusal.
  INFO(lines[degraded + 1]);
  CHECK(lines[degraded + 6] == std::to_string(stored[degraded + 6]) + " ok");
  CHECK(lines[degraded + 7] == "memory-only 0");  // the degraded put's value was written back
  CHECK(lines[degraded + 8] == "flush ok");
  const VerifyReport report = test::reopen_and_verify(d, stored);
  CHECK(report.unreferenced_blobs == 0);
  // The put after the degraded one asked the index with a probe commit (DiskTier::probe_commit), which passed:
  // it left no row (an older build kept a count of probes in the meta row commit_probe).
  CHECK_FALSE(SqliteIndex(d + "/index.sqlite", SqliteIndex::Mode::kReadOnly).meta("commit_probe").has_value());
}

TEST_CASE("a probe commit leaves no meta row, and takes away the one an older build left", "[store][cpu]") {
  test::TempDir dir;
  SqliteIndex index((dir.path() / "index.sqlite").string(), SqliteIndex::Mode::kReadWrite);
  REQUIRE(index.probe_commit());
  CHECK_FALSE(index.meta("commit_probe").has_value());
  REQUIRE(index.set_meta("commit_probe", "41"));  // an older build's count of probes
  REQUIRE(index.probe_commit());
  CHECK_FALSE(index.meta("commit_probe").has_value());
}

// An index that cannot grow (RLIMIT_FSIZE at its size: the WAL fills and no checkpoint can copy it) refuses every
// commit. Each put then wrote its whole blob before the commit failed and the blob was discarded (old: one or more
// blob writes per put, filling a full disk further); now a put asks the index with a small probe commit first and
// writes no blob while it refuses. The values stay in memory, not durable, as before.
TEST_CASE("while the index refuses commits, a put writes no blob until a probe commit passes", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const std::vector<std::string> lines = child_lines({"stuck", d, "5"});
  REQUIRE(lines.size() == 1 + 5 + 2);
  REQUIRE_THAT(lines[0], Catch::Matchers::StartsWith("degraded "));
  for (size_t n = 1; n <= 5; ++n) {
    INFO(lines[n]);
    CHECK_THAT(lines[n], Catch::Matchers::EndsWith(" degraded"));  // still refused: the index cannot grow
  }
  CHECK(lines[6] == "blob-writes 0");
  CHECK(lines[7] == "memory-only 6");    // the degraded put's value and the five after it
  ChunkStore reopened(disk_options(d));  // without the limit: the memory-only values were never durable
  reopened.verify_integrity(true);
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  CHECK(report.unreferenced_blobs == 0);
}

// A kill inside a blob write leaves its temp file; the next open removes it, but never a live writer's (held
// by its flock), so leftovers do not pile up across crashes until `orbit store gc`.
TEST_CASE("the temp file of a writer killed inside its blob goes at the next open; a live writer's stays",
          "[store][cpu][kill]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  std::string line;
  test::ChildProcess live(ORBIT_STORE_CHILD_PATH, {"stall", d, "4"});  // stopped inside its blob write
  REQUIRE(live.next_line(&line));
  REQUIRE(line == "in blob");
  {
    test::ChildProcess dead(ORBIT_STORE_CHILD_PATH, {"stall", d, "6"});
    REQUIRE(dead.next_line(&line));
    REQUIRE(line == "in blob");
    dead.kill();  // SIGKILL mid-write
    const int status = dead.wait();
    REQUIRE(WIFSIGNALED(status));
  }
  REQUIRE(summarize_store(d).temp_files == 2);
  {
    ChunkStore store(disk_options(d));
    CHECK(summarize_store(d).temp_files == 1);  // the dead writer's went; the live writer's is still written
    for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  }
  live.kill();
  REQUIRE(WIFSIGNALED(live.wait()));
  {
    ChunkStore store(disk_options(d));
    CHECK(summarize_store(d).temp_files == 0);
    CHECK_FALSE(store.contains(key(4)));
    CHECK_FALSE(store.contains(key(6)));
  }
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  CHECK(report.temp_files == 0);
  CHECK(report.checked == 3);
}

namespace {

// What the kills of kill_rounds() interrupted, classified from what each left in the directory.
struct KillCounts {
  int kills = 0;
  int in_blob_write = 0;  // a temp file: inside a blob file's write (before its rename)
  int before_commit = 0;  // a blob no row names: between the blob's rename and the index commit
  int before_report = 0;  // the next entry committed but never reported: after the commit
  int64_t committed = 0;  // puts the children reported, all intact
  int mid_write() const { return in_blob_write + before_commit + before_report; }
};

// `kills` rounds of: start a writer of a stream of 100,000 values into `d` (a process forked by one
// store_kill_child fork-server, which skips loading libtorch per round); wait until it has reported 1 to
// 10 committed puts (the store is open and the stream under way: no kill lands before the first write or
// after the last); kill -9 it 0 to 4 ms later (this picks the moment, it does not wait for work). Then
// check that the writer died of the kill, that every put it reported is intact after reopening (its own
// and 10 earlier ones each round, all of them at the end), that the index verifies, and classify the kill
// by what it left (KillCounts); gc then removes the leftovers for the next round. Every 10th round and the
// last, verify_store also re-reads every blob against its checksum (a corruption stays until then; doing
// it every round made the 200-kill run quadratic in the entries committed).
KillCounts kill_rounds(const std::string& d, int kills, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> committed;
  KillCounts counts;
  test::ChildProcess server(ORBIT_STORE_CHILD_PATH, {"fork-server"});
  REQUIRE(server.started());
  for (int iter = 0; iter < kills; ++iter) {
    const int64_t first = int64_t{iter} * 100000;
    const size_t before = committed.size();
    {
      REQUIRE(server.write_line("write " + d + " " + std::to_string(first) + " 100000"));
      std::string line;
      REQUIRE(server.next_line(&line));
      REQUIRE(line.rfind("pid ", 0) == 0);
      const pid_t writer = static_cast<pid_t>(std::stol(line.substr(4)));
      const int wait_lines = std::uniform_int_distribution<int>(1, 10)(rng);
      int seen = 0;
      while (seen < wait_lines && server.next_line(&line)) {
        committed.push_back(std::stoll(line));
        ++seen;
      }
      REQUIRE(seen == wait_lines);  // the writer wrote, and is still writing
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 4000)(rng)));
      ::kill(writer, SIGKILL);
      int status = -1;
      while (server.next_line(&line)) {
        if (line.rfind("exit ", 0) == 0) {
          status = std::stoi(line.substr(5));
          break;
        }
        committed.push_back(std::stoll(line));  // puts that returned before death
      }
      REQUIRE(status != -1);  // the server reported the writer's end
      REQUIRE(WIFSIGNALED(status));
      REQUIRE(WTERMSIG(status) == SIGKILL);
      REQUIRE(committed.size() - before < 100000);  // it died inside its stream, not after it
    }
    const int64_t next = first + static_cast<int64_t>(committed.size() - before);  // the put in flight
    bool next_committed = false;
    const StoreSummary crashed = summarize_store(d);  // what the kill left, before an open cleans up
    {
      ChunkStore store(disk_options(d));  // reopening after the crash
      store.verify_integrity(/*deep=*/true);
      std::vector<int64_t> check(committed.begin() + static_cast<std::ptrdiff_t>(before), committed.end());
      for (int s = 0; s < 10; ++s) {
        check.push_back(committed[std::uniform_int_distribution<size_t>(0, committed.size() - 1)(rng)]);
      }
      if (iter == kills - 1) check = committed;
      for (int64_t i : check) {
        Result<ValuePtr> v = store.get(key(i), GetOptions{false});
        INFO("round " << iter << ", entry " << i);
        REQUIRE(v.is_ok());
        REQUIRE(values_equal(*v.value(), *test::store_test_value(i)));
      }
      // The put in flight is either absent or whole: never a partial entry.
      Result<ValuePtr> in_flight = store.get(key(next), GetOptions{false});
      if (in_flight.is_ok()) {
        REQUIRE(values_equal(*in_flight.value(), *test::store_test_value(next)));
        next_committed = true;
      }
    }
    INFO("round " << iter);
    const StoreSummary left = summarize_store(d);
    if (iter % 10 == 9 || iter == kills - 1) {
      const VerifyReport report = verify_store(d);
      REQUIRE(report.clean());
      REQUIRE(report.temp_files == left.temp_files);
      REQUIRE(report.unreferenced_blobs == left.unreferenced_blobs);
    }
    // At most one write was in flight: one temp file or one unreferenced blob, never both, never more.
    REQUIRE(crashed.temp_files + crashed.unreferenced_blobs <= 1);
    REQUIRE(left.temp_files == 0);  // the reopening removed the dead writer's temp file
    REQUIRE(left.unreferenced_blobs == crashed.unreferenced_blobs);
    if (crashed.temp_files == 1) {
      ++counts.in_blob_write;
    } else if (left.unreferenced_blobs == 1) {
      ++counts.before_commit;
    } else if (next_committed) {
      ++counts.before_report;
    }
    const GcReport gc = gc_store(d);
    REQUIRE(gc.removed_temps == left.temp_files);
    REQUIRE(gc.removed_blobs == left.unreferenced_blobs);
    ++counts.kills;
  }
  counts.committed = static_cast<int64_t>(committed.size());
  WARN("kill test: " << counts.kills << " kills, " << counts.committed << " committed entries intact; kills mid-write: "
                     << counts.mid_write() << " (" << counts.in_blob_write << " inside a blob write, "
                     << counts.before_commit << " between blob and index commit, " << counts.before_report
                     << " after the commit, before the report)");
  return counts;
}

}  // namespace

// The default run: a few kills, enough that some land mid-write (a put is most of the stream's time). On a loaded
// machine a writer is often descheduled right after it reports a put (its reader woken), so all 20 kills can fall
// between two puts (seen once under the ASan stage beside both suites): up to 4 more runs of 20, each on a store of
// its own and checked whole, until one lands mid-write.
TEST_CASE("SIGKILL at random points of a write stream loses at most the write in flight", "[store][cpu][kill]") {
  int mid_write = 0;
  for (uint32_t run = 0; run < 5 && mid_write == 0; ++run) {
    test::TempDir dir;
    const KillCounts counts = kill_rounds(dir.path().string(), 20, 20240601 + run * 7919);
    CHECK(counts.kills == 20);
    CHECK(counts.committed >= 20);
    mid_write += counts.mid_write();
  }
  CHECK(mid_write >= 1);  // a kill test whose kills all fell between writes would prove nothing
}

// The slow label: 200 kills, each kind of interruption seen.
TEST_CASE("SIGKILL 200 times in a write stream: every committed entry survives", "[store][cpu][kill][slow]") {
  test::TempDir dir;
  const KillCounts counts = kill_rounds(dir.path().string(), 200, 20240602);
  CHECK(counts.kills >= 200);
  CHECK(counts.committed >= 200);
  CHECK(counts.mid_write() >= 20);
  CHECK(counts.in_blob_write >= 1);
}

}  // namespace ORBIT_TEST_FILE
