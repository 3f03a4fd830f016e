// `orbit serve`'s Responses API below HTTP (cli/serve/responses/responses_api.h, responses_run.h): input items as
// chat messages (the parser's refusals: test_serve_responses_refusals.cpp), and on TinyStories-656K: a response chained
// by previous_response_id runs in the first one's window and forwards only what is new, a streamed response's events
// come in order, an agent resending its whole history lands in that window too, store false is not chainable, a
// header's session is the chain's, and refusals use the Responses API's names. (Bodies, events with tool calls and the
// store: test_serve_responses_wire.cpp.)
#include <nlohmann/json.hpp>

#include "orbit_catch.h"
#include "serve/responses/responses_api.h"
#include "serve/responses/responses_run.h"
#include "serve/serve_core.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using nlohmann::json;

namespace {

using serve_test::kModel;
using serve_test::parse_events;

// A body with `fields` added to a valid request.
std::string body_with(const std::string& fields) {
  return R"({"model":"m","input":"hi")" + std::string(fields.empty() ? "" : ",") + fields + "}";
}

// The param a body is refused with ("" when it parses).
std::string refused(const std::string& body) {
  const sv::Parsed<sv::ResponsesRequest> p = sv::parse_responses_request(body);
  return p.ok() ? "" : p.error.param;
}

}  // namespace

TEST_CASE("responses: a reasoning item is the reasoning_content of the assistant turn after it", "[serve][responses]") {
  // Before a message: that message's. Before a call that follows an assistant message: a turn of its own,
  // since the reasoning led to the call and not to the text before it. Content is read before the summary.
  const sv::Parsed<sv::ResponsesRequest> p = sv::parse_responses_request(
      R"({"model":"m","input":[{"role":"user","content":"x"},)"
      R"({"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Greet."}]},)"
      R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi."}]},)"
      R"({"type":"reasoning","summary":[{"type":"summary_text","text":"S"}],"encrypted_content":"gAAA",)"
      R"("content":[{"type":"reasoning_text","text":"Look it up."},{"type":"reasoning_text","text":"Then say."}]},)"
      R"({"type":"function_call","call_id":"c","name":"f","arguments":"{}"},)"
      R"({"type":"function_call_output","call_id":"c","output":"4"}]})");
  REQUIRE(p.ok());
  const std::vector<orbit::ChatMessage>& m = p.value->chat.messages;
  REQUIRE(m.size() == 4);
  CHECK(m[1].content == "Hi.");
  CHECK(m[1].reasoning_content == "Greet.");
  CHECK(m[1].tool_calls.empty());
  CHECK(m[2].content.empty());
  CHECK(m[2].reasoning_content == "Look it up.\n\nThen say.");
  CHECK(m[2].tool_calls.size() == 1);
  CHECK(!m[3].reasoning_content);
  // An item with no text and nothing else (OpenAI returns {"type": "reasoning", "summary": []}) is no reasoning:
  // taken, as clients replaying OpenAI's output send it back (it was refused).
  const sv::Parsed<sv::ResponsesRequest> empty = sv::parse_responses_request(
      R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"reasoning","id":"rs_1","summary":[]},)"
      R"({"role":"assistant","content":"y"},{"type":"reasoning","summary":[]}]})");
  REQUIRE(empty.ok());
  REQUIRE(empty.value->chat.messages.size() == 2);
  CHECK(!empty.value->chat.messages[1].reasoning_content);
  // An assistant's refusal part is read as its text, as chat reads it (it was refused); another role's is not.
  const sv::Parsed<sv::ResponsesRequest> refusal = sv::parse_responses_request(
      R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"message","role":"assistant","content":[)"
      R"({"type":"output_text","text":"No: "},{"type":"refusal","refusal":"I can't."}]},)"
      R"({"role":"user","content":"ok"}]})");
  REQUIRE(refusal.ok());
  CHECK(refusal.value->chat.messages[1].content == "No: I can't.");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":[{"type":"refusal","refusal":"x"}]}]})") ==
        "input[0].content[0].type");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"role":"assistant","content":[)"
                R"({"type":"refusal","text":"x"}]}]})") == "input[1].content[0].text");
  // Refused: only encrypted_content, a reasoning item not followed by the turn it led to, an unknown part key.
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"reasoning","summary":[],)"
                R"("encrypted_content":"gAAA"},{"role":"assistant","content":"y"}]})") == "input[1].encrypted_content");
  CHECK(refused(R"({"model":"m","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},)"
                R"({"role":"user","content":"x"}]})") == "input[0]");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},)"
                R"({"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]}]})") == "input[1]");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"reasoning",)"
                R"("summary":[{"type":"reasoning_text","text":"t"}]},{"role":"assistant","content":"y"}]})") ==
        "input[1].summary[0].type");
}

