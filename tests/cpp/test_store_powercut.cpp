// What reaches the disk, and what survives losing it.
//
// Power cuts: writer processes (store_powercut_child) put values and read them back on a simulated disk
// (powercut_preload.cpp, preloaded) that logs every write and sync (powercut_events.h). Every read goes to
// the disk tier and takes a read lease there, so the index's lease commits and checkpoints run between
// the puts, as in an agent. One writer cuts the power at a random sync, every writer stops there, and the
// store directory is rebuilt from the log as the cut leaves it: directory entries as of each directory's
// last sync; each file as of its last sync plus, by the cut's write-back mode,
//
//   synced   nothing written since (only what was synced survives)
//   all      everything written since (the kernel wrote it all back in time)
//   torn     each 4 KiB page, and the file's size, as of its own random moment between that sync and
//            the cut (partial and reordered write-back of unsynced pages)
//
// Then: every put that returned ok is readable with its value, the store opens, verify_integrity(deep)
// and verify_store are clean, and the next round's writers open it again.
//
// Each round runs the writers to their cut once; besides that cut, it checks cuts at random earlier
// moments of the round (the disk as those cuts would have left it), so a round checks
// ORBIT_POWERCUT_PER_ROUND cuts for the price of one run of writers. A round's writers put enough (with
// their reads) for the index's write-ahead log to be checkpointed and restarted within the round.
//
//   ORBIT_POWERCUT_CUTS=1000 ORBIT_POWERCUT_WRITERS=3 build/tests/test_store_powercut "[powercut]"
//
// runs the long version (defaults: 150 cuts, 30 a round, 2 writers of 60 puts with 6 reads after each;
// ORBIT_POWERCUT_PER_ROUND, _PUTS, _READS and _SEED set the rest; the files go to /dev/shm when there is
// one, or to ORBIT_POWERCUT_DIR).
//
// Confinement: a store whose blobs/ is a symlink (or resolves outside the store) is refused by the
// engine's store and by verify, gc and repair, so no write or removal reaches files outside it.
#include "orbit_catch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string_view>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "powercut_events.h"
#include "powercut_values.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using powercut::EventType;
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

std::string file_id(const fs::path& path) {
  unsigned mode = 0;
  const std::string id = powercut::file_id(AT_FDCWD, path.c_str(), 0, &mode);
  REQUIRE(!id.empty());
  return id;
}

// The simulated disk's event log, parsed. Sync numbers grow along the log; a write or truncation
// carries the number of the last sync logged before it (it happened after that sync, before the next).
struct DiskLog {
  struct Event {
    EventType type = EventType::kWrite;
    std::string id;
    long seq = 0;
    int64_t offset = 0;
    std::string_view data;
  };
  std::string bytes;
  std::vector<Event> events;
  std::map<std::string, std::vector<std::size_t>> by_id;  // each file's or directory's events, in order
  long first = 0, last = 0;                               // the first and last sync numbers

  explicit DiskLog(const fs::path& file) : bytes(slurp(file)) {
    std::size_t at = 0;
    long seq = 0;
    while (at < bytes.size()) {
      powercut::EventHeader h;
      REQUIRE(at + sizeof h <= bytes.size());
      std::memcpy(&h, bytes.data() + at, sizeof h);
      REQUIRE(h.magic == powercut::kEventMagic);
      REQUIRE(at + sizeof h + h.id_bytes + static_cast<std::size_t>(h.length) <= bytes.size());
      Event e;
      e.type = h.type;
      e.id.assign(bytes.data() + at + sizeof h, h.id_bytes);
      e.offset = h.offset;
      e.data = std::string_view(bytes).substr(at + sizeof h + h.id_bytes, static_cast<std::size_t>(h.length));
      if (h.type == EventType::kSync || h.type == EventType::kDirSync) {
        REQUIRE(h.seq >= seq);
        seq = h.seq;
        if (first == 0) first = seq;
      }
      e.seq = seq;
      by_id[e.id].push_back(events.size());
      events.push_back(std::move(e));
      at += sizeof h + h.id_bytes + static_cast<std::size_t>(h.length);
    }
    last = seq;
  }

