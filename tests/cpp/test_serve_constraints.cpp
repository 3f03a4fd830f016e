// The constraint a chat answer is decoded under (cli/serve/run/answer_constraint.h), per tool_choice and
// response_format, over byte vocabularies: tool_choice "auto" decodes a call the model starts under the
// tools' grammar (from the format's mark on), and stays free where that grammar cannot be had; forced calls
// and JSON answers are constrained from the start or refused naming the field; a JSON answer with tools under
// auto is a call or that JSON.
#include <string>

#include "orbit_catch.h"
#include "serve/run/answer_constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using namespace orbit;

namespace {

std::shared_ptr<const TokenVocabulary> bytes_vocabulary(const std::string& without = "") {
  TokenBytes tb;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    tb.text.emplace_back(without.find(c) == std::string::npos ? std::optional<std::string>(std::string(1, c))
                                                              : std::nullopt);
  }
  return TokenVocabulary::from_bytes(tb);
}

sv::ChatRequest request(const std::string& tools, const std::string& choice) {
  sv::ChatRequest r;
  r.tools_json = tools;
  r.tool_choice.mode = choice;
  return r;
}

const std::string kTools = R"([{"type":"function","function":{"name":"find","parameters":{"type":"object",)"
                           R"("properties":{"q":{"type":"string","format":"date"}},"required":["q"]}}}])";
const std::string kLooseTools = R"([{"type":"function","function":{"name":"tag","parameters":{"type":"object",)"
                                R"("properties":{"t":{"type":"array","uniqueItems":true}}}}}])";

// A request under auto sending `tools` (kTools and kLooseTools, in some order) with allowed_tools naming tag alone.
sv::ChatRequest narrowed_to_tag(const std::string& tools) {
  sv::ChatRequest narrowed = request(tools, "auto");
  narrowed.tool_choice.allowed = {"tag"};
  narrowed.callable_tools_json = kLooseTools;
  return narrowed;
}

}  // namespace

TEST_CASE("serve constraints: auto decodes a started call under the grammar, from the format's mark",
          "[serve][constraint]") {
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const sv::AnswerConstraint a = cache.for_request(request(kTools, "auto"));
  REQUIRE(a.constraint != nullptr);
  CHECK_FALSE(a.error);
  CHECK(a.trigger == "<tool_call>");
  CHECK(a.constraint->matches(R"(<tool_call>{"name": "find", "arguments": {"q": "2024-05-01"}}</tool_call>)"));
  CHECK_FALSE(a.constraint->matches(R"(<tool_call>{"name": "find", "arguments": {"q": "May 1"}}</tool_call>)"));
  // Forced: the same grammar from the first byte.
  const sv::AnswerConstraint forced = cache.for_request(request(kTools, "required"));
  REQUIRE(forced.constraint != nullptr);
  CHECK(forced.trigger.empty());
  // No call: nothing.
  CHECK(cache.for_request(request(kTools, "none")).constraint == nullptr);
}

TEST_CASE("serve constraints: a JSON answer asked for with tools under auto is a call or that JSON",
          "[serve][constraint]") {
  // An agent with tools and a structured final answer (the Agents SDK's outputType): each turn may call.
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  sv::ChatRequest json = request(kTools, "auto");
  json.response_format.type = "json_schema";
  json.response_format.schema_json = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  const sv::AnswerConstraint j = cache.for_request(json);
  REQUIRE(j.constraint != nullptr);
  CHECK_FALSE(j.error);
  CHECK(j.trigger.empty());  // from the first byte: no free text before either
  CHECK(j.constraint->matches(R"({"a": 1})"));
  CHECK(j.constraint->matches(R"(<tool_call>{"name": "find", "arguments": {"q": "2024-05-01"}}</tool_call>)"));
  CHECK_FALSE(j.constraint->matches(R"({"a": "x"})"));
  CHECK_FALSE(j.constraint->is_prefix("Sure"));
  // parallel_tool_calls false: one call at most.
  const std::string call = R"(<tool_call>{"name": "find", "arguments": {"q": "2024-05-01"}}</tool_call>)";
  CHECK(j.constraint->matches(call + "\n" + call));
  json.parallel_tool_calls = false;
  CHECK_FALSE(cache.for_request(json).constraint->matches(call + "\n" + call));
  // json_object likewise; tool_choice none leaves the JSON alone.
  json.response_format.type = "json_object";
  CHECK(cache.for_request(json).constraint->matches(call));
  json.tool_choice.mode = "none";
  CHECK_FALSE(cache.for_request(json).constraint->matches(call));
  CHECK(cache.for_request(json).constraint->matches("{}"));
  // Tools whose grammar cannot be had (a keyword outside the subset): the JSON answer alone, as before.
  sv::ChatRequest loose = request(kLooseTools, "auto");
  loose.response_format.type = "json_object";
  const sv::AnswerConstraint l = cache.for_request(loose);
  REQUIRE(l.constraint != nullptr);
  CHECK_FALSE(l.error);
  CHECK(l.constraint->matches("{}"));
  // A schema that is refused is refused as without tools, naming the response format.
  json.tool_choice.mode = "auto";
  json.response_format.type = "json_schema";
  json.response_format.schema_json = R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})";
  const sv::AnswerConstraint bad = cache.for_request(json);
  REQUIRE(bad.error);
  CHECK(bad.error->param == "response_format.json_schema.schema");
}

