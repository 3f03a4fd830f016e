// `orbit serve` below HTTP (cli/serve/), its tools and answers: tools, tool_choice and response_format parsed
// (unhonoured parameters refused by name), tool calls held back from the stream and read when the answer
// ends, tools in the prompt and what the vocabulary cannot write refused, forced calls and JSON answers
// decoded under a constraint (even by a story model), and logprobs in OpenAI's chat shape.
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "orbit/text_stream.h"
#include "orbit_catch.h"
#include "serve/responses/responses_api.h"
#include "serve/run/tool_stream.h"
#include "serve/serve_core.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/serve_wire.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using serve_test::kModel;

using serve_test::chat_error;

// "a <tool" streamed through a Hermes tool call stream ("a " sent, the start of a call's mark held back), then
// the answer ended with `finish_reason`: the result as finish() leaves it, which names no call.
sv::RunResult finished_after_a_mark_start(const std::string& finish_reason) {
  sv::ToolCallStream stream(orbit::ToolCallFormat::kHermes, false);
  CHECK(stream.push("a <tool").content == "a ");
  sv::RunResult r;
  r.text = "a <tool";
  r.finish_reason = finish_reason;
  stream.finish(r);
  CHECK(r.tool_calls.empty());
  return r;
}

}  // namespace

TEST_CASE("serve: a tool message is taken wherever it stands, its call trimmed away or not", "[serve]") {
  const std::string user = R"({"model":"m","messages":[{"role":"user","content":"x"},)";
  const std::string call =
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":)"
      R"({"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},)";
  // Both results of a two-call message in any order, and the lists an agent that trims its context sends: a
  // result whose call message was dropped, one after a user message, one whose id names a call that is gone.
  // Each result stays in the parsed messages as sent.
  const std::vector<std::string> bodies = {
      user + call +
          R"({"role":"tool","tool_call_id":"c2","content":"2"},{"role":"tool","tool_call_id":"c1","content":"1"}]})",
      user + R"({"role":"tool","tool_call_id":"c1","content":"1"}]})",
      user + call + R"({"role":"user","content":"y"},{"role":"tool","tool_call_id":"c1","content":"1"}]})",
      user + call +
          R"({"role":"tool","tool_call_id":"c1","content":"1"},{"role":"tool","tool_call_id":"c9","content":"9"}]})"};
  for (const std::string& body : bodies) {
    const auto parsed = sv::parse_chat_request(body);
    REQUIRE(parsed.ok());
    CHECK(parsed.value->messages.back().role == "tool");
  }
  // An assistant's null or left-out content is "" to the template (not None: Qwen3's template cannot take it); a
  // refusal beside null is the message's text.
  const auto form = [&](const std::string& assistant) {
    const auto parsed = sv::parse_chat_request(user + assistant + "]}");
    REQUIRE(parsed.ok());
    return parsed.value->messages.back().content_form;
  };
  CHECK(form(call.substr(0, call.size() - 1)) == orbit::ContentForm::kText);
  CHECK(form(R"({"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f"}}]})") ==
        orbit::ContentForm::kText);
  CHECK(form(R"({"role":"assistant","content":""})") == orbit::ContentForm::kText);
  CHECK(form(R"({"role":"assistant","content":null,"refusal":"No."})") == orbit::ContentForm::kText);
  CHECK(form(R"({"role":"assistant","content":[]})") == orbit::ContentForm::kText);
  // A result that names no call at all (no tool_call_id, null or empty), or a call without an id, is refused
  // naming the field, as OpenAI refuses it: nothing would tie the two together.
  for (const std::string tool :
       {R"({"role":"tool","content":"1"})", R"({"role":"tool","tool_call_id":null,"content":"1"})",
        R"({"role":"tool","tool_call_id":"","content":"1"})"}) {
    CHECK(chat_error(user + call + tool + "]}").second == "messages[2].tool_call_id");
    CHECK(chat_error(R"({"model":"m","messages":[)" + tool + "]}").second == "messages[0].tool_call_id");
  }
  // Content null is an assistant's alone (a message of tool calls); on any other role it is refused naming it.
  for (const std::string role : {"system", "developer", "user", "tool"}) {
    const std::string id = role == "tool" ? R"("tool_call_id":"c1",)" : "";
    const std::string message = R"({"role":")" + role + R"(",)" + id + R"("content":null})";
    CHECK(chat_error(user + call + message + "]}").second == "messages[2].content");
  }
  for (const std::string& id : {std::string(), std::string(R"("id":null,)"), std::string(R"("id":"",)")}) {
    CHECK(chat_error(user + R"({"role":"assistant","content":null,"tool_calls":[{)" + id +
                     R"("type":"function","function":{"name":"f","arguments":"{}"}}]}]})")
              .second == "messages[1].tool_calls[0].id");
  }
}

