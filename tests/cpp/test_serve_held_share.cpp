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
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "orbit_catch.h"
#include "serve/responses/responses_disk.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/held_journal.h"
#include "serve/stored/journal_share.h"
#include "store_write_fixtures.h"

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

// Not run by ctest (hidden): `test_serve_held_share "[.held-share-bench]"` prints what a deletion's check of the
// other servers' journals costs (the lock taken, the directory listed, the lock let go), with 10 and 2,000 other
// files in the store's directory, beside a put that commits (one sync of the disk). It asserts no time.
TEST_CASE("held share: time of a deletion's check of the other journals", "[.held-share-bench]") {
  constexpr int kCalls = 2000;
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  const auto per_call_us = [](const std::function<void()>& call, int calls) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
  };
  sv::JournalShare share(path, [](const std::string& payload) { return payload; });
  const auto check = [&] {
    (void)share.named_elsewhere("some-row", "");
    share.unlock();
  };
  for (int files : {10, 2000}) {
    for (int i = 0; i < files; ++i)
      std::ofstream(tmp.dir / ("other-" + std::to_string(files) + "-" + std::to_string(i)));
    std::printf("check of the other journals, %d other files in the directory: %.1f us\n", files,
                per_call_us(check, kCalls));
  }
  sv::ResponseStore store(sv::ResponseStoreOptions{4096, path});
  int n = 0;
  std::printf("a put that commits: %.1f us\n",
              per_call_us([&] { REQUIRE(put(store, response("p" + std::to_string(n++)))); }, 200));
}
