// What reaches the disk, and what survives losing it.
//
// Power cuts: writer processes (store_powercut_child) run on a simulated disk (powercut_preload.cpp,
// preloaded) that keeps only what was fsync'd; one of them cuts the power at a random sync, every writer
// stops there, and the store directory is rebuilt from the synced data alone (directory entries as of
// each directory's last sync, file contents as of each file's last sync; unsynced writes, renames and
// creations are lost). Then: every put that returned ok is readable with its value, the store opens,
// verify_integrity(deep) and verify_store are clean, and the next round's writers open it again.
//
// Each round runs the writers to their cut once; besides that cut, it checks cuts right after random
// earlier syncs of the round (the disk as those cuts would have left it), so a round checks
// ORBIT_POWERCUT_PER_ROUND cuts (default 10) for the price of one run of writers.
//
//   ORBIT_POWERCUT_CUTS=1000 ORBIT_POWERCUT_WRITERS=3 build/tests/test_store_powercut "[powercut]"
//
// runs the long version (defaults: 100 cuts, 2 writers of 8 puts a round).
//
// Confinement: a store whose blobs/ is a symlink (or resolves outside the store) is refused by the
// engine's store and by verify, gc and repair, so no write or removal reaches files outside it.
#include "orbit_catch.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "powercut_values.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_values.h"

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
namespace fs = std::filesystem;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spill(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string inode(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return std::to_string(st.st_ino);
}

// The simulated disk's records: for each "f<inode>" / "d<inode>", its versions by sync number.
struct Shadow {
  std::map<std::string, std::map<long, fs::path>> versions;
  long last = 0;

  explicit Shadow(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      const auto dot = name.find('.');
      if (dot == std::string::npos || dot == 0 || name[0] < '0' || name[0] > '9') continue;
      const long seq = std::stol(name.substr(0, dot));
      versions[name.substr(dot + 1)][seq] = e.path();
      last = std::max(last, seq);
    }
  }
  // The newest record of `id` synced at or before sync `k`; empty when none.
  fs::path at(const std::string& id, long k) const {
    auto it = versions.find(id);
    if (it == versions.end()) return {};
    auto v = it->second.upper_bound(k);
    return v == it->second.begin() ? fs::path() : std::prev(v)->second;
  }
};

// The directory `ino` as a power cut right after sync `k` leaves it, written into `into`: entries as of
// its last sync, each file as of its own last sync (never synced: empty). Blob files are hard links to
// the records (never written in place); the index files are copies (a reopen writes them).
void rebuild(const Shadow& shadow, long k, const std::string& ino, const fs::path& into, bool blobs) {
  fs::create_directory(into);
  const fs::path listing_path = shadow.at("d" + ino, k);
  if (listing_path.empty()) return;
  std::istringstream listing(slurp(listing_path));
  std::string line;
  while (std::getline(listing, line)) {
    std::istringstream fields(line);
    std::string name, child, type;
    std::getline(fields, name, '\t');
    std::getline(fields, child, '\t');
    std::getline(fields, type, '\t');
    if (type == "D") {
      rebuild(shadow, k, child, into / name, blobs || name == "blobs");
      continue;
    }
    const fs::path content = shadow.at("f" + child, k);
    if (content.empty()) {
      spill(into / name, std::string());
    } else if (blobs) {
      fs::create_hard_link(content, into / name);
    } else {
      fs::copy_file(content, into / name);
    }
  }
}

// Records `dir` and everything under it as synced at sync `seq`.
void record_tree(const fs::path& shadow, const fs::path& dir, long seq) {
  std::string listing;
  const std::string prefix = std::to_string(seq) + ".";
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory() && !e.is_regular_file()) continue;
    listing += e.path().filename().string() + "\t" + inode(e.path()) + "\t" + (e.is_directory() ? "D" : "F") + "\n";
    if (e.is_directory()) {
      record_tree(shadow, e.path(), seq);
    } else {
      spill(shadow / (prefix + "f" + inode(e.path())), slurp(e.path()));
    }
  }
  spill(shadow / (prefix + "d" + inode(dir)), listing);
}

