// Tool calls in a model's text (orbit/tool_calls.h): each format parsed into OpenAI-style calls, malformed and
// cut calls left as content, the streaming hold-back, and the format a template writes, read off its rendering;
// the built-in template (kPlainChatTemplate) rendering tools and tool calls, and unchanged without them.
#include "orbit_catch.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "orbit/engine.h"
#include "orbit/tool_calls.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

std::shared_ptr<Engine> open_story_engine() {
  EngineOptions o;
  o.model = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";
  o.pool_bytes = int64_t{16} << 20;
  return Engine::open(o);
}

nlohmann::json args_of(const ChatToolCall& c) { return nlohmann::json::parse(c.arguments); }

std::string trimmed(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.substr(s.find_first_not_of(' '));
}

}  // namespace

TEST_CASE("hermes: every <tool_call> block is a call, the text around them content", "[tool_calls]") {
  const ToolCallParse r = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"open_page\", \"arguments\": {\"url\": \"a.html\"}}\n</tool_call>"
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cats\", \"n\": 3}}</tool_call>",
      ToolCallFormat::kHermes);
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "open_page");
  CHECK(args_of(r.calls[0]) == nlohmann::json{{"url", "a.html"}});
  CHECK(r.calls[1].name == "search");
  CHECK(args_of(r.calls[1])["n"] == 3);
  CHECK(r.content == "Let me look.");
  CHECK_FALSE(r.malformed);
  // Ids are OpenAI's shape and differ between calls.
  CHECK(r.calls[0].id.rfind("call_", 0) == 0);
  CHECK(r.calls[0].id.size() == 29);
  CHECK(r.calls[0].id != r.calls[1].id);
  // Arguments given as JSON text are read as the object they spell.
  const ToolCallParse s = parse_tool_calls(
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", ToolCallFormat::kHermes);
  REQUIRE(s.calls.size() == 1);
  CHECK(args_of(s.calls[0]) == nlohmann::json{{"x", 1}});
}

TEST_CASE("hermes: a cut or malformed call stays content and is flagged", "[tool_calls]") {
  for (const char* text : {"<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1",         // cut by max_tokens
                           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",  // not an object
                           "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",    // no name
                           "<tool_call>not json</tool_call>"}) {
    const ToolCallParse r = parse_tool_calls(text, ToolCallFormat::kHermes);
    CHECK(r.calls.empty());
    CHECK(r.malformed);
    CHECK(r.content == text);
  }
  const ToolCallParse plain = parse_tool_calls("Once upon a time there was a cat.", ToolCallFormat::kHermes);
  CHECK(plain.calls.empty());
  CHECK_FALSE(plain.malformed);
  CHECK(plain.content == "Once upon a time there was a cat.");
  // Arguments nested past the depth bound are malformed, never a crash.
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  CHECK(parse_tool_calls(deep + "</tool_call>", ToolCallFormat::kHermes).malformed);
}

TEST_CASE("hermes: a closing mark inside a call's strings does not end the call", "[tool_calls]") {
  // What a schema's enum, const or pattern may make a forced call write: the block ends at the first mark
  // before which it is a call, so the call is read whole (it was content, malformed, and no call).
  const std::string text =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>x\"}}</tool_call> "
      "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
  for (const CutToolCall cut : {CutToolCall::kContent, CutToolCall::kCall}) {
    const ToolCallParse r = parse_tool_calls(text, ToolCallFormat::kHermes, cut);
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].name == "f");
    CHECK(r.calls[0].arguments == R"({"a":"</tool_call>x"})");
    CHECK(r.calls[1].name == "g");
    CHECK_FALSE(r.malformed);
    CHECK(r.content.empty());
  }
  // Cut inside that string, the call is being written (cut), not content.
  const ToolCallParse cut =
      parse_tool_calls(text.substr(0, text.find("x\"}}")), ToolCallFormat::kHermes, CutToolCall::kCall);
  REQUIRE(cut.calls.size() == 1);
  CHECK(cut.cut);
  CHECK(cut.calls[0].arguments == R"({"a":"</tool_call>)");
}

TEST_CASE("llama3: the answer as one JSON call, or several separated by semicolons", "[tool_calls]") {
  ToolCallParse r = parse_tool_calls("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                                     ToolCallFormat::kLlama3);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(args_of(r.calls[0]) == nlohmann::json{{"city", "Oslo"}});
  CHECK(r.content.empty());
  r = parse_tool_calls("{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": true}}",
                       ToolCallFormat::kLlama3);
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[1].name == "b");
  r = parse_tool_calls("The weather is fine.", ToolCallFormat::kLlama3);
  CHECK(r.calls.empty());
  CHECK(r.content == "The weather is fine.");
  r = parse_tool_calls("{\"nam", ToolCallFormat::kLlama3);
  CHECK(r.calls.empty());
  CHECK(r.malformed);
}