TEST_CASE("responses: a function_call_output must answer a function_call before it", "[serve][responses]") {
  const std::string call = R"({"type":"function_call","call_id":"c1","name":"f","arguments":"{}"})";
  const std::string output = R"({"type":"function_call_output","call_id":"c1","output":"1"})";
  // Answered in the input, also past a message between them (the Responses API keeps no adjacency).
  CHECK(sv::parse_responses_request(R"({"model":"m","input":[)" + call + R"(,{"role":"user","content":"x"},)" + output +
                                    "]}")
            .ok());
  // An output before its call, or of a call the input never made: refused naming the item.
  CHECK(refused(R"({"model":"m","input":[)" + output + "," + call + "]}") == "input[0].call_id");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},)" + output + "]}") == "input[1].call_id");
  // With previous_response_id the call may be in that conversation: the server checks once it joins it.
  const sv::Parsed<sv::ResponsesRequest> chained = sv::parse_responses_request(
      R"({"model":"m","previous_response_id":"resp_x","input":[{"role":"user","content":"x"},)" + output + "]}");
  REQUIRE(chained.ok());
  REQUIRE(chained.value->call_items.size() == 1);
  CHECK(chained.value->call_items[0].item == 1);
  CHECK(chained.value->call_items[0].output);
  orbit::ChatMessage made{"assistant", ""};
  made.tool_calls.push_back({"c1", "f", "{}"});
  CHECK_FALSE(sv::call_pairing_error(chained.value->call_items, {made}));
  const std::optional<sv::ApiError> orphan = sv::call_pairing_error(chained.value->call_items, {});
  REQUIRE(orphan);
  CHECK(orphan->param == "input[1].call_id");
  CHECK(orphan->message.find("no tool call found for function call output with call_id 'c1'") != std::string::npos);
}

TEST_CASE("responses: every function call is answered exactly once", "[serve][responses]") {
  const auto call = [](const std::string& id) {
    return R"({"type":"function_call","call_id":")" + id + R"(","name":"f","arguments":"{}"})";
  };
  const auto output = [](const std::string& id) {
    return R"({"type":"function_call_output","call_id":")" + id + R"(","output":"1"})";
  };
  const auto error_of = [](const std::string& items) {
    return sv::parse_responses_request(R"({"model":"m","input":[)" + items + "]}").error;
  };
  CHECK(sv::parse_responses_request(R"({"model":"m","input":[)" + call("a") + "," + call("b") + "," + output("b") +
                                    "," + output("a") + "]}")
            .ok());
  // A call of the input with no output: OpenAI's error, param "input".
  sv::ApiError missing = error_of(call("a") + "," + call("b") + "," + output("a"));
  CHECK(missing.status == 400);
  CHECK(missing.message == "No tool output found for function call b.");
  CHECK(missing.param == "input");
  CHECK(missing.type == "invalid_request_error");
  CHECK(missing.code.empty());
  // A call answered twice: refused at the second output.
  sv::ApiError twice = error_of(call("a") + "," + output("a") + R"(,{"role":"user","content":"x"},)" + output("a"));
  CHECK(twice.status == 400);
  CHECK(twice.param == "input[3].call_id");
  CHECK(twice.message.rfind("Duplicate function_call_output for call_id 'a'. Each function_call must have exactly "
                            "one matching function_call_output (input[3].call_id answers it again, after input[1])",
                            0) == 0);

  // A continuation: the previous conversation's unanswered calls must be answered in the input, the answered
  // ones not again.
  orbit::ChatMessage made{"assistant", ""};
  made.tool_calls.push_back({"p1", "f", "{}"});
  made.tool_calls.push_back({"p2", "f", "{}"});
  orbit::ChatMessage answered{"tool", "1"};
  answered.tool_call_id = "p1";
  const auto chained = [&](const std::string& items) {
    const sv::Parsed<sv::ResponsesRequest> r =
        sv::parse_responses_request(R"({"model":"m","previous_response_id":"resp_x","input":[)" + items + "]}");
    REQUIRE(r.ok());  // the parser leaves the check to the server, which has the conversation
    return r.value->call_items;
  };
  CHECK_FALSE(sv::call_pairing_error(chained(output("p2")), {made, answered}));
  CHECK_FALSE(sv::call_pairing_error(chained(output("p1") + "," + output("p2")), {made}));
  const std::optional<sv::ApiError> unanswered =
      sv::call_pairing_error(chained(R"({"role":"user","content":"x"})"), {made, answered});
  REQUIRE(unanswered);
  CHECK(unanswered->message == "No tool output found for function call p2.");
  CHECK(unanswered->param == "input");
  const std::optional<sv::ApiError> again =
      sv::call_pairing_error(chained(output("p2") + "," + output("p1")), {made, answered});
  REQUIRE(again);
  CHECK(again->param == "input[1].call_id");
  CHECK(again->message.find("after the previous response's conversation") != std::string::npos);
  // Its own call too must be answered in the input.
  const std::optional<sv::ApiError> own =
      sv::call_pairing_error(chained(output("p2") + "," + call("c")), {made, answered});
  REQUIRE(own);
  CHECK(own->message == "No tool output found for function call c.");
}

