// A reasoning model's thinking read out of its answer (cli/serve/run/reasoning.h), without a model: known
// answers split at every byte position, and byte by byte, must let out the same reasoning and content as the
// whole answer split at once, with no piece of a tag (nor the whitespace the split drops) in either stream;
// an answer cut before `</think>` is all reasoning; one without a tag is content (or, begun inside the
// reasoning, reasoning); where the generation prompt leaves `<think>` open the answer begins inside it. Chained
// before a tool-call reading as the request path chains them, calls are read after the reasoning only; a chat
// chunk carries the reasoning queued for its choice.
#include <optional>
#include <string>
#include <vector>

#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "serve/run/reasoning.h"
#include "serve/run/reasoning_sink.h"
#include "serve/run/tool_stream.h"
#include "serve/wire/serve_wire.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

struct Streamed {
  std::string reasoning;
  std::string content;
  std::vector<std::string> reasoning_pieces;  // each piece let out, in order
  std::vector<std::string> content_pieces;
  std::optional<std::size_t> end;
};

void take(Streamed& s, const sv::ReasoningPieces& p) {
  if (!p.reasoning.empty()) s.reasoning_pieces.push_back(p.reasoning);
  if (!p.content.empty()) s.content_pieces.push_back(p.content);
  s.reasoning += p.reasoning;
  s.content += p.content;
}

// `text` pushed in the pieces `cuts` (increasing byte offsets) makes, then finished.
Streamed feed(const std::string& text, const std::vector<std::size_t>& cuts, bool in_reasoning) {
  sv::ReasoningSplitter splitter(in_reasoning);
  Streamed s;
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    take(s, splitter.push(text.substr(at, cut - at)));
    at = cut;
  }
  take(s, splitter.push(text.substr(at)));
  take(s, splitter.finish());
  s.end = splitter.reasoning_end();
  return s;
}

// Every split into two pieces, every split into three around each byte, and byte by byte, equal the whole.
void check_every_split(const std::string& text, bool in_reasoning, const std::string& reasoning,
                       const std::string& content) {
  const sv::ReasoningSplit whole = sv::split_reasoning(text, in_reasoning);
  INFO("answer '" << text << "'");
  CHECK(whole.reasoning == reasoning);
  CHECK(whole.content == content);
  for (std::size_t i = 0; i <= text.size(); ++i) {
    for (std::size_t j = i; j <= text.size(); ++j) {
      const Streamed s = feed(text, {i, j}, in_reasoning);
      INFO("cut at " << i << ", " << j);
      REQUIRE(s.reasoning == reasoning);
      REQUIRE(s.content == content);
      REQUIRE(s.end == whole.reasoning_end);
    }
  }
  std::vector<std::size_t> bytes;
  for (std::size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  const Streamed each = feed(text, bytes, in_reasoning);
  CHECK(each.reasoning == reasoning);
  CHECK(each.content == content);
}

}  // namespace

TEST_CASE("reasoning: an answer that opens <think> is split at every byte") {
  check_every_split("<think>\nPlan it.\n</think>\n\nHello there.", false, "Plan it.", "Hello there.");
  check_every_split("  <think>a < b </thin k></think>x", false, "a < b </thin k>", "x");
  // Begun inside (the prompt opened it): the open tag is optional and dropped where written.
  check_every_split("<think>\nPlan.</think>Hi", true, "Plan.", "Hi");
  check_every_split("Plan.\n\n</think>\n\nHi <think>not reasoning</think>", true, "Plan.",
                    "Hi <think>not reasoning</think>");
}

TEST_CASE("reasoning: an answer max_tokens cut before </think> is all reasoning") {
  check_every_split("<think>\nStill thinking </thi", false, "Still thinking </thi", "");
  check_every_split("Still thinking\n\n", true, "Still thinking", "");
  const sv::ReasoningSplit cut = sv::split_reasoning("<think>abc", false);
  CHECK_FALSE(cut.reasoning_end.has_value());  // every token is reasoning
  const sv::ReasoningSplit closed = sv::split_reasoning("<think>abc</think> x", false);
  REQUIRE(closed.reasoning_end.has_value());
  CHECK(*closed.reasoning_end == std::string("<think>abc</think>").size());
}