TEST_CASE("serve: names in the history are held to OpenAI's rule, 1 to 64 of [A-Za-z0-9_-]", "[serve]") {
  const auto assistant_call = [](const std::string& name) {
    return R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,)"
           R"("tool_calls":[{"id":"c1","type":"function","function":{"name":)" +
           nlohmann::json(name).dump() + R"(,"arguments":"{}"}}]}]})";
  };
  const auto named = [](const std::string& role, const std::string& name) {
    return R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":")" + role +
           R"(","content":"y","tool_call_id":"c1","name":)" + nlohmann::json(name).dump() + "}]}";
  };
  for (const std::string& bad :
       std::vector<std::string>{"x</tool_call>", "a b", "caf\u00e9", "a.b", std::string(65, 'n')}) {
    CHECK(chat_error(assistant_call(bad)).second == "messages[1].tool_calls[0].function.name");
    CHECK(sv::parse_chat_request(assistant_call(bad)).error.message.find("is not a tool name") != std::string::npos);
    CHECK(chat_error(named("tool", bad)).second == "messages[1].name");
  }
  // A message's name is not empty; a call's may be, as this server answers a forced call cut before its name.
  CHECK(chat_error(named("tool", "")).second == "messages[1].name");
  CHECK(sv::parse_chat_request(assistant_call("")).ok());
  // A 100 KB name reached the template whole; the message quotes 40 bytes of it.
  const sv::Parsed<sv::ChatRequest> long_name = sv::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"x","name":")" + std::string(100000, 'a') + R"("}]})");
  REQUIRE_FALSE(long_name.ok());
  CHECK(long_name.error.param == "messages[0].name");
  CHECK(long_name.error.message.size() < 200);
  CHECK(sv::parse_chat_request(assistant_call(std::string(64, 'n'))).ok());
  const sv::Parsed<sv::ChatRequest> ok = sv::parse_chat_request(named("tool", "get_weather-2"));
  REQUIRE(ok.ok());
  CHECK(ok.value->messages[1].name == std::optional<std::string>("get_weather-2"));
}

