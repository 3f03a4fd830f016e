// An agent's tools changed between two syncs of its list (a handoff, tools bound per step): added, reordered,
// removed, and given again with a round appended, under the bundled templates that take tools, through one window
// and checked by sync_rerender_harness.h against @huggingface/jinja's rendering of each whole list (the window's
// tokens are its tokenization, the units start where rendering every prefix says, the instances inside the tokens
// the old and new renderings start with alike stay). Each list's key and aliases under its tools differ from the
// list before's, so step 2 rendered every prefix and step 3 encoded the whole text again; the memos now also name
// each list whatever its variables (sync_memo.h: any_variables_key), so a tools change reads the list before:
// here, step 3 takes every token of the new units inside the text the two renderings end with alike (the messages
// after a tools block written first) and step 2 renders a few prefixes, not every one.
#include <iostream>
#include <string>
#include <vector>

#include "sync_rerender_harness.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using namespace orbit::test::rerender;

// Two tools with no parameters, in both orders: Llama's and Qwen's tool preambles leave the bundled model's 512
// positions little room.
constexpr const char* kF = R"([{"type": "function", "function": {"name": "f"}}])";
constexpr const char* kFG =
    R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])";
constexpr const char* kGF =
    R"([{"type": "function", "function": {"name": "g"}}, {"type": "function", "function": {"name": "f"}}])";

// A system prompt, `rounds` rounds of a query and an answer, and a last query.
Messages conversation(int rounds) {
  Messages l = {msg("system", "You are brief.")};
  for (int i = 1; i <= rounds; ++i) {
    const std::string n = std::to_string(i);
    l = plus(l, {msg("user", "Story " + n + "?"), answer("Dog " + n + " ran.")});
  }
  l.push_back(msg("user", "Story " + std::to_string(rounds + 1) + "?"));
  return l;
}

// The tools given (f), one added (f, g), the two reordered (g, f), all removed, and f given again with a round
// appended; the steps 1 to 3 change only the tools.
Scenario tools_scenario(const std::string& template_name, int rounds) {
  Scenario s{template_name + ": tools added, reordered, removed and given again", template_name, true, {}, kF};
  const Messages l = conversation(rounds);
  s.steps.push_back({Step::kAppends, l});
  s.steps.push_back({Step::kEdits, l, std::nullopt, std::nullopt, kFG});
  s.steps.push_back({Step::kEdits, l, std::nullopt, std::nullopt, kGF});
  s.steps.push_back({Step::kEdits, l, false});
  Messages more = plus(l, {answer("Dog " + std::to_string(rounds + 1) + " ran."), msg("user", "The end?")});
  s.steps.push_back({Step::kEdits, more});
  return s;
}

// The scenario checked by the harness, and at each step that changes only the tools (1 to 3): step 3 took at least
// the tokens of the new units inside the tokens the old and new renderings end with alike, and step 2 rendered at
// most max_renders[k - 1] prefixes (-1: not bounded; every prefix, the list's messages less one, before).
void check_tools_change(const std::string& template_name, int rounds, const std::vector<int64_t>& max_renders) {
  const Scenario s = tools_scenario(template_name, rounds);
  const std::vector<Counts> counts = check_scenario(s);
  for (std::size_t k = 1; k <= 3; ++k) {
    const Counts& c = counts[k];
    std::cout << template_name << " step " << k << ": " << c.tokens << " tokens, " << c.tail_units
              << " in units the renderings end with alike, " << c.reused << " reused by step 3, " << c.renders
              << " prefixes rendered of " << s.steps[k].list.size() - 1 << ", " << c.forward << " forwarded\n";
    INFO(s.name << ", step " << k);
    CHECK(c.reused >= static_cast<int64_t>(c.tail_units));
    if (max_renders[k - 1] >= 0) CHECK(c.renders <= max_renders[k - 1]);
  }
}

}  // namespace

TEST_CASE("Qwen2.5 7B: tools added, reordered, removed and given again", "[sync_tools]") {
  check_tools_change("qwen2.5-7b-instruct", 4, {4, 4, 4});
}
// Qwen3's check renders one prefix more (the shortest answer read: sync_memo.h).
TEST_CASE("Qwen3: tools added, reordered, removed and given again", "[sync_tools]") {
  check_tools_change("qwen3-0.6b", 4, {5, 5, 5});
}
// Llama's tool preamble leaves room for two rounds: the check renders every prefix of so short a list.
TEST_CASE("Llama 3.1: tools added, reordered, removed and given again", "[sync_tools]") {
  check_tools_change("llama-3.1-8b-instruct", 2, {-1, -1, -1});
}
// Mistral Nemo writes the tools before the last user turn, so a list under tools renders no prefix before it as a
// head of its rendering, and the tools removed read no prefix from it (each is rendered, as before).
TEST_CASE("Mistral Nemo: tools added, reordered, removed and given again", "[sync_tools]") {
  check_tools_change("mistral-nemo-instruct-2407", 6, {3, 3, -1});
}

}  // namespace ORBIT_TEST_FILE
