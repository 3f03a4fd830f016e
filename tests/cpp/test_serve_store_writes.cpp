// How `orbit serve`'s stores write (cli/serve/stored/chat_store.h, responses/responses_store.h, both over
// stored/group_commit.h; store_write.h), without a model: puts that queue while one commits share the next
// transaction (and with group commit off each has its own); a group that fails is written again one item at
// a time, so only the one the disk cannot take fails; a check queued with puts is answered before their
// commit; check_writable fails where a write fails, and names the file. A full disk is RLIMIT_FSIZE here
// (with SIGXFSZ ignored, as `orbit serve` does): it stops root as well.
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/group_commit.h"
#include "serve/stored/sqlite_file.h"
#include "store_write_fixtures.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using namespace store_fixtures;  // store_write_fixtures.h: what these tests share

// Puts `items` from one thread each, in order, while another connection holds the file (of `format`)'s
// write lock: the first put leads a group of its own and waits for the lock, and the others queue behind it
// in order (queued()), so they form the next group. Returns the outcomes in `items`' order.
template <class Store, class Item>
std::vector<sv::StoreWrite> put_together(Store& store, const std::string& path, const char* format,
                                         const std::vector<Item>& items) {
  sv::SqliteFile other("other writer", path, "", format);
  auto lock = std::make_unique<sv::SqlTransaction>(other);  // BEGIN IMMEDIATE: the store's commits wait
  std::vector<sv::StoreWrite> out(items.size());
  std::vector<std::thread> writers;
  for (std::size_t i = 0; i < items.size(); ++i) {
    writers.emplace_back([&, i] { out[i] = put(store, items[i]); });
    while (store.queued() < i + 1) std::this_thread::yield();
  }
  lock->commit();
  for (std::thread& t : writers) t.join();
  return out;
}

constexpr const char* kChatFormat = "orbit-serve-chat-completions 1";
constexpr const char* kResponsesFormat = "orbit-serve-responses 1";

}  // namespace

TEST_CASE("store writes: puts queued while one commits share the next transaction", "[serve][chat_store]") {
  for (const bool group : {true, false}) {
    CAPTURE(group);
    TempDir tmp;
    const std::string path = (tmp.dir / "chat.sqlite").string();
    sv::ChatStore store(sv::ChatStoreOptions{64, path, group});
    std::vector<sv::StoredCompletion> items;
    for (int i = 0; i < 16; ++i) items.push_back(completion("c" + std::to_string(i)));
    for (const sv::StoreWrite& w : put_together(store, path, kChatFormat, items)) CHECK(w.ok);
    CHECK(store.size() == 16);
    // Grouped: the first put's transaction, then one for the fifteen that queued behind it.
    CHECK(store.writes().commits == (group ? 2 : 16));
    CHECK(store.writes().items == 16);
    sv::ChatStore reopened(sv::ChatStoreOptions{64, path});
    for (const sv::StoredCompletion& c : items) CHECK(reopened.get(c.id));
  }
}

TEST_CASE("store writes: a group the disk cannot take is written again one by one", "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  // Nothing held for a retry (test_serve_store_retry.cpp): the failure is counted once.
  sv::ChatStore store(sv::ChatStoreOptions{64, path, true, 0});
  REQUIRE(store.put(completion("first")));
  const auto wal = static_cast<rlim_t>(std::filesystem::file_size(path + "-wal"));
  std::vector<sv::StoreWrite> out;
  {
    const FileSizeLimit limit(wal + (256 << 10));
    out = put_together(
        store, path, kChatFormat,
        std::vector<sv::StoredCompletion>{completion("small"), completion("large", 1 << 20), completion("other")});
  }
  // "small" committed alone; "large" and "other" failed as a group, then "other" went through alone.
  CHECK(out[0].ok);
  CHECK(out[2].ok);
  REQUIRE_FALSE(out[1].ok);
  CHECK(out[1].error.find(path) != std::string::npos);
  CHECK(store.get("small"));
  CHECK(store.get("other"));
  CHECK_FALSE(store.get("large"));
  CHECK(store.writes().failures == 1);
  CHECK(store.writes().commits == 3);  // "first", "small", "other"
}

TEST_CASE("store writes: a check fails where a write fails, naming the file", "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  sv::ChatStore store(sv::ChatStoreOptions{64, path});
  REQUIRE(store.check_writable());
  {
    const FileSizeLimit limit(static_cast<rlim_t>(std::filesystem::file_size(path + "-wal")));
    const sv::StoreWrite check = store.check_writable();
    REQUIRE_FALSE(check.ok);
    CHECK(check.error.find(path) != std::string::npos);
    CHECK_FALSE(store.put(completion("c1")).ok);
  }
  CHECK(store.check_writable());
  CHECK(store.put(completion("c2")));
  CHECK(store.get("c2"));
  // In memory nothing is written to a disk: the check is always ok.
  sv::ChatStore memory;
  const FileSizeLimit none(0);
  CHECK(memory.check_writable());
}