TEST_CASE("serve: tools, tool_choice and response_format are parsed; unhonoured parameters are refused by name",
          "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}])";
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}},)"
      R"({"type":"function","function":{"name":"open"}}])";
  const sv::Parsed<sv::ChatRequest> p = sv::parse_chat_request(head + tools + R"(,"tool_choice":"auto"})");
  REQUIRE(p.ok());
  CHECK(p.value->tool_names == std::vector<std::string>{"search", "open"});
  // Keys stay in the client's order (the template renders the schema as written, as Hugging Face does).
  CHECK(p.value->tools_json.rfind(R"([{"type":"function","function":{"name":"search","parameters")", 0) == 0);
  CHECK(p.value->reads_tool_calls());
  CHECK_FALSE(sv::parse_chat_request(head + tools + R"(,"tool_choice":"none"})").value->reads_tool_calls());
  const sv::Parsed<sv::ChatRequest> named =
      sv::parse_chat_request(head + tools + R"(,"tool_choice":{"type":"function","function":{"name":"open"}}})");
  REQUIRE(named.ok());
  CHECK(named.value->tool_choice.mode == "function");
  CHECK(named.value->tool_choice.function == "open");
  CHECK(chat_error(head + tools + R"(,"tool_choice":{"type":"function","function":{"name":"fly"}}})").second ==
        "tool_choice.function.name");
  CHECK(chat_error(head + tools + R"(,"tool_choice":"always"})").second == "tool_choice");
  CHECK(chat_error(head + R"(,"tool_choice":"required"})").second == "tool_choice");
  CHECK(chat_error(head + R"(,"tools":[{"type":"function","function":{}}]})").second == "tools[0].function.name");
  CHECK(chat_error(head + R"(,"tools":[{"type":"retrieval"}]})").second == "tools[0].type");
  // Two tools of one name: which would a call name? Refused at the second.
  const std::string twice = head + tools.substr(0, tools.size() - 1) +
                            R"(,{"type":"function","function":{"name":"search"}}],"tool_choice":"auto"})";
  CHECK(chat_error(twice).second == "tools[2].function.name");
  CHECK(sv::parse_chat_request(twice).error.message.find("'search' is also the name of tools[0]") != std::string::npos);
  // A name is 1 to 64 letters, digits, _ and - (OpenAI's rule): one holding the calls' markup ("</tool_call>")
  // ended the call it was written in, and a "required" answer came back as text.
  for (const std::string& bad :
       std::vector<std::string>{"x</tool_call>", "a b", "caf\u00e9", "a.b", std::string(65, 'n')}) {
    const std::string one = head + R"(,"tools":[{"type":"function","function":{"name":)" + nlohmann::json(bad).dump() +
                            R"(}}],"tool_choice":"required"})";
    CHECK(chat_error(one).second == "tools[0].function.name");
    CHECK(sv::parse_chat_request(one).error.message.find("is not a tool name") != std::string::npos);
  }
  CHECK(sv::parse_chat_request(head + R"(,"tools":[{"type":"function","function":{"name":")" + std::string(64, 'n') +
                               R"("}}]})")
            .ok());
  // An assistant call's arguments are text: a call max_tokens cut comes back as it was answered (not JSON).
  const sv::Parsed<sv::ChatRequest> cut = sv::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":)"
      R"([{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"ca"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"bad arguments"}]})");
  REQUIRE(cut.ok());
  CHECK(cut.value->messages[1].tool_calls[0].arguments == R"({"q":"ca)");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"assistant","content":"","tool_calls":)"
                   R"([{"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]}]})")
            .second == "messages[0].tool_calls[0].function.arguments");  // an object, not text
  // JSON arguments reach the template parsed, so an object giving a key twice is refused: the renderer keeps one
  // of its values ({"a":1,"a":2} is rendered {"a": 2}). What renders as written is taken: numbers (an integer
  // past 64 bits too: the renderer keeps its text), the same key in two objects, text that is not JSON.
  const auto with_arguments = [](const std::string& arguments) {
    return R"({"model":"m","messages":[{"role":"assistant","content":"","tool_calls":)"
           R"([{"id":"c1","type":"function","function":{"name":"f","arguments":)" +
           nlohmann::json(arguments).dump() + "}}]}]}";
  };
  for (const std::string& altered : {std::string(R"({"a":1,"a":2})"), std::string(R"({"o":[{"k":1,"k":1}]})"),
                                     std::string(R"({"a":1,"b":{},"a":1})")}) {
    CHECK(chat_error(with_arguments(altered)).second == "messages[0].tool_calls[0].function.arguments");
  }
  CHECK(sv::parse_chat_request(with_arguments(R"({"a":1,"a":2})")).error.message.find("holds the key \"a\" twice") !=
        std::string::npos);
  for (const std::string& kept :
       {std::string(R"({"x":1.5,"y":2e3,"n":12345678901234567890123})"), std::string(R"({"a":{"k":1},"b":{"k":2}})"),
        std::string(R"({"q":"ca)"), std::string("[1,2]")}) {
    CHECK(sv::parse_chat_request(with_arguments(kept)).ok());
  }
  CHECK(chat_error(head + R"(,"response_format":{"type":"nonsense"}})").second == "response_format.type");
  CHECK(chat_error(head + R"(,"response_format":"json"})").second == "response_format");
  CHECK(chat_error(head + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})").second ==
        "response_format.json_schema.schema");
  const sv::Parsed<sv::ChatRequest> schema = sv::parse_chat_request(
      head + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}})");
  REQUIRE(schema.ok());
  CHECK(schema.value->response_format.type == "json_schema");
  CHECK(schema.value->response_format.schema_json == R"({"type":"object"})");
  // OpenAI's logit processors and logprobs are read into the request (decode hands them to generate).
  const sv::Parsed<sv::ChatRequest> processed = sv::parse_chat_request(
      head + R"(,"presence_penalty":0.5,"frequency_penalty":-1,"logit_bias":{"7":-100,"300":2.5},"logprobs":true,)"
             R"("top_logprobs":4})");
  REQUIRE(processed.ok());
  const sv::SamplingRequest& sp = processed.value->sampling;
  CHECK(sp.presence_penalty == 0.5);
  CHECK(sp.frequency_penalty == -1);
  CHECK(sp.logit_bias == std::map<int64_t, double>{{7, -100}, {300, 2.5}});
  CHECK(sp.logprobs);
  CHECK(sp.top_logprobs == 4);
  CHECK(chat_error(head + R"(,"logprobs":false,"presence_penalty":0,"frequency_penalty":0,"logit_bias":{}})").first ==
        200);
  // Out of range: a 400 naming the field.
  sv::ServeLimits vocab512;
  vocab512.vocab_size = 512;
  for (const auto& [extra, field] :
       std::vector<std::pair<std::string, std::string>>{{R"("presence_penalty":2.5)", "presence_penalty"},
                                                        {R"("frequency_penalty":"a")", "frequency_penalty"},
                                                        {R"("logit_bias":[1])", "logit_bias"},
                                                        {R"("logit_bias":{"x":1})", "logit_bias"},
                                                        {R"("logit_bias":{"-3":1})", "logit_bias"},
                                                        {R"("logit_bias":{"512":1})", "logit_bias"},
                                                        {R"("logit_bias":{"5":-100.5})", "logit_bias"},
                                                        {R"("logit_bias":{"5":"high"})", "logit_bias"},
                                                        {R"("logit_bias":{"5":1,"05":-1})", "logit_bias"},
                                                        {R"("logprobs":1)", "logprobs"},
                                                        {R"("top_logprobs":2)", "top_logprobs"},
                                                        {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"}}) {
    const sv::Parsed<sv::ChatRequest> p = sv::parse_chat_request(head + "," + extra + "}", vocab512);
    INFO(extra << ": " << p.error.message);
    CHECK(!p.ok());
    CHECK(p.error.status == 400);
    CHECK(p.error.param == field);
  }
  CHECK(sv::parse_chat_request(head + R"(,"logit_bias":{"511":1}})", vocab512).ok());
  // Legacy completions: penalties and biases as chat; its integer logprobs refused by name.
  const sv::Parsed<sv::CompletionRequest> legacy =
      sv::parse_completion_request(R"({"model":"m","prompt":"x","presence_penalty":1,"logit_bias":{"3":1}})");
  REQUIRE(legacy.ok());
  CHECK(legacy.value->sampling.presence_penalty == 1);
  for (const char* extra : {R"("logprobs":2)", R"("logprobs":true)", R"("top_logprobs":1)"}) {
    const sv::Parsed<sv::CompletionRequest> p =
        sv::parse_completion_request(std::string(R"({"model":"m","prompt":"x",)") + extra + "}");
    CHECK(p.error.code == "unsupported_parameter");
    CHECK(std::string(extra).find(p.error.param) != std::string::npos);
  }
}

TEST_CASE("serve: tool calls are held back from the stream and read when the answer ends", "[serve]") {
  sv::ToolCallStream stream(orbit::ToolCallFormat::kHermes, false);
  std::string sent;
  for (const char* delta : {"Let me ", "look. <to", "ol_call>{\"name\": \"search\", ",
                            "\"arguments\": {\"q\": \"cat\"}}", "</tool_call>"}) {
    sent += stream.push(delta).content;
  }
  CHECK(sent == "Let me look. ");
  sv::RunResult r;
  r.text = "Let me look. <tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cat\"}}</tool_call>";
  r.finish_reason = "stop";
  stream.finish(r);
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].name == "search");
  CHECK(r.tool_calls[0].arguments == R"({"q":"cat"})");
  CHECK(r.text == "Let me look.");
  CHECK(r.unstreamed.empty());
  CHECK(r.finish_reason == "tool_calls");

  // Text that only looked like the start of a call is sent when the answer ends; where max_tokens cut the
  // answer there it may be a call's mark begun, and is left out (no half call markup in content).
  const sv::RunResult t = finished_after_a_mark_start("stop");
  CHECK(t.unstreamed == "<tool");
  CHECK(t.finish_reason == "stop");
  const sv::RunResult m = finished_after_a_mark_start("length");
  CHECK(m.unstreamed.empty());
  CHECK(m.text == "a");
  CHECK(m.finish_reason == "length");

  // max_tokens ended the answer inside a call: the call as far as it was written, finish_reason "length".
  sv::ToolCallStream cut(orbit::ToolCallFormat::kHermes, false);
  CHECK(cut.push("Sure. <tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ca").content == "Sure. ");
  sv::RunResult c;
  c.text = "Sure. <tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ca";
  c.finish_reason = "length";
  cut.finish(c);
  REQUIRE(c.tool_calls.size() == 1);
  CHECK(c.tool_call_cut);
  CHECK(c.tool_calls[0].name == "search");
  CHECK(c.tool_calls[0].arguments == R"({"q":"ca)");
  CHECK(c.text == "Sure.");
  CHECK(c.unstreamed.empty());
  CHECK(c.finish_reason == "length");
  const nlohmann::json body = sv::chat_completion({"chatcmpl-1", 1, "m"}, c);
  CHECK(body["choices"][0]["finish_reason"] == "length");
  CHECK(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == R"({"q":"ca)");
  // Every message has refusal: null, as OpenAI's do (the openai client's ChatCompletionMessage requires it).
  const nlohmann::json& message = body["choices"][0]["message"];
  CHECK((message.contains("refusal") && message["refusal"].is_null()));
  // The same text ended by a stop token is no call: it stays content, as before.
  sv::ToolCallStream stopped(orbit::ToolCallFormat::kHermes, false);
  sv::RunResult s;
  s.text = "Sure. <tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ca";
  s.finish_reason = "stop";
  stopped.finish(s);
  CHECK(s.tool_calls.empty());
  CHECK_FALSE(s.tool_call_cut);
}

