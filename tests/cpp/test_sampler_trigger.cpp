// A constraint that applies from a trigger on (GenerateOptions::constraint_trigger, sdk/src/window/sampler.h),
// on a Sampler over a small vocabulary whose logits are scripted step by step: free text until the trigger,
// the grammar after it, a token that completes the trigger and goes on wrongly never chosen (greedy: the
// next best; sampled: a new draw), end tokens that end the run only once the constraint applies; a trigger
// written inside a leading free block (GenerateOptions::constraint_trigger_block: a model's reasoning) that
// does not count there.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "error_text.h"
#include "orbit/tool_calls.h"
#include "window/sampler.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

// Words first, then every byte (so the grammar can always go on), then EOS.
const std::vector<std::string> kWords{
    "Sure",         ", ", "<tool_",  "call>",     "call>{\"name\": \"f\"", "call>oops", ", \"arguments\": {}}",
    "</tool_call>", "x",  "<think>", "</think>\n"};
constexpr int64_t kThink = 9, kUnthink = 10;
constexpr int64_t kBytes = 11;          // id of byte 0
constexpr int64_t kEos = kBytes + 256;  // writes nothing
constexpr int64_t kVocab = kEos + 1;

std::shared_ptr<const TokenVocabulary> vocabulary() {
  TokenBytes tb;
  for (const std::string& w : kWords) tb.text.emplace_back(w);
  for (int b = 0; b < 256; ++b) tb.text.emplace_back(std::string(1, static_cast<char>(b)));
  tb.text.emplace_back(std::nullopt);
  return TokenVocabulary::from_bytes(tb);
}

const char* kTools = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";

orbit::detail::Sampler sampler(const GenerateOptions& o) {
  orbit::detail::SamplerSetup setup;
  setup.vocab = kVocab;
  setup.vocabulary = vocabulary();
  setup.end_tokens = {kEos};
  return orbit::detail::Sampler(o, std::move(setup));
}

// Logits preferring `ranked` in order (10, 9, ...), everything else at 0.
at::Tensor prefer(const std::vector<int64_t>& ranked) {
  at::Tensor t = at::zeros({kVocab}, at::kFloat);
  float v = 10;
  for (int64_t id : ranked) t[id] = v--;
  return t;
}

GenerateOptions triggered() {
  GenerateOptions o;
  o.constraint = Constraint::tool_calls(kTools, tool_call_options(ToolCallFormat::kHermes));
  o.constraint_trigger = tool_call_trigger(ToolCallFormat::kHermes);
  return o;
}

std::string text_of(const std::vector<int64_t>& tokens) {
  std::string out;
  for (int64_t t : tokens)
    out += t < kBytes ? kWords[static_cast<std::size_t>(t)] : std::string(1, static_cast<char>(t - kBytes));
  return out;
}

}  // namespace

TEST_CASE("trigger: free text, then the grammar from the trigger on; a wrong completion is passed over",
          "[sampler][constraint]") {
  orbit::detail::Sampler s = sampler(triggered());
  std::vector<int64_t> out;
  const auto step = [&](const std::vector<int64_t>& ranked) {
    const orbit::detail::SamplerStep st = s.next(prefer(ranked));
    REQUIRE(st.has_token());
    out.push_back(st.token);
    return st.token;
  };
  // Free: "x" is allowed though no grammar would take it, and EOS is not an end yet.
  CHECK(step({0}) == 0);
  CHECK(step({8}) == 8);
  CHECK_FALSE(s.is_stop_token(kEos));
  CHECK(step({1}) == 1);
  CHECK(step({2}) == 2);
  CHECK_FALSE(s.constraint_active());
  // "call>oops" completes the trigger and goes on where the grammar refuses: the next best is taken.
  CHECK(step({5, 4}) == 4);
  CHECK(s.constraint_active());
  CHECK(s.is_stop_token(kEos));
  // Constrained: "x" and "oops" are masked, the arguments' token and the end mark go through.
  CHECK(step({8, 6}) == 6);
  CHECK(step({8, 7}) == 7);
  CHECK(s.complete());
  CHECK(text_of(out) == R"(Surex, <tool_call>{"name": "f", "arguments": {}}</tool_call>)");
  const ToolCallParse calls = parse_tool_calls(text_of(out), ToolCallFormat::kHermes);
  REQUIRE(calls.calls.size() == 1);
  CHECK(calls.calls[0].name == "f");
  CHECK(calls.content == "Surex,");
}