TEST_CASE("responses: items become chat messages; tools, formats and settings carry over", "[serve][responses]") {
  const sv::Parsed<sv::ResponsesRequest> p = sv::parse_responses_request(R"({"model":"m","instructions":"Be brief.",
    "input":[{"role":"developer","content":"Use tools."},
             {"type":"message","role":"user",
              "content":[{"type":"input_text","text":"Read "},{"type":"input_text","text":"a"}]},
             {"type":"message","id":"msg_1","status":"completed","role":"assistant",
              "content":[{"type":"output_text","text":"Reading.","annotations":[]}]},
             {"type":"function_call","id":"fc_1","call_id":"c1","name":"read_file","arguments":"{\"path\":\"a\"}"},
             {"type":"function_call","call_id":"c2","name":"read_file","arguments":"{}"},
             {"type":"function_call_output","call_id":"c1","output":"A"},
             {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"B"}]},
             {"type":"function_call","call_id":"c3","name":"read_file","arguments":"{}"}],
    "tools":[{"type":"function","name":"read_file","description":"Reads.","parameters":{"type":"object",
              "properties":{"path":{"type":"string"}}},"strict":true}],
    "tool_choice":{"type":"function","name":"read_file"},"parallel_tool_calls":false,
    "max_output_tokens":20,"temperature":0.5,"top_p":0.9,"store":false,"stream":true,"user":"u-1",
    "previous_response_id":"resp_x","metadata":{"k":"v"},
    "text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}}})");
  REQUIRE(p.ok());
  const sv::ChatRequest& chat = p.value->chat;
  REQUIRE(chat.messages.size() == 7);
  CHECK(p.value->has_instructions);
  CHECK(chat.messages[0].role == "system");
  CHECK(chat.messages[0].content == "Be brief.");
  CHECK(chat.messages[1].role == "system");  // developer
  CHECK(chat.messages[2].content == "Read a");
  // The assistant's text and the calls after it are one message.
  CHECK(chat.messages[3].role == "assistant");
  CHECK(chat.messages[3].content == "Reading.");
  REQUIRE(chat.messages[3].tool_calls.size() == 2);
  CHECK(chat.messages[3].tool_calls[0].id == "c1");
  CHECK(chat.messages[3].tool_calls[0].arguments == R"({"path":"a"})");
  CHECK(chat.messages[4].role == "tool");
  CHECK(chat.messages[4].tool_call_id == "c1");
  CHECK(chat.messages[5].content == "B");
  // A call after a tool message starts an assistant message of its own.
  CHECK(chat.messages[6].role == "assistant");
  CHECK(chat.messages[6].content.empty());
  CHECK(chat.messages[6].tool_calls.at(0).id == "c3");
  // Tools in the chat form, keys in the client's order; strict carried (chat refuses a strict tool whose
  // arguments it cannot hold to the schema under tool_choice auto).
  CHECK(chat.tool_names == std::vector<std::string>{"read_file"});
  CHECK(chat.tools_json ==
        R"([{"type":"function","function":{"name":"read_file","description":"Reads.","parameters":{"type":"object",)"
        R"("properties":{"path":{"type":"string"}}},"strict":true}}])");
  CHECK(chat.tool_choice.mode == "function");
  CHECK(chat.tool_choice.function == "read_file");
  CHECK_FALSE(chat.parallel_tool_calls);
  CHECK(chat.response_format.type == "json_schema");
  CHECK(chat.response_format.name == "s");
  CHECK(chat.response_format.strict);
  CHECK(*chat.sampling.max_tokens == 20);
  CHECK(chat.sampling.temperature == 0.5);
  CHECK(chat.sampling.stream);
  CHECK(chat.user == "u-1");
  CHECK_FALSE(p.value->store);
  CHECK(p.value->previous_response_id == "resp_x");
  const json& echo = p.value->echo;
  CHECK(echo["instructions"] == "Be brief.");
  CHECK(echo["tools"][0]["name"] == "read_file");
  CHECK(echo["tool_choice"]["name"] == "read_file");
  CHECK(echo["max_output_tokens"] == 20);
  CHECK(echo["metadata"]["k"] == "v");
  CHECK(echo["store"] == false);
  CHECK(echo["text"]["format"]["type"] == "json_schema");
  // A string input is one user message; the defaults are echoed.
  const sv::Parsed<sv::ResponsesRequest> plain = sv::parse_responses_request(body_with(""));
  REQUIRE(plain.ok());
  REQUIRE(plain.value->chat.messages.size() == 1);
  CHECK(plain.value->chat.messages[0].role == "user");
  CHECK(plain.value->store);
  CHECK(plain.value->echo["tool_choice"] == "auto");
  CHECK(plain.value->echo["max_output_tokens"].is_null());
  CHECK(plain.value->echo["text"]["format"]["type"] == "text");
  // Chat's errors in the Responses API's names.
  sv::ApiError e = sv::responses_error(sv::api_error(400, "max_tokens = 9 is out of range", "x", "", "max_tokens"));
  CHECK(e.param == "max_output_tokens");
  CHECK(e.message == "max_output_tokens = 9 is out of range");
  // A chat tool's field is the Responses tool's, one level up (the server's check of the tools' schemas).
  e = sv::responses_error(sv::api_error(400, "tools[12].function.parameters.properties.q: 'pattern' is not supported",
                                        "invalid_request_error", "invalid_function_parameters",
                                        "tools[12].function.parameters"));
  CHECK(e.param == "tools[12].parameters");
  CHECK(e.message == "tools[12].parameters.properties.q: 'pattern' is not supported");
  // Chat's response_format.json_schema.schema is text.format.schema (the Responses format is flat); it was
  // named text.format.json_schema.schema, a field no request has.
  e = sv::responses_error(sv::api_error(400, "response_format.json_schema.schema.properties.a: admits no value",
                                        "invalid_request_error", "invalid_value",
                                        "response_format.json_schema.schema"));
  CHECK(e.param == "text.format.schema");
  CHECK(e.message == "text.format.schema.properties.a: admits no value");
  e = sv::responses_error(
      sv::api_error(400, "response_format.type: wrong", "invalid_request_error", "", "response_format.type"));
  CHECK(e.param == "text.format.type");
  // Chat's allowed_tools choice nests mode and tools where the Responses one has them at tool_choice's level.
  e = sv::responses_error(sv::api_error(400, "tool_choice.allowed_tools: the calls cannot be held",
                                        "invalid_request_error", "unsupported_value", "tool_choice.allowed_tools"));
  CHECK(e.param == "tool_choice");
  CHECK(e.message == "tool_choice: the calls cannot be held");
}

