// The journal of held answers (stored/held_journal.h) and what the stores do with it (chat_store.h,
// responses/responses_store.h), without a model: a held answer survives its store's end without a drain (a
// crash, as far as the files are concerned) and the next store opened on the path writes it; a torn last
// record is ignored and a corrupt journal set aside, each reported naming the file; a release is taken on a
// full disk (the journal cannot grow), so a deleted answer does not come back; a response whose release mark
// failed (an I/O error) before a crash, and whose chain's row was deleted since, is reported as not confirmed
// released, not as lost. Also the Responses store's chain check, made inside the write's transaction: a link
// another server deletes just before the write is written with it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/held_journal.h"
#include "store_write_fixtures.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using namespace store_fixtures;  // store_write_fixtures.h: what these tests share

namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void append_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
}

// Replaces this process's descriptor of the file `path` (a journal's, opened to read and write) by one opened
// read-only on the same file, which its owner closes: every write through it fails (EBADF), as on an I/O error.
void fail_writes_to(const std::string& path) {
  std::vector<int> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec) == path && !ec) found.push_back(std::stoi(e.path().filename()));
  }
  REQUIRE(found.size() == 1);
  const int read_only = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(read_only >= 0);
  REQUIRE(::dup2(read_only, found[0]) == found[0]);
  ::close(read_only);
}

// Grows `store`'s write-ahead log by `count` completions of kLarge that stay, so that a file-size limit a
// little above it fails a large write there while a new journal still takes one.
void grow_log(sv::ChatStore& store, int count) {
  for (int i = 0; i < count; ++i) REQUIRE(store.put(completion("ballast" + std::to_string(i), kLarge)));
}

}  // namespace

TEST_CASE("held journal: live holds survive a close and are adopted by the next journal", "[serve][journal]") {
  TempDir tmp;
  const std::string store = (tmp.dir / "s.sqlite").string();
  {
    sv::HeldJournal j(store);
    CHECK(j.error().empty());
    CHECK(j.hold("a", "payload a").empty());
    CHECK(j.hold("b", "payload b").empty());
    CHECK(j.hold("c", std::string(3000, 'c')).empty());
    CHECK(j.release("a").empty());
    CHECK(j.live() == 2);
  }  // ends without releasing b and c: the file stays
  const std::string left = journal_of(store);
  REQUIRE_FALSE(left.empty());
  sv::HeldJournal next(store);
  REQUIRE(next.adopted().held.size() == 2);
  CHECK(next.adopted().held[0].id == "b");
  CHECK(next.adopted().held[0].payload == "payload b");
  CHECK(next.adopted().held[1].payload == std::string(3000, 'c'));
  CHECK(next.adopted().problems.empty());
  CHECK(next.live() == 2);
  // Releasing every hold cuts the file back to its header.
  CHECK(next.release("b").empty());
  CHECK(next.release("c").empty());
  CHECK(std::filesystem::file_size(next.path()) == std::string("orbit-held-journal 1\n").size());
}

TEST_CASE("held journal: a torn last record is ignored and a corrupt journal set aside, both reported",
          "[serve][journal]") {
  TempDir tmp;
  const std::string store = (tmp.dir / "s.sqlite").string();
  {
    sv::HeldJournal j(store);
    REQUIRE(j.hold("kept", "payload kept").empty());
  }
  // A crash in the middle of an append: a record's head, and part of its id.
  append_bytes(journal_of(store), std::string("HLDR\x01\0\0\0\x09\0\0\0", 12));
  {
    sv::HeldJournal next(store);
    REQUIRE(next.adopted().held.size() == 1);
    CHECK(next.adopted().held[0].id == "kept");
    REQUIRE(next.adopted().problems.size() == 1);
    CHECK_THAT(next.adopted().problems[0], Catch::Matchers::Contains("last record is incomplete"));
    CHECK_THAT(next.adopted().problems[0], Catch::Matchers::Contains(store + ".held-"));
    REQUIRE(next.hold("second", "payload second").empty());
  }
  // A byte of the first record flipped: the records from there on are lost, the file kept aside.
  const std::string path = journal_of(store);
  std::string bytes = file_text(path);
  const std::size_t at = bytes.find("payload kept");
  REQUIRE(at != std::string::npos);
  bytes[at] = 'P';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  sv::HeldJournal after(store);
  CHECK(after.adopted().held.empty());
  REQUIRE(after.adopted().problems.size() == 1);
  CHECK_THAT(after.adopted().problems[0], Catch::Matchers::Contains("corrupt at byte 21"));
  CHECK_THAT(after.adopted().problems[0], Catch::Matchers::Contains(path + ".corrupt"));
  CHECK(std::filesystem::exists(path + ".corrupt"));
}