TEST_CASE("serve constraints: auto stays free where the grammar cannot be had; forced is refused",
          "[serve][constraint]") {
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  // A keyword outside the subset: auto constrains nothing (and refuses nothing), a forced call is a 400.
  const sv::AnswerConstraint loose = cache.for_request(request(kLooseTools, "auto"));
  CHECK(loose.constraint == nullptr);
  CHECK_FALSE(loose.error);
  const sv::AnswerConstraint forced = cache.for_request(request(kLooseTools, "required"));
  REQUIRE(forced.error);
  CHECK(forced.error->message.find("'uniqueItems' is not supported") != std::string::npos);
  // A vocabulary that cannot write '{': auto is free, a forced call is refused naming the byte.
  sv::ConstraintCache braceless(ToolCallFormat::kHermes, bytes_vocabulary("{"), 512);
  const sv::AnswerConstraint free = braceless.for_request(request(kTools, "auto"));
  CHECK(free.constraint == nullptr);
  CHECK_FALSE(free.error);
  REQUIRE(braceless.for_request(request(kTools, "required")).error);
  // A format whose calls have no mark (Llama 3's bare objects): auto is free.
  sv::ConstraintCache llama(ToolCallFormat::kLlama3, bytes_vocabulary(), 512);
  CHECK(llama.for_request(request(kTools, "auto")).constraint == nullptr);
  sv::ConstraintCache mistral(ToolCallFormat::kMistral, bytes_vocabulary(), 512);
  CHECK(mistral.for_request(request(kTools, "auto")).trigger == "[TOOL_CALLS]");
}

TEST_CASE("serve constraints: a strict tool is refused under auto where its calls would be left free",
          "[serve][constraint]") {
  // kLooseTools with function.strict true: its arguments were promised to follow the schema, and were free.
  std::string strict_tools = kLooseTools;
  strict_tools.insert(strict_tools.rfind("}}]"), R"(,"strict":true)");
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const sv::AnswerConstraint loose = cache.for_request(request(strict_tools, "auto"));
  REQUIRE(loose.error);
  CHECK(loose.error->param == "tools[0].function.strict");
  CHECK(loose.error->code == "unsupported_value");
  CHECK(loose.error->message.find("'uniqueItems' is not supported") != std::string::npos);
  // The same under auto with a JSON answer asked for (the calls' branch could not be had).
  sv::ChatRequest with_answer = request(strict_tools, "auto");
  with_answer.response_format.type = "json_object";
  REQUIRE(cache.for_request(with_answer).error);
  CHECK(cache.for_request(with_answer).error->param == "tools[0].function.strict");
  // strict false, as before: free.
  std::string lax_tools = kLooseTools;
  lax_tools.insert(lax_tools.rfind("}}]"), R"(,"strict":false)");
  CHECK_FALSE(cache.for_request(request(lax_tools, "auto")).error);
  // A vocabulary that cannot write '{', and a format without a call mark: refused too, naming why.
  std::string strict_ok = kTools;
  strict_ok.insert(strict_ok.rfind("}}]"), R"(,"strict":true)");
  CHECK(cache.for_request(request(strict_ok, "auto")).constraint != nullptr);
  sv::ConstraintCache braceless(ToolCallFormat::kHermes, bytes_vocabulary("{"), 512);
  REQUIRE(braceless.for_request(request(strict_ok, "auto")).error);
  CHECK(braceless.for_request(request(strict_ok, "auto")).error->param == "tools[0].function.strict");
  sv::ConstraintCache llama(ToolCallFormat::kLlama3, bytes_vocabulary(), 512);
  const sv::AnswerConstraint markless = llama.for_request(request(strict_ok, "auto"));
  REQUIRE(markless.error);
  CHECK(markless.error->message.find("no mark a call starts with") != std::string::npos);
}

