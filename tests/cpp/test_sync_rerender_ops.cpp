// What agents do to their message lists between requests, synced through Window::sync under every bundled
// template (tests/data/templates): a new system prompt, the oldest turns after the system prompt dropped, a tool
// result in the middle removed, the oldest tool call dropped with its result, a run of turns replaced by one
// summary, the tools removed and added again, with turns appended in between (and, for Llama 3.2, the day its
// system header writes changing between two requests). Each step is checked by sync_rerender_harness.h against
// @huggingface/jinja's rendering of the whole list: the window's tokens are its tokenization, the units start where
// rendering every prefix says, every instance inside the tokens the old and new renderings share stays, step 3
// reuses at least those tokens, and a list that only grew renders at most its new prefixes (none once known).
//
// Templates without a system role (Gemma 2, Mistral 7B) skip the system prompt; templates without tools (Gemma,
// Mistral 7B, SmolLM2) skip the calls and the tool changes; the strict alternation of Gemma and Mistral 7B holds
// at every step (a summary is a user turn and an answer).
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "sync_rerender_harness.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using namespace orbit::test::rerender;

// One tool, `f`, with no parameters: Llama's and Qwen's tool preambles leave the bundled model's 512 positions
// little room.
constexpr const char* kShortTool = R"([{"type": "function", "function": {"name": "f"}}])";

// What a template takes: a system prompt first, tools (and so calls and results).
struct Traits {
  std::string template_name;
  bool system = true;
  bool tools = true;
  bool clock = false;  // renders strftime_now's day (Llama 3.2): the steps pin the time, and the day changes once
};

// Story i's query, and its tool result.
std::string query(int i) { return "Story " + std::to_string(i) + "?"; }
std::string result(int i) { return "Dog " + std::to_string(i) + "."; }

// Story i's round: a query, where `call` a call of f(q) and its result, and an answer (with reasoning, which only Qwen3
// renders, and only after the last query).
Messages story_round(int i, bool call) {
  const std::string n = std::to_string(i);
  Messages r = {msg("user", query(i))};
  if (call) {
    const std::string id = "call0000" + n;  // nine letters and digits, as Mistral Nemo wants
    ChatMessage c = answer("", "Look.");
    c.tool_calls.push_back({id, "f", "{\"q\": \"" + n + "\"}"});
    ChatMessage res = msg("tool", result(i));
    res.tool_call_id = id;
    r = plus(r, {c, res});
  }
  r.push_back(answer("Dog " + n + " ran.", "Tale " + n + "."));
  return r;
}

// `l` without the message whose content is `content` and role `role` (the first such).
Messages without(Messages l, const std::string& role, const std::string& content) {
  for (auto it = l.begin(); it != l.end(); ++it) {
    if (it->role == role && it->content == content) {
      l.erase(it);
      return l;
    }
  }
  FAIL("no " << role << " message '" << content << "'");
  return l;
}

// The index of the first message with `content`.
std::size_t index_of(const Messages& l, const std::string& content) {
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i].content == content) return i;
  FAIL("no message '" << content << "'");
  return 0;
}

constexpr std::time_t kDay = 1721995200;  // 2024-07-26 12:00 UTC: the day Llama's templates write without a clock

// The time strftime_now reads on day `d` after kDay, where the template reads it.
std::optional<std::time_t> day(const Traits& t, int d) {
  return t.clock ? std::optional<std::time_t>(kDay + 86400 * d) : std::nullopt;
}

