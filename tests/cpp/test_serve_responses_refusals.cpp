// The Responses API's request parser (cli/serve/responses/responses_api.h): what it cannot honour is refused,
// naming the field, never ignored. (Its other cases: test_serve_responses.cpp.)
#include <string>

#include "orbit_catch.h"
#include "serve/responses/responses_api.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

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

TEST_CASE("responses: the parser refuses what it cannot honour, naming the field", "[serve][responses]") {
  CHECK(refused(body_with("")).empty());
  CHECK(sv::parse_responses_request("{not json").error.status == 400);
  CHECK(refused(R"({"input":"hi"})") == "model");
  CHECK(refused(R"({"model":"m"})") == "input");
  CHECK(refused(R"({"model":"m","input":[]})") == "input");
  CHECK(refused(R"({"model":"m","input":7})") == "input");
  CHECK(refused(R"({"model":"m","input":[{"role":"robot","content":"x"}]})") == "input[0].role");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image"}]}]})") ==
        "input[0].content[0].type");
  CHECK(refused(R"({"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]})") ==
        "input[0].call_id");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c",)"
                R"("name":"f","arguments":{}}]})") == "input[1].arguments");
  // Arguments are text, also where they are not a JSON object: an incomplete call (max_output_tokens cut
  // it) is sent back as it was answered.
  const sv::Parsed<sv::ResponsesRequest> cut_call = sv::parse_responses_request(
      R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c",)"
      R"("name":"f","arguments":"{\"q\":\"ca","status":"incomplete"},)"
      R"({"type":"function_call_output","call_id":"c","output":"bad arguments"}]})");
  REQUIRE(cut_call.ok());
  CHECK(cut_call.value->chat.messages[1].tool_calls[0].arguments == R"({"q":"ca)");
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c",)"
                R"("name":"f","arguments":"{\"a\":1,\"a\":2}"}]})") == "input[1].arguments");  // a key twice
  // A call's name is a tool's (1 to 64 of [A-Za-z0-9_-]), named at the item rather than the chat message.
  CHECK(refused(R"({"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c",)"
                R"("name":"a b","arguments":"{}"}]})") == "input[1].name");
  CHECK(refused(R"({"model":"m","input":[{"type":"function_call_output","call_id":"c"}]})") == "input[0].output");
  // An empty reasoning item is no reasoning (test_serve_responses): alone, the input holds no message.
  CHECK(refused(R"({"model":"m","input":[{"type":"reasoning","summary":[]}]})") == "input");
  CHECK(refused(R"({"model":"m","input":[{"type":"reasoning","summary":[],"encrypted_content":"gA"}]})") ==
        "input[0].encrypted_content");
  CHECK(refused(body_with(R"("tools":[{"type":"web_search"}])")) == "tools[0].type");
  CHECK(refused(body_with(R"("tools":[{"type":"function"}])")) == "tools[0].name");
  CHECK(
      refused(body_with(R"("tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"})")) ==
      "tool_choice.name");
  CHECK(refused(body_with(R"("tool_choice":"required")")) == "tool_choice");
  CHECK(refused(body_with(R"("max_output_tokens":0)")) == "max_output_tokens");
  // Chat's fields are refused naming what this API takes instead, not dropped.
  for (const char* chat_field : {"max_tokens", "max_completion_tokens", "messages", "response_format", "logprobs",
                                 "stop", "n", "functions", "function_call"}) {
    const auto parsed = sv::parse_responses_request(body_with("\"" + std::string(chat_field) + "\":1"));
    INFO(chat_field);
    CHECK(parsed.error.param == chat_field);
    CHECK(parsed.error.code == "unknown_parameter");
  }
  CHECK(sv::parse_responses_request(body_with(R"("max_tokens":5)")).error.message.find("use max_output_tokens") !=
        std::string::npos);
  CHECK(refused(body_with(R"("temperature":3)")) == "temperature");
  CHECK(refused(body_with(R"("store":"yes")")) == "store");
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema"}})")) == "text.format.schema");
  // name is required (OpenAI's 400), held to OpenAI's rule, and named at text.format, not at chat's field.
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","schema":{}}})")) == "text.format.name");
  CHECK(
      sv::parse_responses_request(body_with(R"("text":{"format":{"type":"json_schema","schema":{}}})")).error.message ==
      "text.format.name: missing");
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","name":"a b","schema":{}}})")) ==
        "text.format.name");
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","name":"","schema":{}}})")) == "text.format.name");
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","name":"a","schema":{}}})")).empty());
  // A description (a string) is taken, as chat's: the schema is not shown to the model either. Else refused.
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","name":"a","description":"d","schema":{}}})"))
            .empty());
  CHECK(refused(body_with(R"("text":{"format":{"type":"json_schema","name":"a","description":[],"schema":{}}})")) ==
        "text.format.description");
  // json_schema's keys beside another type were dropped: the schema went unenforced.
  for (const char* type : {"text", "json_object"}) {
    INFO(type);
    const auto parsed = sv::parse_responses_request(
        body_with(R"("text":{"format":{"type":")" + std::string(type) + R"(","schema":{"type":"object"}}})"));
    CHECK(parsed.error.param == "text.format.schema");
    CHECK(parsed.error.code == "unknown_parameter");
    CHECK(refused(body_with(R"("text":{"format":{"type":")" + std::string(type) + R"(","name":"a"}})")) ==
          "text.format.name");
  }
  CHECK(refused(body_with(R"("text":{"format":{"type":"xml"}})")) == "text.format.type");
  CHECK(refused(body_with(R"("metadata":{"k":1})")) == "metadata.k");
  // Unsupported values are refused, never ignored; neutral ones pass.
  CHECK(refused(body_with(R"("reasoning":{"effort":"high"})")) == "reasoning.effort");
  CHECK(refused(body_with(R"("truncation":"auto")")).empty());
  CHECK(refused(body_with(R"("truncation":"middle")")) == "truncation");
  CHECK(refused(body_with(R"("truncation":true)")) == "truncation");
  CHECK(refused(body_with(R"("include":["reasoning.encrypted_content"])")) == "include[0]");
  CHECK(refused(body_with(R"("include":["message.output_text.logprobs","file_search_call.results"])")) == "include[1]");
  CHECK(refused(body_with(R"("top_logprobs":21)")) == "top_logprobs");
  CHECK(refused(body_with(R"("logit_bias":{"x":1})")) == "logit_bias");
  // Log probabilities are served: include asks for them, top_logprobs above 0 too (and sets their count).
  const sv::Parsed<sv::ResponsesRequest> lp =
      sv::parse_responses_request(body_with(R"("include":["message.output_text.logprobs"],"top_logprobs":3)"));
  REQUIRE(lp.ok());
  CHECK(lp.value->chat.sampling.logprobs);
  CHECK(lp.value->chat.sampling.top_logprobs == 3);
  CHECK(lp.value->echo["top_logprobs"] == 3);
  CHECK(sv::parse_responses_request(body_with(R"("top_logprobs":2)")).value->chat.sampling.logprobs);
  CHECK(!sv::parse_responses_request(body_with(R"("top_logprobs":0)")).value->chat.sampling.logprobs);
  CHECK(sv::parse_responses_request(body_with(R"("frequency_penalty":1.5)")).value->chat.sampling.frequency_penalty ==
        1.5);
  // Samplers chat refuses are refused here too (the chat body would not carry them); a seed is honoured.
  CHECK(refused(body_with(R"("top_k":5)")) == "top_k");
  CHECK(refused(body_with(R"("repetition_penalty":1.1)")) == "repetition_penalty");
  CHECK(refused(body_with(R"("min_p":0.1)")) == "min_p");
  CHECK(sv::parse_responses_request(body_with(R"("seed":7)")).value->chat.sampling.seed == 7u);
  CHECK(refused(body_with(R"("seed":"x")")) == "seed");
  CHECK(refused(body_with(R"("background":true)")) == "background");
  CHECK(refused(body_with(R"("conversation":"conv_1")")) == "conversation");
  CHECK(refused(body_with(R"("service_tier":"flex")")) == "service_tier");
  CHECK(refused(body_with(R"("text":{"verbosity":"high"})")) == "text.verbosity");
  CHECK(refused(body_with(R"("reasoning":{"effort":"none"},"truncation":"disabled","include":[],)"
                          R"("background":false,"service_tier":"auto","text":{"format":{"type":"text"}},)"
                          R"("prompt_cache_key":"k","stream":true,"stream_options":{"include_obfuscation":false})"))
            .empty());
  // Fields this API does not know are refused by name (a misspelling with the field it most likely meant),
  // at the top level and inside text, text.format and stream_options; stream_options needs stream true.
  const sv::Parsed<sv::ResponsesRequest> typo = sv::parse_responses_request(body_with(R"("temprature":0.5)"));
  CHECK(typo.error.param == "temprature");
  CHECK(typo.error.code == "unknown_parameter");
  CHECK(typo.error.message.find("did you mean 'temperature'") != std::string::npos);
  CHECK(refused(body_with(R"("foo":null)")) == "foo");
  CHECK(refused(body_with(R"("text":{"fromat":{"type":"text"}})")) == "text.fromat");
  CHECK(refused(body_with(R"("text":{"format":{"type":"text","schema_name":"x"}})")) == "text.format.schema_name");
  CHECK(refused(body_with(R"("stream_options":{"include_obfuscation":false})")) == "stream_options");
  CHECK(refused(body_with(R"("reasoning":{"effort":"none","efort":"high"})")) == "reasoning.efort");
  CHECK(refused(body_with(R"("stream":true,"stream_options":{"include_usage":true})")) ==
        "stream_options.include_usage");
  CHECK(refused(body_with(R"("stream":true,"stream_options":{"include_obfuscation":1})")) ==
        "stream_options.include_obfuscation");
  // Each ".delta" event is padded with a random "obfuscation" field unless include_obfuscation is false (on
  // by default, as OpenAI has it): read into chat's sampling.
  const auto obfuscated = [&](const std::string& fields) {
    return sv::parse_responses_request(body_with(fields)).value->chat.sampling.include_obfuscation;
  };
  CHECK(obfuscated(R"("stream":true,"stream_options":{"include_obfuscation":true})"));
  CHECK_FALSE(obfuscated(R"("stream":true,"stream_options":{"include_obfuscation":false})"));
  CHECK(obfuscated(R"("stream":true)"));
  CHECK(refused(body_with(R"("prompt_cache_options":{},"safety_identifier":"u",)"
                          R"("text":{"format":{"type":"json_schema","name":"n","schema":{}}})"))
            .empty());
  const sv::Parsed<sv::ResponsesRequest> big = sv::parse_responses_request(body_with(""), sv::ServeLimits{8});
  CHECK(big.error.status == 413);
  std::string deep = body_with(R"("metadata":)" + std::string(5000, '[') + std::string(5000, ']'));
  CHECK(sv::parse_responses_request(deep).error.status == 400);
}

}  // namespace ORBIT_TEST_FILE