// The field a chat check would name in message `param` of `request`, in the Responses API's names.
std::string named(const sv::ResponsesRequest& request, const std::string& param,
                  const std::vector<sv::MessageOrigin>* origins = nullptr) {
  const sv::ApiError e = sv::responses_error(sv::api_error(400, param + ": wrong", "invalid_request_error", "", param),
                                             origins != nullptr ? *origins : request.origins);
  CHECK(e.message == e.param + ": wrong");
  return e.param;
}

TEST_CASE("responses: a chat check's message field names the input item the message was read from",
          "[serve][responses]") {
  // Chat messages: 0 the instructions; 1 input[0]; 2 input[1] with the calls input[2] and input[3]; 3 and 4 the
  // outputs input[4] and input[5]; 5 made for the call input[7], with the reasoning input[6]; 6 input[8].
  const auto call = [](const std::string& id) {
    return json{{"type", "function_call"}, {"call_id", id}, {"name", "f"}, {"arguments", "{}"}};
  };
  const auto output = [](const std::string& id) {
    return json{{"type", "function_call_output"}, {"call_id", id}, {"output", "ok"}};
  };
  const json body = {{"model", "m"},
                     {"instructions", "Be brief."},
                     {"input",
                      {{{"role", "user"}, {"content", "x"}},
                       {{"role", "assistant"}, {"content", "calling"}},
                       call("c1"),
                       call("c2"),
                       output("c1"),
                       output("c2"),
                       {{"type", "reasoning"}, {"summary", {{{"type", "summary_text"}, {"text", "why"}}}}},
                       call("c3"),
                       output("c3")}}};
  const sv::Parsed<sv::ResponsesRequest> p = sv::parse_responses_request(body.dump());
  REQUIRE(p.ok());
  const sv::ResponsesRequest& r = *p.value;
  REQUIRE(r.chat.messages.size() == 7);
  REQUIRE(r.origins.size() == 7);
  CHECK(named(r, "messages[0].content") == "instructions");
  CHECK(named(r, "messages[1].role") == "input[0].role");
  CHECK(named(r, "messages[1].name") == "input[0]");  // no field of the item: the item
  CHECK(named(r, "messages[2].content") == "input[1].content");
  CHECK(named(r, "messages[2].tool_calls[0].function.name") == "input[2].name");
  CHECK(named(r, "messages[2].tool_calls[1].function.arguments") == "input[3].arguments");
  CHECK(named(r, "messages[2].tool_calls[1].id") == "input[3].call_id");
  CHECK(named(r, "messages[2].tool_calls[1].type") == "input[3]");
  CHECK(named(r, "messages[2].tool_calls[2].id") == "input[1]");  // no such call
  CHECK(named(r, "messages[4].tool_call_id") == "input[5].call_id");
  CHECK(named(r, "messages[4].content") == "input[5].output");
  CHECK(named(r, "messages[5].reasoning_content") == "input[6]");
  CHECK(named(r, "messages[5].content") == "input[7]");
  CHECK(named(r, "messages[5].tool_calls[0].function.arguments") == "input[7].arguments");
  CHECK(named(r, "messages[6].tool_call_id") == "input[8].call_id");
  CHECK(named(r, "messages[7].content") == "input");  // past the request's messages
  // Without the request's origins (a conversation joined to a previous response's), no item is guessed.
  const std::vector<sv::MessageOrigin> none;
  CHECK(named(r, "messages[2].tool_calls[1].function.arguments", &none) == "input");
  // A string input is one message, named "input".
  const sv::Parsed<sv::ResponsesRequest> text = sv::parse_responses_request(body_with(""));
  REQUIRE(text.ok());
  CHECK(named(*text.value, "messages[0].content") == "input");
}