TEST_CASE("reasoning: without a tag the answer is content, as written") {
  check_every_split("  Hello <think> world", false, "", "  Hello <think> world");
  check_every_split("<thin", false, "", "<thin");
  check_every_split("", false, "", "");
  check_every_split("  ", false, "", "  ");
  const sv::ReasoningSplit none = sv::split_reasoning("Hello", false);
  REQUIRE(none.reasoning_end.has_value());
  CHECK(*none.reasoning_end == 0);
}

TEST_CASE("reasoning: a partial tag is held until it cannot be one") {
  // Each stream's pieces concatenated equal the whole split at every cut (above), so no held piece leaks;
  // here what is let out at each step.
  sv::ReasoningSplitter r(false);
  CHECK(r.push("<thi").reasoning.empty());
  sv::ReasoningPieces p1 = r.push("nk>\nabc\n</th");
  CHECK(p1.reasoning == "abc");
  CHECK(p1.content.empty());
  sv::ReasoningPieces p2 = r.push("ink>\n\n");
  CHECK(p2.reasoning.empty());
  CHECK(p2.content.empty());
  CHECK(r.push("Hi").content == "Hi");

  sv::ReasoningSplitter s(false);
  CHECK(s.push("  <thi").content.empty());
  const sv::ReasoningPieces p = s.push("s is");
  CHECK(p.content == "  <this is");
  CHECK(p.reasoning.empty());
}