// After a clean close everything on disk is durable: the shadow restarts from the tree as it is, as
// sync `seq`. Returns seq.
long seed(const fs::path& shadow, const fs::path& dir, long seq) {
  for (const auto& e : fs::directory_iterator(shadow)) {
    if (e.path().filename() != "LOCK") fs::remove(e.path());
  }
  record_tree(shadow, dir, seq);
  spill(shadow / "SEQ", std::to_string(seq));
  return seq;
}

// Sets the variables the preloaded disk reads (for the children spawned while it lives).
class SimulatedDisk {
 public:
  explicit SimulatedDisk(const fs::path& shadow) {
    ::setenv("ORBIT_POWERCUT_SHADOW", shadow.c_str(), 1);
    ::setenv("LD_PRELOAD", ORBIT_POWERCUT_PRELOAD, 1);
    const char* asan = std::getenv("ASAN_OPTIONS");  // a sanitizer runtime must otherwise come first
    asan_ = asan ? asan : "";
    ::setenv("ASAN_OPTIONS", (asan_ + (asan_.empty() ? "" : ":") + "verify_asan_link_order=0").c_str(), 1);
  }
  ~SimulatedDisk() {
    ::unsetenv("ORBIT_POWERCUT_SHADOW");
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("ORBIT_POWERCUT_AT");
    if (asan_.empty()) {
      ::unsetenv("ASAN_OPTIONS");
    } else {
      ::setenv("ASAN_OPTIONS", asan_.c_str(), 1);
    }
  }

 private:
  std::string asan_;
};

struct Put {
  int64_t key = 0;
  long seq = 0;  // every sync of the put is numbered <= seq
};

