// `orbit serve`'s stored chat completions below HTTP (cli/serve/stored/chat_store.h, chat_store_wire.h): the store's
// LRU, its pages in either order with model and metadata filters, a metadata update, deletion; the wire's
// queries refused naming the parameter, the request's messages as the messages list returns them, the
// update body; and on TinyStories-656K, a ServeCore with a store directory whose completions (every choice of
// n = 2 included) are read back by a new ServeCore on the same directory.
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/chat_store_wire.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using nlohmann::json;

namespace {

const std::string kModel = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() /
          ("orbit-chat-store-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

sv::StoredCompletion completion(const std::string& id, int64_t created, sv::Metadata metadata = {},
                                const std::string& model = "m") {
  sv::StoredCompletion c;
  c.id = id;
  c.created = created;
  c.model = model;
  c.metadata = std::move(metadata);
  c.body = json{{"id", id}, {"object", "chat.completion"}, {"created", created}}.dump();
  c.messages = "[]";
  return c;
}

std::vector<std::string> ids_of(const sv::CompletionPage& page) {
  std::vector<std::string> out;
  for (const sv::StoredCompletion& c : page.data) out.push_back(c.id);
  return out;
}

sv::CompletionPage list(sv::ChatStore& store, const sv::QueryParams& params) {
  const sv::Parsed<sv::CompletionQuery> query = sv::completion_list_query(params);
  REQUIRE(query.ok());
  const std::optional<sv::CompletionPage> page = store.list(*query.value);
  REQUIRE(page);
  return *page;
}

}  // namespace

TEST_CASE("chat store: a bounded LRU; a retrieve or an update is a use, a list is not", "[serve][chat_store]") {
  sv::ChatStore store(sv::ChatStoreOptions{3, ""});
  CHECK_FALSE(store.persistent());
  for (int i = 1; i <= 3; ++i) REQUIRE(store.put(completion("c" + std::to_string(i), 100 + i)));
  CHECK(store.size() == 3);
  REQUIRE(store.get("c1"));                   // c2 is now the least recently used
  CHECK(list(store, {}).data.size() == 3);    // listing uses none
  REQUIRE(store.put(completion("c4", 104)));  // c2 goes
  CHECK_FALSE(store.get("c2"));
  REQUIRE(store.update_metadata("c3", {{"k", "v"}}));  // c1 is now the least recently used
  REQUIRE(store.put(completion("c5", 105)));           // c1 goes
  CHECK_FALSE(store.get("c1"));
  CHECK(store.size() == 3);
  // An id stored again is left as it was.
  REQUIRE(store.put(completion("c3", 999, {{"other", "x"}})));
  CHECK(store.get("c3")->metadata == sv::Metadata{{"k", "v"}});
  CHECK(store.get("c3")->created == 103);
  CHECK(store.erase("c3"));
  CHECK_FALSE(store.erase("c3"));
  CHECK_FALSE(store.get("c3"));
  CHECK_FALSE(store.update_metadata("c3", {}));
  CHECK(store.size() == 2);
}

TEST_CASE("chat store: pages by created in either order, filtered by model and metadata", "[serve][chat_store]") {
  sv::ChatStore store;
  // Stored out of created order; c2 and c3 were created in the same second (stored order breaks the tie).
  REQUIRE(store.put(completion("c2", 20, {{"team", "a"}})));
  REQUIRE(store.put(completion("c3", 20, {{"team", "b"}})));
  REQUIRE(store.put(completion("c1", 10, {{"team", "a"}, {"run", "1"}})));
  REQUIRE(store.put(completion("c4", 30, {{"team", "a"}}, "other")));
  REQUIRE(store.put(completion("c5", 40, {{"team", "a"}, {"run", "1"}})));
  CHECK(ids_of(list(store, {})) == std::vector<std::string>{"c1", "c2", "c3", "c4", "c5"});
  CHECK(ids_of(list(store, {{"order", "desc"}})) == std::vector<std::string>{"c5", "c4", "c3", "c2", "c1"});
  // Pages of 2, each after the last id of the one before (the openai client's auto-pagination).
  sv::CompletionPage page = list(store, {{"limit", "2"}});
  CHECK(ids_of(page) == std::vector<std::string>{"c1", "c2"});
  CHECK(page.has_more);
  page = list(store, {{"limit", "2"}, {"after", "c2"}});
  CHECK(ids_of(page) == std::vector<std::string>{"c3", "c4"});
  CHECK(page.has_more);
  page = list(store, {{"limit", "2"}, {"after", "c4"}});
  CHECK(ids_of(page) == std::vector<std::string>{"c5"});
  CHECK_FALSE(page.has_more);
  CHECK(ids_of(list(store, {{"order", "desc"}, {"after", "c3"}})) == std::vector<std::string>{"c2", "c1"});
  // Filters: every metadata pair must match; the model, exactly.
  CHECK(ids_of(list(store, {{"metadata[team]", "a"}})) == std::vector<std::string>{"c1", "c2", "c4", "c5"});
  CHECK(ids_of(list(store, {{"metadata[team]", "a"}, {"metadata[run]", "1"}})) == std::vector<std::string>{"c1", "c5"});
  CHECK(ids_of(list(store, {{"metadata[team]", "a"}, {"model", "m"}, {"limit", "2"}, {"after", "c1"}})) ==
        std::vector<std::string>{"c2", "c5"});
  page = list(store, {{"metadata[run]", "1"}, {"limit", "1"}});
  CHECK(ids_of(page) == std::vector<std::string>{"c1"});
  CHECK(page.has_more);
  CHECK(list(store, {{"metadata[team]", "z"}}).data.empty());
  CHECK(ids_of(list(store, {{"model", "other"}})) == std::vector<std::string>{"c4"});
  // after must name a stored completion.
  const sv::Parsed<sv::CompletionQuery> gone = sv::completion_list_query({{"after", "c9"}});
  REQUIRE(gone.ok());
  CHECK_FALSE(store.list(*gone.value));
  CHECK(sv::unknown_after("c9").param == "after");
  // The page body: metadata as last updated in each object.
  REQUIRE(store.update_metadata("c1", {{"team", "b"}}));
  const json body = sv::completion_list_body(list(store, {{"metadata[team]", "b"}}));
  CHECK(body["object"] == "list");
  CHECK(body["first_id"] == "c1");
  CHECK(body["last_id"] == "c3");
  CHECK(body["has_more"] == false);
  CHECK(body["data"][0]["metadata"] == json{{"team", "b"}});
  CHECK(body["data"][0]["object"] == "chat.completion");
}

TEST_CASE("chat store: a page goes on after a completion that left since the page before", "[serve][chat_store]") {
  sv::ChatStore store(sv::ChatStoreOptions{4, ""});
  for (int i = 1; i <= 4; ++i) REQUIRE(store.put(completion("c" + std::to_string(i), 10 * i)));
  sv::CompletionPage page = list(store, {{"limit", "2"}});
  REQUIRE(ids_of(page) == std::vector<std::string>{"c1", "c2"});
  // The page's last completion is deleted before the client asks for the next page: it goes on after c2's
  // place, in either order.
  REQUIRE(store.erase("c2"));
  CHECK(ids_of(list(store, {{"limit", "2"}, {"after", "c2"}})) == std::vector<std::string>{"c3", "c4"});
  CHECK(ids_of(list(store, {{"order", "desc"}, {"after", "c2"}})) == std::vector<std::string>{"c1"});
  // Evicted (the least recently used, past the capacity): likewise.
  REQUIRE(store.put(completion("c5", 50)));
  REQUIRE(store.put(completion("c6", 60)));
  REQUIRE_FALSE(store.get("c1"));
  CHECK(ids_of(list(store, {{"after", "c1"}})) == std::vector<std::string>{"c3", "c4", "c5", "c6"});
  // An id never stored stays unknown; and a departed key is forgotten after departed_kept() departures.
  const sv::Parsed<sv::CompletionQuery> never = sv::completion_list_query({{"after", "c9"}});
  REQUIRE(never.ok());
  CHECK_FALSE(store.list(*never.value));
  for (std::size_t i = 0; i < store.departed_kept(); ++i) REQUIRE(store.put(completion("d" + std::to_string(i), 70)));
  const sv::Parsed<sv::CompletionQuery> old = sv::completion_list_query({{"after", "c1"}});
  REQUIRE(old.ok());
  CHECK_FALSE(store.list(*old.value));
}

TEST_CASE("chat store: departed keys survive a restart of a store on disk", "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  {
    sv::ChatStore store(sv::ChatStoreOptions{8, path});
    for (int i = 1; i <= 3; ++i) REQUIRE(store.put(completion("c" + std::to_string(i), 10 * i)));
    REQUIRE(store.erase("c2"));
  }
  sv::ChatStore reopened(sv::ChatStoreOptions{8, path});
  CHECK(ids_of(list(reopened, {{"after", "c2"}})) == std::vector<std::string>{"c3"});
}

