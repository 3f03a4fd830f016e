// `orbit serve`'s Responses API bodies and store (cli/serve/responses/responses_wire.h, responses_store.h), without a
// model: the response object and the stream's events written from a RunResult with tool calls (the story
// model writes none), in OpenAI's order and numbering; the store's LRU, its index of conversations that a
// resent history continues, and a long chain released without recursion.
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_items.h"
#include "serve/responses/responses_store.h"
#include "serve/responses/responses_wire.h"
#include "serve/wire/serve_wire.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using nlohmann::json;

namespace {

using serve_test::parse_events;

std::vector<std::string> types_of(const std::vector<std::pair<std::string, json>>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.first);
  return out;
}

sv::RunResult answer_with_calls(const std::string& text) {
  sv::RunResult r;
  r.text = text;
  r.finish_reason = "tool_calls";
  r.tool_calls = {{"call_1", "read_file", R"({"path":"a.txt"})"}, {"call_2", "read_file", R"({"path":"b.txt"})"}};
  r.usage.prompt_tokens = 40;
  r.usage.completion_tokens = 12;
  r.usage.forward_tokens = 6;
  r.usage.plan = "keep 3, admit 1";
  return r;
}

}  // namespace

TEST_CASE("responses: bodies and stream events carry text and tool calls", "[serve][responses]") {
  sv::ResponseHead head;
  head.id = "resp_abc";
  head.created_at = 7;
  head.model = "m";
  head.echo = {{"store", true}, {"metadata", {{"k", "v"}}}};
  const sv::RunResult r = answer_with_calls("Let me look.");
  const json body = sv::response_body(head, &r);
  CHECK(body["object"] == "response");
  CHECK(body["status"] == "completed");
  CHECK(body["previous_response_id"].is_null());
  CHECK(body["metadata"]["k"] == "v");
  REQUIRE(body["output"].size() == 3);
  CHECK(body["output"][0]["type"] == "message");
  CHECK(body["output"][0]["id"] == "msg_abc");
  CHECK(body["output"][0]["content"][0] ==
        json({{"type", "output_text"}, {"text", "Let me look."}, {"annotations", json::array()}}));
  CHECK(body["output"][1] == json({{"type", "function_call"},
                                   {"id", "fc_abc_0"},
                                   {"call_id", "call_1"},
                                   {"name", "read_file"},
                                   {"arguments", R"({"path":"a.txt"})"},
                                   {"status", "completed"}}));
  CHECK(body["output"][2]["call_id"] == "call_2");
  CHECK(body["usage"]["input_tokens"] == 40);
  CHECK(body["usage"]["output_tokens"] == 12);
  CHECK(body["usage"]["total_tokens"] == 52);
  CHECK(body["usage"]["input_tokens_details"]["cached_tokens"] == 40 - 6);  // the prompt tokens not forwarded
  CHECK(body["usage"]["output_tokens_details"]["reasoning_tokens"] == 0);
  CHECK(body["usage"]["orbit"]["plan"] == "keep 3, admit 1");
  // Only calls: no message item. A cut answer: incomplete.
  const sv::RunResult calls_only = answer_with_calls("");
  CHECK(sv::response_body(head, &calls_only)["output"][0]["type"] == "function_call");
  sv::RunResult cut;
  cut.text = "Once";
  cut.finish_reason = "length";
  const json incomplete = sv::response_body(head, &cut);
  CHECK(incomplete["status"] == "incomplete");
  CHECK(incomplete["incomplete_details"]["reason"] == "max_output_tokens");
  CHECK(incomplete["output"][0]["status"] == "incomplete");
  // completed_at only on a completed response (OpenAI: "Only present when the status is completed").
  CHECK(body["completed_at"].is_number_integer());
  CHECK((incomplete.contains("completed_at") && incomplete["completed_at"].is_null()));
  // A call max_output_tokens cut: its item is incomplete, with the arguments written so far; the calls before
  // it are complete.
  sv::RunResult cut_call = answer_with_calls("");
  cut_call.finish_reason = "length";
  cut_call.tool_calls[1].arguments = R"({"path":"b.t)";
  cut_call.tool_call_cut = true;
  const json cut_body = sv::response_body(head, &cut_call);
  CHECK(cut_body["status"] == "incomplete");
  REQUIRE(cut_body["output"].size() == 2);
  CHECK(cut_body["output"][0]["status"] == "completed");
  CHECK(cut_body["output"][1]["status"] == "incomplete");
  CHECK(cut_body["output"][1]["arguments"] == R"({"path":"b.t)");
  sv::ResponseEvents cut_stream(head);
  const std::string started = cut_stream.start();
  const auto cut_events = parse_events(started + cut_stream.finish(cut_call));
  REQUIRE_FALSE(cut_events.empty());
  CHECK(cut_events.back().first == "response.incomplete");
  std::vector<std::string> statuses;
  for (const auto& [type, data] : cut_events) {
    if (type == "response.output_item.done") statuses.push_back(data["item"]["status"].get<std::string>());
  }
  CHECK(statuses == std::vector<std::string>{"completed", "incomplete"});

  // A stream: text as it comes, the held-back rest, then the calls, in OpenAI's order.
  sv::ResponseEvents events(head);
  sv::RunResult streamed = answer_with_calls("Let me look.");
  streamed.unstreamed = "look.";
  std::string text = events.start();
  text += events.text("Let me ");
  text += events.finish(streamed);
  const auto parsed = parse_events(text);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  CHECK(types_of(parsed) == want);
  CHECK(parsed[0].second["response"]["status"] == "in_progress");
  CHECK(parsed[5].second["delta"] == "look.");
  CHECK(parsed[6].second["text"] == "Let me look.");
  CHECK(parsed[9].second["output_index"] == 1);
  CHECK(parsed[9].second["item"]["status"] == "in_progress");
  CHECK(parsed[11].second["arguments"] == R"({"path":"a.txt"})");
  CHECK(parsed[12].second["item"] == body["output"][1]);
  CHECK(parsed.back().second["response"]["output"] == body["output"]);
  sv::ResponseEvents failing(head);
  std::string stopped = failing.start();
  stopped += failing.failed(sv::api_error(500, "boom", "server_error"));
  const auto failed = parse_events(stopped);
  CHECK(failed.back().first == "response.failed");
  CHECK(failed.back().second["response"]["error"]["message"] == "boom");
}