  // The listing of directory `id` as of its last sync numbered <= k ("" when none).
  std::string_view listing(const std::string& id, long k) const {
    std::string_view out;
    auto it = by_id.find(id);
    if (it == by_id.end()) return out;
    for (std::size_t i : it->second) {
      if (events[i].seq > k) break;
      if (events[i].type == EventType::kDirSync) out = events[i].data;
    }
    return out;
  }

  // The syncs of file `id` numbered after `after`.
  int64_t syncs_of(const std::string& id, long after) const {
    auto it = by_id.find(id);
    int64_t n = 0;
    if (it != by_id.end()) {
      for (std::size_t i : it->second) n += events[i].type == EventType::kSync && events[i].seq > after ? 1 : 0;
    }
    return n;
  }
};

// What of the writes since a file's last sync reached the disk before the cut.
enum class WriteBack { kSynced, kAll, kTorn };
constexpr const char* kWriteBackNames[] = {"synced", "all", "torn"};

void apply(std::string* file, const DiskLog::Event& e) {
  if (e.type == EventType::kTruncate) {
    file->resize(static_cast<std::size_t>(e.offset));
    return;
  }
  const std::size_t end = static_cast<std::size_t>(e.offset) + e.data.size();
  if (file->size() < end) file->resize(end);
  std::memcpy(file->data() + e.offset, e.data.data(), e.data.size());
}

// Applies to `page`, the bytes [begin, begin + page->size()) of a file, what `e` changed there.
void apply_to_page(std::string* page, std::size_t begin, const DiskLog::Event& e) {
  const std::size_t end = begin + page->size();
  if (e.type == EventType::kTruncate) {
    const std::size_t cut = std::max(begin, static_cast<std::size_t>(e.offset));
    if (cut < end) std::fill(page->begin() + static_cast<std::ptrdiff_t>(cut - begin), page->end(), '\0');
    return;
  }
  const std::size_t from = std::max(begin, static_cast<std::size_t>(e.offset));
  const std::size_t to = std::min(end, static_cast<std::size_t>(e.offset) + e.data.size());
  if (from < to) std::memcpy(page->data() + (from - begin), e.data.data() + (from - e.offset), to - from);
}

// File `id` as a power cut right after sync k leaves it (nothing synced: empty).
std::string file_at(const DiskLog& log, const std::string& id, long k, WriteBack mode, std::mt19937_64& rng) {
  std::string durable;
  std::vector<const DiskLog::Event*> pending;  // written after the file's last sync <= k, before the cut
  auto it = log.by_id.find(id);
  if (it != log.by_id.end()) {
    for (std::size_t i : it->second) {
      const DiskLog::Event& e = log.events[i];
      if (e.seq > k) break;
      if (e.type == EventType::kSync) {
        for (const DiskLog::Event* p : pending) apply(&durable, *p);
        pending.clear();
      } else if (e.type != EventType::kDirSync) {
        pending.push_back(&e);
      }
    }
  }
  if (mode == WriteBack::kSynced || pending.empty()) return durable;
  if (mode == WriteBack::kAll) {
    for (const DiskLog::Event* p : pending) apply(&durable, *p);
    return durable;
  }
  // Torn: page p holds the file as after its first j_p pending writes, j_p drawn for each page (and
  // once for the size): any page may have been written back, at any time, in any order.
  constexpr std::size_t kPage = 4096;
  std::uniform_int_distribution<std::size_t> moment(0, pending.size());
  std::size_t size = durable.size();
  for (std::size_t m = 0, until = moment(rng); m < until; ++m) {
    const DiskLog::Event& e = *pending[m];
    size = e.type == EventType::kTruncate ? static_cast<std::size_t>(e.offset)
                                          : std::max(size, static_cast<std::size_t>(e.offset) + e.data.size());
  }
  std::string out(size, '\0');
  for (std::size_t begin = 0; begin < size; begin += kPage) {
    std::string page(std::min(kPage, size - begin), '\0');
    if (begin < durable.size())
      std::memcpy(page.data(), durable.data() + begin, std::min(page.size(), durable.size() - begin));
    for (std::size_t m = 0, until = moment(rng); m < until; ++m) apply_to_page(&page, begin, *pending[m]);
    std::memcpy(out.data() + begin, page.data(), page.size());
  }
  return out;
}