// Writers put keys [first, first + writers·per_writer); one cuts the power at a random sync (or all
// finish first). The puts that returned ok, with their sync numbers.
std::vector<Put> run_writers(const fs::path& shadow, const fs::path& live, int writers, int per_writer, int64_t first,
                             std::mt19937_64& rng) {
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  {
    const SimulatedDisk disk(shadow);
    for (int w = 0; w < writers; ++w) {
      // About 3 syncs a put (blob, its directory, the index's WAL) and a dozen at open.
      const int at = 1 + static_cast<int>(rng() % static_cast<uint64_t>(4 * per_writer + 24));
      ::setenv("ORBIT_POWERCUT_AT", std::to_string(at).c_str(), 1);
      children.push_back(std::make_unique<test::ChildProcess>(
          ORBIT_POWERCUT_CHILD_PATH,
          std::vector<std::string>{live.string(), std::to_string(first + int64_t{w} * per_writer),
                                   std::to_string(per_writer)}));
    }
  }
  std::vector<Put> puts;
  for (auto& child : children) {
    std::string line;
    while (child->next_line(&line)) {
      std::istringstream fields(line);
      Put p;
      fields >> p.key >> p.seq;
      puts.push_back(p);
    }
    const int status = child->wait();
    INFO("a writer ended otherwise than by the cut or a clean exit (status " << status << ")");
    REQUIRE(((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
  }
  return puts;
}

ChunkStoreOptions store_options(const fs::path& dir) {
  ChunkStoreOptions o;
  o.dir = dir.string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  o.host_budget_bytes = 1 << 20;
  return o;
}

struct CutTotals {
  int64_t cuts = 0, unreferenced = 0, temp_files = 0, checked_reads = 0;
};

// The store as a cut after sync `k` leaves it, in `dir`: it opens, every entry committed before this
// round is there, every put of this round whose syncs are all <= k reads back its value, and
// verify_integrity(deep) and verify_store are clean.
void check_cut(const fs::path& dir, const std::set<int64_t>& durable, const std::vector<Put>& round, long k,
               CutTotals* totals) {
  INFO("cut after sync " << k);
  {
    ChunkStore store(store_options(dir));  // the engine's reopen first: a store cut while created gets its schema
    store.verify_integrity(true);
    for (int64_t i : durable) {
      if (!store.contains(test::store_test_key(i))) FAIL_CHECK("committed entry " << i << " was lost");
    }
    for (const Put& p : round) {
      if (p.seq > k) continue;
      ++totals->checked_reads;
      Result<ValuePtr> v = store.get(test::store_test_key(p.key));
      if (!v || !values_equal(*v.value(), *test::powercut_value(p.key))) {
        FAIL_CHECK("committed entry " << p.key << " reads back wrong: " << v.status().reason());
      }
    }
  }
  const VerifyReport report = verify_store(dir.string());
  for (const VerifyProblem& p : report.problems) FAIL_CHECK(p.key << " " << p.path << ": " << p.reason);
  totals->unreferenced += report.unreferenced_blobs;
  totals->temp_files += report.temp_files;
  ++totals->cuts;
}

}  // namespace

TEST_CASE("simulated power cuts: no committed entry is lost and every reopen is clean", "[store][powercut]") {
  const int cuts = env_int("ORBIT_POWERCUT_CUTS", 100);
  const int per_round = env_int("ORBIT_POWERCUT_PER_ROUND", 10);
  const int writers = env_int("ORBIT_POWERCUT_WRITERS", 2);
  const int per_writer = env_int("ORBIT_POWERCUT_PUTS", 8);
  REQUIRE((cuts >= 1 && per_round >= 1 && writers >= 1 && per_writer >= 1));
  test::TempDir dir;
  const fs::path shadow = dir / "shadow", live = dir / "store", image = dir / "image";
  fs::create_directories(shadow);
  fs::create_directories(live);
  long seq = seed(shadow, live, 1);
  std::mt19937_64 rng(20261125);
  std::set<int64_t> durable;
  CutTotals totals;
  int64_t next = 0;
  for (int round = 0; totals.cuts < cuts; ++round) {
    INFO("round " << round);
    const std::string root = inode(live);
    const std::vector<Put> puts = run_writers(shadow, live, writers, per_writer, next, rng);
    next += int64_t{writers} * per_writer;
    const Shadow records(shadow);
    // Cuts after random syncs of the round (the writers went on past them), then the one that stopped them.
    const int earlier = std::min(per_round, cuts - static_cast<int>(totals.cuts)) - 1;
    for (int c = 0; c < earlier; ++c) {
      const long k = seq + static_cast<long>(rng() % static_cast<uint64_t>(records.last - seq + 1));
      fs::remove_all(image);
      rebuild(records, k, root, image, false);
      check_cut(image, durable, puts, k, &totals);
    }
    fs::remove_all(image);
    rebuild(records, records.last, root, image, false);
    fs::remove_all(live);
    fs::rename(image, live);
    check_cut(live, durable, puts, records.last, &totals);  // and the next round's writers reopen it
    for (const Put& p : puts) durable.insert(p.key);
    seq = seed(shadow, live, records.last + 1);  // the check closed the store cleanly: all of it is on disk
  }
  CHECK(totals.checked_reads > 0);
  WARN(totals.cuts << " simulated power cuts, " << writers << " writer processes: " << durable.size()
                   << " entries committed, 0 lost; " << totals.checked_reads
                   << " reads of entries committed before their cut; blobs left unreferenced (summed over cuts; gc "
                      "removes them): "
                   << totals.unreferenced << ", temp files: " << totals.temp_files);
}

TEST_CASE("a symlinked blobs/ (or one resolving outside the store) is refused, never written through",
          "[store][paths]") {
  test::TempDir dir;
  const fs::path store = dir / "store", elsewhere = dir / "elsewhere";
  fs::create_directories(store);
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, store / "blobs");
  CHECK_THROWS_WITH(ChunkStore(store_options(store)), Contains("blobs is a symlink") && Contains("elsewhere"));
  CHECK(fs::is_empty(elsewhere));  // nothing was written through it
  CHECK_THROWS_WITH(repair_store(store.string()), Contains("is a symlink"));

  // A store that was fine, whose blobs/ is then replaced by a symlink: verify and gc refuse it too.
  const fs::path good = dir / "good";
  {
    ChunkStore s(store_options(good));
    REQUIRE(s.put(test::store_test_key(1), test::store_test_value(1)));
  }
  fs::rename(good / "blobs", dir / "moved");
  fs::create_directory_symlink(dir / "moved", good / "blobs");
  CHECK_THROWS_WITH(verify_store(good.string()), Contains("is a symlink"));
  CHECK_THROWS_WITH(gc_store(good.string()), Contains("is a symlink"));
  CHECK_THROWS_WITH(ChunkStore(store_options(good)), Contains("is a symlink"));
  CHECK(fs::exists(dir / "moved"));
}