TEST_CASE("trigger: a trigger split across tokens and bytes; never written, the run stays free",
          "[sampler][constraint]") {
  orbit::detail::Sampler s = sampler(triggered());
  // "<tool_" then "call>" then '{' as a byte: the grammar takes over at the trigger's first byte.
  CHECK(s.next(prefer({2})).token == 2);
  CHECK(s.next(prefer({3})).token == 3);
  CHECK(s.constraint_active());
  CHECK(s.next(prefer({8, kBytes + '{'})).token == kBytes + '{');
  // Never written: every step free, whatever it writes.
  orbit::detail::Sampler free = sampler(triggered());
  for (int i = 0; i < 20; ++i) CHECK(free.next(prefer({static_cast<int64_t>(kBytes + 'a' + i % 26)})).has_token());
  CHECK_FALSE(free.constraint_active());
  CHECK_FALSE(free.complete());
}

TEST_CASE("trigger: sampled, a wrong completion is never drawn; the options are checked", "[sampler][constraint]") {
  std::map<int64_t, int> drawn;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    GenerateOptions o = triggered();
    o.temperature = 1.0;
    o.seed = seed;
    orbit::detail::Sampler s = sampler(o);
    at::Tensor first = at::full({kVocab}, -30.0f);
    first[2] = 0.0f;
    REQUIRE(s.next(first).token == 2);
    at::Tensor logits = at::full({kVocab}, -30.0f);
    logits[5] = 3.0f;  // "call>oops": most likely, refused
    logits[4] = 1.0f;
    logits[3] = 0.5f;
    const orbit::detail::SamplerStep st = s.next(logits);
    REQUIRE(st.has_token());
    ++drawn[st.token];
    CHECK(s.constraint_active());
  }
  CHECK(drawn.count(5) == 0);
  CHECK(drawn[4] + drawn[3] == 40);
  CHECK(drawn[4] > drawn[3]);  // the rest keep their proportions (e^1 : e^0.5)
  GenerateOptions bad;
  bad.constraint_trigger = "<tool_call>";
  CHECK_THAT(error_of([&] { orbit::detail::Sampler::check_options(bad, kVocab); }),
             Contains("generate: constraint_trigger = \"<tool_call>\" needs a constraint"));
  CHECK(tool_call_trigger(ToolCallFormat::kMistral) == "[TOOL_CALLS]");
  CHECK(tool_call_trigger(ToolCallFormat::kLlama3).empty());
}

namespace {

GenerateOptions triggered_after(const std::string& open) {
  GenerateOptions o = triggered();
  o.constraint_trigger_block = {open, "</think>"};
  return o;
}

// Runs the scripted steps (each the single token preferred) and returns the text.
std::string run(orbit::detail::Sampler& s, const std::vector<int64_t>& tokens) {
  std::vector<int64_t> out;
  for (int64_t t : tokens) {
    const orbit::detail::SamplerStep st = s.next(prefer({t}));
    REQUIRE(st.has_token());
    out.push_back(st.token);
  }
  return text_of(out);
}

// A call written after the reasoning: "<tool_call>" then the arguments and the end mark.
const std::vector<int64_t> kCall{2, 4, 6, 7};

}  // namespace

