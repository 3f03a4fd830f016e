// How `orbit serve`'s chat completions store writes (cli/serve/stored/chat_store.h, group_commit.h,
// store_write.h), without a model: puts that queue while one commits share the next transaction (and with
// group commit off each has its own); a group that fails is written again one completion at a time, so only
// the one the disk cannot take fails; check_writable fails where a write fails, and names the file. A full
// disk is RLIMIT_FSIZE here (with SIGXFSZ ignored, as `orbit serve` does): it stops root as well.
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "orbit_catch.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/sqlite_file.h"

namespace sv = orbit::serve;

namespace {

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() /
          ("orbit-store-writes-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

sv::StoredCompletion completion(const std::string& id, std::size_t body_bytes = 0) {
  sv::StoredCompletion c;
  c.id = id;
  c.created = 1;
  c.model = "m";
  c.body = nlohmann::json{{"id", id}, {"padding", std::string(body_bytes, 'x')}}.dump();
  c.messages = "[]";
  return c;
}

// This process's files may grow to at most `bytes` while it lives (the write past it fails with EFBIG).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
};

// Puts `items` from one thread each, in order, while another connection holds the file's write lock: the
// first put leads a group of its own and waits for the lock, and the others queue behind it in order
// (ChatStore::queued), so they form the next group. Returns the outcomes in `items`' order.
std::vector<sv::StoreWrite> put_together(sv::ChatStore& store, const std::string& path,
                                         const std::vector<sv::StoredCompletion>& items) {
  sv::SqliteFile other("other writer", path, "", "orbit-serve-chat-completions 1");
  auto lock = std::make_unique<sv::SqlTransaction>(other);  // BEGIN IMMEDIATE: the store's commits wait
  std::vector<sv::StoreWrite> out(items.size());
  std::vector<std::thread> writers;
  for (std::size_t i = 0; i < items.size(); ++i) {
    writers.emplace_back([&, i] { out[i] = store.put(items[i]); });
    while (store.queued() < i + 1) std::this_thread::yield();
  }
  lock->commit();
  for (std::thread& t : writers) t.join();
  return out;
}

}  // namespace

TEST_CASE("store writes: puts queued while one commits share the next transaction", "[serve][chat_store]") {
  for (const bool group : {true, false}) {
    CAPTURE(group);
    TempDir tmp;
    const std::string path = (tmp.dir / "chat.sqlite").string();
    sv::ChatStore store(sv::ChatStoreOptions{64, path, group});
    std::vector<sv::StoredCompletion> items;
    for (int i = 0; i < 16; ++i) items.push_back(completion("c" + std::to_string(i)));
    for (const sv::StoreWrite& w : put_together(store, path, items)) CHECK(w.ok);
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
  sv::ChatStore store(sv::ChatStoreOptions{64, path});
  REQUIRE(store.put(completion("first")));
  const auto wal = static_cast<rlim_t>(std::filesystem::file_size(path + "-wal"));
  std::vector<sv::StoreWrite> out;
  {
    const FileSizeLimit limit(wal + (256 << 10));
    out = put_together(store, path, {completion("small"), completion("large", 1 << 20), completion("other")});
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