// allowed_tools narrows the callable tools to a list the same as some other request's whole tools: the two are built
// (and refused) apart. They shared a cache entry, so whichever came first decided the other's answer: the narrowed
// request's refusal (the calls would be left free under auto, where allowed_tools cannot be held) reached a later
// request that sent those tools alone, naming a field it never sent; or the narrowed request found the free answer
// and went unrefused. A forced call's refusal names its tool by the index in the request's own list.
TEST_CASE("serve constraints: tools narrowed by allowed_tools and the same tools sent alone are kept apart",
          "[serve][constraint]") {
  const std::string both = kLooseTools.substr(0, kLooseTools.size() - 1) + "," + kTools.substr(1);  // [tag, find]
  const sv::ChatRequest narrowed = narrowed_to_tag(both);
  const auto refused = [](const sv::AnswerConstraint& a) {
    return a.error && a.error->param == "tool_choice.allowed_tools";
  };
  for (const bool narrowed_first : {true, false}) {
    INFO("narrowed first: " << narrowed_first);
    sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
    if (narrowed_first) CHECK(refused(cache.for_request(narrowed)));
    const sv::AnswerConstraint alone = cache.for_request(request(kLooseTools, "auto"));
    CHECK_FALSE(alone.error);  // free: nothing was asked to be held
    CHECK(alone.constraint == nullptr);
    CHECK(refused(cache.for_request(narrowed)));
  }
  // A forced call too long for the context: its tool named where each request lists it.
  const std::string long_tool = R"([{"type":"function","function":{"name":"essay","parameters":{"type":"object",)"
                                R"("properties":{"e":{"type":"string","minLength":100000}},"required":["e"]}}}])";
  sv::ChatRequest second = request(kTools.substr(0, kTools.size() - 1) + "," + long_tool.substr(1), "required");
  second.tool_choice.allowed = {"essay"};
  second.callable_tools_json = long_tool;
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const sv::AnswerConstraint at_one = cache.for_request(second);
  REQUIRE(at_one.error);
  CHECK(at_one.error->param == "tools[1].function.parameters");
  const sv::AnswerConstraint at_zero = cache.for_request(request(long_tool, "required"));
  REQUIRE(at_zero.error);
  CHECK(at_zero.error->param == "tools[0].function.parameters");
  // A schema the grammar refuses: the message and the param name the tool where the request lists it (the
  // grammar is built from the callable tools, where tag, allowed alone, is tools[0]: listed second, the message
  // named find, and the param was the whole list).
  const std::string find_then_tag = kTools.substr(0, kTools.size() - 1) + "," + kLooseTools.substr(1);
  for (const auto& [tools, at] : {std::pair{both, "tools[0]"}, std::pair{find_then_tag, "tools[1]"}}) {
    INFO(at);
    sv::ChatRequest forced = request(tools, "required");
    forced.tool_choice.allowed = {"tag"};
    forced.callable_tools_json = kLooseTools;
    const sv::AnswerConstraint unsupported = cache.for_request(forced);
    REQUIRE(unsupported.error);
    CHECK(unsupported.error->param == std::string(at) + ".function.parameters");
    CHECK(unsupported.error->message.rfind(std::string(at) + ".function.parameters.properties.t: 'uniqueItems'", 0) ==
          0);
  }
  // Every tool callable (required): the refused one named by its own index, not the whole list.
  const sv::AnswerConstraint all_callable = cache.for_request(request(find_then_tag, "required"));
  REQUIRE(all_callable.error);
  CHECK(all_callable.error->param == "tools[1].function.parameters");
}