namespace {

// One request through prepare_response and run_response, as the route runs it.
struct Answer {
  std::optional<sv::ApiError> error;
  json body;
  std::string events;  // streamed requests
  std::string session;
};

Answer respond(sv::ServeCore& core, const json& request, const std::string* header = nullptr) {
  Answer out;
  sv::ResponseCall call;
  out.error = sv::prepare_response(core, request.dump(), header, call);
  if (out.error) return out;
  out.session = call.session;
  std::function<bool(const std::string&)> events;
  if (request.value("stream", false)) {
    events = [&out](const std::string& e) {
      out.events += e;
      return true;
    };
  }
  const sv::ResponseOutcome o = sv::run_response(core, call, {}, events);
  out.events += o.last_events;  // the route writes them once it counted the request
  if (!o.run.result) out.error = o.run.error;
  out.body = o.body;
  return out;
}

std::string text_of(const json& body) {
  std::string text;
  for (const json& item : body["output"]) {
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
  }
  return text;
}

}  // namespace

TEST_CASE("responses: a chain runs in one window and forwards only what is new", "[serve][responses][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:exact";
  sv::ServeCore core(options);
  const json base = {{"model", core.model_name()},
                     {"instructions", "You tell short stories."},
                     {"max_output_tokens", 8},
                     {"temperature", 0}};
  auto request = [&](json input, json more = json::object()) {
    json r = base;
    r["input"] = std::move(input);
    r.update(more);
    return r;
  };

  // The first response names its own window.
  const Answer first = respond(core, request("What did the dog find?"));
  REQUIRE_FALSE(first.error);
  const std::string id = first.body["id"];
  const json& u1 = first.body["usage"];
  CHECK(first.session == id);
  CHECK(u1["orbit"]["session"] == id);
  CHECK(u1["orbit"]["forward_tokens"] == u1["input_tokens"]);
  CHECK(core.session_info(id).has_value());
  core.run_idle_work();  // the answer, prefilled as the chained request sends it back

  // Chained: the same window, which keeps the conversation and forwards the new message only.
  const json count_body = {
      {"instructions", base["instructions"]}, {"input", "And then?"}, {"previous_response_id", id}};
  const sv::Parsed<int64_t> counted = sv::count_input_tokens(core, count_body.dump());
  const Answer second = respond(core, request("And then?", {{"previous_response_id", id}}));
  REQUIRE_FALSE(second.error);
  const json& u2 = second.body["usage"];
  // POST /v1/responses/input_tokens counted, beforehand and without running anything, what it read.
  REQUIRE(counted.ok());
  CHECK(*counted.value == u2["input_tokens"].get<int64_t>());
  json sampled = count_body;
  sampled["temperature"] = 0;
  CHECK(sv::count_input_tokens(core, sampled.dump()).error.param == "temperature");
  json unknown = count_body;
  unknown["previous_response_id"] = "resp_never";
  CHECK(sv::count_input_tokens(core, unknown.dump()).error.status == 400);
  // An output of a call neither the chain nor the input made is refused once the chain is joined.
  json orphan = count_body;
  orphan["input"] = json::array({{{"type", "function_call_output"}, {"call_id", "c9"}, {"output", "9"}}});
  CHECK(sv::count_input_tokens(core, orphan.dump()).error.param == "input[0].call_id");
  // A body nesting far past the limit, without a model (which counting adds itself): refused, not read whole
  // (adding the model and writing the body again recursed once per level, and overflowed the stack).
  const std::string deep = R"({"input": )" + std::string(200000, '[') + std::string(200000, ']') + "}";
  const sv::Parsed<int64_t> deep_count = sv::count_input_tokens(core, deep);
  CHECK(deep_count.error.status == 400);
  CHECK_THAT(deep_count.error.message, Catch::Contains("nests deeper than 128"));
  CHECK(second.session == id);
  CHECK(second.body["previous_response_id"] == id);
  CHECK(u2["input_tokens"].get<int64_t>() > u1["input_tokens"].get<int64_t>() + 4);
  const std::string plan = u2["orbit"]["plan"];
  CHECK(plan.find("keep") != std::string::npos);
  CHECK(plan.find("evict") == std::string::npos);
  // What was added since: the answer (prefilled in idle time), the new message and the generation prompt.
  const double added = u2["input_tokens"].get<double>() - u1["input_tokens"].get<double>();
  CHECK(u2["orbit"]["idle_forward_tokens"].get<double>() > 0);
  CHECK(u2["orbit"]["forward_tokens"].get<double>() < added);
  CHECK(u2["orbit"]["forward_tokens"].get<double>() < u2["input_tokens"].get<double>() / 3);
  core.run_idle_work();

  // Streamed and chained again: the events in order, their text the response's.
  const Answer third = respond(core, request(json::array({{{"role", "user"}, {"content", "Who was there?"}}}),
                                             {{"previous_response_id", second.body["id"]}, {"stream", true}}));
  REQUIRE_FALSE(third.error);
  CHECK(third.session == id);
  const auto events = parse_events(third.events);
  REQUIRE(events.size() >= 4);
  CHECK(events[0].first == "response.created");
  CHECK(events[1].first == "response.in_progress");
  const std::string last = events.back().first;
  CHECK((last == "response.completed" || last == "response.incomplete"));
  std::string deltas;
  for (const auto& [type, data] : events) {
    if (type == "response.output_text.delta") deltas += data["delta"].get<std::string>();
  }
  CHECK(deltas == text_of(events.back().second["response"]));
  CHECK(events.back().second["response"] == third.body);
  const json& u3 = third.body["usage"];
  CHECK(u3["orbit"]["forward_tokens"].get<double>() <
        u3["input_tokens"].get<double>() - u2["input_tokens"].get<double>());

  // An agent that resends its whole history instead of chaining lands in the window that holds it.
  const json history = json::array({{{"role", "user"}, {"content", "What did the dog find?"}},
                                    {{"type", "message"},
                                     {"role", "assistant"},
                                     {"content", {{{"type", "output_text"}, {"text", text_of(first.body)}}}}},
                                    {{"role", "user"}, {"content", "Was it big?"}}});
  const Answer resent = respond(core, request(history));
  REQUIRE_FALSE(resent.error);
  CHECK(resent.session == id);
  CHECK(resent.body["usage"]["orbit"]["plan"].get<std::string>().find("keep") != std::string::npos);
  core.close();
}