TEST_CASE("responses: the store keeps a bounded LRU and finds the response a history continues", "[serve][responses]") {
  sv::ResponseStore store(sv::ResponseStoreOptions{2, ""});
  const std::string id = store.new_id();
  CHECK(id.size() == 37);
  CHECK(id.rfind("resp_", 0) == 0);
  CHECK(store.new_id() != id);
  auto put = [&](const std::string& rid, std::shared_ptr<sv::StoredResponse> previous,
                 std::vector<orbit::ChatMessage> added, const std::vector<orbit::ChatMessage>& read) {
    auto r = std::make_shared<sv::StoredResponse>();
    r->id = rid;
    r->session = "s-" + rid;
    r->previous = std::move(previous);
    r->added = std::move(added);
    store.put(r, read);
    return r;
  };
  const orbit::ChatMessage sys{"system", "Be brief."}, q1{"user", "Hi"}, a1{"assistant", "Hello"}, q2{"user", "More"},
      a2{"assistant", "Sure"};
  auto first = put("resp_1", nullptr, {q1, a1}, {sys, q1, a1});
  auto second = put("resp_2", first, {q2, a2}, {sys, q1, a1, q2, a2});
  CHECK(second->conversation().size() == 4);
  CHECK(second->conversation()[2].content == "More");
  // A history that resends what resp_1 read and answered, and more: resp_1's window.
  CHECK(store.continued_by({sys, q1, a1, q2}) == first);
  CHECK(store.continued_by({sys, q1, a1, q2, a2, q1}) == second);
  CHECK(store.continued_by({sys, q1}) == nullptr);
  CHECK(store.continued_by({sys, q1, {"assistant", "Other"}}) == nullptr);
  // Capacity 2: the least recently used leaves (resp_1 was just used, so resp_2 goes).
  CHECK(store.get("resp_1") == first);
  put("resp_3", nullptr, {q2}, {q2});
  CHECK(store.size() == 2);
  CHECK(store.get("resp_2") == nullptr);
  CHECK(store.continued_by({sys, q1, a1, q2, a2, q1}) == first);
  // A long chain is released without recursion.
  std::shared_ptr<sv::StoredResponse> chain;
  for (int i = 0; i < 200000; ++i) {
    auto next = std::make_shared<sv::StoredResponse>();
    next->previous = std::move(chain);
    chain = std::move(next);
  }
  chain.reset();
}

