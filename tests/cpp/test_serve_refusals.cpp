// `orbit serve`'s request parser below HTTP (cli/serve/wire/serve_api.h): a response_format or a tool's key out of
// place, a json_schema format's name and description, parallel_tool_calls without tools, an assistant's refusal
// parts, whole numbers past 64 bits, chat and the Responses API refusing an unsupported parameter alike, and
// lone surrogate escapes read as U+FFFD rather than refused. Each
// refusal names the field. (The parser's other refusals: test_serve.cpp.)
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_api.h"
#include "serve/stored/cursor_page.h"
#include "serve/wire/lone_surrogates.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/serve_wire.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

// A body refused with status 400, the field it names (`param`, which also starts the message) and OpenAI's code.
struct Case {
  std::string body;
  const char* param;
  const char* code;
};

void check(const Case& c, const sv::ApiError& e) {
  INFO(c.body);
  CHECK(e.status == 400);
  CHECK(e.param == c.param);
  CHECK(e.code == c.code);
  CHECK(e.message.rfind(std::string(c.param) + ": ", 0) == 0);
}

}  // namespace

TEST_CASE("serve: a response_format key out of place is refused, never left unenforced", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":)";
  const auto refused = [&](const std::string& format) {
    return sv::parse_chat_request(head + format + "}").error.param;
  };
  CHECK(refused(R"({"type":"json_object","schema":{"type":"object"}})") == "response_format.schema");
  CHECK(refused(R"({"type":"json_object","json_schema":{"name":"a","schema":{}}})") == "response_format.json_schema");
  CHECK(refused(R"({"type":"json_schema","json_schema":{"name":"a","schema":{},"stirct":true}})") ==
        "response_format.json_schema.stirct");
  const sv::Parsed<sv::ChatRequest> full = sv::parse_chat_request(
      head + R"({"type":"json_schema","json_schema":{"name":"a","description":null,"schema":{},"strict":true}}})");
  REQUIRE(full.ok());
  CHECK(full.value->response_format.name == "a");
  CHECK(full.value->response_format.strict);
  CHECK(sv::parse_chat_request(head + R"({"type":"json_object"}})").ok());
}

TEST_CASE("serve: a json_schema response_format needs its name; its description is a string", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":)";
  const auto refused = [&](const std::string& format) { return sv::parse_chat_request(head + format + "}").error; };
  // Without a name OpenAI answers 400 naming it; this server took the format as if it had one.
  const sv::ApiError missing = refused(R"({"type":"json_schema","json_schema":{"schema":{}}})");
  CHECK(missing.status == 400);
  CHECK(missing.param == "response_format.json_schema.name");
  CHECK(missing.message == "response_format.json_schema.name: missing");
  CHECK(missing.type == "invalid_request_error");
  // OpenAI's rule for the name: 1 to 64 letters, digits, _ and -.
  for (const char* bad : {R"("")", R"("a b")", R"("x</tool_call>")", R"(7)", R"(null)"}) {
    INFO(bad);
    CHECK(refused(R"({"type":"json_schema","json_schema":{"name":)" + std::string(bad) + R"(,"schema":{}}})").param ==
          "response_format.json_schema.name");
  }
  CHECK(
      refused(R"({"type":"json_schema","json_schema":{"name":")" + std::string(65, 'n') + R"(","schema":{}}})").param ==
      "response_format.json_schema.name");
  CHECK(sv::parse_chat_request(head + R"({"type":"json_schema","json_schema":{"name":")" + std::string(64, 'n') +
                               R"(","schema":{}}}})")
            .ok());
  // A description is taken as LangChain's structured output sends it (a schema's own); the schema is not shown
  // to the model either, so it changes nothing. Not a string: refused by name.
  CHECK(sv::parse_chat_request(head + R"({"type":"json_schema","json_schema":{"name":"a","description":"d",)"
                                      R"("schema":{}}}})")
            .ok());
  CHECK(refused(R"({"type":"json_schema","json_schema":{"name":"a","description":7,"schema":{}}})").param ==
        "response_format.json_schema.description");
}