TEST_CASE(
    "held journal: a chat completion held when its store ends without a drain is written by the next, one "
    "deleted while held is not",
    "[serve][journal][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  {
    sv::ChatStore store(sv::ChatStoreOptions{64, path});
    grow_log(store, 3);
    {
      const FileSizeLimit limit(wal_bytes(path) + kRoom);
      const sv::StoreWrite failed = store.put(completion("kept", kLarge));
      REQUIRE_FALSE(failed.ok);
      CHECK(failed.held);
      CHECK(failed.journaled);
      REQUIRE(store.put(completion("deleted", kLarge)).journaled);
      CHECK(store.pending().journaled == 2);
      SECTION("deleted while the journal grows") { CHECK(store.erase("deleted")); }
    }
    SECTION("deleted while not even the journal grows") {
      // Erasing a completion that was never written adds no page to the log.
      const FileSizeLimit full(std::filesystem::file_size(journal_of(path)));
      CHECK(store.erase("deleted"));  // the old code's release was an append, which failed: written again
    }
  }  // no drain_pending(): a crash, as the files see it
  sv::ChatStore reopened(sv::ChatStoreOptions{64, path});
  CHECK(reopened.get("kept"));
  CHECK_FALSE(reopened.get("deleted"));
  CHECK(reopened.pending().held == 0);
  CHECK(reopened.pending().recovered == 1);
}

TEST_CASE("held journal: a release is taken when no byte can be appended", "[serve][journal]") {
  TempDir tmp;
  const std::string store = (tmp.dir / "s.sqlite").string();
  {
    sv::HeldJournal j(store);
    REQUIRE(j.hold("deleted", std::string(3000, 'd')).empty());
    REQUIRE(j.hold("kept", "payload kept").empty());
    const FileSizeLimit full(std::filesystem::file_size(j.path()));  // the journal's disk is full
    CHECK_FALSE(j.hold("more", "payload more").empty());
    CHECK(j.release("deleted").empty());  // marked in place: no byte added
    CHECK(j.live() == 1);
  }  // ends without a release of "kept": the file stays
  sv::HeldJournal next(store);
  REQUIRE(next.adopted().held.size() == 1);  // the old code appended the release, failed, and adopted both
  CHECK(next.adopted().held[0].id == "kept");
  CHECK(next.adopted().problems.empty());
}

TEST_CASE("held journal: an answer the journal cannot take either is held in memory only",
          "[serve][journal][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  sv::ChatStore store(sv::ChatStoreOptions{64, path});
  REQUIRE(store.put(completion("first")));
  const FileSizeLimit limit(wal_bytes(path) + kRoom);
  const sv::StoreWrite failed = store.put(completion("large", 2 * kLarge));  // past the limit in any file
  REQUIRE_FALSE(failed.ok);
  CHECK(failed.held);
  CHECK_FALSE(failed.journaled);
  CHECK(store.pending().journaled == 0);
  CHECK(store.drain_pending() == 1);  // lost at shutdown: it is nowhere else
}

TEST_CASE("held journal: a held response chain is rebuilt and written by the next store", "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{64, path});
    auto first = response("r1");
    REQUIRE(put(store, first));
    for (int i = 0; i < 3; ++i) REQUIRE(put(store, response("ballast" + std::to_string(i), kLarge)));
    const FileSizeLimit limit(wal_bytes(path) + kRoom);
    auto second = response("r2", kLarge, first);
    const sv::StoreWrite held = put(store, second);
    REQUIRE(held.held);
    CHECK(held.journaled);
    auto third = response("r3", 0, second);
    REQUIRE(put(store, third).journaled);  // r2, written first, does not fit: neither does r3
    CHECK(store.erase("r2"));              // r3's record holds r2 as a link: still written whole
  }
  sv::ResponseStore reopened(sv::ResponseStoreOptions{64, path});
  CHECK(reopened.pending().held == 0);
  CHECK_FALSE(reopened.get("r2"));
  sv::ResponseStore fresh(sv::ResponseStoreOptions{64, path});  // nothing in memory: read from disk
  const std::vector<orbit::ChatMessage> conversation = conversation_of(fresh, "r3");
  REQUIRE(conversation.size() == 6);
  CHECK(conversation[0].content == "question r1");
  CHECK(conversation[2].content == "question r2");
  CHECK(conversation[5].content == "answer r3");
}

