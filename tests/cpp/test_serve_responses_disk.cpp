// The Responses API's store with a path (cli/serve/responses/responses_store.h over responses_disk.h): a store opened
// again on the same file reads back every response by id, its conversation through the chain and its body,
// and finds the response a resent history continues; past the capacity the least recently used are
// forgotten while the chains of kept ones stay whole; a deleted response leaves the conversations that
// continue it intact and its rows go once nothing needs them; a file that is not a responses store is refused
// naming it.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit_catch.h"
#include "serve/responses/responses_disk.h"
#include "serve/responses/responses_store.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using orbit::ChatMessage;

namespace {

struct TempFile {
  std::filesystem::path dir;
  TempFile() {
    dir = std::filesystem::temp_directory_path() /
          ("orbit-responses-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string path() const { return (dir / "responses.sqlite").string(); }
};

// Puts a response continuing `previous` that added `added`; the read list is the whole conversation.
std::shared_ptr<sv::StoredResponse> put(sv::ResponseStore& store, const std::string& id,
                                        std::shared_ptr<sv::StoredResponse> previous, std::vector<ChatMessage> added) {
  auto r = std::make_shared<sv::StoredResponse>();
  r->id = id;
  r->session = "s-" + id;
  r->previous = std::move(previous);
  r->added = std::move(added);
  r->body = "{\"id\":\"" + id + "\"}";
  store.put(r, r->conversation());
  return r;
}

std::vector<std::string> contents(const std::vector<ChatMessage>& messages) {
  std::vector<std::string> out;
  for (const ChatMessage& m : messages) out.push_back(m.role + ":" + m.content);
  return out;
}

}  // namespace

TEST_CASE("responses on disk: a store opened again reads back ids, chains, bodies and continued histories",
          "[serve][responses]") {
  TempFile tmp;
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"call_1", "lookup", "{\"n\": 123456789012345678901234567890}"});
  call.reasoning_content = "Look it up.";
  ChatMessage result{"tool", "42"};
  result.tool_call_id = "call_1";
  result.name = "lookup";
  const ChatMessage q1{"user", "Hi"}, q2{"user", "More"}, a2{"assistant", "Sure"};
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{8, tmp.path()});
    CHECK(store.persistent());
    auto first = put(store, "resp_1", nullptr, {q1, call});
    put(store, "resp_2", first, {result, q2, a2});
    CHECK(store.size() == 2);
  }
  sv::ResponseStore again(sv::ResponseStoreOptions{8, tmp.path()});
  CHECK(again.size() == 2);
  const auto second = again.get("resp_2");
  REQUIRE(second != nullptr);
  CHECK(second->session == "s-resp_2");
  CHECK(second->body == "{\"id\":\"resp_2\"}");
  const std::vector<ChatMessage> conversation = second->conversation();
  CHECK(contents(conversation) ==
        std::vector<std::string>{"user:Hi", "assistant:", "tool:42", "user:More", "assistant:Sure"});
  REQUIRE(conversation[1].tool_calls.size() == 1);
  CHECK(conversation[1].tool_calls[0].arguments == "{\"n\": 123456789012345678901234567890}");
  CHECK(conversation[1].reasoning_content == std::optional<std::string>("Look it up."));
  CHECK(!conversation[3].reasoning_content);
  CHECK(conversation[2].tool_call_id == std::optional<std::string>("call_1"));
  CHECK(conversation[2].name == std::optional<std::string>("lookup"));
  // The chain's first link is the object resp_1 names (read once, shared).
  CHECK(again.get("resp_1") == second->previous);
  // A history resending resp_1's conversation and more continues resp_1, found on disk.
  sv::ResponseStore third(sv::ResponseStoreOptions{8, tmp.path()});
  const auto continued = third.continued_by({q1, call, result});
  REQUIRE(continued != nullptr);
  CHECK(continued->id == "resp_1");
  CHECK(third.continued_by({q2}) == nullptr);
  ChatMessage other_thought = call;  // the same call after other reasoning: another history
  other_thought.reasoning_content = "Guess.";
  CHECK(third.continued_by({q1, other_thought, result}) == nullptr);
  CHECK(third.get("resp_9") == nullptr);
}