TEST_CASE("serve: a tool's or tool_choice's key out of place is refused by name", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":)";
  const auto refused = [&](const std::string& rest) { return sv::parse_chat_request(head + rest + "}").error.param; };
  CHECK(refused(R"([{"type":"function","function":{"name":"f","params":{"type":"object"}}}])") ==
        "tools[0].function.params");
  CHECK(refused(R"([{"type":"function","function":{"name":"f"},"parameters":{}}])") == "tools[0].parameters");
  CHECK(refused(R"([{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function",)"
                R"("function":{"name":"f","arguments":"{}"}})") == "tool_choice.function.arguments");
  CHECK(refused(R"([{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","name":"f",)"
                R"("function":{"name":"f"}})") == "tool_choice.name");
  CHECK(sv::parse_chat_request(head + R"([{"type":"function","function":{"name":"f","description":"d",)"
                                      R"("parameters":{"type":"object"},"strict":true}}]})")
            .ok());
  const sv::Parsed<sv::ResponsesRequest> deferred = sv::parse_responses_request(
      R"({"model":"m","input":"hi","tools":[{"type":"function","name":"f","defer_loading":true}]})");
  CHECK(deferred.error.param == "tools[0].defer_loading");
  CHECK(sv::parse_responses_request(
            R"({"model":"m","input":"hi","tools":[{"type":"function","name":"f","description":"d",)"
            R"("parameters":{"type":"object"},"strict":false}]})")
            .ok());
}

TEST_CASE("serve: parallel_tool_calls without tools is refused by chat, repeated by the Responses API", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
  const auto chat = [&](const std::string& rest) { return sv::parse_chat_request(head + rest + "}"); };
  // As OpenAI's chat completions: the setting is only allowed beside tools (it would change nothing without them).
  for (const char* rest :
       {R"(,"parallel_tool_calls":false)", R"(,"parallel_tool_calls":true)",
        R"(,"tools":[],"parallel_tool_calls":false)", R"(,"tools":null,"parallel_tool_calls":true)"}) {
    const auto p = chat(rest);
    CHECK(p.error.status == 400);
    CHECK(p.error.param == "parallel_tool_calls");
    CHECK(p.error.message.find("tools") != std::string::npos);
  }
  CHECK(chat(R"(,"parallel_tool_calls":null)").ok());
  const auto with_tools = chat(R"(,"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":false)");
  REQUIRE(with_tools.ok());
  CHECK_FALSE(with_tools.value->parallel_tool_calls);
  // A response has the setting with or without tools: it is checked and repeated, as OpenAI repeats it.
  const auto resp = sv::parse_responses_request(R"({"model":"m","input":"hi","parallel_tool_calls":false})");
  REQUIRE(resp.ok());
  CHECK(resp.value->echo["parallel_tool_calls"] == false);
  CHECK(sv::parse_responses_request(R"({"model":"m","input":"hi"})").value->echo["parallel_tool_calls"] == true);
  CHECK(sv::parse_responses_request(R"({"model":"m","input":"hi","parallel_tool_calls":"no"})").error.param ==
        "parallel_tool_calls");
}

TEST_CASE("serve: an assistant's refusal parts are read as its text; another role's are refused", "[serve]") {
  const sv::Parsed<sv::ChatRequest> said = sv::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[)"
      R"({"type":"text","text":"No: "},{"type":"refusal","refusal":"I can't."}]},{"role":"user","content":"ok"}]})");
  REQUIRE(said.ok());
  CHECK(said.value->messages[1].content == "No: I can't.");
  CHECK(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":[{"type":"refusal",)"
                               R"("refusal":"x"}]}]})")
            .error.param == "messages[0].content[0].type");
  CHECK(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal"}]}]})")
            .error.param == "messages[0].content[0].refusal");
}

TEST_CASE("serve: a whole number past 64 bits is named as too large", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  const sv::Parsed<sv::ChatRequest> seed = sv::parse_chat_request(head + R"("seed":18446744073709551616})");
  CHECK(seed.error.param == "seed");
  CHECK(seed.error.message.find("too large") != std::string::npos);
  CHECK(sv::parse_chat_request(head + R"("seed":1.5})").error.message.find("expected an integer, got a number") !=
        std::string::npos);
}

TEST_CASE("serve: chat and the Responses API refuse an unsupported parameter with the same error", "[serve]") {
  // One thrower (request_invalid.h) for both parsers: the same field gets the same status, code and message.
  const sv::ApiError chat =
      sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"service_tier":"flex"})")
          .error;
  const sv::ApiError responses =
      sv::parse_responses_request(R"({"model":"m","input":"hi","service_tier":"flex"})").error;
  CHECK(chat.status == 400);
  CHECK(chat.code == "unsupported_parameter");
  CHECK(sv::error_body(chat) == sv::error_body(responses));
}