TEST_CASE("mistral: [TOOL_CALLS] and a JSON array, ids kept when given", "[tool_calls]") {
  const ToolCallParse r = parse_tool_calls(
      "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abc123XYZ\"}, {\"name\": \"g\", "
      "\"arguments\": {}}]",
      ToolCallFormat::kMistral);
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].id == "abc123XYZ");
  CHECK(r.calls[1].id.rfind("call_", 0) == 0);
  CHECK(r.content == "Sure.");
  CHECK(parse_tool_calls("[TOOL_CALLS] [{\"name\": \"f\"", ToolCallFormat::kMistral).malformed);
}

TEST_CASE("arguments come back as written: integers of any length, escapes, in every format", "[tool_calls]") {
  // json holds 64-bit integers and doubles: a round trip through it printed 1.2345678901234568e+29 and
  // -9.223372036854776e+18. The arguments keep the model's tokens, less the whitespace between them.
  const std::string args =
      "{\"a\": 9007199254740993, \"b\": 123456789012345678901234567890, \"c\": "
      "-9223372036854775809, \"d\": [1.50e+2, 0.10], \"s\": \"x\\u0041 \\\" y\"}";
  const std::string compact =
      "{\"a\":9007199254740993,\"b\":123456789012345678901234567890,\"c\":"
      "-9223372036854775809,\"d\":[1.50e+2,0.10],\"s\":\"x\\u0041 \\\" y\"}";
  const std::string quoted = nlohmann::json(args).dump();  // the arguments given as a JSON string
  const std::pair<std::string, ToolCallFormat> cases[] = {
      {"<tool_call>{\"name\": \"f\", \"arguments\": " + args + "}</tool_call>", ToolCallFormat::kHermes},
      {"<tool_call>{\"name\": \"f\", \"arguments\": " + quoted + "}</tool_call>", ToolCallFormat::kHermes},
      {"{\"name\": \"f\", \"parameters\": " + args + "}", ToolCallFormat::kLlama3},
      {"[TOOL_CALLS] [{\"name\": \"g\", \"arguments\": {}}, {\"arguments\":" + args + ", \"name\": \"f\"}]",
       ToolCallFormat::kMistral}};
  for (const auto& [text, format] : cases) {
    INFO(text);
    const ToolCallParse r = parse_tool_calls(text, format);
    REQUIRE_FALSE(r.calls.empty());
    CHECK(r.calls.back().name == "f");
    CHECK(r.calls.back().arguments == compact);
  }
}

TEST_CASE("streaming holds back exactly what may still become a call", "[tool_calls]") {
  CHECK(tool_call_free_prefix("Hello there", ToolCallFormat::kHermes) == 11);
  CHECK(tool_call_free_prefix("Hello <tool", ToolCallFormat::kHermes) == 6);
  CHECK(tool_call_free_prefix("Hello <tool_call>{\"na", ToolCallFormat::kHermes) == 6);
  CHECK(tool_call_free_prefix("a < b", ToolCallFormat::kHermes) == 5);
  CHECK(tool_call_free_prefix("Sure [TOOL", ToolCallFormat::kMistral) == 5);
  CHECK(tool_call_free_prefix("  {\"name\"", ToolCallFormat::kLlama3) == 0);
  CHECK(tool_call_free_prefix("It is sunny.", ToolCallFormat::kLlama3) == 12);
}

TEST_CASE("format names round-trip; an unknown one is refused naming the argument", "[tool_calls]") {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral})
    CHECK(parse_tool_call_format(tool_call_format_name(f)) == f);
  CHECK_THROWS_WITH(parse_tool_call_format("qwen", "--tool-call-format"),
                    Contains("--tool-call-format: 'qwen' is not a tool call format"));
}

