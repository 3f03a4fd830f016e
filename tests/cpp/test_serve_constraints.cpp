// The constraint a chat answer is decoded under (cli/serve/answer_constraint.h), per tool_choice and
// response_format, over byte vocabularies: tool_choice "auto" decodes a call the model starts under the
// tools' grammar (from the format's mark on), and stays free where that grammar cannot be had; forced calls
// and JSON answers are constrained from the start or refused naming the field.
#include <string>

#include "orbit_catch.h"
#include "serve/answer_constraint.h"

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
  // A JSON answer with tools under auto: the JSON, from the start.
  sv::ChatRequest json = request(kTools, "auto");
  json.response_format.type = "json_object";
  const sv::AnswerConstraint j = cache.for_request(json);
  REQUIRE(j.constraint != nullptr);
  CHECK(j.trigger.empty());
  CHECK(j.constraint->matches("{}"));
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