// OpenAI's error codes for the refusals it shares with this server: a required field absent
// (missing_required_parameter), a field of the wrong JSON type (invalid_type), a value outside the field's values
// (invalid_value), a value OpenAI serves and this server does not (unsupported_value). Clients branch on the code;
// every one had null before but the unknown and unsupported parameters'. The message still names the field.
TEST_CASE("serve: refusals carry OpenAI's error code, chat and the Responses API alike", "[serve]") {
  const std::vector<Case> chat = {
      {R"({"model":"m"})", "messages", "missing_required_parameter"},
      {R"({"messages":[{"role":"user","content":"hi"}]})", "model", "missing_required_parameter"},
      {R"({"model":"m","messages":[{"content":"hi"}]})", "messages[0].role", "missing_required_parameter"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]})",
       "tools[0].function", "missing_required_parameter"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":7}]})",
       "tools[0].function", "invalid_type"},
      {R"({"model":"m","messages":"hi"})", "messages", "invalid_type"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":"8"})", "max_tokens", "invalid_type"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":"hot"})", "temperature",
       "invalid_type"},
      {R"({"model":"m","messages":[{"role":"chef","content":"hi"}]})", "messages[0].role", "invalid_value"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"yaml"}})",
       "response_format.type", "invalid_value"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search"}]})", "tools[0].type",
       "unsupported_value"},
  };
  const std::vector<Case> responses = {
      {R"({"model":"m"})", "input", "missing_required_parameter"},
      {R"({"input":"hi"})", "model", "missing_required_parameter"},
      {R"({"model":"m","input":[{"role":"user"}]})", "input[0].content", "missing_required_parameter"},
      {R"({"model":"m","input":7})", "input", "invalid_type"},
      {R"({"model":"m","input":"hi","max_output_tokens":"8"})", "max_output_tokens", "invalid_type"},
      {R"({"model":"m","input":[{"role":"chef","content":"hi"}]})", "input[0].role", "invalid_value"},
      {R"({"model":"m","input":"hi","text":{"format":{"type":"yaml"}}})", "text.format.type", "invalid_value"},
      {R"({"model":"m","input":"hi","tools":[{"type":"web_search"}]})", "tools[0].type", "unsupported_value"},
  };
  for (const Case& c : chat) check(c, sv::parse_chat_request(c.body).error);
  for (const Case& c : responses) check(c, sv::parse_responses_request(c.body).error);
}