TEST_CASE("serve: parallel_tool_calls false answers one call where a free answer wrote several", "[serve]") {
  // A free answer (tool_choice auto where the tools' grammar cannot be had, and always in Llama 3's format,
  // which has no call mark) may hold several calls; with parallel_tool_calls false the first is the answer.
  const std::string two =
      "Sure. <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>"
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
  auto finish = [](orbit::ToolCallFormat format, bool one_call, const std::string& text, const char* reason) {
    sv::ToolCallStream stream(format, false, false, one_call);
    stream.push(text);
    sv::RunResult r;
    r.text = text;
    r.finish_reason = reason;
    stream.finish(r);
    return r;
  };
  const sv::RunResult both = finish(orbit::ToolCallFormat::kHermes, false, two, "stop");
  CHECK(both.tool_calls.size() == 2);  // parallel_tool_calls true: every call
  const sv::RunResult one = finish(orbit::ToolCallFormat::kHermes, true, two, "stop");
  REQUIRE(one.tool_calls.size() == 1);
  CHECK(one.tool_calls[0].name == "a");
  CHECK(one.tool_calls[0].arguments == R"({"x":1})");
  CHECK(one.tool_calls_dropped == 1);
  CHECK(one.text == "Sure.");
  CHECK(one.finish_reason == "tool_calls");
  // Streamed: the one call goes out whole at the end.
  REQUIRE(one.unstreamed_calls.size() == 1);
  CHECK(one.unstreamed_calls[0].name == "a");
  // The second call cut by max_tokens: the answer is the first call, whole.
  const sv::RunResult cut = finish(orbit::ToolCallFormat::kHermes, true, two.substr(0, two.size() - 20), "length");
  REQUIRE(cut.tool_calls.size() == 1);
  CHECK_FALSE(cut.tool_call_cut);
  CHECK(cut.finish_reason == "tool_calls");
  // Llama 3's calls, separated by semicolons.
  const std::string llama = R"({"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}})";
  CHECK(finish(orbit::ToolCallFormat::kLlama3, false, llama, "stop").tool_calls.size() == 2);
  const sv::RunResult first = finish(orbit::ToolCallFormat::kLlama3, true, llama, "stop");
  REQUIRE(first.tool_calls.size() == 1);
  CHECK(first.tool_calls[0].name == "a");
}