TEST_CASE("responses on disk: a content of null or none is read back as such, and is another history",
          "[serve][responses]") {
  TempFile tmp;
  ChatMessage null_call{"assistant", ""};
  null_call.tool_calls.push_back({"call_1", "lookup", "{}"});
  null_call.content_form = orbit::ContentForm::kNull;
  ChatMessage bare_call = null_call;
  bare_call.content_form = orbit::ContentForm::kAbsent;
  const ChatMessage q{"user", "Hi"};
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{8, tmp.path()});
    put(store, "resp_1", nullptr, {q, null_call});
    put(store, "resp_2", nullptr, {q, bare_call});
  }
  sv::ResponseStore again(sv::ResponseStoreOptions{8, tmp.path()});
  const auto first = again.get("resp_1");
  const auto second = again.get("resp_2");
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  CHECK(first->added[1].content_form == orbit::ContentForm::kNull);
  CHECK(second->added[1].content_form == orbit::ContentForm::kAbsent);
  CHECK(first->added[0].content_form == orbit::ContentForm::kText);
  // The template renders them apart, so a history with "" continues neither.
  ChatMessage empty_call = null_call;
  empty_call.content_form = orbit::ContentForm::kText;
  const auto by_null = again.continued_by({q, null_call});
  REQUIRE(by_null != nullptr);
  CHECK(by_null->id == "resp_1");
  CHECK(again.continued_by({q, empty_call}) == nullptr);
}

TEST_CASE("responses on disk: capacity and deletion keep the conversations of kept responses whole",
          "[serve][responses]") {
  TempFile tmp;
  const ChatMessage a{"user", "a"}, b{"user", "b"}, c{"user", "c"}, d{"user", "d"};
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{2, tmp.path()});
    auto r1 = put(store, "resp_1", nullptr, {a});
    auto r2 = put(store, "resp_2", r1, {b});
    auto r3 = put(store, "resp_3", r2, {c});  // past 2: resp_1, the least recently used, is forgotten
    CHECK(store.size() == 2);
    CHECK(store.get("resp_1") == nullptr);
    CHECK(store.erase("resp_2"));  // deleted while resp_3 continues it
    CHECK_FALSE(store.erase("resp_2"));
    CHECK(store.get("resp_2") == nullptr);
    CHECK(store.size() == 1);
  }
  sv::ResponseStore again(sv::ResponseStoreOptions{2, tmp.path()});
  const auto r3 = again.get("resp_3");
  REQUIRE(r3 != nullptr);
  CHECK(contents(r3->conversation()) == std::vector<std::string>{"user:a", "user:b", "user:c"});
  CHECK(again.get("resp_1") == nullptr);
  // Deleting the last response that needs the chain deletes its rows.
  put(again, "resp_4", nullptr, {d});
  CHECK(again.erase("resp_3"));
  {
    sv::ResponseDisk disk(tmp.path());
    CHECK(disk.named_count() == 1);
    for (const char* gone : {"resp_1", "resp_2", "resp_3"}) CHECK_FALSE(disk.load(gone).has_value());
    REQUIRE(disk.load("resp_4").has_value());
  }
  // Memory only: erase and size work the same, nothing is written.
  sv::ResponseStore memory;
  CHECK_FALSE(memory.persistent());
  put(memory, "resp_5", nullptr, {a});
  CHECK(memory.erase("resp_5"));
  CHECK(memory.size() == 0);
}

TEST_CASE("responses on disk: a file that is not a responses store is refused naming it", "[serve][responses]") {
  TempFile tmp;
  {
    std::ofstream out(tmp.path());
    out << "not a database, but long enough to be read as a header of one: 0123456789abcdef0123456789abcdef";
  }
  CHECK_THROWS_WITH(sv::ResponseStore(sv::ResponseStoreOptions{4, tmp.path()}),
                    Catch::Contains(tmp.path()) && Catch::Contains("responses store"));
  CHECK_THROWS_WITH(sv::messages_from_json("[{\"role\": 1}]", "row x"), Catch::Contains("row x"));
}

}  // namespace ORBIT_TEST_FILE