// OpenAI's codes for a value past a bound or empty: a number under or over the field's range
// (integer_below_min_value, integer_above_max_value, decimal_below_min_value, decimal_above_max_value), an empty
// string or array where one item or byte is needed (empty_string, empty_array), and one too long
// (string_above_max_length, array_above_max_length). A name outside the pattern is invalid_value, as OpenAI's; a
// batch of prompts, which OpenAI serves, unsupported_value. Each had code null before, the param named the field.
TEST_CASE("serve: range and empty refusals carry OpenAI's error codes, chat and the Responses API alike", "[serve]") {
  const std::string hi = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  const std::string long_name(65, 'a');
  const std::string tool = R"("tools":[{"type":"function","function":{"name":)";
  const std::vector<Case> chat = {
      {R"({"model":"m","messages":[]})", "messages", "empty_array"},
      {hi + R"("max_tokens":0})", "max_tokens", "integer_below_min_value"},
      {hi + R"("max_completion_tokens":-3})", "max_completion_tokens", "integer_below_min_value"},
      {hi + R"("temperature":3})", "temperature", "decimal_above_max_value"},
      {hi + R"("temperature":-0.5})", "temperature", "decimal_below_min_value"},
      {hi + R"("top_p":-0.1})", "top_p", "decimal_below_min_value"},
      {hi + R"("frequency_penalty":2.5})", "frequency_penalty", "decimal_above_max_value"},
      {hi + R"("n":0})", "n", "integer_below_min_value"},
      {hi + R"("n":65})", "n", "integer_above_max_value"},
      {hi + R"("logprobs":true,"top_logprobs":21})", "top_logprobs", "integer_above_max_value"},
      {hi + R"("logprobs":true,"top_logprobs":-1})", "top_logprobs", "integer_below_min_value"},
      {hi + R"("seed":18446744073709551616})", "seed", "integer_above_max_value"},
      {hi + R"("seed":-18446744073709551616})", "seed", "integer_below_min_value"},
      {hi + R"("logit_bias":{"5":101}})", "logit_bias", "decimal_above_max_value"},
      {hi + R"("logit_bias":{"5":-100.5}})", "logit_bias", "decimal_below_min_value"},
      {hi + R"("logit_bias":{"5":"up"}})", "logit_bias", "invalid_type"},
      {hi + R"("stop":""})", "stop", "empty_string"},
      {hi + R"("stop":["a",""]})", "stop[1]", "empty_string"},
      {hi + R"("stop":["a","b","c","d","e"]})", "stop", "array_above_max_length"},
      {hi + R"("user":")" + std::string(4097, 'u') + R"("})", "user", "string_above_max_length"},
      {hi + R"("store":true,"metadata":{"k":")" + std::string(513, 'v') + R"("}})", "metadata.k",
       "string_above_max_length"},
      {hi + tool + R"(""}}]})", "tools[0].function.name", "empty_string"},
      {hi + tool + "\"" + long_name + R"("}}]})", "tools[0].function.name", "string_above_max_length"},
      {hi + tool + R"("a b"}}]})", "tools[0].function.name", "invalid_value"},
      {hi + R"("response_format":{"type":"json_schema","json_schema":{"name":"","schema":{}}}})",
       "response_format.json_schema.name", "empty_string"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi","name":""}]})", "messages[0].name", "empty_string"},
      {R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"","type":"function",)"
       R"("function":{"name":"f","arguments":"{}"}}]}]})",
       "messages[0].tool_calls[0].id", "empty_string"},
      {R"({"model":"m","messages":[{"role":"tool","content":"r","tool_call_id":""}]})", "messages[0].tool_call_id",
       "empty_string"},
  };
  const std::vector<Case> completions = {
      {R"({"model":"m","prompt":[]})", "prompt", "empty_array"},
      {R"({"model":"m","prompt":["a","b"]})", "prompt", "unsupported_value"},
      {R"({"model":"m","prompt":"a","n":2})", "n", "unsupported_value"},
  };
  const std::vector<Case> responses = {
      {R"({"model":"m","input":[]})", "input", "empty_array"},
      {R"({"model":"m","input":"hi","max_output_tokens":0})", "max_output_tokens", "integer_below_min_value"},
      {R"({"model":"m","input":"hi","temperature":2.5})", "temperature", "decimal_above_max_value"},
      {R"({"model":"m","input":"hi","top_logprobs":21})", "top_logprobs", "integer_above_max_value"},
      {R"({"model":"m","input":"hi","previous_response_id":""})", "previous_response_id", "empty_string"},
      {R"({"model":"m","input":[{"type":"function_call","call_id":"","name":"f","arguments":"{}"}]})",
       "input[0].call_id", "empty_string"},
      {R"({"model":"m","input":[{"type":"function_call","call_id":"c","name":")" + long_name +
           R"(","arguments":"{}"}]})",
       "input[0].name", "string_above_max_length"},
      {R"({"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"","schema":{}}}})",
       "text.format.name", "empty_string"},
      {R"({"model":"m","input":"hi","truncation":"sometimes"})", "truncation", "invalid_value"},
      {R"({"model":"m","input":"hi","metadata":{"k":")" + std::string(513, 'v') + R"("}})", "metadata.k",
       "string_above_max_length"},
  };
  for (const Case& c : chat) check(c, sv::parse_chat_request(c.body).error);
  for (const Case& c : completions) check(c, sv::parse_completion_request(c.body).error);
  for (const Case& c : responses) check(c, sv::parse_responses_request(c.body).error);
}

// A list endpoint's limit past its range: OpenAI's integer codes (its list endpoints answer a limit of 101 with
// integer_above_max_value); an order outside asc and desc, or a limit that is no integer, invalid_value.
TEST_CASE("serve: a list page's limit out of range carries OpenAI's error code", "[serve]") {
  const auto refused = [](const std::string& name, const std::string& value) {
    return sv::read_page_query({{name, value}}, "asc", "order, limit and after are").error;
  };
  CHECK(refused("limit", "0").code == "integer_below_min_value");
  CHECK(refused("limit", "101").code == "integer_above_max_value");
  CHECK(refused("limit", "ten").code == "invalid_value");
  CHECK(refused("order", "up").code == "invalid_value");
  CHECK(refused("limit", "101").param == "limit");
  CHECK(refused("limit", "101").message == "limit: must be an integer from 1 to 100, got '101'");
  CHECK(sv::read_page_query({{"limit", "100"}}, "asc", "").ok());
}

