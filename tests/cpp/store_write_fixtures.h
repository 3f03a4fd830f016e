// What the tests of `orbit serve`'s store writes share (test_serve_store_writes.cpp, test_serve_store_retry.cpp,
// test_serve_held_journal.cpp, test_serve_held_links.cpp, test_serve_held_share.cpp): a temporary directory, a
// file-size limit that makes writes fail as on a full disk, items to store, where a store's journal of held
// answers lies, the check of a held chain recovered after a crash, and what this process writes to stderr.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_disk.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/chat_store.h"
#include "stderr_capture.h"

namespace store_fixtures {

using orbit::test::StderrCapture;  // stderr_capture.h: what this process writes to stderr

// An answer's padding too large for what a limit of wal_bytes() + kRoom leaves of the log (a new journal still
// takes it), and that room, in which small writes fit.
constexpr std::size_t kLarge = 1 << 20;
constexpr rlim_t kRoom = 256 << 10;

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

// This process's files may grow to at most `bytes` while it lives (the write past it fails with EFBIG, as on
// a full disk, for root too: SIGXFSZ is ignored meanwhile, as `orbit serve` does).
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
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
};

inline orbit::serve::StoredCompletion completion(const std::string& id, std::size_t body_bytes = 0) {
  orbit::serve::StoredCompletion c;
  c.id = id;
  c.created = 1;
  c.model = "m";
  c.body = nlohmann::json{{"id", id}, {"padding", std::string(body_bytes, 'x')}}.dump();
  c.messages = "[]";
  return c;
}

// A response continuing `previous` (null: the first of its chain), with a body of `body_bytes` padding.
inline std::shared_ptr<orbit::serve::StoredResponse> response(
    const std::string& id, std::size_t body_bytes = 0,
    std::shared_ptr<orbit::serve::StoredResponse> previous = nullptr) {
  auto r = std::make_shared<orbit::serve::StoredResponse>();
  r->id = id;
  r->session = "s-" + id;
  r->added = {orbit::ChatMessage{"user", "question " + id}, orbit::ChatMessage{"assistant", "answer " + id}};
  r->previous = std::move(previous);
  r->body = nlohmann::json{{"id", id}, {"padding", std::string(body_bytes, 'x')}}.dump();
  return r;
}

inline orbit::serve::StoreWrite put(orbit::serve::ChatStore& store, const orbit::serve::StoredCompletion& c) {
  return store.put(c);
}

inline orbit::serve::StoreWrite put(orbit::serve::ResponseStore& store,
                                    const std::shared_ptr<orbit::serve::StoredResponse>& r) {
  return store.put(r, r->conversation());
}

// The conversation of the response `id` as `store` reads it back (it must find it).
inline std::vector<orbit::ChatMessage> conversation_of(orbit::serve::ResponseStore& store, const std::string& id) {
  const std::shared_ptr<orbit::serve::StoredResponse> r = store.get(id);
  REQUIRE(r);
  return r->conversation();
}

// The size of `path`'s write-ahead log now: a limit a little above it lets small writes through and fails
// large ones.
inline rlim_t wal_bytes(const std::string& path) {
  return static_cast<rlim_t>(std::filesystem::file_size(path + "-wal"));
}

// The path of the one journal of held answers of `store` left in its directory (a `.corrupt` one aside), or "".
inline std::string journal_of(const std::string& store) {
  std::string found;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(store).parent_path())) {
    const std::string name = e.path().string();
    if (name.rfind(store + ".held-", 0) == 0 && name.find(".corrupt") == std::string::npos) found = name;
  }
  return found;
}

// After a crash of a server holding response r (whose record names t, its previous, a row on disk that was deleted
// or evicted meanwhile): the next start on `path` adopts the journal and writes r whole, t its unnamed link only,
// and erasing r then deletes t, which nothing needs any more.
inline void check_chain_recovered(const std::string& path) {
  {
    orbit::serve::ResponseStore reopened(orbit::serve::ResponseStoreOptions{4096, path});
    CHECK(reopened.pending().recovered == 1);
    CHECK(reopened.pending().held == 0);
  }
  orbit::serve::ResponseStore fresh(orbit::serve::ResponseStoreOptions{4096, path});  // nothing in memory: the disk
  CHECK_FALSE(fresh.get("t"));
  const std::vector<orbit::ChatMessage> conversation = conversation_of(fresh, "r");
  REQUIRE(conversation.size() == 4);
  CHECK(conversation[0].content == "question t");
  CHECK(conversation[3].content == "answer r");
  CHECK(fresh.erase("r"));
  CHECK_FALSE(orbit::serve::ResponseDisk(path).has("t"));
}

}  // namespace store_fixtures