TEST_CASE("responses: store false, a header's session, refusals by the Responses API's names",
          "[serve][responses][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:exact";
  sv::ServeCore core(options);
  auto request = [&](const std::string& input, json more = json::object()) {
    json r = {{"model", core.model_name()}, {"input", input}, {"max_output_tokens", 4}, {"temperature", 0}};
    r.update(more);
    return r;
  };

  // store false: an anonymous window, and nothing to chain to.
  const Answer unstored = respond(core, request("A cat sat.", {{"store", false}}));
  REQUIRE_FALSE(unstored.error);
  CHECK(unstored.session.empty());
  CHECK(unstored.body["store"] == false);
  const Answer orphan = respond(core, request("More.", {{"previous_response_id", unstored.body["id"]}}));
  REQUIRE(orphan.error);
  CHECK(orphan.error->status == 400);
  CHECK(orphan.error->code == "previous_response_not_found");
  CHECK(orphan.error->param == "previous_response_id");

  // A session named by the header is the chain's window.
  const std::string mine = "mine";
  const Answer named = respond(core, request("A bird sang."), &mine);
  REQUIRE_FALSE(named.error);
  CHECK(named.session == "mine");
  const Answer follow = respond(core, request("Then?", {{"previous_response_id", named.body["id"]}}));
  CHECK(follow.session == "mine");

  // Refusals in the Responses API's names, before anything runs.
  const Answer greedy = respond(core, request("Hi", {{"max_output_tokens", 100000}}));
  REQUIRE(greedy.error);
  CHECK(greedy.error->param == "max_output_tokens");
  CHECK(respond(core, request("Hi", {{"model", "gpt-4"}})).error->status == 404);
  // A prompt past the context is named at what overflows it: the instructions when they alone leave no room,
  // else the input.
  std::string story;
  for (int i = 0; i < 200; ++i) story += "Once upon a time there was a cat. ";
  const Answer long_instructions = respond(core, request("Hi", {{"instructions", story}}));
  REQUIRE(long_instructions.error);
  CHECK(long_instructions.error->code == "context_length_exceeded");
  CHECK(long_instructions.error->param == "instructions");
  CHECK(long_instructions.error->message.rfind("instructions: ", 0) == 0);
  const Answer long_input = respond(core, request(story, {{"instructions", "Be brief."}}));
  REQUIRE(long_input.error);
  CHECK(long_input.error->code == "context_length_exceeded");
  CHECK(long_input.error->param == "input");
  // Tools: every schema is checked (tool_choice auto) to be an arguments schema, and a name is given once.
  const json search = {{"type", "function"}, {"name", "search"}, {"parameters", {{"type", "object"}}}};
  json odd = search;
  odd["name"] = "open";
  odd["parameters"] = {{"type", "string"}, {"format", "uri"}};
  const Answer bad_schema = respond(core, request("Hi", {{"tools", {search, odd}}}));
  REQUIRE(bad_schema.error);
  CHECK(bad_schema.error->param == "tools[1].parameters");
  CHECK(bad_schema.error->code == "invalid_function_parameters");
  CHECK(bad_schema.error->message.rfind("tools[1].parameters: 'type' must be \"object\"", 0) == 0);
  // A strict tool whose arguments cannot be held to its schema under tool_choice auto is refused naming its
  // strict, as chat refuses it, not decoded free behind an echo that says strict.
  json unheld = search;
  unheld["name"] = "find";
  unheld["parameters"] = {{"type", "object"}, {"properties", {{"q", {{"not", {{"type", "string"}}}}}}}};
  unheld["strict"] = true;
  const Answer strict = respond(core, request("Hi", {{"tools", {search, unheld}}}));
  REQUIRE(strict.error);
  CHECK(strict.error->status == 400);
  CHECK(strict.error->code == "unsupported_value");
  CHECK(strict.error->param == "tools[1].strict");
  CHECK(strict.error->message.rfind("tools[1].strict: ", 0) == 0);
  unheld["strict"] = false;
  CHECK_FALSE(respond(core, request("Hi", {{"tools", {search, unheld}}})).error);
  const Answer twice = respond(core, request("Hi", {{"tools", {search, search}}}));
  REQUIRE(twice.error);
  CHECK(twice.error->param == "tools[1].name");
  CHECK(twice.error->message.find("'search' is also the name of tools[0]") != std::string::npos);
  core.close();
}