TEST_CASE("serve: tools reach the prompt; what the vocabulary cannot write is refused by name", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"user", "Find a story about a cat."}};
  r.sampling.max_tokens = 4;
  r.sampling.temperature = 0;
  const sv::RunOutcome plain = core.chat(r, "", {});
  REQUIRE(plain.result.has_value());
  sv::ChatRequest with_tools = r;
  with_tools.tools_json =
      R"([{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":)"
      R"({"q":{"type":"string"}}}}}])";
  with_tools.tool_names = {"search"};
  const sv::RunOutcome tooled = core.chat(with_tools, "", {});
  REQUIRE(tooled.result.has_value());
  // The built-in template lists the tools: the prompt is longer by their schema and the instruction.
  CHECK(tooled.result->usage.prompt_tokens > plain.result->usage.prompt_tokens + 20);
  // A story model writes no call: the answer is content, finished as text answers finish.
  CHECK(tooled.result->tool_calls.empty());
  CHECK(tooled.result->finish_reason != "tool_calls");
  // Every tool's parameters must be an arguments schema, whatever tool_choice says (here auto): refused before
  // the run, naming the tool.
  for (const std::string& schema : {std::string(R"({"type":"string","pattern":"a+"})"), std::string(R"({"type":7})"),
                                    std::string(R"({"type":"object","properties":[]})"), std::string("[1]"),
                                    std::string(R"({"type":"object","required":[3]})")}) {
    sv::ChatRequest bad_schema = with_tools;
    bad_schema.tools_json = R"([{"type":"function","function":{"name":"search"}},)"
                            R"({"type":"function","function":{"name":"open","parameters":)" +
                            schema + "}}]";
    bad_schema.tool_names = {"search", "open"};
    const sv::RunTicket bad = core.prepare_chat(bad_schema, "");
    INFO(schema);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().status == 400);
    CHECK(bad.error().param == "tools[1].function.parameters");
    CHECK(bad.error().code == "invalid_function_parameters");
    CHECK(bad.error().message.rfind("tools[1].function.parameters", 0) == 0);
  }
  // Keywords outside the constraints' subset, as Pydantic and zod write them, describe the arguments to the
  // model: accepted under auto (nothing is decoded under them), refused naming the keyword when a call is forced.
  sv::ChatRequest described = with_tools;
  described.tools_json =
      R"([{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":)"
      R"({"tags":{"type":"array","uniqueItems":true},"when":{"type":"string","format":"date-time"}}}}}])";
  CHECK(core.prepare_chat(described, "").ok());
  described.tool_choice.mode = "required";
  const sv::RunTicket enforced = core.prepare_chat(described, "");
  REQUIRE_FALSE(enforced.ok());
  CHECK(enforced.error().message.find("'uniqueItems' is not supported") != std::string::npos);
  // Forcing a call or a JSON answer decodes under a constraint; this model's vocabulary has no token for '{',
  // so it cannot write one: refused before the run, naming the field and the byte.
  sv::ChatRequest forced = with_tools;
  forced.tool_choice.mode = "required";
  const sv::RunTicket refused = core.prepare_chat(forced, "");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().param == "tool_choice");
  CHECK(refused.error().message.find("no token that writes '{'") != std::string::npos);
  sv::ChatRequest json_answer = r;
  json_answer.response_format.type = "json_object";
  CHECK(core.prepare_chat(json_answer, "").error().param == "response_format.type");
  // A schema outside the supported subset is refused naming where.
  json_answer.response_format.type = "json_schema";
  json_answer.response_format.schema_json = R"({"type":"array","uniqueItems":true})";
  const sv::RunTicket unsupported = core.prepare_chat(json_answer, "");
  REQUIRE_FALSE(unsupported.ok());
  CHECK(unsupported.error().param == "response_format.json_schema.schema");
  CHECK(unsupported.error().message.find("uniqueItems") != std::string::npos);
  // One whose shortest answer is longer than the context can hold is refused before any answer is built.
  json_answer.response_format.schema_json = R"({"type":"string","minLength":100000000})";
  const sv::RunTicket endless = core.prepare_chat(json_answer, "");
  REQUIRE_FALSE(endless.ok());
  CHECK(endless.error().param == "response_format.json_schema.schema");
  CHECK(endless.error().message.find("its shortest answer is 100000002 bytes") != std::string::npos);
  // So is a forced call whose arguments are: refused naming the tool's parameters, not tool_choice (which
  // stays named where the vocabulary cannot write a call, above).
  sv::ChatRequest long_call = with_tools;
  long_call.tools_json =
      R"([{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":)"
      R"({"q":{"type":"string"}}}}},{"type":"function","function":{"name":"open","parameters":)"
      R"({"type":"object","properties":{"s":{"type":"string","minLength":100000}},"required":["s"]}}}])";
  long_call.tool_names = {"search", "open"};
  long_call.tool_choice.mode = "function";
  long_call.tool_choice.function = "open";
  const sv::RunTicket too_long = core.prepare_chat(long_call, "");
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.error().param == "tools[1].function.parameters");
  CHECK(too_long.error().code == "unsupported_value");
  CHECK(too_long.error().message.rfind("tools[1].function.parameters: its shortest answer is 1000", 0) == 0);
  long_call.tools_json = R"([{"type":"function","function":{"name":"open","parameters":)"
                         R"({"type":"object","properties":{"s":{"type":"string","minLength":100000}},)"
                         R"("required":["s"]}}}])";
  long_call.tool_names = {"open"};
  long_call.tool_choice.mode = "required";
  long_call.tool_choice.function.clear();
  const sv::RunTicket only_one = core.prepare_chat(long_call, "");
  REQUIRE_FALSE(only_one.ok());
  CHECK(only_one.error().param == "tools[0].function.parameters");
  core.close();
}