TEST_CASE("the built-in template renders tools and tool calls, and lists without them as before", "[tool_calls]") {
  std::shared_ptr<Engine> engine = open_story_engine();
  ChatMessage user{"user", "What is the weather in Oslo?"};
  ChatMessage call;
  call.role = "assistant";
  call.tool_calls.push_back({"call_1", "get_weather", "{\"city\": \"Oslo\"}"});
  ChatMessage result;
  result.role = "tool";
  result.content = "Sunny, 21 C";
  result.tool_call_id = "call_1";
  ChatOptions o;
  o.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
                 R"("properties": {"city": {"type": "string"}}}}}])";
  const std::string text = engine->render_chat({user, call, result}, true, o);
  CHECK_THAT(text, Contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""));
  CHECK_THAT(text, Contains("user: What is the weather in Oslo?\n"));
  CHECK_THAT(text, Contains("assistant: <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
                            "</tool_call>\n"));
  CHECK_THAT(text, Contains("tool: Sunny, 21 C\nassistant:"));
  // What the template writes, the parser reads back.
  const std::size_t at = text.rfind("<tool_call>");  // the call, after the instruction that shows one
  const ToolCallParse back = parse_tool_calls(text.substr(at, text.find('\n', at) - at), ToolCallFormat::kHermes);
  REQUIRE(back.calls.size() == 1);
  CHECK(back.calls[0].name == "get_weather");
  CHECK(engine->tool_call_format() == ToolCallFormat::kHermes);
  // Without tools and calls: "role: content" lines after the BOS text, as the plain template always rendered.
  CHECK(engine->render_chat({user}, true) == "<|start_story|>user: What is the weather in Oslo?\nassistant:");
}

TEST_CASE("the tool call format is read off how a template writes a call", "[tool_calls]") {
  std::shared_ptr<Engine> engine = open_story_engine();
  ChatOptions mistral;
  mistral.chat_template =
      "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS] {{ m.tool_calls | tojson }}{% else %}"
      "{{ m.content }}{% endif %}{% endfor %}";
  CHECK(engine->tool_call_format(mistral) == ToolCallFormat::kMistral);
  ChatOptions llama;
  llama.chat_template =
      "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", "
      "\"parameters\": {{ c.function.arguments | tojson }}}{% endfor %}{% else %}{{ m.content }}{% endif %}"
      "{% endfor %}";
  CHECK(engine->tool_call_format(llama) == ToolCallFormat::kLlama3);
  ChatOptions refuses;
  refuses.chat_template =
      "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no tools') }}{% endif %}"
      "{% endfor %}";
  CHECK(engine->tool_call_format(refuses) == ToolCallFormat::kHermes);
}

TEST_CASE("calls decoded under tool_call_options' constraint parse back, in every format", "[tool_calls]") {
  EngineOptions eo;
  eo.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";  // byte tokens: any JSON
  eo.pool_bytes = int64_t{16} << 20;
  std::shared_ptr<Engine> engine = Engine::open(eo);
  const std::string tools =
      R"([{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": )"
      R"({"q": {"type": "string", "maxLength": 6}}, "required": ["q"]}}}, )"
      R"({"type": "function", "function": {"name": "open"}}])";
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral}) {
    INFO(tool_call_format_name(f));
    Window w = engine->new_window();
    w.add_turn(engine->tokenize("Tom wanted to find his ball.", true));
    GenerateOptions o;
    o.max_tokens = 96;
    o.constraint = Constraint::tool_calls(tools, tool_call_options(f, "search"));
    const Generation g = w.generate(engine->tokenize(" He", false), o);
    INFO(g.text);
    const ToolCallParse r = parse_tool_calls(g.text, f);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "search");
    CHECK(nlohmann::json::parse(r.calls[0].arguments)["q"].is_string());
    CHECK(r.content.empty());
  }
  CHECK_THROWS_WITH(tool_call_options(ToolCallFormat::kHermes, "", 0), Contains("max_calls = 0 must be >= 1"));
}