struct Cut {
  long k = 0;  // right after this sync
  WriteBack mode = WriteBack::kSynced;
};

// The position in the log of file `id`'s last sync numbered <= k, when nothing was written to it after
// that sync before the cut (whatever the write-back, the file is then as that sync left it).
std::optional<std::size_t> settled_at(const DiskLog& log, const std::string& id, long k) {
  std::optional<std::size_t> out;
  auto it = log.by_id.find(id);
  if (it == log.by_id.end()) return out;
  for (std::size_t i : it->second) {
    if (log.events[i].seq > k) break;
    if (log.events[i].type == EventType::kSync) {
      out = i;
    } else if (log.events[i].type != EventType::kDirSync) {
      out.reset();
    }
  }
  return out;
}

// The directory `id` as `cut` leaves it, written into `into`: its entries as of its last sync, each file
// as file_at() says. A settled file under blobs/ (never written again: blobs are immutable) is a hard link
// to its one copy in `cache`; other files are written out (a reopen writes the index files).
void rebuild(const DiskLog& log, const Cut& cut, const std::string& id, const fs::path& into, const fs::path& cache,
             std::mt19937_64& rng, bool blobs = false) {
  fs::create_directory(into);
  std::istringstream listing{std::string(log.listing(id, cut.k))};
  std::string line;
  while (std::getline(listing, line)) {
    std::istringstream fields(line);
    std::string name, child, type;
    std::getline(fields, name, '\t');
    std::getline(fields, child, '\t');
    std::getline(fields, type, '\t');
    if (type == "D") {
      rebuild(log, cut, child, into / name, cache, rng, blobs || name == "blobs");
      continue;
    }
    const std::optional<std::size_t> settled = blobs ? settled_at(log, child, cut.k) : std::nullopt;
    if (!settled) {
      spill(into / name, file_at(log, child, cut.k, cut.mode, rng));
      continue;
    }
    const fs::path copy = cache / (child + "@" + std::to_string(*settled));
    if (!fs::exists(copy)) spill(copy, file_at(log, child, cut.k, WriteBack::kSynced, rng));
    fs::create_hard_link(copy, into / name);
  }
}

// Logs `dir` and everything under it as written and synced, as sync `seq`.
void record_tree(std::ofstream& out, const fs::path& dir, long seq) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) {
      record_tree(out, e.path(), seq);
    } else if (e.is_regular_file()) {
      const std::string id = file_id(e.path()), bytes = slurp(e.path());
      out << powercut::encode_event(EventType::kWrite, id, 0, 0, bytes.data(), bytes.size())
          << powercut::encode_event(EventType::kSync, id, seq, 0, nullptr, 0);
    }
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::string listing;
  const bool listed = powercut::directory_listing(fd, &listing);
  ::close(fd);
  REQUIRE(listed);
  out << powercut::encode_event(EventType::kDirSync, file_id(dir), seq, 0, listing.data(), listing.size());
}