namespace {

sv::ChatRequest schema_request(const std::string& schema) {
  sv::ChatRequest r;
  r.response_format.type = "json_schema";
  r.response_format.schema_json = schema;
  return r;
}

// Decodes `steps` tokens of the shortest valid text under `c`, so that its masks are computed and cached.
void decode_masks(const std::shared_ptr<const Constraint>& c, const std::shared_ptr<const TokenVocabulary>& vocab,
                  int steps) {
  TokenConstraint tc(c, vocab);
  for (int i = 0; i < steps && !tc.finished(); ++i) {
    const TokenMask m = tc.allowed();
    int64_t id = 0;
    while (!m.allows(id)) ++id;
    tc.accept(id);
  }
}

const char* const kSchemaA =
    R"({"type":"object","properties":{"a":{"type":"string","minLength":40}},"required":["a"]})";
const char* const kSchemaB =
    R"({"type":"object","properties":{"b":{"type":"string","minLength":40}},"required":["b"]})";

}  // namespace

TEST_CASE("serve constraints: the cache is bounded by the bytes it holds, masks included, least recent out first",
          "[serve][constraint]") {
  const auto vocab = bytes_vocabulary();
  // What one schema's entry holds once its masks are computed, measured on a cache of its own.
  sv::ConstraintCache probe(ToolCallFormat::kHermes, vocab, 512);
  decode_masks(probe.for_request(schema_request(kSchemaA)).constraint, vocab, 30);
  const std::size_t one = probe.usage().bytes;
  REQUIRE(one > 30 * (256 / 8));  // 30 masks' bits at least

  // Room for one such entry and a half: a second one's masks push the first out once they are counted.
  sv::ConstraintCache cache(ToolCallFormat::kHermes, vocab, 512, one * 3 / 2);
  const auto a = cache.for_request(schema_request(kSchemaA)).constraint;
  decode_masks(a, vocab, 30);
  const auto b = cache.for_request(schema_request(kSchemaB)).constraint;
  CHECK(cache.usage().entries == 2);  // b's masks are not computed yet: both fit
  decode_masks(b, vocab, 30);
  const sv::ConstraintCache::Usage after = cache.usage();
  CHECK(after.entries == 1);  // a, the least recently used, went
  CHECK(after.bytes <= one * 3 / 2);
  CHECK(cache.for_request(schema_request(kSchemaB)).constraint == b);  // kept
  CHECK(cache.for_request(schema_request(kSchemaA)).constraint != a);  // built again
  // An entry larger than the budget stays while it is the most recent (the request uses it anyway).
  sv::ConstraintCache tiny(ToolCallFormat::kHermes, vocab, 512, 1);
  const auto t = tiny.for_request(schema_request(kSchemaA)).constraint;
  CHECK(tiny.usage().entries == 1);
  CHECK(tiny.for_request(schema_request(kSchemaA)).constraint == t);
  tiny.for_request(schema_request(kSchemaB));
  CHECK(tiny.usage().entries == 1);
}

TEST_CASE("serve constraints: under a reasoning parser the answer's constraint applies after the close tag",
          "[serve][constraint]") {
  // The answer begins inside the model's reasoning: free text until </think>, then the constrained answer.
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  sv::ChatRequest json;
  json.response_format.type = "json_object";
  const sv::AnswerConstraint a = cache.for_request(json, "</think>");
  REQUIRE(a.constraint != nullptr);
  CHECK(a.trigger == "</think>");
  for (const char* text : {"</think>{\"a\": 1}", "</think>\n\n{\"a\": 1}", "</think> {}", "</think>\n{}"}) {
    INFO(text);
    CHECK(a.constraint->matches(text));
  }
  CHECK_FALSE(a.constraint->matches("{\"a\": 1}"));
  CHECK_FALSE(a.constraint->matches("</think>\n\nHello"));
  CHECK_FALSE(a.constraint->matches("</think>\n\n\n{}"));
  // Without `after`, as before: from the first byte.
  const sv::AnswerConstraint plain = cache.for_request(json);
  CHECK(plain.trigger.empty());
  CHECK(plain.constraint->matches("{\"a\": 1}"));
  // A forced call likewise; under tool_choice auto the call mark stays the trigger.
  const sv::AnswerConstraint forced = cache.for_request(request(kTools, "required"), "</think>");
  REQUIRE(forced.constraint != nullptr);
  CHECK(forced.trigger == "</think>");
  CHECK(forced.calls_whole);
  CHECK(
      forced.constraint->matches("</think>\n\n"
                                 R"(<tool_call>{"name": "find", "arguments": {"q": "2024-05-01"}}</tool_call>)"));
  CHECK(cache.for_request(request(kTools, "auto"), "</think>").trigger == "<tool_call>");
}