TEST_CASE("store writes: responses queued while one commits share the next transaction", "[serve][responses]") {
  for (const bool group : {true, false}) {
    CAPTURE(group);
    TempDir tmp;
    const std::string path = (tmp.dir / "responses.sqlite").string();
    sv::ResponseStore store(sv::ResponseStoreOptions{64, path, group});
    std::vector<std::shared_ptr<sv::StoredResponse>> items;
    for (int i = 0; i < 16; ++i) items.push_back(response("resp_" + std::to_string(i)));
    for (const sv::StoreWrite& w : put_together(store, path, kResponsesFormat, items)) CHECK(w.ok);
    CHECK(store.size() == 16);
    // Grouped: the first put's transaction, then one for the fifteen that queued behind it.
    CHECK(store.writes().commits == (group ? 2 : 16));
    CHECK(store.writes().items == 16);
    sv::ResponseStore reopened(sv::ResponseStoreOptions{64, path});
    for (const auto& r : items) {
      const std::shared_ptr<sv::StoredResponse> back = reopened.get(r->id);
      REQUIRE(back);
      CHECK(back->body == r->body);
      CHECK(reopened.continued_by(r->conversation()) != nullptr);
    }
  }
}

TEST_CASE("store writes: a group of responses the disk cannot take is written again one by one", "[serve][responses]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  // Nothing held for a retry (test_serve_store_retry.cpp): the failure is counted once.
  sv::ResponseStore store(sv::ResponseStoreOptions{64, path, true, 0});
  REQUIRE(put(store, response("resp_first")));
  const auto wal = static_cast<rlim_t>(std::filesystem::file_size(path + "-wal"));
  std::vector<sv::StoreWrite> out;
  {
    const FileSizeLimit limit(wal + (256 << 10));
    out = put_together(store, path, kResponsesFormat,
                       std::vector<std::shared_ptr<sv::StoredResponse>>{
                           response("resp_small"), response("resp_large", 1 << 20), response("resp_other")});
  }
  // "small" committed alone; "large" and "other" failed as a group, then "other" went through alone.
  CHECK(out[0].ok);
  CHECK(out[2].ok);
  REQUIRE_FALSE(out[1].ok);
  CHECK(out[1].error.find(path) != std::string::npos);
  CHECK(store.writes().failures == 1);
  CHECK(store.writes().commits == 3);  // "first", "small", "other"
  CHECK(store.get("resp_large"));      // held in memory only, until a restart
  sv::ResponseStore reopened(sv::ResponseStoreOptions{64, path});
  CHECK(reopened.get("resp_small"));
  CHECK(reopened.get("resp_other"));
  CHECK_FALSE(reopened.get("resp_large"));
}

TEST_CASE("store writes: a responses check fails where a write fails, naming the file", "[serve][responses]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  sv::ResponseStore store(sv::ResponseStoreOptions{64, path});
  REQUIRE(store.check_writable());
  {
    const FileSizeLimit limit(static_cast<rlim_t>(std::filesystem::file_size(path + "-wal")));
    const sv::StoreWrite check = store.check_writable();
    REQUIRE_FALSE(check.ok);
    CHECK(check.error.find(path) != std::string::npos);
  }
  CHECK(store.check_writable());
}

TEST_CASE("group commit: a writer that throws anything fails its write, and the next write goes on",
          "[serve][chat_store]") {
  sv::GroupCommit<int>::Writer writer;
  writer.commit = [](const std::vector<int>& items) {
    if (items.front() == 0) throw 42;  // not a std::exception: it left the leader with the store marked busy
  };
  writer.check = [] {};
  sv::GroupCommit<int> group(4, writer);
  const sv::StoreWrite failed = group.submit(0);
  CHECK_FALSE(failed.ok);
  CHECK_FALSE(failed.error.empty());
  std::thread next([&] { CHECK(group.submit(1)); });  // would wait for ever for the failed leader
  next.join();
  CHECK(group.check());
  CHECK(group.writes().failures == 1);
  CHECK(group.writes().items == 1);
}

TEST_CASE("group commit: a check is answered before the commit of the puts it queued with", "[serve][chat_store]") {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> log;
  bool first_open = false, second_open = false, second_waited_for_check = false;
  sv::GroupCommit<int>::Writer writer;
  writer.commit = [&](const std::vector<int>& items) {
    std::unique_lock<std::mutex> lock(mutex);
    std::string names;
    for (const int i : items) names += " " + std::to_string(i);
    log.push_back("commit" + names);
    changed.notify_all();
    if (items.front() == 0) {
      changed.wait(lock, [&] { return first_open; });
      return;
    }
    // Opened by the check's caller once its check returned; a leader that answers its checks only after this
    // commit would wait here for ever, so it gives up after a while (and the CHECK below fails).
    second_waited_for_check = changed.wait_for(lock, std::chrono::seconds(20), [&] { return second_open; });
  };
  writer.check = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back("check");
  };
  sv::GroupCommit<int> group(64, writer);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { CHECK(group.submit(0)); });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return !log.empty(); });  // 0 leads, inside its commit
  }
  threads.emplace_back([&] { CHECK(group.submit(1)); });
  while (group.queued() < 2) std::this_thread::yield();
  threads.emplace_back([&] {
    CHECK(group.check());
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back("check answered");
    second_open = true;
    changed.notify_all();
  });
  while (group.queued() < 3) std::this_thread::yield();
  threads.emplace_back([&] { CHECK(group.submit(2)); });
  while (group.queued() < 4) std::this_thread::yield();
  {
    std::lock_guard<std::mutex> lock(mutex);
    first_open = true;
    changed.notify_all();
  }
  for (std::thread& t : threads) t.join();
  CHECK(second_waited_for_check);
  // 1 leads the next group (1, the check, 2): the check runs first, then 1 and 2 commit together.
  REQUIRE(log.size() == 4);
  CHECK(log[0] == "commit 0");
  CHECK(log[1] == "check");
  CHECK(group.writes().commits == 2);
  CHECK(group.writes().items == 3);
}

}  // namespace ORBIT_TEST_FILE