// The refusals that answered code null: a field refused for how it stands with the rest of the request
// (invalid_value, OpenAI's where no narrower code fits), a part or item type OpenAI serves and this server does
// not (unsupported_value), and a body that is not JSON or not an object (param null). Each had code null before.
TEST_CASE("serve: no refusal of a request's fields answers code null", "[serve]") {
  const std::string hi = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  const std::string tool = R"({"type":"function","function":{"name":"f"}})";
  const std::string tools = R"("tools":[)" + tool + "]";
  const std::vector<Case> chat = {
      {hi + R"("stream_options":{"include_usage":true}})", "stream_options", "invalid_value"},
      {hi + R"("stream":true,"stream_options":{"usage":true}})", "stream_options.usage", "invalid_value"},
      {hi + R"("tools":[)" + tool + "," + tool + "]}", "tools[1].function.name", "invalid_value"},
      {hi + R"("tool_choice":"required"})", "tool_choice", "invalid_value"},
      {hi + R"("parallel_tool_calls":false})", "parallel_tool_calls", "invalid_value"},
      {hi + R"("top_logprobs":2})", "top_logprobs", "invalid_value"},
      {hi + R"("response_format":{"type":"text","json_schema":{"name":"a","schema":{}}}})",
       "response_format.json_schema", "invalid_value"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       "messages[0].content[0].type", "unsupported_value"},
      {R"({"model":"m","messages":[{"role":"assistant","content":"a","function_call":{"name":"f"}}]})",
       "messages[0].function_call", "unsupported_value"},
      {R"({"model":"m","messages":[{"role":"assistant","content":"a","reasoning_content":"x","reasoning":"y"}]})",
       "messages[0].reasoning", "invalid_value"},
  };
  const std::string in = R"({"model":"m","input":"hi",)";
  const std::vector<Case> responses = {
      {in + R"("stream_options":{"include_obfuscation":false}})", "stream_options", "invalid_value"},
      {in + R"("tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]})", "tools[1].name",
       "invalid_value"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})",
       "input[0].content[0].type", "unsupported_value"},
      {R"({"model":"m","input":[{"type":"web_search_call","id":"w"}]})", "input[0].type", "unsupported_value"},
  };
  for (const Case& c : chat) check(c, sv::parse_chat_request(c.body).error);
  for (const Case& c : responses) check(c, sv::parse_responses_request(c.body).error);
  for (const std::string& body : {std::string("{\"model\":"), std::string("[1]")}) {
    INFO(body);
    for (const sv::ApiError& e : {sv::parse_chat_request(body).error, sv::parse_responses_request(body).error}) {
      CHECK(e.status == 400);
      CHECK(e.param.empty());
      CHECK(e.code == (body == "[1]" ? "invalid_type" : "invalid_value"));
    }
  }
}

// prompt_cache_retention and prompt_cache_options, hints this server takes and does not use, are checked as the
// openai package types them: a value OpenAI would refuse is refused by name (any string or object was taken).
TEST_CASE("serve: the prompt-cache hints are checked as OpenAI types them", "[serve]") {
  const std::string hi = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  const std::string in = R"({"model":"m","input":"hi",)";
  const std::vector<std::pair<std::string, Case>> refused = {
      {R"("prompt_cache_retention":"forever"})", {"", "prompt_cache_retention", "invalid_value"}},
      {R"("prompt_cache_retention":24})", {"", "prompt_cache_retention", "invalid_type"}},
      {R"("prompt_cache_options":"30m"})", {"", "prompt_cache_options", "invalid_type"}},
      {R"("prompt_cache_options":{"ttl":"1h"}})", {"", "prompt_cache_options.ttl", "invalid_value"}},
      {R"("prompt_cache_options":{"mode":"auto"}})", {"", "prompt_cache_options.mode", "invalid_value"}},
      {R"("prompt_cache_options":{"mode":1}})", {"", "prompt_cache_options.mode", "invalid_type"}},
      {R"("prompt_cache_options":{"tll":"30m"}})", {"", "prompt_cache_options.tll", "unknown_parameter"}},
  };
  for (const auto& [tail, expected] : refused) {
    Case c = expected;
    c.body = hi + tail;
    check(c, sv::parse_chat_request(c.body).error);
    c.body = in + tail;
    check(c, sv::parse_responses_request(c.body).error);
  }
  for (const std::string tail : {R"("prompt_cache_retention":"24h"})", R"("prompt_cache_retention":"in_memory"})",
                                 R"("prompt_cache_retention":"in-memory"})", R"("prompt_cache_retention":null})",
                                 R"("prompt_cache_options":{"mode":"explicit","ttl":"30m"}})",
                                 R"("prompt_cache_options":{"mode":"implicit"}})", R"("prompt_cache_options":{}})"}) {
    INFO(tail);
    CHECK(sv::parse_chat_request(hi + tail).ok());
    CHECK(sv::parse_responses_request(in + tail).ok());
  }
}