TEST_CASE("reasoning: where the generation prompt leaves the answer") {
  using F = sv::ReasoningFormat;
  // DeepSeek-R1's template opens it; Qwen3's enable_thinking false closes it.
  CHECK(sv::starts_in_reasoning(F::kQwen3, "<｜Assistant｜><think>\n"));
  CHECK(sv::starts_in_reasoning(F::kDeepSeekR1, "<｜Assistant｜><think>\n"));
  CHECK_FALSE(sv::starts_in_reasoning(F::kQwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  CHECK_FALSE(sv::starts_in_reasoning(F::kDeepSeekR1, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // No tag: as the name says.
  CHECK_FALSE(sv::starts_in_reasoning(F::kQwen3, "<|im_start|>assistant\n"));
  CHECK(sv::starts_in_reasoning(F::kDeepSeekR1, "<|im_start|>assistant\n"));
  CHECK_FALSE(sv::starts_in_reasoning(F::kNone, "<think>\n"));
}

TEST_CASE("reasoning: the parser's names") {
  CHECK(sv::reasoning_format_named("qwen3") == sv::ReasoningFormat::kQwen3);
  CHECK(sv::reasoning_format_named("deepseek_r1") == sv::ReasoningFormat::kDeepSeekR1);
  CHECK(sv::reasoning_format_named("none") == sv::ReasoningFormat::kNone);
  CHECK_FALSE(sv::reasoning_format_named("think").has_value());
  CHECK_FALSE(sv::reasoning_format_named("").has_value());
}

namespace {

// A run's text through a ReasoningRun whose content goes on to a ToolCallStream (as run/request_path.cpp
// chains them), pushed in pieces of `step` bytes; the reasoning and content let out, and the result finished.
struct Chained {
  std::string reasoning;
  std::string content;
  sv::RunResult r;
  bool past = false;
};

Chained chain(const std::string& text, bool in_reasoning, bool forced, std::size_t step,
              const std::string& finish_reason = "stop") {
  Chained out;
  sv::ToolCallStream calls(orbit::ToolCallFormat::kHermes, forced);
  sv::RunSink sink;
  sink.on_text = [&](const std::string& d) {
    out.content += d;
    return true;
  };
  sink.on_reasoning = [&](int64_t, const std::string& d) {
    out.reasoning += d;
    return true;
  };
  sv::RunSink content = sink;
  content.on_text = [&](const std::string& d) {
    out.content += calls.push(d).content;
    return true;
  };
  // The answer's tokens: one per byte, counted by bytes.
  sv::ReasoningRun run(in_reasoning, 1,
                       [](const std::vector<int64_t>&, std::size_t bytes) { return static_cast<int64_t>(bytes); });
  const sv::RunSink wrapped = run.wrap(sink, content);
  for (std::size_t at = 0; at < text.size(); at += step) REQUIRE(wrapped.on_text(text.substr(at, step)));
  out.r.text = text;
  out.r.tokens.assign(text.size(), 7);
  out.r.finish_reason = finish_reason;
  out.past = run.finish(0, out.r);
  if (out.past) calls.finish(out.r);
  out.content += out.r.unstreamed;
  return out;
}

}  // namespace

TEST_CASE("reasoning: tool calls are read from the text after the reasoning only") {
  const std::string call = R"(<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>)";
  const std::string text = "<think>\nI might write <tool_call> here.\n</think>\n\n" + call;
  for (std::size_t step : {1, 2, 3, 5, 1000}) {
    INFO("step " << step);
    const Chained c = chain(text, false, false, step);
    CHECK(c.reasoning == "I might write <tool_call> here.");
    CHECK(c.r.reasoning == c.reasoning);
    REQUIRE(c.r.tool_calls.size() == 1);
    CHECK(c.r.tool_calls[0].name == "f");
    CHECK(c.r.text.empty());
    CHECK(c.content.empty());
    CHECK(c.r.finish_reason == "tool_calls");
    CHECK(c.r.usage.reasoning_tokens == static_cast<int64_t>(text.find("</think>") + 8));
  }
  // A forced call that max_tokens cut inside the reasoning: no call, all reasoning, every token counted.
  const Chained cut = chain("<think>\nStill", false, true, 2, "length");
  CHECK_FALSE(cut.past);
  CHECK(cut.r.tool_calls.empty());
  CHECK(cut.r.reasoning == "Still");
  CHECK(cut.r.usage.reasoning_tokens == 13);
  // No reasoning: content and calls as without a parser, no reasoning token.
  const Chained none = chain("Hello " + call, false, false, 4);
  CHECK(none.r.reasoning == "");
  CHECK(none.r.text == "Hello");  // the content before a call, as parse_tool_calls gives it
  CHECK(none.r.tool_calls.size() == 1);
  CHECK(none.r.usage.reasoning_tokens == 0);
}

TEST_CASE("reasoning: a streamed chat chunk carries the reasoning gathered for its choice") {
  const sv::ResponseIds ids{"chatcmpl-1", 1, "m"};
  sv::StreamExtras extras;
  extras.add_reasoning(1, "Think");
  extras.add_reasoning(1, "ing");
  const nlohmann::json other = sv::chat_chunk(ids, "", false, "", 0, extras.take(0));
  CHECK_FALSE(other["choices"][0]["delta"].contains("reasoning_content"));
  const nlohmann::json first = sv::chat_chunk(ids, "", true, "", 1, extras.take(1));
  CHECK(first["choices"][0]["delta"]["reasoning_content"] == "Thinking");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  CHECK(first["choices"][0]["delta"]["refusal"].is_null());  // as OpenAI opens a choice
  CHECK_FALSE(first["choices"][0]["delta"].contains("content"));
  const nlohmann::json next = sv::chat_chunk(ids, "Hi", false, "", 1, extras.take(1));
  CHECK_FALSE(next["choices"][0]["delta"].contains("reasoning_content"));  // taken once
  CHECK(next["choices"][0]["delta"]["content"] == "Hi");
  // Non-streamed: reasoning_content beside content, null where none; content null when empty.
  sv::RunResult r;
  r.reasoning = "Plan.";
  const nlohmann::json body = sv::chat_completion(ids, r);
  CHECK(body["choices"][0]["message"]["reasoning_content"] == "Plan.");
  CHECK(body["choices"][0]["message"]["content"].is_null());
  r.reasoning = "";
  r.text = "Hello";
  const nlohmann::json plain = sv::chat_completion(ids, r);
  CHECK(plain["choices"][0]["message"]["reasoning_content"].is_null());
  CHECK(plain["choices"][0]["message"]["content"] == "Hello");
}

}  // namespace ORBIT_TEST_FILE