TEST_CASE("a call max_tokens cut is read as far as it was written with CutToolCall::kCall", "[tool_calls]") {
  const auto cut = [](std::string_view text, ToolCallFormat format) {
    return parse_tool_calls(text, format, CutToolCall::kCall);
  };
  const std::string text = "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  // By default a cut call stays content, as before.
  const ToolCallParse plain = parse_tool_calls(text, ToolCallFormat::kHermes);
  CHECK(plain.calls.empty());
  CHECK(plain.malformed);
  CHECK_FALSE(plain.cut);
  CHECK(plain.content == text);

  const ToolCallParse r = cut(text, ToolCallFormat::kHermes);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.cut);
  CHECK_FALSE(r.malformed);
  CHECK(r.content == "Let me check.");
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == "{\"city\":\"Par");
  CHECK(r.calls[0].id.rfind("call_", 0) == 0);

  // Cut within the name: the name as far as it was written, no arguments yet.
  const ToolCallParse name = cut("<tool_call>{\"name\": \"get_wea", ToolCallFormat::kHermes);
  REQUIRE(name.calls.size() == 1);
  CHECK(name.calls[0].name == "get_wea");
  CHECK(name.calls[0].arguments.empty());
  CHECK(name.cut);
  // Before the name began there is nothing to act on: the text stays content.
  for (const char* early : {"<tool_call>", "<tool_call>{\"na", "<tool_call>{\"name\": ", "<tool_call>{\"name\": \"",
                            "a <tool_call>not json"}) {
    const ToolCallParse e = cut(early, ToolCallFormat::kHermes);
    CHECK(e.calls.empty());
    CHECK(e.malformed);
    CHECK_FALSE(e.cut);
    CHECK(e.content == trimmed(early));
  }
  // A whole call first, then one cut; strings keep their escapes; arguments given as JSON text are decoded as
  // far as they are whole, less the whitespace between their tokens (as a whole call's are).
  const ToolCallParse two =
      cut("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": "
          "{\"q\": \"say \\\"hi\", \"n\": [1, 2",
          ToolCallFormat::kHermes);
  REQUIRE(two.calls.size() == 2);
  CHECK(two.calls[0].arguments == "{}");
  CHECK(two.calls[1].name == "b");
  CHECK(two.calls[1].arguments == "{\"q\":\"say \\\"hi\",\"n\":[1,2");
  CHECK(two.cut);
  const ToolCallParse text_args =
      cut("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"a\\u00", ToolCallFormat::kHermes);
  REQUIRE(text_args.calls.size() == 1);
  CHECK(text_args.calls[0].arguments == "{\"x\":\"a");
  // A character cut in the middle of its UTF-8 bytes is left out.
  const ToolCallParse utf8 =
      cut("<tool_call>{\"name\": \"f\", \"arguments\": {\"c\": \"Z\xc3", ToolCallFormat::kHermes);
  REQUIRE(utf8.calls.size() == 1);
  CHECK(utf8.calls[0].arguments == "{\"c\":\"Z");
  // A whole call whose closing mark was cut is an ordinary call.
  const ToolCallParse whole =
      cut("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_", ToolCallFormat::kHermes);
  REQUIRE(whole.calls.size() == 1);
  CHECK_FALSE(whole.cut);
  CHECK(whole.calls[0].arguments == "{\"x\":1}");
}

TEST_CASE("cut calls in the Llama 3 and Mistral formats", "[tool_calls]") {
  const auto cut = [](std::string_view text, ToolCallFormat format) {
    return parse_tool_calls(text, format, CutToolCall::kCall);
  };
  const ToolCallParse one = cut("{\"name\": \"search\", \"parameters\": {\"q\": \"ca", ToolCallFormat::kLlama3);
  REQUIRE(one.calls.size() == 1);
  CHECK(one.calls[0].name == "search");
  CHECK(one.calls[0].arguments == "{\"q\":\"ca");
  CHECK(one.cut);
  // Llama 3's calls have no mark: a cut JSON answer whose first member is not a name is not a call.
  const ToolCallParse answer = cut("{\"answer\": \"the ca", ToolCallFormat::kLlama3);
  CHECK(answer.calls.empty());
  CHECK(answer.content == "{\"answer\": \"the ca");
  const ToolCallParse two = cut("{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1",
                                ToolCallFormat::kLlama3);
  REQUIRE(two.calls.size() == 2);
  CHECK(two.calls[1].name == "b");
  CHECK(two.calls[1].arguments == "{\"x\":1");
  const ToolCallParse sep = cut("{\"name\": \"a\", \"parameters\": {}}; ", ToolCallFormat::kLlama3);
  REQUIRE(sep.calls.size() == 1);
  CHECK_FALSE(sep.cut);

  const ToolCallParse m =
      cut("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", "
          "\"arguments\": {\"y\": tr",
          ToolCallFormat::kMistral);
  REQUIRE(m.calls.size() == 2);
  CHECK(m.calls[0].arguments == "{\"x\":1}");
  CHECK(m.calls[1].name == "g");
  CHECK(m.calls[1].arguments == "{\"y\":tr");
  CHECK(m.cut);
  const ToolCallParse closed = cut("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}", ToolCallFormat::kMistral);
  REQUIRE(closed.calls.size() == 1);
  CHECK_FALSE(closed.cut);
  const ToolCallParse bare = cut("Hi [TOOL_CALLS] [", ToolCallFormat::kMistral);
  CHECK(bare.calls.empty());
  CHECK(bare.malformed);
  CHECK(bare.content == "Hi [TOOL_CALLS] [");
}