// A body that is not JSON says where it failed (the value being read where the text stops being JSON): a number no
// float64 holds, a bad escape, a missing comma. It said "the body" alone whatever the field. param stays null, as
// OpenAI's for a body it cannot parse.
TEST_CASE("serve: a body that stops being JSON inside a field says where", "[serve]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":"m","temperature":1e309,"messages":[{"role":"user","content":"hi"}]})",
       "the body: not valid JSON at temperature: a number is out of range"},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"},{"role":"user","content":"a\q"}]})",
       "the body: not valid JSON at messages[1].content: "},
      {R"({"model":"m","messages":[{"role":"user","content":"hi"} {"role":"user"}]})",
       "the body: not valid JSON at messages[1]: "},
      {R"({"model":"m","n":1e999})", "the body: not valid JSON at n: a number is out of range"},
      {R"({"model":)", "the body: not valid JSON at model: "},  // cut short: where it was cut
      {"not json", "the body: not valid JSON: "},               // no field: as before
      {R"({"model":"m",})", "the body: not valid JSON: "},
      {"{} x", "the body: not valid JSON: "},
  };
  for (const auto& [body, says] : cases) {
    INFO(body);
    const sv::ApiError e = sv::parse_chat_request(body).error;
    CHECK(e.status == 400);
    CHECK(e.param.empty());
    CHECK(e.code == "invalid_value");
    INFO(e.message);
    CHECK(e.message.rfind(says, 0) == 0);
  }
  // Nesting past the bound is refused as such before any parse, and never read through for a path.
  const std::string deep = R"({"model":"m","messages":)" + std::string(1 << 20, '[') + "x";
  CHECK(sv::parse_chat_request(deep).error.message.rfind("the body: JSON nests deeper than 128 levels", 0) == 0);
  const sv::ApiError r = sv::parse_responses_request(R"({"model":"m","input":"x","max_output_tokens":1e400})").error;
  INFO(r.message);
  CHECK(r.message.rfind("the body: not valid JSON at max_output_tokens: a number is out of range", 0) == 0);
}

TEST_CASE("serve: a lone surrogate escape in a string is read as U+FFFD, a pair as its character", "[serve]") {
  // JSON.stringify writes "\ud83d" for a string cut inside an emoji; the whole body was refused as not JSON.
  const sv::Parsed<sv::ChatRequest> chat = sv::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"a\ud800b \ud83d\ude00 \udc00\\ud800 \"\ud83d"}]})");
  REQUIRE(chat.ok());
  CHECK(chat.value->messages[0].content ==
        "a\xEF\xBF\xBD"
        "b \xF0\x9F\x98\x80 \xEF\xBF\xBD\\ud800 \"\xEF\xBF\xBD");
  CHECK(sv::parse_completion_request(R"({"model":"m","prompt":"x\uDBFF"})").ok());
  CHECK(sv::parse_responses_request(R"({"model":"m","input":"x\uDFFF"})").ok());
  CHECK(sv::replace_lone_surrogates(R"({"a":"\ud83d\ude00","b":"\\ud800"})") == std::nullopt);  // nothing lone
  CHECK(sv::replace_lone_surrogates(R"(["\ud800\ud800\udc00"])") ==
        std::optional<std::string>(R"(["\uFFFD\ud800\udc00"])"));
  CHECK_FALSE(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"\u12"}]})").ok());
}

}  // namespace ORBIT_TEST_FILE
