// Two servers sharing one store (store_share.h) and the journals of held answers (held_journal.h,
// journal_share.h): a row on disk that a live record of one server's journal names stays when the other
// server deletes it (a client's DELETE, or its eviction past --max-responses), whether the first server still
// runs or crashed and its journal waits for the next start; that start then rebuilds and writes the held
// response whole. The first server is a forked child (a journal per process) that ends with _exit, a crash as
// far as the files see it. A hold that looks its link up while another server deletes that row (that server
// holding the store's lock, as from its read of the journals to its commit) waits for the deletion, then finds
// no row and carries the link in its record. Also the contract a hold naming a row keeps: the store's lock held.
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_disk.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/held_journal.h"
#include "serve/stored/journal_cache.h"
#include "serve/stored/journal_share.h"
#include "store_write_fixtures.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using namespace store_fixtures;  // store_write_fixtures.h: what these tests share

namespace {

// In the child: opens a store on `path`, writes "r0", three of kLarge and "t", then, under a file-size limit
// that lets small writes through, runs `before_hold` and holds "r" (too large) continuing "t": its journal
// record names t's row (or, if t was deleted meanwhile, carries it). Returns whether r is held and journaled.
// The store stays open (never destroyed: the child ends by _exit, holding it).
bool hold_on_row(const std::string& path, const std::function<bool()>& before_hold) {
  sv::ResponseStore& store = *new sv::ResponseStore(sv::ResponseStoreOptions{4096, path});
  for (const char* id : {"r0", "ballast0", "ballast1", "ballast2"}) {
    if (!put(store, response(id, id[0] == 'b' ? kLarge : 0))) return false;
  }
  auto parent = response("t");
  if (!put(store, parent)) return false;
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit limit{};
  ::getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = wal_bytes(path) + kRoom;
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0 || !before_hold()) return false;
  const sv::StoreWrite held = put(store, response("r", kLarge, parent));
  return !held.ok && held.journaled;
}