// A conversation edited as an agent edits it, with tool calls and results in the messages where the template takes
// them (the tools themselves in tools_scenario: with them, a list this long passes the bundled model's 512
// positions under Llama's and Qwen's templates).
Scenario edits_scenario(const Traits& t) {
  Scenario s{t.template_name + ": a new system prompt, trims, a summary, results and calls removed",
             t.template_name,
             false,
             {}};
  const auto step = [&](Step kind, const Messages& l, int d) { s.steps.push_back({kind, l, std::nullopt, day(t, d)}); };
  Messages l;
  if (t.system) l.push_back(msg("system", "You are brief."));
  const Messages r3 = story_round(3, t.tools);
  l = plus(plus(plus(l, story_round(1, false)), story_round(2, t.tools)), {r3.front()});
  step(Step::kAppends, l, 0);
  l = plus(plus(l, Messages(r3.begin() + 1, r3.end())), {msg("user", query(4))});
  step(Step::kAppends, l, 0);
  if (t.system) {
    l.front().content = "You are brief and kind.";  // a new system prompt
    step(Step::kEdits, l, 0);
  }
  const std::size_t first = t.system ? 1 : 0;
  const std::size_t r2 = index_of(l, query(2));
  l.erase(l.begin() + static_cast<std::ptrdiff_t>(first), l.begin() + static_cast<std::ptrdiff_t>(r2));
  step(Step::kEdits, l, 0);  // the oldest round dropped
  l = plus(l, {answer("Dog 4 ran."), msg("user", query(5))});
  step(t.clock ? Step::kEdits : Step::kAppends, l, 1);  // Llama 3.2's system header writes the next day
  if (t.tools) {
    l = without(l, "tool", result(3));  // a result in the middle removed
    step(Step::kEdits, l, 1);
    const std::size_t call2 = index_of(l, query(2)) + 1;  // the oldest call and its result dropped
    l.erase(l.begin() + static_cast<std::ptrdiff_t>(call2), l.begin() + static_cast<std::ptrdiff_t>(call2 + 2));
    step(Step::kEdits, l, 1);
  }
  // Stories 2 and 3 summarized: their run of turns becomes one query and one answer.
  const std::size_t from = index_of(l, query(2)), to = index_of(l, query(4));
  l.erase(l.begin() + static_cast<std::ptrdiff_t>(from), l.begin() + static_cast<std::ptrdiff_t>(to));
  l.insert(l.begin() + static_cast<std::ptrdiff_t>(from), {msg("user", "Sum: dogs 2, 3."), answer("Noted.")});
  step(Step::kEdits, l, 1);
  const Messages r5 = story_round(5, t.tools);  // story 5's call and result where it has them, and its answer
  l = plus(plus(l, Messages(r5.begin() + 1, r5.end())), {msg("user", query(6))});
  step(Step::kAppends, l, 1);
  return s;
}

// The tools given, moved by a trim (Llama writes them into the first user turn, Mistral Nemo before the last),
// removed, and given again with turns appended.
Scenario tools_scenario(const Traits& t) {
  Scenario s{t.template_name + ": the tools given, trimmed under, removed and given again",
             t.template_name,
             true,
             {},
             kShortTool};
  Messages l = {msg("system", "You are brief."), msg("user", query(1)), answer("Dog 1 ran."), msg("user", query(2))};
  s.steps.push_back({Step::kAppends, l, std::nullopt, day(t, 0)});
  l.erase(l.begin() + 1, l.begin() + 3);  // the oldest round dropped
  s.steps.push_back({Step::kEdits, l, std::nullopt, day(t, 0)});
  l = plus(l, {answer("Dog 2 ran."), msg("user", query(3))});
  s.steps.push_back({Step::kAppends, l, std::nullopt, day(t, 0)});
  s.steps.push_back({Step::kEdits, l, false, day(t, 0)});  // the tools removed
  l = plus(l, {answer("Dog 3 ran."), msg("user", query(4))});
  s.steps.push_back({Step::kEdits, l, true, day(t, 0)});  // and given again, with a round
  return s;
}

// Every scenario the template takes, each checked (check_scenario).
void check_template(const Traits& t) {
  check_scenario(edits_scenario(t));
  if (t.tools) check_scenario(tools_scenario(t));
}

}  // namespace

TEST_CASE("Gemma 2: trims and a summary through one window", "[sync_rerender]") {
  check_template({"gemma-2-2b-it", false, false});
}

TEST_CASE("Gemma 3: a new system prompt, trims and a summary through one window", "[sync_rerender]") {
  check_template({"gemma-3-270m-it", true, false});
}

TEST_CASE("Llama 3.1: every agent's edit, with a tool, through one window", "[sync_rerender]") {
  check_template({"llama-3.1-8b-instruct", true, true});
}

TEST_CASE("Llama 3.2: every agent's edit, with a tool and the day changing, through one window", "[sync_rerender]") {
  check_template({"llama-3.2-3b-instruct", true, true, true});
}

TEST_CASE("Mistral 7B: trims and a summary through one window", "[sync_rerender]") {
  check_template({"mistral-7b-instruct", false, false});
}

TEST_CASE("Mistral Nemo: every agent's edit, with a tool, through one window", "[sync_rerender]") {
  check_template({"mistral-nemo-instruct-2407", true, true});
}

TEST_CASE("Qwen2.5 0.5B: every agent's edit, with a tool, through one window", "[sync_rerender]") {
  check_template({"qwen2.5-0.5b-instruct", true, true});
}

TEST_CASE("Qwen2.5 7B: every agent's edit, with a tool, through one window", "[sync_rerender]") {
  check_template({"qwen2.5-7b-instruct", true, true});
}

TEST_CASE("Qwen3: every agent's edit, with a tool and reasoning, through one window", "[sync_rerender]") {
  check_template({"qwen3-0.6b", true, true});
}

TEST_CASE("SmolLM2: a new system prompt, trims and a summary through one window", "[sync_rerender]") {
  check_template({"smollm2-135m-instruct", true, false});
}

}  // namespace ORBIT_TEST_FILE