TEST_CASE("responses: log probabilities in output_text and in the stream's deltas", "[serve][responses]") {
  sv::ResponseHead head;
  head.id = "resp_lp";
  head.model = "m";
  orbit::StepLogprobs step;
  step.chosen = {5, -0.5, "Hi"};
  step.top = {{5, -0.5, "Hi"}, {6, -1.25, "Ho"}};
  sv::RunResult r;
  r.text = "HiHi";
  r.finish_reason = "stop";
  r.tokens = {5, 5};
  r.logprobs = {step, step};
  const json part = sv::response_body(head, &r)["output"][0]["content"][0];
  REQUIRE(part["logprobs"].size() == 2);
  CHECK(part["logprobs"][0]["token"] == "Hi");
  CHECK(part["logprobs"][0]["top_logprobs"][1]["logprob"] == -1.25);
  r.logprobs.clear();
  CHECK(!sv::response_body(head, &r)["output"][0]["content"][0].contains("logprobs"));  // not asked for

  // Streamed: each delta carries what decode handed on since the last one; output_text.done carries all.
  r.logprobs = {step, step};
  sv::ResponseEvents events(head);
  std::string text = events.start();
  events.logprobs(step);
  text += events.text("Hi");
  events.logprobs(step);
  text += events.text("Hi");
  text += events.finish(r);
  std::vector<json> deltas;
  json done;
  for (const auto& [type, data] : parse_events(text)) {
    if (type == "response.output_text.delta") deltas.push_back(data["logprobs"]);
    if (type == "response.output_text.done") done = data["logprobs"];
  }
  REQUIRE(deltas.size() == 2);
  CHECK(deltas[0].size() == 1);
  CHECK(deltas[1].size() == 1);
  CHECK(done.size() == 2);
}

TEST_CASE("responses: a stored response's input items, paged, and bad queries refused naming them",
          "[serve][responses]") {
  sv::StoredResponse r;
  r.id = "resp_ab";
  orbit::ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"c1", "look", "{\"q\": 1}"});
  orbit::ChatMessage result{"tool", "42"};
  result.tool_call_id = "c1";
  r.added = {{"user", "Hi"}, call, result, {"user", "More"}, {"assistant", "the answer: not an input"}};
  const json items = sv::input_items(r);
  REQUIRE(items.size() == 4);
  CHECK(items[0] == json{{"type", "message"},
                         {"id", "msg_ab_0"},
                         {"role", "user"},
                         {"status", "completed"},
                         {"content", {{{"type", "input_text"}, {"text", "Hi"}}}}});
  CHECK(items[1]["type"] == "function_call");  // an assistant message without text is its calls alone
  CHECK(items[1]["id"] == "fc_ab_1_0");
  CHECK(items[1]["arguments"] == "{\"q\": 1}");
  CHECK(items[2] == json{{"type", "function_call_output"},
                         {"id", "fco_ab_2"},
                         {"call_id", "c1"},
                         {"output", "42"},
                         {"status", "completed"}});
  // Newest first by default; a page, then the next after its last id.
  const sv::ItemsPage first = sv::input_items_page(r, {{"limit", "3"}});
  REQUIRE_FALSE(first.error);
  CHECK(first.body["data"].size() == 3);
  CHECK(first.body["first_id"] == "msg_ab_3");
  CHECK(first.body["has_more"] == true);
  const sv::ItemsPage next = sv::input_items_page(r, {{"limit", "3"}, {"after", first.body["last_id"]}});
  REQUIRE_FALSE(next.error);
  CHECK(next.body["data"].size() == 1);
  CHECK(next.body["last_id"] == "msg_ab_0");
  CHECK(next.body["has_more"] == false);
  CHECK(sv::input_items_page(r, {{"order", "asc"}}).body["first_id"] == "msg_ab_0");
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"limit", "0"}, {"limit", "x"}, {"order", "up"}, {"after", "msg_zz"}, {"include", "a"}}) {
    const sv::ItemsPage bad = sv::input_items_page(r, {{name, value}});
    INFO(name << "=" << value);
    REQUIRE(bad.error);
    CHECK(bad.error->status == 400);
    CHECK(bad.error->param == name);
  }
  CHECK(sv::input_items_page(r, {{"limit", "1"}, {"limit", "2"}}).error->param == "limit");
}