TEST_CASE("a forced call cut before its name began is a cut call with CutToolCall::kForcedCall", "[tool_calls]") {
  const auto forced = [](std::string_view text, ToolCallFormat format) {
    return parse_tool_calls(text, format, CutToolCall::kForcedCall);
  };
  // Inside the opening mark, or after it before the name's first character: no name, no arguments yet.
  for (const auto& [text, format] :
       std::vector<std::pair<std::string, ToolCallFormat>>{{"<tool_cal", ToolCallFormat::kHermes},
                                                           {"<tool_call>", ToolCallFormat::kHermes},
                                                           {"<tool_call>{\"na", ToolCallFormat::kHermes},
                                                           {"<tool_call>{\"name\": \"", ToolCallFormat::kHermes},
                                                           {"{\"na", ToolCallFormat::kLlama3},
                                                           {"[TOOL_CA", ToolCallFormat::kMistral},
                                                           {"[TOOL_CALLS] [{", ToolCallFormat::kMistral}}) {
    const ToolCallParse r = forced(text, format);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.cut);
    CHECK_FALSE(r.malformed);
    CHECK(r.content.empty());
    CHECK(r.calls[0].name.empty());
    CHECK(r.calls[0].arguments.empty());
    CHECK(r.calls[0].id.rfind("call_", 0) == 0);
  }
  // Past the name's start it reads as kCall does; a whole call is whole; nothing decoded is no call.
  const ToolCallParse name = forced("<tool_call>{\"name\": \"get_wea", ToolCallFormat::kHermes);
  REQUIRE(name.calls.size() == 1);
  CHECK(name.calls[0].name == "get_wea");
  CHECK(name.cut);
  const ToolCallParse whole =
      forced("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_", ToolCallFormat::kHermes);
  REQUIRE(whole.calls.size() == 1);
  CHECK_FALSE(whole.cut);
  const ToolCallParse empty = forced("", ToolCallFormat::kHermes);
  CHECK(empty.calls.empty());
  CHECK_FALSE(empty.cut);
}

TEST_CASE("a call's arguments that are not a JSON object reach templates as a string", "[tool_calls]") {
  const std::shared_ptr<Engine> engine = open_story_engine();
  ChatMessage user{"user", "Weather?"};
  ChatMessage assistant{"assistant", ""};
  assistant.tool_calls.push_back({"call_1", "get_weather", "{\"city\": \"Par"});
  const std::string text = engine->render_chat({user, assistant}, false);
  CHECK_THAT(text, Contains("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par}</tool_call>"));
  // An object is rendered as before.
  assistant.tool_calls[0].arguments = "{\"city\": \"Paris\"}";
  CHECK_THAT(engine->render_chat({user, assistant}, false),
             Contains("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"));
}

TEST_CASE("tool calls: a cut call says whether its name is whole; Llama 3 calls split between calls only",
          "[tool_calls]") {
  ToolCallParse r =
      parse_tool_calls("<tool_call>{\"name\": \"search\", \"argu", ToolCallFormat::kHermes, CutToolCall::kCall);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.cut);
  CHECK(r.cut_name_whole);
  CHECK(r.calls[0].name == "search");
  r = parse_tool_calls("<tool_call>{\"name\": \"sea", ToolCallFormat::kHermes, CutToolCall::kCall);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "sea");
  CHECK_FALSE(r.cut_name_whole);  // "sea" may still become "search"
  r = parse_tool_calls("<tool_call>{\"name\": \"search\"", ToolCallFormat::kHermes, CutToolCall::kCall);
  CHECK(r.cut_name_whole);

  // A ';' in a string is the arguments', not a separator.
  r = parse_tool_calls("{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": {}}",
                       ToolCallFormat::kLlama3);
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].arguments == R"({"q":"x;y"})");
  CHECK(r.calls[1].name == "b");
  // Cut in the second call before its name: the first call, whole; the rest content.
  r = parse_tool_calls("{\"name\": \"a\", \"parameters\": {}}; {\"na", ToolCallFormat::kLlama3, CutToolCall::kCall);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "a");
  CHECK_FALSE(r.cut);
  CHECK(r.content == "{\"na");
}

}  // namespace ORBIT_TEST_FILE
