// Templates that render an earlier turn otherwise once later messages arrive, through Window::sync: Qwen3 shows
// an answer's reasoning (and an empty <think> block for the last answer) only while no query follows it, and
// Mistral Nemo writes the system prompt (and, with tools, the tools) into the last user turn, so a user turn
// renders otherwise once another follows it. Their real templates (tests/data/templates) drive message lists
// through one window step by step, most steps changing what earlier messages rendered to, each checked by
// sync_rerender_harness.h against @huggingface/jinja's rendering of the whole list (tokens, units, reuse). Where the
// memos took an earlier list's text or cuts for this one's without comparing the renderings, the first two checks fail:
// step 3's stale tokens (window_sync_encode.cpp's common_prefix), step 2's stale cuts (window_sync_memo.cpp's
// known.common).
#include "sync_rerender_harness.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using namespace orbit::test::rerender;

// Qwen3: each query hides the reasoning of the answers before it (given as reasoning_content, as <think> tags in
// the content, or the empty block of the last answer); a tool's result is no query, so it hides none.
Scenario qwen3_scenario() {
  Scenario s{"Qwen3, reasoning hidden by each later query", "qwen3-0.6b", false, {}};
  Messages l = {msg("system", "You are brief."), msg("user", "Tell me about the dog.")};
  s.steps.push_back({Step::kGrows, l});
  l.push_back(answer("The dog ran.", "A dog story."));
  s.steps.push_back({Step::kGrows, l});
  l.push_back(msg("user", "And the cat?"));
  s.steps.push_back({Step::kRewrites, l});  // the dog's reasoning hidden
  l = plus(l, call_and_result("call00001", "cat", "The cat sat.", "Look it up."));
  s.steps.push_back({Step::kGrows, l});  // after a result the call still shows its reasoning
  l.push_back(answer("The cat sat on a mat."));
  s.steps.push_back({Step::kGrows, l});  // the last answer: an empty <think> block
  l.push_back(msg("user", "Thanks."));
  s.steps.push_back({Step::kRewrites, l});  // the call's reasoning and the empty block hidden
  l.push_back(answer("<think>\nBe kind.\n</think>\n\nYou are welcome."));
  s.steps.push_back({Step::kGrows, l});
  l.push_back(msg("user", "One more?"));
  s.steps.push_back({Step::kRewrites, l});  // the <think> tags of the content hidden
  l.front().content = "You are brief. Step 2.";
  l.push_back(answer("No more.", "Enough."));
  s.steps.push_back({Step::kEdits, l});
  l.erase(l.begin() + 1, l.begin() + 3);  // the oldest round
  l.push_back(msg("user", "Bye."));
  s.steps.push_back({Step::kEdits, l});
  return s;
}

// Mistral Nemo: the system prompt is written into the last message when that is a user turn, so it leaves a user
// turn once anything follows it; with tools, the tools are written before the last user turn, so they move to
// each new one. A result or an answer after the call or result before it changes nothing before it.
Scenario nemo_scenario(bool tools) {
  Scenario s{tools ? "Mistral Nemo with a tool, the system prompt and tools in the last user turn"
                   : "Mistral Nemo, the system prompt in the last user turn",
             "mistral-nemo-instruct-2407",
             tools,
             {}};
  const Step user_turn = tools ? Step::kRewrites : Step::kGrows;  // the tools move to it
  Messages l = {msg("system", "You are brief."), msg("user", "Tell me about the dog.")};
  s.steps.push_back({Step::kGrows, l});
  l.push_back(answer("The dog ran."));
  s.steps.push_back({Step::kRewrites, l});  // the system prompt leaves the user turn
  l.push_back(msg("user", "And the cat?"));
  s.steps.push_back({user_turn, l});
  l = plus(l, call_and_result("call00001", "cat", "The cat sat."));
  s.steps.push_back({Step::kRewrites, l});
  l.push_back(answer("The cat sat on a mat."));
  s.steps.push_back({Step::kGrows, l});
  l.push_back(msg("user", "Thanks."));
  s.steps.push_back({user_turn, l});
  l.push_back(answer("You are welcome."));
  s.steps.push_back({Step::kRewrites, l});
  l.front().content = "You are brief. Step 2.";
  l.push_back(msg("user", "One more?"));
  s.steps.push_back({Step::kEdits, l});
  l.erase(l.begin() + 1, l.begin() + 3);  // the oldest round: the list still starts with a user turn
  l.push_back(answer("No more."));
  s.steps.push_back({Step::kEdits, l});
  return s;
}

}  // namespace

TEST_CASE("Qwen3: answers' reasoning hidden by each later query; the window is the whole rendering",
          "[sync_rerender]") {
  check_scenario(qwen3_scenario());
}

TEST_CASE("Mistral Nemo: the system prompt in the last user turn; the window is the whole rendering",
          "[sync_rerender]") {
  check_scenario(nemo_scenario(false));
}

TEST_CASE("Mistral Nemo with a tool: the tools before the last user turn; the window is the whole rendering",
          "[sync_rerender]") {
  check_scenario(nemo_scenario(true));
}

}  // namespace ORBIT_TEST_FILE