// After a clean close everything on disk is durable: the log restarts from the tree as it is, as sync
// `seq`. Returns seq.
long seed(const fs::path& shadow, const fs::path& dir, long seq) {
  for (const auto& e : fs::directory_iterator(shadow)) {
    if (e.path().filename() != "LOCK") fs::remove(e.path());
  }
  {
    std::ofstream out(shadow / "EVENTS", std::ios::binary | std::ios::trunc);
    record_tree(out, dir, seq);
  }
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

struct Writers {
  int count = 2;
  int puts = 60;  // each
  int reads = 6;  // after each put
};

// Writers put keys [first, first + count·puts), reading back after each put; one cuts the power at a
// random sync (or all finish first). The puts that returned ok, with their sync numbers.
std::vector<Put> run_writers(const fs::path& shadow, const fs::path& live, const Writers& writers, int64_t first,
                             std::mt19937_64& rng) {
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  {
    const SimulatedDisk disk(shadow);
    for (int w = 0; w < writers.count; ++w) {
      // About 4 syncs a put (blob, its directory, the index's WAL, now and then a checkpoint) and a dozen at
      // open. The cut comes after a quarter of the puts at least, so that the round checkpoints and
      // restarts the index's write-ahead log (the cuts checked before it cover the start).
      const int at = writers.puts + static_cast<int>(rng() % static_cast<uint64_t>(3 * writers.puts + 24));
      ::setenv("ORBIT_POWERCUT_AT", std::to_string(at).c_str(), 1);
      children.push_back(std::make_unique<test::ChildProcess>(
          ORBIT_POWERCUT_CHILD_PATH,
          std::vector<std::string>{live.string(), std::to_string(first + int64_t{w} * writers.puts),
                                   std::to_string(writers.puts), std::to_string(writers.reads)}));
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

// The test's directory (shadow, store, images), removed at the end. On a memory file system when there
// is one (/dev/shm): the disk under test is the simulated one, and a real one only makes the checks' own
// fsyncs wait for every file the rebuilds wrote (about 4 times slower). ORBIT_POWERCUT_DIR picks another.
class ScratchDir {
 public:
  ScratchDir() {
    const char* chosen = std::getenv("ORBIT_POWERCUT_DIR");
    std::error_code ec;
    fs::path root = chosen != nullptr && *chosen != '\0'                                  ? fs::path(chosen)
                    : fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                                                          : fs::temp_directory_path();
    path_ = root / ("orbit-powercut-" + std::to_string(::getpid()) + "-" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

class Stopwatch {
 public:
  // Seconds since the last lap (or the start).
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

struct CutTotals {
  int64_t cuts = 0, failed = 0, lost = 0, unreferenced = 0, temp_files = 0, checked_reads = 0;
  int64_t by_mode[3] = {0, 0, 0};
  int64_t index_syncs = 0, syncs = 0;                // of index.sqlite, and of everything
  double writers_s = 0, rebuild_s = 0, check_s = 0;  // where the time went
};

// The store as `cut` leaves it, in `dir`: it opens, every entry committed before this round is there,
// every put of this round whose syncs all come at or before the cut reads back its value, and
// verify_integrity(deep) and verify_store are clean. false (each failure reported) when not.
bool check_cut(const fs::path& dir, const std::set<int64_t>& durable, const std::vector<Put>& round, const Cut& cut,
               CutTotals* totals) {
  INFO("cut after sync " << cut.k << ", write-back " << kWriteBackNames[static_cast<int>(cut.mode)]);
  ++totals->cuts;
  ++totals->by_mode[static_cast<int>(cut.mode)];
  int64_t lost = 0;
  try {
    ChunkStore store(store_options(dir));  // the engine's reopen first: a store cut while created gets its schema
    store.verify_integrity(true);
    for (int64_t i : durable) {
      if (!store.contains(test::store_test_key(i))) {
        ++lost;
        FAIL_CHECK("committed entry " << i << " was lost");
      }
    }
    for (const Put& p : round) {
      if (p.seq > cut.k) continue;
      ++totals->checked_reads;
      Result<ValuePtr> v = store.get(test::store_test_key(p.key));
      if (!v || !values_equal(*v.value(), *test::powercut_value(p.key))) {
        ++lost;
        FAIL_CHECK("committed entry " << p.key << " reads back wrong: " << v.status().reason());
      }
    }
    CHECK(store.faults().empty());
    const VerifyReport report = verify_store(dir.string());
    for (const VerifyProblem& p : report.problems) FAIL_CHECK(p.key << " " << p.path << ": " << p.reason);
    lost += static_cast<int64_t>(report.problems.size());
    totals->unreferenced += report.unreferenced_blobs;
    totals->temp_files += report.temp_files;
  } catch (const std::exception& e) {
    FAIL_CHECK("the store as the cut left it does not open cleanly: " << e.what());
    ++totals->failed;
    return false;
  }
  totals->failed += lost > 0 ? 1 : 0;
  totals->lost += lost;
  return lost == 0;
}

}  // namespace

TEST_CASE("simulated power cuts: no committed entry is lost and every reopen is clean", "[store][powercut]") {
  const int cuts = env_int("ORBIT_POWERCUT_CUTS", 150);
  const int per_round = env_int("ORBIT_POWERCUT_PER_ROUND", 30);
  Writers writers;
  writers.count = env_int("ORBIT_POWERCUT_WRITERS", writers.count);
  writers.puts = env_int("ORBIT_POWERCUT_PUTS", writers.puts);
  writers.reads = env_int("ORBIT_POWERCUT_READS", writers.reads);
  REQUIRE((cuts >= 1 && per_round >= 1 && writers.count >= 1 && writers.puts >= 1 && writers.reads >= 0));
  const ScratchDir dir;
  const fs::path shadow = dir / "shadow", live = dir / "store", image = dir / "image", cache = dir / "cache";
  fs::create_directories(shadow);
  fs::create_directories(live);
  long seq = seed(shadow, live, 1);
  std::mt19937_64 rng(static_cast<uint64_t>(env_int("ORBIT_POWERCUT_SEED", 20261125)));
  std::set<int64_t> durable;
  CutTotals totals;
  int64_t next = 0;
  const auto draw_mode = [&] { return static_cast<WriteBack>(rng() % 3); };
  for (int round = 0; totals.cuts < cuts; ++round) {
    INFO("round " << round);
    const std::string root = file_id(live);
    Stopwatch watch;
    const std::vector<Put> puts = run_writers(shadow, live, writers, next, rng);
    totals.writers_s += watch.lap();
    next += int64_t{writers.count} * writers.puts;
    const DiskLog log(shadow / "EVENTS");
    fs::remove_all(cache);  // positions in the log: this round's
    fs::create_directories(cache);
    // Cuts after random syncs of the round (the writers went on past them), then the one that stopped them.
    const int earlier = std::min(per_round, cuts - static_cast<int>(totals.cuts)) - 1;
    for (int c = 0; c < earlier; ++c) {
      const Cut cut{seq + static_cast<long>(rng() % static_cast<uint64_t>(log.last - seq + 1)), draw_mode()};
      fs::remove_all(image);
      rebuild(log, cut, root, image, cache, rng);
      totals.rebuild_s += watch.lap();
      check_cut(image, durable, puts, cut, &totals);
      totals.check_s += watch.lap();
    }
    const Cut last{log.last, draw_mode()};
    fs::remove_all(image);
    rebuild(log, last, root, image, cache, rng);
    fs::remove_all(live);
    fs::rename(image, live);
    totals.rebuild_s += watch.lap();
    REQUIRE(check_cut(live, durable, puts, last, &totals));  // and the next round's writers reopen it
    totals.check_s += watch.lap();
    for (const Put& p : puts) durable.insert(p.key);
    // How often the index file itself was synced (checkpoints that made the log's pages durable there).
    std::istringstream listing{std::string(log.listing(root, log.last))};
    for (std::string line; std::getline(listing, line);) {
      std::istringstream fields(line);
      std::string name, id;
      std::getline(fields, name, '\t');
      std::getline(fields, id, '\t');
      if (name == "index.sqlite") totals.index_syncs += log.syncs_of(id, seq);
    }
    totals.syncs += log.last - seq;
    seq = seed(shadow, live, log.last + 1);  // the check closed the store cleanly: all of it is on disk
  }
  CHECK(totals.checked_reads > 0);
  CHECK(totals.failed == 0);
  WARN(totals.cuts << " simulated power cuts (write-back synced " << totals.by_mode[0] << ", all " << totals.by_mode[1]
                   << ", torn " << totals.by_mode[2] << "), " << totals.failed << " left a store that lost entries or "
                   << "did not reopen cleanly; " << writers.count << " writer processes of " << writers.puts
                   << " puts and " << writers.reads << " reads after each: " << durable.size() << " entries committed, "
                   << totals.lost << " lost; " << totals.checked_reads
                   << " reads of entries committed before their cut; index.sqlite synced " << totals.index_syncs
                   << " times in " << totals.syncs
                   << " syncs; blobs left unreferenced (summed over cuts; gc "
                      "removes them): "
                   << totals.unreferenced << ", temp files: " << totals.temp_files << "; seconds in the writers "
                   << totals.writers_s << ", rebuilding disks " << totals.rebuild_s << ", checking them "
                   << totals.check_s);
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

}  // namespace ORBIT_TEST_FILE