TEST_CASE("responses: truncation auto drops a chain's oldest items to fit, and stores the input whole",
          "[serve][responses][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:exact";
  sv::ServeCore core(options);
  const std::string page =
      "The dog found a big red ball in the park. Lily was happy. She threw the ball and the dog ran after it.";
  // A chain of pages, each request about 60 tokens more, on a 512-token model: past the context by the
  // seventh without truncation.
  auto chain = [&](const std::string& truncation, int64_t requests) {
    std::string previous;
    std::vector<Answer> out;
    for (int64_t i = 0; i < requests; ++i) {
      json r = {{"model", core.model_name()},
                {"instructions", "You tell short stories."},
                {"input", "Page " + std::to_string(i) + ": " + page + " " + page + " What next?"},
                {"max_output_tokens", 16},
                {"temperature", 0},
                {"truncation", truncation}};
      if (!previous.empty()) r["previous_response_id"] = previous;
      out.push_back(respond(core, r));
      if (out.back().error) break;
      previous = out.back().body["id"];
    }
    return out;
  };
  const std::vector<Answer> plain = chain("disabled", 10);
  REQUIRE(plain.back().error);
  CHECK(plain.back().error->code == "context_length_exceeded");
  const int64_t fit = static_cast<int64_t>(plain.size()) - 1;  // requests that fit whole

  // 16 requests: past the 13th the chain's text is longer than the model's 512 positions can hold at the most
  // bytes a token takes, which the length check refuses before tokenizing (truncation must take that as a list
  // that does not fit).
  const std::vector<Answer> cut = chain("auto", 16);
  REQUIRE(cut.size() == 16);
  for (const Answer& a : cut) {
    INFO((a.error ? a.error->message : std::string()));
    REQUIRE_FALSE(a.error);
  }
  for (int64_t i = 0; i < 16; ++i) {
    INFO("request " << i);
    const json& u = cut[i].body["usage"];
    CHECK(cut[i].body["truncation"] == "auto");
    CHECK(u["input_tokens"].get<int64_t>() + 16 <= core.context_tokens());
    const std::string plan = u["orbit"]["plan"];
    // Whole while the chain fits; then the oldest pages leave the window and the rest stays in it.
    CHECK((plan.find("evict") != std::string::npos) == (i >= fit));
    if (i < fit) CHECK(u["input_tokens"] == plain[i].body["usage"]["input_tokens"]);
    if (i >= fit) CHECK(plan.find("keep") != std::string::npos);
  }
  // The model read the instructions and the newest pages; the stored response keeps its input whole, and
  // a chained request counts from all of it (truncated again).
  const json& last = cut.back().body;
  CHECK(last["usage"]["input_tokens"].get<int64_t>() > core.context_tokens() / 2);
  const sv::Parsed<int64_t> counted = sv::count_input_tokens(
      core, json{{"input", "And then?"}, {"previous_response_id", last["id"]}, {"truncation", "disabled"}}.dump());
  REQUIRE(counted.ok());
  CHECK(*counted.value > core.context_tokens());
  const sv::Parsed<int64_t> truncated = sv::count_input_tokens(
      core, json{{"input", "And then?"}, {"previous_response_id", last["id"]}, {"truncation", "auto"}}.dump());
  REQUIRE(truncated.ok());
  CHECK(*truncated.value + std::min<int64_t>(core.options().default_max_tokens, core.context_tokens() / 4) <=
        core.context_tokens());
  core.close();
}

}  // namespace ORBIT_TEST_FILE