TEST_CASE("serve: forced calls and JSON answers are decoded under a constraint, even by a story model",
          "[serve][model]") {
  sv::ServeOptions options;
  options.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";  // byte tokens: any JSON
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"user", "Find a story about a cat."}};
  r.sampling.max_tokens = 160;
  r.sampling.temperature = 0;
  r.tools_json =
      R"([{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":)"
      R"({"q":{"type":"string","maxLength":8}},"required":["q"]}}},{"type":"function","function":{"name":"open"}}])";
  r.tool_names = {"search", "open"};
  // tool_choice "required": a call to one of the tools, with arguments its schema allows.
  sv::ChatRequest forced = r;
  forced.tool_choice.mode = "required";
  forced.parallel_tool_calls = false;
  const sv::RunOutcome called = core.chat(forced, "", {});
  REQUIRE(called.result.has_value());
  INFO("answer: " << called.result->text);
  REQUIRE(called.result->tool_calls.size() == 1);
  const orbit::ChatToolCall& call = called.result->tool_calls[0];
  CHECK((call.name == "search" || call.name == "open"));
  const nlohmann::json args = nlohmann::json::parse(call.arguments);
  CHECK(args.is_object());
  if (call.name == "search") CHECK(args["q"].is_string());
  CHECK(called.result->finish_reason == "tool_calls");
  // Streamed with n = 2: each choice's answer is read for calls on its own, each choice's content streams
  // under its index up to its call, and its calls reach the sink as the choice ends.
  sv::ChatRequest several = forced;
  several.sampling.n = 2;
  several.sampling.stream = true;
  several.sampling.temperature = 1.0;
  several.sampling.seed = 5;
  std::vector<std::string> streamed(2);
  sv::RunSink sink;
  sink.on_choice_text = [&](int64_t choice, const std::string& delta) {
    streamed.at(static_cast<std::size_t>(choice)) += delta;
    return true;
  };
  std::vector<std::vector<orbit::ChatToolCall>> ended(2);
  sink.on_choice_end = [&](int64_t choice, const sv::RunResult& result) {
    CHECK(result.finish_reason == "tool_calls");
    ended.at(static_cast<std::size_t>(choice)) = result.tool_calls;
    return true;
  };
  const sv::RunOutcome both = core.chat(several, "", sink);
  REQUIRE(both.result.has_value());
  REQUIRE(both.result->extra_choices.size() == 1);
  for (std::size_t i = 0; i < 2; ++i) {
    const sv::RunResult& choice = i == 0 ? *both.result : both.result->extra_choices[0];
    INFO("choice " << i << ": " << choice.text);
    REQUIRE(choice.tool_calls.size() == 1);
    CHECK(nlohmann::json::parse(choice.tool_calls[0].arguments).is_object());
    CHECK(choice.finish_reason == "tool_calls");
    CHECK(streamed[i] + choice.unstreamed == choice.text);
    REQUIRE(ended[i].size() == 1);
    CHECK(ended[i][0].arguments == choice.tool_calls[0].arguments);
  }
  // A named function: that one.
  forced.tool_choice = {"function", "open"};
  const sv::RunOutcome named = core.chat(forced, "", {});
  REQUIRE(named.result.has_value());
  REQUIRE(named.result->tool_calls.size() == 1);
  CHECK(named.result->tool_calls[0].name == "open");
  // response_format: a JSON object; a schema's required properties are written with their types.
  sv::ChatRequest json_answer = r;
  json_answer.tools_json.clear();
  json_answer.tool_names.clear();
  json_answer.response_format.type = "json_object";
  const sv::RunOutcome object = core.chat(json_answer, "", {});
  REQUIRE(object.result.has_value());
  INFO("object: " << object.result->text);
  CHECK(nlohmann::json::parse(object.result->text).is_object());
  json_answer.response_format.type = "json_schema";
  json_answer.response_format.schema_json =
      R"({"type":"object","properties":{"title":{"type":"string","maxLength":12},"pages":{"type":"integer"}},)"
      R"("required":["title","pages"]})";
  const sv::RunOutcome schema = core.chat(json_answer, "", {});
  REQUIRE(schema.result.has_value());
  INFO("schema: " << schema.result->text);
  const nlohmann::json parsed = nlohmann::json::parse(schema.result->text);
  CHECK(parsed["title"].is_string());
  CHECK(parsed["pages"].is_number_integer());
  CHECK(schema.result->finish_reason == "stop");
  // Stop strings the answer must write ('"', '}') end it only where it is whole: the call and the JSON are
  // the same as without them (greedy), not cut at their first quote.
  forced.tool_choice.mode = "required";
  forced.sampling.stop = {"\"", "}"};
  const sv::RunOutcome quoted = core.chat(forced, "", {});
  REQUIRE(quoted.result.has_value());
  CHECK(quoted.result->text == called.result->text);
  CHECK(quoted.result->finish_reason == "tool_calls");
  json_answer.sampling.stop = {"\"", "}"};
  const sv::RunOutcome braced = core.chat(json_answer, "", {});
  REQUIRE(braced.result.has_value());
  CHECK(braced.result->text == schema.result->text);
  core.close();
}