TEST_CASE("chat store: bad queries and update bodies are refused naming the parameter", "[serve][chat_store]") {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{{"limit", "0"},
                                                                                    {"limit", "101"},
                                                                                    {"limit", "x"},
                                                                                    {"order", "up"},
                                                                                    {"metadata", "a"},
                                                                                    {"metadata[]", "a"},
                                                                                    {"include", "x"}}) {
    const sv::Parsed<sv::CompletionQuery> bad = sv::completion_list_query({{name, value}});
    INFO(name << "=" << value);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error.status == 400);
    CHECK(bad.error.param == name);
  }
  CHECK(sv::completion_list_query({{"model", "a"}, {"model", "b"}}).error.param == "model");
  CHECK(sv::completion_list_query({{"include", "x"}}).error.code == "unsupported_parameter");
  CHECK(sv::completion_retrieve_query_problem({{"stream", "true"}})->param == "stream");
  CHECK_FALSE(sv::completion_retrieve_query_problem({}));
  const sv::ApiError unknown = sv::unknown_completion("chatcmpl-x");
  CHECK(unknown.status == 404);
  CHECK(unknown.param == "completion_id");

  CHECK(*sv::parse_completion_update(R"({"metadata": {"a": "b"}})").value == sv::Metadata{{"a", "b"}});
  CHECK(sv::parse_completion_update(R"({"metadata": null})").value->empty());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"metadata": {"a": "b"}, "model": "m"})", "model"},
      {R"({})", "metadata"},
      {R"({"metadata": "a"})", "metadata"},
      {R"({"metadata": {"a": 1}})", "metadata.a"},
      {R"({"metadata": {"a": ")" + std::string(513, 'x') + "\"}}", "metadata.a"},
      {R"({"metadata": {")" + std::string(65, 'k') + "\": \"v\"}}", "metadata"},
      {"[1]", ""},
      {"{", ""}};
  for (const auto& [body, param] : refused) {
    const sv::Parsed<sv::Metadata> bad = sv::parse_completion_update(body);
    INFO(body);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error.status == 400);
    CHECK(bad.error.param == param);
  }
  json many = json::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  CHECK(sv::parse_completion_update(json{{"metadata", many}}.dump()).error.param == "metadata");
}