TEST_CASE("serve constraints: where the model may open its reasoning, the answer after at most two newlines",
          "[serve][constraint]") {
  // Qwen3's template with thinking on: the answer begins outside the reasoning but the model may open it; the
  // Sampler starts the constraint at the first byte, or right after </think> (constraint_trigger_block).
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  sv::ChatRequest json;
  json.response_format.type = "json_object";
  const sv::AnswerConstraint a = cache.for_request(json, std::string());
  REQUIRE(a.constraint != nullptr);
  CHECK(a.trigger.empty());
  for (const char* text : {"{\"a\": 1}", "\n\n{\"a\": 1}", " {}", "\n{}"}) {
    INFO(text);
    CHECK(a.constraint->matches(text));
  }
  CHECK_FALSE(a.constraint->matches("\n\n\n{}"));
  CHECK_FALSE(a.constraint->matches("</think>{}"));
  // Kept apart from the plain entry and the </think> one.
  CHECK(cache.for_request(json).constraint != a.constraint);
  CHECK(cache.for_request(json, std::string("</think>")).constraint != a.constraint);
  CHECK(cache.for_request(json, std::string()).constraint == a.constraint);
}

TEST_CASE("serve constraints: a tool written from an OpenAPI document is decoded under its schema",
          "[serve][constraint]") {
  // int64 and int32 formats, an example and x-* extensions, as OpenAPI generators write them: refused as a
  // whole before (a forced call was a 400, and under auto every call was left free).
  const std::string tools =
      R"([{"type":"function","function":{"name":"get_order","parameters":{"type":"object","x-go-type":"Req",)"
      R"("properties":{"id":{"type":"integer","format":"int64","example":42},)"
      R"("qty":{"type":"integer","format":"int32","minimum":1,"x-order":2}},"required":["id","qty"]}}}])";
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const sv::AnswerConstraint forced = cache.for_request(request(tools, "required"));
  REQUIRE(forced.constraint != nullptr);
  CHECK_FALSE(forced.error);
  const auto call = [](const std::string& qty) {
    return R"(<tool_call>{"name": "get_order", "arguments": {"id": 42, "qty": )" + qty + "}}</tool_call>";
  };
  CHECK(forced.constraint->matches(call("2147483647")));
  CHECK_FALSE(forced.constraint->matches(call("2147483648")));
  CHECK_FALSE(forced.constraint->matches(call("0")));
  const sv::AnswerConstraint free = cache.for_request(request(tools, "auto"));
  REQUIRE(free.constraint != nullptr);
  CHECK(free.trigger == "<tool_call>");
}

}  // namespace ORBIT_TEST_FILE