TEST_CASE("trigger block: the call mark inside the reasoning is free text; after its close tag a call is whole",
          "[sampler][constraint]") {
  orbit::detail::Sampler s = sampler(triggered_after(""));
  // Inside the reasoning: "<tool_call>oops" is thought about, not a call: chosen, and the run stays free.
  CHECK(run(s, {0, 2, 5, 8}) == "Sure<tool_call>oopsx");
  CHECK_FALSE(s.constraint_active());
  CHECK_FALSE(s.is_stop_token(kEos));
  CHECK(run(s, {kUnthink}) == "</think>\n");
  CHECK_FALSE(s.constraint_active());
  // After it the mark starts a call: "call>oops" is now passed over for the next best.
  CHECK(s.next(prefer({2})).token == 2);
  CHECK(s.next(prefer({5, 4})).token == 4);
  CHECK(s.constraint_active());
  CHECK(run(s, {6, 7}) == R"(, "arguments": {}}</tool_call>)");
  CHECK(s.complete());
}

TEST_CASE("trigger block: the close tag and the mark split across tokens and bytes, or in one token",
          "[sampler][constraint]") {
  orbit::detail::Sampler s = sampler(triggered_after(""));
  std::vector<int64_t> bytes;
  for (char c : std::string("a <tool_call>x </th")) bytes.push_back(kBytes + static_cast<unsigned char>(c));
  CHECK(run(s, bytes) == "a <tool_call>x </th");
  CHECK(run(s, {kBytes + 'i', kBytes + 'n', kBytes + 'k', kBytes + '>', 2}) == "ink><tool_");
  CHECK_FALSE(s.constraint_active());
  CHECK(s.next(prefer({5, 3})).token == 3);  // the mark completed after the close tag: the grammar applies
  CHECK(s.constraint_active());
}

TEST_CASE("trigger block with an open tag: the block only where the text begins with it", "[sampler][constraint]") {
  SECTION("opened (after whitespace): the mark inside is free, after the close tag a call") {
    orbit::detail::Sampler s = sampler(triggered_after("<think>"));
    CHECK(run(s, {kBytes + '\n', kThink, 2, 5, kUnthink}) == "\n<think><tool_call>oops</think>\n");
    CHECK_FALSE(s.constraint_active());
    CHECK(run(s, kCall) == R"(<tool_call>{"name": "f", "arguments": {}}</tool_call>)");
    CHECK(s.complete());
  }
  SECTION("not opened: the mark counts from the first byte, the open tag's first bytes held on the way") {
    orbit::detail::Sampler s = sampler(triggered_after("<think>"));
    std::vector<int64_t> bytes;
    for (char c : std::string(" <tool_call>")) bytes.push_back(kBytes + static_cast<unsigned char>(c));
    CHECK(run(s, bytes) == " <tool_call>");
    CHECK(s.constraint_active());
    CHECK(s.next(prefer({8, kBytes + '{'})).token == kBytes + '{');  // "x" refused: a call goes on
  }
  SECTION("an open tag after the block is text: a mark after it counts") {
    orbit::detail::Sampler s = sampler(triggered_after("<think>"));
    CHECK(run(s, {kThink, kUnthink, kThink}) == "<think></think>\n<think>");
    CHECK(s.next(prefer({2})).token == 2);
    CHECK(s.next(prefer({5, 4})).token == 4);
    CHECK(s.constraint_active());
  }
}

TEST_CASE("trigger block: where the trigger counts in a whole text; options checked", "[sampler][constraint]") {
  const std::string mark = "<tool_call>";
  const TriggerBlock inside{"", "</think>"}, may_open{"<think>", "</think>"};
  CHECK(TriggerWatch::find("a<tool_call>b</think> <tool_call>{", mark, inside) == std::size_t{22});
  CHECK(TriggerWatch::find("a<tool_call>b", mark, inside) == std::nullopt);
  CHECK(TriggerWatch::find("a<tool_call>b", mark, {}) == std::size_t{1});
  CHECK(TriggerWatch::find(" <think>x<tool_call></think><tool_call>", mark, may_open) == std::size_t{28});
  CHECK(TriggerWatch::find(" <tool_call>", mark, may_open) == std::size_t{1});
  CHECK(TriggerWatch::find("<thi", mark, may_open) == std::nullopt);
  GenerateOptions no_constraint;
  no_constraint.constraint_trigger_block = {"", "</think>"};
  CHECK_THAT(error_of([&] { orbit::detail::Sampler::check_options(no_constraint, kVocab); }),
             Contains("generate: constraint_trigger_block (close \"</think>\") needs a constraint"));
  GenerateOptions no_close = triggered();
  no_close.constraint_trigger_block = {"<think>", ""};
  CHECK_THAT(error_of([&] { orbit::detail::Sampler::check_options(no_close, kVocab); }),
             Contains("generate: constraint_trigger_block.open = \"<think>\" needs a close string"));
}