TEST_CASE("chat store: a request's store, metadata and messages as the messages list returns them",
          "[serve][chat_store]") {
  const json body = {
      {"model", "m"},
      {"store", true},
      {"metadata", {{"topic", "cats"}}},
      {"messages",
       {{{"role", "developer"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi "}}, {{"type", "text"}, {"text", "there"}}}}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}, {"name", "f"}}}}};
  const sv::Parsed<sv::ChatRequest> parsed = sv::parse_chat_request(body.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed.value->store);
  CHECK(parsed.value->metadata == sv::Metadata{{"topic", "cats"}});
  sv::RunResult result;
  result.text = "Hello";
  result.finish_reason = "stop";
  sv::RunResult second = result;
  second.text = "Hey";
  result.extra_choices.push_back(second);
  CHECK(sv::storable(result));
  const sv::StoredCompletion c = sv::stored_completion(*parsed.value, {"chatcmpl-a", 7, "m"}, result);
  CHECK(c.id == "chatcmpl-a");
  CHECK(c.created == 7);
  const json object = sv::completion_object(c);
  REQUIRE(object["choices"].size() == 2);
  CHECK(object["choices"][1]["message"]["content"] == "Hey");
  CHECK(object["metadata"] == json{{"topic", "cats"}});
  sv::StoredCompletion copy = c;
  const sv::Parsed<json> page = sv::messages_page(c, {});
  REQUIRE(page.ok());
  const json& data = (*page.value)["data"];
  REQUIRE(data.size() == 4);
  CHECK(data[0] == json{{"id", "chatcmpl-a-0"},
                        {"role", "developer"},
                        {"content", "Be brief."},
                        {"name", nullptr},
                        {"content_parts", nullptr}});
  CHECK(data[1]["content"] == "Hi there");
  CHECK(data[1]["content_parts"] == body["messages"][1]["content"]);
  CHECK(data[2]["content"].is_null());
  CHECK(data[2]["tool_calls"] == body["messages"][2]["tool_calls"]);
  CHECK(data[3]["tool_call_id"] == "c1");
  CHECK(data[3]["name"] == "f");
  // Paged newest first, after an id; an unknown one is refused.
  const sv::Parsed<json> desc = sv::messages_page(c, {{"order", "desc"}, {"limit", "2"}, {"after", "chatcmpl-a-3"}});
  REQUIRE(desc.ok());
  CHECK((*desc.value)["first_id"] == "chatcmpl-a-2");
  CHECK((*desc.value)["last_id"] == "chatcmpl-a-1");
  CHECK((*desc.value)["has_more"] == true);
  CHECK(sv::messages_page(c, {{"after", "x"}}).error.param == "after");
  CHECK(sv::messages_page(c, {{"model", "m"}}).error.param == "model");
  // A cancelled choice is not stored; store and metadata are checked whether or not it is stored.
  result.extra_choices[0].finish_reason = "cancelled";
  CHECK_FALSE(sv::storable(result));
  CHECK(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"x"}],"store":1})").error.param ==
        "store");
  CHECK(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"a":2}})")
            .error.param == "metadata.a");
  const sv::Parsed<sv::ChatRequest> plain = sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user",
      "content":"x"}],"metadata":{"a":"b"}})");
  REQUIRE(plain.ok());
  CHECK_FALSE(plain.value->store);
  CHECK(plain.value->messages_json.empty());
}