TEST_CASE("serve: a forced call max_tokens cuts comes back as the call so far, and can be sent back",
          "[serve][model]") {
  sv::ServeOptions options;
  options.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"user", "Find a story about a cat."}};
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 160;
  r.tools_json = R"([{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":)"
                 R"({"q":{"type":"string","maxLength":8}},"required":["q"]}}}])";
  r.tool_names = {"search"};
  r.tool_choice.mode = "required";
  r.parallel_tool_calls = false;
  const sv::RunOutcome whole = core.chat(r, "", {});
  REQUIRE(whole.result.has_value());
  REQUIRE(whole.result->tool_calls.size() == 1);
  const orbit::ChatToolCall full = whole.result->tool_calls[0];
  const int64_t n = static_cast<int64_t>(whole.result->tokens.size());
  // Shorter budgets. One that holds the shortest call gives a whole call (the constraint reserves room to
  // finish: orbit/constraint.h); a shorter one is cut, "length", and is the call so far, a prefix of the
  // unhurried one, no content; cut before its name's string closed (inside the mark too), the one tool's call
  // with arguments "" (a client never reads a name no tool has: ToolCallStream::finish).
  int64_t cut_calls = 0;
  int64_t inside_mark = 0;
  std::optional<sv::RunResult> with_arguments;
  for (int64_t k = 1; k < n; ++k) {
    sv::ChatRequest shorter = r;
    shorter.sampling.max_tokens = k;
    const sv::RunOutcome out = core.chat(shorter, "", {});
    REQUIRE(out.result.has_value());
    const sv::RunResult& a = *out.result;
    INFO("max_tokens " << k << ": " << a.text);
    if (a.finish_reason == "tool_calls") {
      REQUIRE(a.tool_calls.size() == 1);
      CHECK(nlohmann::json::parse(a.tool_calls[0].arguments).is_object());
      continue;
    }
    CHECK(a.finish_reason == "length");
    REQUIRE(a.tool_calls.size() == 1);
    CHECK(a.tool_calls[0].name == full.name);
    CHECK(full.arguments.rfind(a.tool_calls[0].arguments, 0) == 0);
    CHECK(a.text.empty());
    CHECK(a.tool_call_cut);
    if (a.tool_calls[0].arguments.empty()) {
      inside_mark += 1;
      continue;
    }
    cut_calls += 1;
    if (a.tool_calls[0].arguments.size() > 2) with_arguments = a;
  }
  CHECK(cut_calls > 0);
  CHECK(inside_mark > 0);
  REQUIRE(with_arguments.has_value());
  // The cut call goes back in the history as a client sends it (its arguments not JSON), with a tool's error.
  sv::ChatRequest next = r;
  orbit::ChatMessage assistant{"assistant", ""};
  assistant.tool_calls = with_arguments->tool_calls;
  orbit::ChatMessage tool{"tool", "error: the arguments are not valid JSON"};
  tool.tool_call_id = with_arguments->tool_calls[0].id;
  next.messages.push_back(assistant);
  next.messages.push_back(tool);
  next.sampling.max_tokens = 100;
  const sv::RunOutcome again = core.chat(next, "", {});
  INFO("error: " << again.error.message);
  REQUIRE(again.result.has_value());
  CHECK(again.result->tool_calls.size() == 1);
  core.close();
}

}  // namespace ORBIT_TEST_FILE