namespace {

// A JSON answer from the first byte, unless the model opens its reasoning first (no trigger, a block that may
// open): the answer after at most two newlines, as the server builds it for Qwen3's template.
GenerateOptions json_after_optional_reasoning() {
  GenerateOptions o;
  std::vector<std::shared_ptr<const Constraint>> ways;
  for (const char* gap : {"", "\n", "\n\n"}) {
    ways.push_back(Constraint::sequence({Constraint::literal(gap), Constraint::json_object()}));
  }
  o.constraint = Constraint::choice(ways);
  o.constraint_trigger_block = {"<think>", "</think>"};
  return o;
}

std::vector<int64_t> bytes_of(const std::string& text) {
  std::vector<int64_t> out;
  for (char c : text) out.push_back(kBytes + static_cast<unsigned char>(c));
  return out;
}

}  // namespace

TEST_CASE("optional reasoning before a constraint: the model thinks freely, then answers under it",
          "[sampler][constraint]") {
  orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
  // The open tag is allowed though the JSON grammar refuses '<'; inside, free text (even "x", "}", EOS is
  // not the end yet).
  CHECK(run(s, {kThink, 0, 8, kBytes + '}'}) == "<think>Surex}");
  CHECK_FALSE(s.constraint_active());
  CHECK(run(s, {kUnthink}) == "</think>\n");
  CHECK(s.constraint_active());
  // After it, the JSON: "x" masked, '{' then '}' taken, and the run complete.
  CHECK(s.next(prefer({8, kBytes + '{'})).token == kBytes + '{');
  CHECK(s.next(prefer({8, kBytes + '}'})).token == kBytes + '}');
  CHECK(s.complete());
}

TEST_CASE("optional reasoning before a constraint: not opened, the constraint from the first byte",
          "[sampler][constraint]") {
  SECTION("the first token is the answer's; words and EOS the grammar refuses are masked") {
    orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
    CHECK(s.next(prefer({0, kEos, kBytes + '{'})).token == kBytes + '{');
    CHECK(s.constraint_active());
    CHECK(s.next(prefer({kThink, kBytes + '}'})).token == kBytes + '}');  // "<think>" is text now: refused
    CHECK(s.complete());
  }
  SECTION("the open tag's start, byte by byte, then the block") {
    orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
    CHECK(run(s, bytes_of("<th")) == "<th");
    CHECK_FALSE(s.constraint_active());
    CHECK(s.next(prefer({kBytes + '{', kBytes + 'i'})).token == kBytes + 'i');  // '{' cannot follow "<th"
    CHECK(run(s, bytes_of("nk>a</think>{}")) == "nk>a</think>{}");
    CHECK(s.complete());
  }
  SECTION("the open tag after leading whitespace opens the block") {
    orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
    CHECK(run(s, bytes_of("\n")) == "\n");
    CHECK_FALSE(s.constraint_active());  // undecided: the answer's whitespace, or the block's lead
    CHECK(s.next(prefer({kThink, kBytes + '{'})).token == kThink);
    CHECK(run(s, {0, kUnthink}) == "Sure</think>\n");
    CHECK(s.next(prefer({8, kBytes + '{'})).token == kBytes + '{');
    CHECK(s.constraint_active());
  }
}