TEST_CASE("chat store: a ServeCore with a store directory keeps completions across a restart",
          "[serve][chat_store][model]") {
  TempDir tmp;
  sv::ServeOptions options;
  options.model = kModel;
  options.store_dir = tmp.dir.string();
  options.max_chat_completions = 8;
  std::string id;
  json returned;
  {
    sv::ServeCore core(options);
    CHECK(core.chat_completions().persistent());
    const json body = {{"model", core.model_name()},
                       {"messages", {{{"role", "user"}, {"content", "A cat sat."}}}},
                       {"max_tokens", 4},
                       {"n", 2},
                       {"seed", 1},
                       {"store", true},
                       {"metadata", {{"run", "restart"}}}};
    const sv::Parsed<sv::ChatRequest> request = sv::parse_chat_request(body.dump());
    REQUIRE(request.ok());
    const sv::RunOutcome out = core.chat(*request.value, "", sv::RunSink{});
    REQUIRE(out.result);
    const sv::ResponseIds ids{"chatcmpl-restart-1", 1700000000, core.model_name()};
    returned = sv::chat_completion(ids, *out.result);
    REQUIRE(sv::storable(*out.result));
    REQUIRE(core.chat_completions().put(sv::stored_completion(*request.value, ids, *out.result)));
    REQUIRE(core.chat_completions().update_metadata(ids.id, {{"run", "restart"}, {"step", "2"}}));
    id = ids.id;
    core.close();
  }
  CHECK(std::filesystem::exists(tmp.dir / "serve-chat-completions.sqlite"));
  sv::ServeCore again(options);
  const std::optional<sv::StoredCompletion> stored = again.chat_completions().get(id);
  REQUIRE(stored);
  json expected = returned;
  expected["metadata"] = {{"run", "restart"}, {"step", "2"}};
  CHECK(sv::completion_object(*stored) == expected);
  CHECK(sv::completion_object(*stored)["choices"].size() == 2);
  const sv::Parsed<json> messages = sv::messages_page(*stored, {});
  REQUIRE(messages.ok());
  CHECK((*messages.value)["data"][0]["content"] == "A cat sat.");
  CHECK(ids_of(list(again.chat_completions(), {{"metadata[step]", "2"}})) == std::vector<std::string>{id});
  CHECK(again.chat_completions().erase(id));
  again.close();
}

}  // namespace ORBIT_TEST_FILE