namespace ORBIT_TEST_FILE {

// A tool's parameters that are no JSON Schema in a subschema ("type": "strin") were taken under tool_choice auto
// (the grammar's refusal read as "outside the subset", the calls left free) and refused only when a call was
// forced; OpenAI refuses them whatever tool_choice says. Schemas outside the subset stay accepted under auto.
TEST_CASE("serve constraints: a tool schema malformed in a subschema is refused under every tool_choice",
          "[serve][constraint]") {
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const auto tool = [](const std::string& name, const std::string& properties) {
    return R"({"type":"function","function":{"name":")" + name + R"(","parameters":{"type":"object","properties":)" +
           properties + "}}}";
  };
  const std::string good = tool("find", R"({"q":{"type":"string"}})");
  const std::pair<std::string, std::string> bad[] = {
      {R"({"p":{"type":"strin"}})", R"(properties.p.type: "strin" is not a JSON Schema type)"},
      {R"({"p":{"type":["string",3]}})", R"(properties.p.type[1]: 3 is not a JSON Schema type)"},
      {R"({"p":{"type":"array","items":{"type":"nmber"}}})", R"(properties.p.items.type: "nmber")"},
      {R"({"p":{"anyOf":[]}})", "properties.p.anyOf: must be a non-empty list of schemas"},
      {R"({"p":{"type":"string","minLength":-1}})", "properties.p.minLength: must be a count"},
      {R"({"p":{"type":"object","required":"x"}})", "properties.p.required: must be a list of property names"},
      {R"({"p":{"type":"number","multipleOf":0}})", "properties.p.multipleOf: must be greater than 0"},
      {R"({"p":{"not":3}})", "properties.p.not: must be a schema"}};
  for (const auto& [properties, says] : bad) {
    for (const char* choice : {"auto", "required", "none"}) {
      INFO(properties << " under " << choice);
      const sv::AnswerConstraint a = cache.for_request(request("[" + good + "," + tool("u", properties) + "]", choice));
      REQUIRE(a.error);
      CHECK(a.error->param == "tools[1].function.parameters");
      CHECK(a.error->code == "invalid_function_parameters");
      CHECK(a.error->message.rfind("tools[1].function.parameters." + says, 0) == 0);
    }
  }
  // Well formed, outside the subset (uniqueItems over free items, format, an annotation, an extension): accepted
  // under auto, the calls free.
  const std::string loose = tool("tag", R"({"t":{"type":"array","uniqueItems":true,"description":"tags",)"
                                        R"("x-order":1},"d":{"type":["string","null"],"format":"date"}})");
  const sv::AnswerConstraint a = cache.for_request(request("[" + loose + "]", "auto"));
  CHECK_FALSE(a.error);
}

// Under allowed_tools mode auto, a refusal whose reason names a tool by its index in the allowed tools (the list the
// grammar was built from) names it where the request lists it.
TEST_CASE("serve constraints: allowed_tools' refusal under auto names the tool by its index in the request",
          "[serve][constraint]") {
  const std::string both = kTools.substr(0, kTools.size() - 1) + "," + kLooseTools.substr(1);  // [find, tag]
  const sv::ChatRequest narrowed = narrowed_to_tag(both);
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const sv::AnswerConstraint a = cache.for_request(narrowed);
  REQUIRE(a.error);
  CHECK(a.error->param == "tool_choice.allowed_tools");
  CHECK(a.error->message.find("(tools[1].function.parameters.properties.t") != std::string::npos);
  CHECK(a.error->message.find("tools[0]") == std::string::npos);
}

TEST_CASE("serve constraints: a response_format beside a forced call is checked, and the answer is the call",
          "[serve][constraint]") {
  sv::ConstraintCache cache(ToolCallFormat::kHermes, bytes_vocabulary(), 512);
  const std::string call = R"(<tool_call>{"name": "find", "arguments": {"q": "2024-05-01"}}</tool_call>)";
  for (const char* choice : {"required", "function"}) {
    sv::ChatRequest r = request(kTools, choice);
    if (std::string(choice) == "function") r.tool_choice.function = "find";
    r.response_format.type = "json_schema";
    // A schema refused on its own is refused here too, naming the response format (it was never compiled).
    r.response_format.schema_json = R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})";
    const sv::AnswerConstraint bad = cache.for_request(r);
    REQUIRE(bad.error);
    CHECK(bad.error->param == "response_format.json_schema.schema");
    CHECK(bad.constraint == nullptr);
    // A good one is accepted (as OpenAI accepts it); the answer is the call, not the JSON.
    r.response_format.schema_json = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
    const sv::AnswerConstraint good = cache.for_request(r);
    REQUIRE(good.constraint != nullptr);
    CHECK_FALSE(good.error);
    CHECK(good.constraint->matches(call));
    CHECK_FALSE(good.constraint->matches(R"({"a": 1})"));
  }
}

}  // namespace ORBIT_TEST_FILE