TEST_CASE("responses: a retrieve's query asking for more than the stored response is refused naming it",
          "[serve][responses]") {
  CHECK_FALSE(sv::retrieve_query_problem({}));
  CHECK_FALSE(sv::retrieve_query_problem({{"stream", "false"}, {"include_obfuscation", "true"}}));
  // stream=true would replay events (the openai client reads the JSON body as a stream without events),
  // include would add outputs: neither may be answered with the response as it is.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{{"stream", "true"},
                                                                                    {"stream", "yes"},
                                                                                    {"starting_after", "3"},
                                                                                    {"include[]", "x"},
                                                                                    {"include", "x"},
                                                                                    {"include_obfuscation", "1"},
                                                                                    {"limit", "2"}}) {
    const std::optional<sv::ApiError> bad = sv::retrieve_query_problem({{name, value}});
    INFO(name << "=" << value);
    REQUIRE(bad);
    CHECK(bad->status == 400);
    CHECK(bad->param == name);
    CHECK_THAT(bad->message, Catch::Contains(name));
  }
  CHECK(sv::retrieve_query_problem({{"stream", "true"}})->code == "unsupported_parameter");
  CHECK(sv::retrieve_query_problem({{"stream", "false"}, {"stream", "true"}})->param == "stream");
}

TEST_CASE("responses: calls streamed as they are written close the message, then each call, in order",
          "[serve][responses]") {
  sv::ResponseHead head;
  head.id = "resp_00ab";
  head.model = "m";
  const sv::RunResult r = answer_with_calls("Let me look.");
  const json body = sv::response_body(head, &r);
  sv::ResponseEvents events(head);
  std::string text = events.start();
  text += events.text("Let me look.");
  text += events.text("\n");
  text += events.call({0, true, "call_1", "read_file", ""});
  text += events.call({0, false, "", "", R"({"path":)"});
  text += events.call({0, false, "", "", R"("a.txt"})"});
  text += events.call({1, true, "call_2", "read_file", ""});
  text += events.call({1, false, "", "", R"({"path":"b)"});
  text += events.finish(r);  // the rest of call 1's arguments, then the closing events
  const auto parsed = parse_events(text);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  CHECK(types_of(parsed) == want);
  CHECK(parsed[6].second["text"] == "Let me look.");
  CHECK(parsed[8].second["item"] == body["output"][0]);
  // Each call's deltas spell its arguments; its closing item is the response's.
  std::map<int64_t, std::string> spelled;
  for (const auto& [type, data] : parsed) {
    if (type == "response.function_call_arguments.delta") spelled[data["output_index"].get<int64_t>()] += data["delta"];
    if (type == "response.function_call_arguments.done") {
      CHECK(spelled[data["output_index"].get<int64_t>()] == data["arguments"]);
    }
  }
  CHECK(spelled[1] == R"({"path":"a.txt"})");
  CHECK(spelled[2] == R"({"path":"b.txt"})");
  CHECK(parsed[9].second["item"]["arguments"] == "");
  CHECK(parsed[13].second["item"] == body["output"][1]);
  CHECK(parsed[18].second["item"] == body["output"][2]);
  CHECK(parsed.back().second["response"]["output"] == body["output"]);

  // Only whitespace before the calls: no message item, the calls from output_index 0.
  sv::RunResult calls_only = answer_with_calls("");
  sv::ResponseEvents bare(head);
  std::string b = bare.start() + bare.text("\n");
  b += bare.call({0, true, "call_1", "read_file", ""});
  b += bare.finish(calls_only);
  const auto bare_events = parse_events(b);
  CHECK(bare_events[2].first == "response.output_item.added");
  CHECK(bare_events[2].second["output_index"] == 0);
  CHECK(bare_events[2].second["item"]["type"] == "function_call");
  CHECK(bare_events.back().second["response"]["output"] == sv::response_body(head, &calls_only)["output"]);
}

// Stream obfuscation (stream_obfuscation.h): a padded event is its JSON with one more member, "obfuscation", of
// random [A-Za-z0-9] characters, and its size a multiple of the block; an event off is as it was.
TEST_CASE("stream obfuscation pads each event to a multiple of the block with random characters", "[serve][cpu]") {
  sv::StreamObfuscation off;
  CHECK(off.pad("data: {\"a\":1}\n\n") == "data: {\"a\":1}\n\n");
  sv::StreamObfuscation on(true);
  std::set<std::size_t> lengths;
  std::vector<std::string> long_paddings;  // of at least 8 characters
  std::set<char> characters;
  for (std::size_t size = 0; size < 80; ++size) {
    const json body = {{"choices", {{{"delta", {{"content", std::string(size, 'x')}}}}}}, {"id", "c"}};
    const std::string bare = sv::sse(body);
    const std::string event = on.pad(bare);
    CHECK(event.size() % sv::StreamObfuscation::kBlock == 0);
    CHECK(event.size() > bare.size());
    CHECK(event.size() <= bare.size() + std::string(",\"obfuscation\":\"\"").size() + sv::StreamObfuscation::kBlock);
    REQUIRE(event.rfind("data: ", 0) == 0);
    REQUIRE(event.substr(event.size() - 2) == "\n\n");
    json data = json::parse(event.substr(6));
    const std::string padding = data["obfuscation"].get<std::string>();
    CHECK_FALSE(padding.empty());
    CHECK(padding.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") ==
          std::string::npos);
    data.erase("obfuscation");
    CHECK(data == body);  // nothing else changed
    lengths.insert(padding.size());
    if (padding.size() >= 8) long_paddings.push_back(padding);
    characters.insert(padding.begin(), padding.end());
  }
  CHECK(lengths.size() == sv::StreamObfuscation::kBlock);  // every length from 1 to the block, as sizes vary
  // Random characters, not a fixed filler: no two paddings of 8 or more characters match (each length comes
  // two or three times; a repeat by chance is one in 62^8), and the ~1,300 characters drawn use most of the
  // alphabet. (All 80 paddings distinct was asserted before: the two or three of one character matched by
  // chance, 2 runs in 300.)
  CHECK(long_paddings.size() >= 60);
  CHECK(std::set<std::string>(long_paddings.begin(), long_paddings.end()).size() == long_paddings.size());
  CHECK(characters.size() >= 50);
}

TEST_CASE("responses: an obfuscated stream pads its delta events only", "[serve][responses][cpu]") {
  sv::ResponseHead head;
  head.id = "resp_ob";
  head.model = "m";
  sv::ResponseEvents stream(head, sv::StreamObfuscation(true));
  std::string text = stream.start();
  text += stream.text("Once");
  text += stream.text(" upon a time");
  sv::RunResult r;
  r.text = "Once upon a time";
  r.finish_reason = "stop";
  text += stream.finish(r);
  int deltas = 0;
  for (const auto& [type, data] : parse_events(text)) {
    const bool delta = type.size() > 6 && type.substr(type.size() - 6) == ".delta";
    CHECK(data.contains("obfuscation") == delta);
    deltas += delta ? 1 : 0;
  }
  CHECK(deltas == 2);
  // Each delta event, as framed, is a multiple of the block.
  std::size_t at = 0;
  while ((at = text.find("event: response.output_text.delta\n", at)) != std::string::npos) {
    const std::size_t end = text.find("\n\n", at) + 2;
    CHECK((end - at) % sv::StreamObfuscation::kBlock == 0);
    at = end;
  }
  // Off (the default of ResponseEvents; a request's include_obfuscation false): no field anywhere.
  sv::ResponseEvents plain(head);
  std::string plain_text = plain.start();
  plain_text += plain.text("Once");
  CHECK(parse_events(plain_text).back().second.contains("obfuscation") == false);
}

}  // namespace ORBIT_TEST_FILE