TEST_CASE("held journal: a held response chain's journal grows with its length, and a deleted link is kept",
          "[serve][journal]") {
  constexpr int kChain = 50;
  constexpr std::size_t kHeader = 21;  // "orbit-held-journal 2\n"
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  std::size_t first_record = 0, journal_bytes = 0;
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{256, path});
    auto previous = response("r0");
    REQUIRE(put(store, previous));
    for (int i = 0; i < 3; ++i) REQUIRE(put(store, response("ballast" + std::to_string(i), kLarge)));
    const FileSizeLimit limit(wal_bytes(path));  // the log takes no write; the journal, a new file, does
    for (int i = 1; i <= kChain; ++i) {
      auto next = response("r" + std::to_string(i), 1000, previous);
      const sv::StoreWrite held = put(store, next);
      REQUIRE_FALSE(held.ok);
      REQUIRE(held.journaled);
      if (i == 1) first_record = std::filesystem::file_size(journal_of(path)) - kHeader;
      previous = next;
    }
    journal_bytes = std::filesystem::file_size(journal_of(path)) - kHeader;
    // Deleted while the responses continuing it are held: its record stays as their link.
    CHECK(store.erase("r10"));
  }  // no drain_pending(): a crash, as the files see it
  std::printf("journal of a %d-response held chain: %zu bytes, %.2f times its first record\n", kChain, journal_bytes,
              static_cast<double>(journal_bytes) / static_cast<double>(first_record));
  // Each record holds its own response only (the old code repeated every held link before it: about 25 times
  // these bytes at 50).
  CHECK(journal_bytes < 2 * kChain * first_record);
  sv::ResponseStore reopened(sv::ResponseStoreOptions{256, path});
  CHECK(reopened.pending().held == 0);
  CHECK(reopened.pending().recovered == kChain - 1);
  sv::ResponseStore fresh(sv::ResponseStoreOptions{256, path});  // nothing in memory: read from disk
  CHECK_FALSE(fresh.get("r10"));
  const std::vector<orbit::ChatMessage> conversation = conversation_of(fresh, "r" + std::to_string(kChain));
  REQUIRE(conversation.size() == 2 * (kChain + 1));
  CHECK(conversation[20].content == "question r10");
  CHECK(conversation.back().content == "answer r" + std::to_string(kChain));
}

TEST_CASE("responses store: a link another server deletes just before the write is written with the response",
          "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  sv::ResponseStore other(sv::ResponseStoreOptions{64, path});  // a second server sharing the store
  bool armed = false;
  sv::ResponseStoreOptions options{64, path};
  options.before_disk_write = [&] {
    if (!armed) return;
    armed = false;
    REQUIRE(other.erase("parent"));  // between the chain's check and the write, on the old code
  };
  sv::ResponseStore store(options);
  auto parent = response("parent");
  REQUIRE(put(store, parent));
  armed = true;
  REQUIRE(put(store, response("child", 0, parent)));
  sv::ResponseStore fresh(sv::ResponseStoreOptions{64, path});
  std::shared_ptr<sv::StoredResponse> child;
  REQUIRE_NOTHROW(child = fresh.get("child"));  // the old code: "continues 'parent', which is missing"
  REQUIRE(child);
  CHECK(child->conversation().size() == 4);
  CHECK_FALSE(fresh.get("parent"));  // deleted: an unnamed link only
}

TEST_CASE("held journal: a response deleted while held, whose release mark failed before a crash, is not reported lost",
          "[serve][journal]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{64, path});
    auto first = response("r1");
    REQUIRE(put(store, first));
    {
      const FileSizeLimit limit(wal_bytes(path));               // the log takes no write; the journal, a new file, does
      REQUIRE(put(store, response("r2", 0, first)).journaled);  // its record names r1, a row on disk
      REQUIRE(put(store, response("kept")).journaled);          // keeps the journal live past r2's release
    }
    CHECK(store.erase("r1"));  // unnamed, kept: r2's record names it
    fail_writes_to(journal_of(path));
    CHECK(store.erase("r2"));  // its release's mark fails; r1, named by no live record, is deleted
  }  // no drain_pending(), and the journal's marks still fail at its close: a crash, as the files see it
  StderrCapture captured;
  sv::ResponseStore reopened(sv::ResponseStoreOptions{64, path});
  const std::string said = captured.text();
  CHECK(reopened.pending().recovered == 1);  // kept
  CHECK(reopened.get("kept"));
  CHECK_FALSE(reopened.get("r2"));
  CHECK_FALSE(reopened.get("r1"));
  // r2 was deleted, not lost: the old code said "response r2 in the journal ... is lost: ... continues 'r1'".
  CHECK_THAT(said, !Catch::Matchers::Contains("r2 in the journal " + journal_of(path) + " is lost:"));
  CHECK_THAT(said, Catch::Matchers::Contains("could not be confirmed released"));
  CHECK_THAT(said, Catch::Matchers::Contains("continues 'r1'"));
}

TEST_CASE("held journal: a FIFO named like a journal is reported and left, not read (its read never ends)",
          "[serve][journal]") {
  TempDir tmp;
  const std::string store = (tmp.dir / "s.sqlite").string();
  {
    sv::HeldJournal j(store);
    REQUIRE(j.hold("kept", "payload kept").empty());
  }
  const std::string fifo = store + ".held-900001";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  ::alarm(60);  // the old adoption read the FIFO forever: end the test rather than hang it
  sv::HeldJournal next(store);
  ::alarm(0);
  REQUIRE(next.adopted().held.size() == 1);  // the real journal beside it is adopted
  CHECK(next.adopted().held[0].id == "kept");
  REQUIRE(next.adopted().problems.size() == 1);
  CHECK_THAT(next.adopted().problems[0],
             Catch::Matchers::Contains("held-answers journal " + fifo + ": not a file but a FIFO"));
  CHECK(std::filesystem::is_fifo(fifo));  // left as it is
}

}  // namespace ORBIT_TEST_FILE