TEST_CASE("optional reasoning before a constraint: leading whitespace keeps both ways open until a byte decides",
          "[sampler][constraint]") {
  SECTION("whitespace, then the answer: the whitespace is the answer's") {
    orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
    CHECK(run(s, bytes_of("\n")) == "\n");
    CHECK(s.next(prefer({kEos, kBytes + '{'})).token == kBytes + '{');  // nothing written yet may end the run
    CHECK(s.constraint_active());
    CHECK(s.next(prefer({kBytes + '}'})).token == kBytes + '}');
    CHECK(s.complete());
  }
  SECTION("whitespace, the open tag's start: the answer can no longer follow") {
    orbit::detail::Sampler s = sampler(json_after_optional_reasoning());
    CHECK(run(s, bytes_of("\n\n<th")) == "\n\n<th");
    CHECK(s.next(prefer({kBytes + '{', kBytes + '\n', kBytes + 'i'})).token == kBytes + 'i');
    CHECK(run(s, bytes_of("nk>")) == "nk>");
    CHECK(s.next(prefer({8})).token == 8);  // inside the block: free
    CHECK_FALSE(s.constraint_active());
  }
  SECTION("whitespace only where the answer may take it: its grammar, then the tokens left") {
    GenerateOptions o;
    o.constraint = Constraint::literal("{}");
    o.constraint_trigger_block = {"<think>", "</think>"};
    orbit::detail::Sampler s = sampler(o);
    CHECK(s.next(prefer({kBytes + ' ', kBytes + '\n', kBytes + '{'})).token == kBytes + '{');
    orbit::detail::Sampler opened = sampler(o);
    CHECK(opened.next(prefer({kBytes + ' ', kThink})).token == kThink);  // the open tag needs no whitespace
    // "\n" then, with one token left after the step, "\n" again would leave no room for "{}" (2 bytes): the
    // answer's '{' (then '}'), or the open tag (the block has no budget), not more whitespace.
    orbit::detail::Sampler budget = sampler(json_after_optional_reasoning());
    CHECK(budget.next(prefer({kBytes + '\n'}), 4).token == kBytes + '\n');
    CHECK(budget.next(prefer({kBytes + '\n', kBytes + '{'}), 1).token == kBytes + '{');
    orbit::detail::Sampler late = sampler(json_after_optional_reasoning());
    CHECK(late.next(prefer({kBytes + '\n'}), 4).token == kBytes + '\n');
    CHECK(late.next(prefer({kBytes + '\n', kThink}), 1).token == kThink);
    CHECK_FALSE(late.constraint_active());
    CHECK(run(late, {0, kUnthink, kBytes + '{'}) == "Sure</think>\n{");  // the answer from scratch after it
    CHECK(late.constraint_active());
  }
}

TEST_CASE("optional reasoning before a constraint: after the open tag's start held, the answer keeps its budget",
          "[sampler][constraint]") {
  // An answer that may itself begin as the open tag does: "<thx", or "<th" and seven more bytes. With "<th"
  // held and one token left after the step, only 'x' finishes the answer in time; 'y' would need six more
  // (the plain step's budget drops it; so must the step that may still open the block). 'i' goes on with
  // the open tag, which has no budget.
  GenerateOptions o;
  o.constraint = Constraint::choice({Constraint::literal("<thx"), Constraint::literal("<thyyyyyyy")});
  o.constraint_trigger_block = {"<think>", "</think>"};
  orbit::detail::Sampler s = sampler(o);
  CHECK(run(s, bytes_of("<th")) == "<th");
  CHECK_FALSE(s.constraint_active());
  CHECK(s.next(prefer({kBytes + 'y', kBytes + 'x'}), 1).token == kBytes + 'x');
  CHECK(s.constraint_active());
  CHECK(s.complete());
  orbit::detail::Sampler roomy = sampler(o);  // with room for it, 'y' is the answer's
  CHECK(run(roomy, bytes_of("<th")) == "<th");
  CHECK(roomy.next(prefer({kBytes + 'y', kBytes + 'x'}), 6).token == kBytes + 'y');
  orbit::detail::Sampler opening = sampler(o);  // the open tag's next byte is not the answer's: no budget
  CHECK(run(opening, bytes_of("<th")) == "<th");
  CHECK(opening.next(prefer({kBytes + 'i', kBytes + 'x'}), 1).token == kBytes + 'i');
  CHECK_FALSE(opening.constraint_active());
}

}  // namespace ORBIT_TEST_FILE