// A server in a child process holding "r" (hold_on_row) until crash() ends it without a drain. With
// `wait_for_go`, the child stops before the hold until go(), and the constructor returns once it is there.
class HoldingServer {
 public:
  explicit HoldingServer(const std::string& path, bool wait_for_go = false) {
    REQUIRE(::pipe(up_) == 0);
    REQUIRE(::pipe(down_) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) run_child(path, wait_for_go);
    if (wait_for_go) {
      REQUIRE(read_status() == 'r');  // t written, writes now limited: waiting for go()
    } else {
      REQUIRE(read_status() == 'h');  // r is held and journaled
    }
  }
  ~HoldingServer() { crash(); }
  pid_t pid() const { return pid_; }
  void go() { REQUIRE(::write(down_[1], "g", 1) == 1); }
  // Whether the child has said something (r's hold done) within `ms`.
  bool said_within(int ms) {
    pollfd p{up_[0], POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  }
  char read_status() {
    char status = 0;
    REQUIRE(::read(up_[0], &status, 1) == 1);
    return status;
  }
  void crash() {
    if (pid_ <= 0) return;
    (void)::write(down_[1], "q", 1);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    for (int fd : {up_[0], up_[1], down_[0], down_[1]}) ::close(fd);
  }

 private:
  // Nothing here touches the parent's Catch state: status bytes on the pipes only.
  [[noreturn]] void run_child(const std::string& path, bool wait_for_go) {
    char ok = 'x';
    const auto wait_for_it = [&] {
      char go = 0;
      return !wait_for_go || (::write(up_[1], "r", 1) == 1 && ::read(down_[0], &go, 1) == 1 && go == 'g');
    };
    try {
      ok = hold_on_row(path, wait_for_it) ? 'h' : 'x';
    } catch (...) {
    }
    // Not returning through the store's destructors: _exit with its journal live, as after a kill -9.
    if (::write(up_[1], &ok, 1) != 1) ::_exit(2);
    char quit = 0;
    if (::read(down_[0], &quit, 1) < 0) ::_exit(3);
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int up_[2] = {-1, -1};
  int down_[2] = {-1, -1};
};

// Whether process `pid` waits for a flock on the file `path` (/proc/locks: a "->" line naming its inode).
bool waits_for_flock(pid_t pid, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  std::ifstream locks("/proc/locks");
  const std::string inode = ":" + std::to_string(st.st_ino) + " ";
  const std::string process = " " + std::to_string(pid) + " ";
  for (std::string line; std::getline(locks, line);) {
    if (line.find("-> FLOCK") != std::string::npos && line.find(process) != std::string::npos &&
        line.find(inode) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// A journal of held answers holding `holds` ((id, payload): the payload's first word is the row it names, by
// kLinkOf), written by a HeldJournal of the scratch store `scratch` and copied to `to` ("" none; a journal of the
// store under test, as another server's): over the file there, if any (same inode). The scratch journal stays.
const sv::LinkOf kLinkOf = [](const std::string& payload) { return payload.substr(0, payload.find(' ')); };

void copy_over(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

std::unique_ptr<sv::HeldJournal> journal_at(const std::string& scratch, const std::string& to,
                                            const std::vector<std::pair<std::string, std::string>>& holds) {
  auto journal = std::make_unique<sv::HeldJournal>(scratch, kLinkOf);
  REQUIRE(journal->error().empty());
  for (const auto& [id, payload] : holds) REQUIRE(journal->hold(id, payload).empty());
  if (!to.empty()) copy_over(journal->path(), to);
  return journal;
}

// Waits until a change of `paths` (files, directories) would give each another stamp (journal_cache.h:
// FileStamp::settled): the kernel's coarse clock past their times.
void wait_settled(const std::vector<std::string>& paths) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
    bool settled = true;
    for (const std::string& path : paths) {
      struct stat st {};
      REQUIRE(::stat(path.c_str(), &st) == 0);
      sv::FileStamp stamp;
      stamp.modified_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
      stamp.changed_ns = st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
      settled = settled && stamp.settled(now.tv_sec * 1000000000LL + now.tv_nsec);
    }
    if (settled) return;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::size_t lines_naming(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Whether a deletion's check through `share` keeps `id` (its lock taken and let go, as a deletion does).
bool kept(sv::JournalShare& share, const std::string& id) {
  const bool keep = share.named_elsewhere(id, "");
  share.unlock();
  return keep;
}

}  // namespace

TEST_CASE("held share: a row another running server's record names stays when this server deletes it",
          "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  HoldingServer a(path);
  {
    sv::ResponseStore b(sv::ResponseStoreOptions{4096, path});  // shares the store: a's journal is not adopted
    CHECK(b.pending().recovered == 0);
    CHECK(b.erase("t"));  // a client's DELETE sent to b
    CHECK_FALSE(b.get("t"));
    CHECK(sv::ResponseDisk(path).has("t"));  // unnamed, kept for a's record (the old code deleted it)
  }
  a.crash();  // before r's hold lands
  check_chain_recovered(path);
}

TEST_CASE("held share: a row a crashed server's record names stays when a running server evicts it",
          "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  HoldingServer a(path);
  {
    sv::ResponseStoreOptions options{1, path};  // --max-responses 1: its next put evicts every other response
    sv::ResponseStore b(options);               // opened while a runs: a's journal is not adopted
    a.crash();                                  // its journal now waits for the next start
    REQUIRE(put(b, response("x")));
    const sv::ResponseDisk disk(path);
    CHECK_FALSE(disk.has("r0"));  // evicted, and deleted: no record names it
    CHECK(disk.has("t"));         // evicted, kept unnamed for the crashed server's record (the old code deleted it)
    CHECK(b.size() == 1);
  }
  check_chain_recovered(path);
}

TEST_CASE("held share: a hold looking up its link while another server deletes that row waits, and carries it",
          "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  HoldingServer a(path, true);
  // This process plays a server deleting t that has read the other journals (none names t yet) and not
  // committed: it holds the store's lock until its deletion commits.
  sv::JournalShare share(path, nullptr);
  REQUIRE(share.lock().empty());
  a.go();
  // a's hold either waits for the lock before it looks t up, or (the old code) looks t up at once, records
  // its name, and says so.
  bool said = false;
  while (!(said = a.said_within(10)) && !waits_for_flock(a.pid(), path + ".held.lock")) {
  }
  CHECK_FALSE(said);
  CHECK(sv::ResponseDisk(path).unname("t"));  // deleted: no row continues it and this disk keeps nothing
  share.unlock();
  CHECK(a.read_status() == 'h');  // r held and journaled, t in its record as a link
  a.crash();
  check_chain_recovered(path);  // the old code: r's record named t, deleted since: "r ... is lost"
}

TEST_CASE("held share: a hold whose record names a row needs the store's lock", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const sv::LinkOf link_of = [](const std::string& payload) { return payload.substr(0, payload.find(' ')); };
  sv::JournalShare share(path, link_of);
  REQUIRE(share.error().empty());
  sv::HeldJournal journal(path, link_of, &share);
  REQUIRE(journal.error().empty());
  CHECK(journal.hold("first", " names nothing").empty());  // names no row: no lock needed
  const std::string refused = journal.hold("second", "row1 names a row");
  CHECK(refused.find("without the store's journals locked") != std::string::npos);
  CHECK(journal.live() == 1);
  CHECK(journal.hold("third", "first names a record here").empty());
  REQUIRE(share.lock().empty());
  CHECK(share.held());
  CHECK(journal.hold("second", "row1 names a row").empty());
  CHECK_FALSE(share.named_elsewhere("row1", journal.path()));  // this journal's own records are not elsewhere
  CHECK(share.named_elsewhere("row1", ""));                    // read as another server's
  CHECK_FALSE(share.named_elsewhere("row2", ""));
  share.unlock();
  CHECK_FALSE(share.held());
  CHECK(journal.live() == 3);
}

TEST_CASE("held share: a deletion's check reads again only the journals that changed", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const std::string first = path + ".held-900001", second = path + ".held-900002";
  const auto a = journal_at((tmp.dir / "a.sqlite").string(), first, {{"h1", "row1 x"}, {"h2", "row2 x"}});
  const auto b = journal_at((tmp.dir / "b.sqlite").string(), second, {{"h3", "row3 x"}});
  int read = 0;  // records read: link_of runs once for each record of each journal read
  sv::JournalShare share(path, [&](const std::string& payload) {
    ++read;
    return kLinkOf(payload);
  });
  wait_settled({first, second, tmp.dir.string()});
  CHECK(kept(share, "row1"));
  CHECK(read == 3);
  CHECK(kept(share, "row3"));
  CHECK_FALSE(kept(share, "row4"));
  CHECK(read == 3);  // neither changed: neither read again (the old check read both at each lock: 9)
  REQUIRE(b->hold("h4", "row4 x").empty());
  copy_over(b->path(), second);
  wait_settled({second});  // else read again at the next check too: a change in the same clock tick would not show
  CHECK(kept(share, "row4"));
  CHECK(read == 5);  // the journal that grew, alone
  CHECK(kept(share, "row1"));
  CHECK(read == 5);
}

TEST_CASE("held share: a journal changed or added just after a check is read by the next", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const std::string other = path + ".held-900001", added = path + ".held-900002";
  const std::string dir = tmp.dir.string();
  const auto one = journal_at(dir + "/one.sqlite", other, {{"h", "row1 x"}});
  const auto two = journal_at(dir + "/two.sqlite", "", {{"h", "row2 x"}});  // as long as one's, another row
  const auto three = journal_at(dir + "/three.sqlite", "", {{"h", "row3 x"}});
  sv::JournalShare share(path, kLinkOf);
  wait_settled({other, dir});
  CHECK(kept(share, "row1"));
  CHECK_FALSE(kept(share, "row2"));
  struct stat before {};
  struct stat after {};
  REQUIRE(::stat(other.c_str(), &before) == 0);
  copy_over(two->path(), other);  // at once: the same inode and size, only its times tell
  REQUIRE(::stat(other.c_str(), &after) == 0);
  REQUIRE((after.st_ino == before.st_ino && after.st_size == before.st_size));
  CHECK(kept(share, "row2"));
  CHECK_FALSE(kept(share, "row1"));
  // Changes in the tick of the check before them (no wait): each check sees the last.
  for (int i = 0; i < 200; ++i) {
    copy_over((i % 2 == 0 ? one : two)->path(), other);
    if (i % 3 == 0) copy_over(three->path(), added);
    if (i % 3 == 2) std::filesystem::remove(added);
    INFO("change " << i);
    CHECK(kept(share, i % 2 == 0 ? "row1" : "row2"));
    CHECK_FALSE(kept(share, i % 2 == 0 ? "row2" : "row1"));
    CHECK(kept(share, "row3") == (i % 3 != 2));
  }
}

TEST_CASE("held share: a journal that cannot be read keeps every row, and is reported once", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const std::string unreadable = path + ".held-900001", foreign = path + ".held-900002";
  std::filesystem::create_directory(unreadable);  // not a file: its read fails (EISDIR; root reads any file)
  sv::JournalShare share(path, kLinkOf);
  {
    StderrCapture captured;
    CHECK(kept(share, "any-row"));
    CHECK(kept(share, "any-row"));
    const std::string said = captured.text();
    CHECK(lines_naming(said, unreadable) == 1);
    CHECK(said.find(unreadable + ": cannot be read (Is a directory)") != std::string::npos);
  }
  std::filesystem::remove(unreadable);
  CHECK_FALSE(kept(share, "any-row"));
  // Another format's journal (a newer server's): what it names is unknown.
  std::ofstream(foreign) << "orbit-held-journal 9\nwhatever it holds";
  {
    StderrCapture captured;
    CHECK(kept(share, "any-row"));
    CHECK(kept(share, "any-row"));
    const std::string said = captured.text();
    CHECK(lines_naming(said, foreign) == 1);
    CHECK(said.find("its header is not") != std::string::npos);
  }
  std::filesystem::remove(foreign);
  CHECK_FALSE(kept(share, "any-row"));
  // A FIFO named like a journal: its open waited for a writer forever, under the store's lock.
  const std::string fifo = path + ".held-900003";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  {
    StderrCapture captured;
    ::alarm(60);  // end the test rather than hang it
    CHECK(kept(share, "any-row"));
    ::alarm(0);
    const std::string said = captured.text();
    CHECK(lines_naming(said, fifo) == 1);
    CHECK(said.find(fifo + ": cannot be read (not a file but a FIFO, socket or device)") != std::string::npos);
  }
  std::filesystem::remove(fifo);
  CHECK_FALSE(kept(share, "any-row"));
}

TEST_CASE("held share: a damaged journal is read up to the damage, a torn one up to the tear", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const std::string other = path + ".held-900001";
  const auto journal =
      journal_at((tmp.dir / "a.sqlite").string(), other, {{"h1", "row1 x"}, {"h2", "row2 x"}, {"h3", "row3 x"}});
  sv::JournalShare share(path, kLinkOf);
  const uintmax_t whole = std::filesystem::file_size(other);
  const std::size_t record = 28 + 2 + 6;  // head, id, payload (held_journal.h)
  REQUIRE(whole == 21 + 3 * record);      // the header, three records
  {
    StderrCapture captured;
    std::filesystem::resize_file(other, whole - 3);  // a crash while the last record was appended
    CHECK(kept(share, "row1"));
    CHECK(kept(share, "row2"));
    CHECK_FALSE(kept(share, "row3"));
    CHECK_FALSE(kept(share, "any-row"));  // not a journal that cannot be read
    CHECK(lines_naming(captured.text(), other) == 0);
  }
  copy_over(journal->path(), other);
  {
    std::fstream damage(other, std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(static_cast<std::streamoff>(21 + record));  // the second record's magic
    damage.put('\0');
  }
  StderrCapture captured;
  CHECK(kept(share, "row1"));
  CHECK_FALSE(kept(share, "row2"));  // from the damage on: lost to a start adopting the file too
  CHECK_FALSE(kept(share, "row3"));
  CHECK_FALSE(kept(share, "any-row"));
  CHECK(kept(share, "row1"));
  const std::string said = captured.text();
  CHECK(lines_naming(said, other) == 1);
  CHECK(said.find("it is corrupt at byte " + std::to_string(21 + record)) != std::string::npos);
}

TEST_CASE("held share: a store named without a directory reads the journals beside it", "[serve][journal]") {
  TempDir tmp;
  struct InDir {  // the store is "responses.sqlite" in the working directory, until the case ends
    std::filesystem::path was = std::filesystem::current_path();
    explicit InDir(const std::filesystem::path& dir) { std::filesystem::current_path(dir); }
    ~InDir() { std::filesystem::current_path(was); }
  } in_dir(tmp.dir);
  const auto journal = journal_at("a.sqlite", "responses.sqlite.held-900001", {{"h", "row1 x"}});
  sv::JournalShare share("responses.sqlite", kLinkOf);
  // The old listing of "" failed, silently: no journal seen, nothing kept.
  CHECK(kept(share, "row1"));
  CHECK_FALSE(kept(share, "row2"));
  CHECK_FALSE(share.named_elsewhere("row1", "responses.sqlite.held-900001"));  // its own: named as its path is
  share.unlock();
}

// Not run by ctest (hidden): `test_serve_held_share "[.held-share-bench]"` prints what a deletion's check of the
// other servers' journals costs (the lock taken, the journals brought up to date, the lock let go), with 10 and
// 2,000 other files in the store's directory and with 4 other journals of 100 holds each, beside a put that
// commits (one sync of the disk). Each setting times, alternated three times, the check reading everything as
// the old one did (the directory listed, every journal read and parsed) and the kept one (JournalShare: only
// what changed). It asserts no time.
TEST_CASE("held share: time of a deletion's check of the other journals", "[.held-share-bench]") {
  constexpr int kCalls = 2000;
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const auto per_call_us = [](const std::function<void()>& call, int calls) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
  };
  sv::JournalShare share(path, kLinkOf);
  const auto kept_check = [&] { (void)kept(share, "some-row"); };
  const auto full_check = [&] {  // the old check: every journal listed, read and parsed at each lock
    REQUIRE(share.lock().empty());
    std::string error;
    std::set<std::string> names;
    for (const std::string& file : sv::journal_files(path, error)) {
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      sv::JournalNames read = sv::journal_names(bytes, file, kLinkOf);
      names.insert(read.names.begin(), read.names.end());
    }
    (void)names.count("some-row");
    share.unlock();
  };
  const auto compare = [&](const std::string& setting, int calls) {
    for (int round = 0; round < 3; ++round) {
      const double full = per_call_us(full_check, calls);
      const double cached = per_call_us(kept_check, calls);
      std::printf("%s: every journal read %.1f us, only what changed %.1f us (%.1fx)\n", setting.c_str(), full, cached,
                  full / cached);
    }
  };
  std::vector<std::unique_ptr<sv::HeldJournal>> journals;
  for (int files : {10, 2000}) {
    for (int i = 0; i < files; ++i)
      std::ofstream(tmp.dir / ("other-" + std::to_string(files) + "-" + std::to_string(i)));
    compare(std::to_string(files) + " other files in the directory", kCalls);
    if (files != 10) continue;
    std::vector<std::string> settled = {tmp.dir.string()};
    for (int j = 0; j < 4; ++j) {
      std::vector<std::pair<std::string, std::string>> holds;
      for (int h = 0; h < 100; ++h) {
        holds.emplace_back("h" + std::to_string(h), "row" + std::to_string(j * 100 + h) + " " + std::string(200, 'x'));
      }
      settled.push_back(path + ".held-90000" + std::to_string(j));
      journals.push_back(
          journal_at((tmp.dir / ("scratch" + std::to_string(j) + ".sqlite")).string(), settled.back(), holds));
    }
    wait_settled(settled);
    compare("4 journals of 100 holds, 10 other files", kCalls / 10);
    for (std::size_t j = 1; j < settled.size(); ++j) std::filesystem::remove(settled[j]);  // not for the store
  }
  sv::ResponseStore store(sv::ResponseStoreOptions{4096, path});
  int n = 0;
  std::printf("a put that commits: %.1f us\n",
              per_call_us([&] { REQUIRE(put(store, response("p" + std::to_string(n++)))); }, 200));
}

}  // namespace ORBIT_TEST_FILE
