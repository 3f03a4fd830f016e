// Log probabilities on the chat wire (cli/serve/wire/serve_wire.h): OpenAI's shape whole and in a stream's chunks,
// null where not asked for and an object where asked for with no entry, and chat_completion_text, which writes a
// body's entries one at a time, the same text as the JSON tree's dump.
#include <limits>
#include <string>

#include "orbit_catch.h"
#include "serve/wire/serve_wire.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

TEST_CASE("serve: logprobs in OpenAI's chat shape, whole and with the stream's chunks", "[serve]") {
  const sv::ResponseIds ids{"chatcmpl-1", 1, "m"};
  orbit::StepLogprobs step;
  step.chosen = {7, -0.25, " a"};
  step.top = {{7, -0.25, " a"}, {9, -1.5, "\xe2\x80"}};  // a byte token, part of a character
  sv::RunResult r;
  r.text = " a";
  r.finish_reason = "stop";
  r.tokens = {7};
  r.logprobs = {step};
  const nlohmann::json whole = sv::chat_completion(ids, r)["choices"][0]["logprobs"];
  CHECK(whole["refusal"].is_null());
  REQUIRE(whole["content"].size() == 1);
  const nlohmann::json& e = whole["content"][0];
  CHECK(e["token"] == " a");
  CHECK(e["logprob"] == -0.25);
  CHECK(e["bytes"] == nlohmann::json::array({32, 97}));
  REQUIRE(e["top_logprobs"].size() == 2);
  CHECK(e["top_logprobs"][1]["bytes"] == nlohmann::json::array({0xe2, 0x80}));
  CHECK(sv::dump(whole).find("\xef\xbf\xbd") != std::string::npos);  // its text written as U+FFFD
  r.logprobs.clear();
  CHECK(sv::chat_completion(ids, r)["choices"][0]["logprobs"].is_null());  // not asked for
  r.logprobs_asked = true;  // asked for, none to list (an empty answer): an object all the same
  CHECK(sv::chat_completion(ids, r)["choices"][0]["logprobs"] ==
        nlohmann::json({{"content", nlohmann::json::array()}, {"refusal", nullptr}}));

  // Streamed: what decode handed on (RunSink::on_logprobs) goes out with the choice's next chunk, once.
  sv::StreamExtras extras;
  extras.add_logprobs(0, step);
  extras.add_logprobs(0, step);
  CHECK(sv::chat_chunk(ids, " a a", false, "", 0, extras.take(0))["choices"][0]["logprobs"]["content"].size() == 2);
  CHECK(sv::chat_chunk(ids, "", false, "stop", 0, extras.take(0))["choices"][0]["logprobs"].is_null());
  extras.add_logprobs(0, step);
  const nlohmann::json call = sv::tool_call_chunk(ids, sv::ToolCallDelta{}, 0, extras.take(0));
  CHECK(call["choices"][0]["logprobs"]["content"].size() == 1);
  // Each stream gathers its own, each choice its own: another stream's chunks on this thread carry none.
  sv::StreamExtras other;
  extras.add_logprobs(0, step);
  extras.add_reasoning(1, "Plan");
  CHECK(sv::chat_chunk(ids, "x", false, "", 0, other.take(0))["choices"][0]["logprobs"].is_null());
  CHECK(sv::chat_chunk(ids, "x", false, "", 0, extras.take(1))["choices"][0]["logprobs"].is_null());
  CHECK(sv::chat_chunk(ids, "x", false, "", 0, extras.take(0))["choices"][0]["logprobs"]["content"].size() == 1);
}

TEST_CASE("serve: a chat body written entry by entry is the JSON tree's text", "[serve]") {
  const sv::ResponseIds ids{"chatcmpl-2", 2, "m"};
  orbit::StepLogprobs step;
  step.chosen = {7, -0.25, " a"};
  step.top = {{7, -0.25, " a"}, {9, -std::numeric_limits<double>::infinity(), "\xe2\x80"}};  // masked; a byte token
  sv::RunResult r;
  r.text = " a a";
  r.finish_reason = "stop";
  r.tokens = {7, 7};
  r.logprobs = {step, step};
  r.logprobs_asked = true;
  sv::RunResult empty;  // asked for, nothing to list
  empty.finish_reason = "stop";
  empty.logprobs_asked = true;
  sv::RunResult quoting = r;  // text that looks like the marks and escapes
  quoting.text = "\"orbit-logprobs-0\" \\ \n";
  r.extra_choices = {empty, quoting};
  r.usage.prompt_tokens = 3;
  const std::string text = sv::chat_completion_text(ids, r);
  CHECK(text == sv::dump(sv::chat_completion(ids, r)));
  CHECK(text.find("orbit-logprobs-0\\\"") != std::string::npos);  // the answer's own text, kept
  CHECK(text.find("-9999.0") != std::string::npos);
  sv::RunResult plain = r;  // none asked for: no entries, null
  plain.logprobs.clear();
  plain.logprobs_asked = false;
  plain.extra_choices.clear();
  CHECK(sv::chat_completion_text(ids, plain) == sv::dump(sv::chat_completion(ids, plain)));
  CHECK(sv::chat_completion(ids, plain)["choices"][0]["logprobs"].is_null());
}

}  // namespace ORBIT_TEST_FILE
