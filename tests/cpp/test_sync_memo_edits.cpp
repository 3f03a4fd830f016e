// Window::plan_sync / sync's message boundaries (orbit/sync.h step 2) read from the spans of the latest list with
// the same first message, second message or template (sync_memo.h) give the boundaries rendering every prefix
// gives: lists trimmed or summarized at their start and lists whose first message changed (a system prompt
// rewritten at every request), under every bundled template and under templates that render a kept message or the
// first message otherwise; and a list no positions can hold is refused before any prefix render. The memo of lists
// that grow is tested in test_sync_memo.cpp.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_cuts_support.h"
#include "sync_memo_support.h"
#include "sync_test_support.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_memo::cuts_both;
using orbit::test::sync_memo::kLookupTool;
using orbit::test::sync_memo::kRoleChecks;
using orbit::test::sync_memo::list_cuts;
using orbit::test::sync_memo::ListCuts;
using orbit::test::sync_memo::MemoOn;
using orbit::test::sync_memo::runtime_msg;
using orbit::test::sync_memo::template_source;
using orbit::test::sync_support::msg;
using orbit::test::sync_support::sentence;

// An agent's list of `n` messages: a system prompt, then rounds of a user turn, an assistant answer that calls
// a tool, the tool's result, and an assistant answer.
std::vector<runtime::ChatMessage> agent_list(std::mt19937_64& rng, std::size_t n) {
  std::vector<runtime::ChatMessage> out = {runtime_msg("system", "You tell short stories.")};
  for (std::size_t i = 1; out.size() < n; ++i) {
    switch (i % 4) {
      case 1: out.push_back(runtime_msg("user", sentence(rng, 6) + " What happened next?")); break;
      case 2:
        out.push_back(runtime_msg("assistant", "Let me look."));
        out.back().tool_calls.push_back({"call_" + std::to_string(i), "lookup", "{\"query\": \"ball\"}"});
        break;
      case 3:
        out.push_back(runtime_msg("tool", sentence(rng, 20)));
        out.back().tool_call_id = "call_" + std::to_string(i - 1);
        break;
      default: out.push_back(runtime_msg("assistant", sentence(rng, 10))); break;
    }
  }
  return out;
}

// `list` with its `k` oldest messages after the first dropped, one assistant message summarizing them in their
// place when `summarize`, and a user turn added.
std::vector<runtime::ChatMessage> trimmed_list(const std::vector<runtime::ChatMessage>& list, std::size_t k,
                                               bool summarize, std::mt19937_64& rng) {
  std::vector<runtime::ChatMessage> out = {list.front()};
  if (summarize) out.push_back(runtime_msg("assistant", "Earlier: " + sentence(rng, 12)));
  out.insert(out.end(), list.begin() + 1 + static_cast<std::ptrdiff_t>(k), list.end());
  out.push_back(runtime_msg("user", sentence(rng, 5)));
  return out;
}

// How an agent that rewrites its system prompt at every request (the date, a memory digest, a step counter)
// edits its last list: only that (kSame), that and a user turn and an assistant answer added (kStep), or that
// with the `k` oldest messages after it dropped and a user turn added (kTrim).
enum class SystemEdit { kSame, kStep, kTrim };

std::vector<runtime::ChatMessage> new_system_list(const std::vector<runtime::ChatMessage>& list, SystemEdit edit,
                                                  std::size_t k, std::mt19937_64& rng) {
  std::vector<runtime::ChatMessage> out = edit == SystemEdit::kTrim ? trimmed_list(list, k, false, rng) : list;
  out.front().content = "You tell short stories. Step " + std::to_string(rng() % 1000) + ": " + sentence(rng, 3);
  if (edit == SystemEdit::kStep) {
    out.push_back(runtime_msg("user", sentence(rng, 5)));
    out.push_back(runtime_msg("assistant", sentence(rng, 8)));
  }
  return out;
}

const char* system_edit_name(SystemEdit edit) {
  return edit == SystemEdit::kSame   ? "new system prompt"
         : edit == SystemEdit::kStep ? "new system prompt, grown"
                                     : "new system prompt, trimmed";
}

using AgentList = std::vector<runtime::ChatMessage>;
// How an agent edits its last list at request `request` (0, 1, ...) into the next; `what` says how.
using AgentEdit = std::function<AgentList(const AgentList&, int request, std::mt19937_64&, std::string& what)>;

// Under the plain, story, Qwen2.5 and Llama 3.1 templates with a tool: an agent's list of 41 messages edited by
// `edit` at each of `requests` requests, each list cut (and so the memo's latest) before the next: the next list
// cuts as rendering every prefix does with at most `max_renders` renders, the rest of its prefixes read from the
// latest list's spans; an answer is then added to it.
void check_edits_read_latest(uint64_t seed, int requests, int64_t max_renders, const AgentEdit& edit) {
  std::vector<std::pair<std::string, std::string>> templates = {{"plain", kPlainChatTemplate},
                                                                {"story", orbit::test::sync_support::kTemplate}};
  for (const char* name : {"qwen2.5-7b-instruct", "llama-3.1-8b-instruct"})
    templates.emplace_back(name, template_source(name));
  runtime::ChatRenderOptions o;
  o.tools_json = kLookupTool;
  std::mt19937_64 rng(seed);
  for (const auto& [name, source] : templates) {
    const runtime::ChatTemplate t(source, name);
    orbit::detail::clear_cuts_memo();
    AgentList list = agent_list(rng, 41);
    for (int request = 0; request < requests; ++request) {
      REQUIRE(list_cuts(t, o, list, true));  // the memo holds this list, the latest under this template
      std::string what;
      AgentList next = edit(list, request, rng, what);
      INFO(name << ", request " << request << ", " << what << ", " << next.size() << " messages");
      const std::optional<ListCuts> cuts = cuts_both(t, o, next);
      REQUIRE(cuts);
      CHECK(cuts->renders <= max_renders + kRoleChecks);
      CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(next.size()) - 1);
      CHECK(cuts->cuts.size() + 4 >= next.size());
      list = std::move(next);
      list.push_back(runtime_msg("assistant", sentence(rng, 8)));
    }
  }
}

// One of for_each_bundled_template's cases: a bundled template, its render options (with or without a tool), and
// an agent list of 30 messages; `name` says which (for INFO).
struct BundledCase {
  const runtime::ChatTemplate& t;
  const runtime::ChatRenderOptions& options;
  const std::vector<runtime::ChatMessage>& list;
  bool tools;
  std::string name;
};

// Runs `check` under every bundled template (tests/data/templates, the date Llama 3.1 asks for given) with and
// without a tool, the memo cleared first, on an agent list drawn from `rng`: without tools its turns alternate
// user and assistant, as the strictest templates want.
void for_each_bundled_template(std::mt19937_64& rng, const std::function<void(const BundledCase&)>& check) {
  namespace fs = std::filesystem;
  runtime::ChatRenderOptions o;
  o.tools_json = kLookupTool;
  o.extra_json = R"({"date_string": "26 Jul 2024"})";
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(ORBIT_TEST_DATA_DIR) / "templates")) {
    if (e.path().extension() != ".jinja") continue;
    const runtime::ChatTemplate t(template_source(e.path().stem().string()), e.path().filename().string(), "<s>",
                                  "</s>");
    for (const bool tools : {false, true}) {
      runtime::ChatRenderOptions with = o;
      if (!tools) with.tools_json.clear();
      orbit::detail::clear_cuts_memo();
      std::vector<runtime::ChatMessage> list = agent_list(rng, 30);
      if (!tools) {
        for (std::size_t i = 1; i < list.size(); ++i)
          list[i] = runtime_msg(i % 2 ? "user" : "assistant", sentence(rng, 6));
      }
      check({t, with, list, tools, e.path().filename().string() + (tools ? ", tools" : "")});
    }
  }
}

}  // namespace

TEST_CASE("a list trimmed or summarized at its start reads its prefixes from the latest list's", "[sync_memo]") {
  // The prefix before the kept messages (two for Llama 3.1, which refuses a list with no user turn when given
  // tools), and the check's two renders: the rest is read.
  check_edits_read_latest(31, 6, 4, [](const AgentList& list, int request, std::mt19937_64& rng, std::string& what) {
    const bool summarize = request % 2 == 1;
    what = summarize ? "summarized" : "trimmed";
    return trimmed_list(list, 4, summarize, rng);
  });
}

TEST_CASE("a trimmed list under every bundled template cuts as rendering every prefix does", "[sync_memo]") {
  std::mt19937_64 rng(32);
  int64_t checked = 0, spans = 0;
  for_each_bundled_template(rng, [&](const BundledCase& c) {
    for (const std::size_t k : {2, 4}) {
      for (const bool summarize : {false, true}) {
        (void)list_cuts(c.t, c.options, c.list, true);
        std::vector<runtime::ChatMessage> next = trimmed_list(c.list, k, summarize, rng);
        if (!c.tools && summarize) next[1].role = "user";  // the summary in the dropped user turn's place
        if (!c.tools && next.back().role == next[next.size() - 2].role) next.pop_back();
        INFO(c.name << ", " << k << " dropped" << (summarize ? " and summarized" : ""));
        const std::optional<ListCuts> cuts = cuts_both(c.t, c.options, next);
        if (!cuts) continue;
        ++checked;
        spans += cuts->spans;
      }
    }
  });
  std::printf("bundled templates: %lld trimmed lists cut as every prefix does, %lld prefixes read from spans\n",
              static_cast<long long>(checked), static_cast<long long>(spans));
  CHECK(checked >= 9 * 4);
  CHECK(spans > checked * 10);
}

TEST_CASE("a list whose first message changed reads its prefixes from the latest list's", "[sync_memo]") {
  // The system prompt's prefix (and the first user turn's, for Llama 3.1, which refuses a list with no user
  // turn when given tools), the added turn before the last, and the check's two renders: the rest is read.
  check_edits_read_latest(34, 9, 5, [](const AgentList& list, int request, std::mt19937_64& rng, std::string& what) {
    const auto edit = static_cast<SystemEdit>(request % 3);
    what = system_edit_name(edit);
    return new_system_list(list, edit, 4, rng);
  });
}

TEST_CASE(
    "agents taking turns under one template, each with a new system prompt at every request, read their own "
    "latest list",
    "[sync_memo]") {
  runtime::ChatRenderOptions o;
  o.tools_json = kLookupTool;
  std::mt19937_64 rng(37);
  for (const std::string& source : {std::string(kPlainChatTemplate), template_source("qwen2.5-7b-instruct")}) {
    const runtime::ChatTemplate t(source, "agents");
    orbit::detail::clear_cuts_memo();
    std::vector<std::vector<runtime::ChatMessage>> lists = {agent_list(rng, 41), agent_list(rng, 37)};
    for (const auto& list : lists) REQUIRE(list_cuts(t, o, list, true));
    for (int request = 0; request < 6; ++request) {
      for (std::size_t agent = 0; agent < lists.size(); ++agent) {
        // The latest list under the template is the other agent's; this agent's is named by its first request.
        const SystemEdit edit = request % 2 == 0 ? SystemEdit::kSame : SystemEdit::kStep;
        std::vector<runtime::ChatMessage> next = new_system_list(lists[agent], edit, 0, rng);
        INFO("request " << request << ", agent " << agent << ", " << system_edit_name(edit));
        const std::optional<ListCuts> cuts = cuts_both(t, o, next);
        REQUIRE(cuts);
        CHECK(cuts->renders <= 4 + kRoleChecks);
        CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(next.size()) - 1);
        lists[agent] = std::move(next);
      }
    }
  }
}

TEST_CASE("a list whose first message changed cuts as rendering every prefix does under every bundled template",
          "[sync_memo]") {
  std::mt19937_64 rng(35);
  int64_t checked = 0, spans = 0, bounded = 0;
  for_each_bundled_template(rng, [&](const BundledCase& c) {
    for (const SystemEdit edit : {SystemEdit::kSame, SystemEdit::kStep, SystemEdit::kTrim}) {
      (void)list_cuts(c.t, c.options, c.list, true);
      std::vector<runtime::ChatMessage> next = new_system_list(c.list, edit, 2, rng);
      if (!c.tools && next.back().role == next[next.size() - 2].role) next.pop_back();
      INFO(c.name << ", " << system_edit_name(edit));
      const std::optional<ListCuts> cuts = cuts_both(c.t, c.options, next);
      if (!cuts) continue;
      ++checked;
      spans += cuts->spans;
      // Each template renders the prefixes it refuses or renders otherwise (a merged boundary each, which the
      // earlier list's were too), the new system prompt's, the added turn before the last, and the check's two
      // and one per other role: the rest is read.
      CHECK(cuts->renders <= cuts->merged + 5 + kRoleChecks);
      bounded += cuts->merged == 0 ? 1 : 0;
    }
  });
  std::printf(
      "bundled templates: %lld lists with a new first message cut as every prefix does (%lld with no boundary "
      "merged), %lld prefixes read from spans\n",
      static_cast<long long>(checked), static_cast<long long>(bounded), static_cast<long long>(spans));
  CHECK(checked >= 9 * 4);
  CHECK(bounded >= 20);  // Qwen2.5 (both), SmolLM2, Llama 3.1 without tools, Gemma 3 without
  CHECK(spans > checked * 10);
}

namespace {

// A template that renders a kept message otherwise in an edited list, where the edited list is this case's.
struct OtherwiseCase {
  const char* what;
  const char* source;
  int64_t max_renders;  // of a trimmed list's prefixes (at most all, once each); -1: not counted
  // Of a list with a new system prompt and no message dropped (alone, or with two turns added): the kept
  // messages render there as before; -1: not counted.
  int64_t max_new_system = -1;
};

// The templates that render a kept message otherwise after an edit at the list's start.
std::vector<OtherwiseCase> otherwise_cases() {
  return {
      // The first user turn marked: the first one kept is marked now, and the spans are read after it (the
      // prefixes before the run, the one that ends with that turn, and the check's two).
      {"first user turn marked",
       "{% set ns = namespace(seen=false) %}{% for message in messages %}{% if message.role == 'user' and not "
       "ns.seen %}{% set ns.seen = true %}[first] {% endif %}{{ message.role }}: {{ message.content }}\n"
       "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
       5, 5},
      // A system prompt only at the start is a header; elsewhere a turn.
      {"system prompt at the start only",
       "{% for message in messages %}{% if loop.first and message.role == 'system' %}<<SYS>>{{ message.content }}"
       "<</SYS>>\n{% else %}{{ message.role }}: {{ message.content }}\n{% endif %}{% endfor %}"
       "{% if add_generation_prompt %}assistant:{% endif %}",
       4, 5},
      // Turns numbered: every kept message renders otherwise, so every prefix is rendered, and none twice.
      {"turns numbered",
       "{% for message in messages %}{{ loop.index }}. {{ message.role }}: {{ message.content }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant:{% endif %}",
       1000, 5},
      // Tool results numbered: the numbers after a dropped tool result shift by one.
      {"tool results numbered",
       "{% set ns = namespace(n=0) %}{% for message in messages %}{{ message.role }}{% if message.role == 'tool' %}"
       "{% set ns.n = ns.n + 1 %} #{{ ns.n }}{% endif %}: {{ message.content }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant:{% endif %}",
       1000, 5},
      // A header naming the last message's role, which the new list has otherwise: a prefix of the earlier
      // list that ends as a kept one does is not one of its rendering, so no span is anchored.
      {"last role named first",
       "({{ messages[-1].role }} last)\n{% for message in messages %}{{ message.role }}: {{ message.content }}\n"
       "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
       1000},
      // A line only in the rendering of `count` messages, the new list's longest prefix, which the spans give as
      // the earlier list's whole rendering: only the check sees it (otherwise_source sets `count` per list).
      {"a line at one length", "", -1},
  };
}

// The source of case `c`'s template for a list of `count` messages: "a line at one length" renders its line where
// the list has `count` - 1 messages.
std::string otherwise_source(const OtherwiseCase& c, std::size_t count) {
  if (*c.source != '\0') return c.source;
  return "{% if messages | length == " + std::to_string(count - 1) +
         " %}(one length)\n{% endif %}{% for message in messages %}{{ message.role }}: {{ message.content }}\n"
         "{% endfor %}";
}

}  // namespace

TEST_CASE("a template that renders a kept message otherwise in the trimmed list reads no span there", "[sync_memo]") {
  const std::vector<OtherwiseCase> cases = otherwise_cases();
  const runtime::ChatRenderOptions o;
  for (const OtherwiseCase& c : cases) {
    std::mt19937_64 rng(33);
    const std::vector<runtime::ChatMessage> list = agent_list(rng, 44);  // ending with a tool result
    for (const bool summarize : {false, true}) {
      std::vector<runtime::ChatMessage> next = trimmed_list(list, 4, summarize, rng);
      const runtime::ChatTemplate t(otherwise_source(c, next.size()), c.what);
      orbit::detail::clear_cuts_memo();
      REQUIRE(list_cuts(t, o, list, true));
      next.back().role = "assistant";  // the earlier list ended with a tool result
      INFO(c.what << (summarize ? ", summarized" : ", trimmed"));
      const std::optional<ListCuts> cuts = cuts_both(t, o, next);
      REQUIRE(cuts);
      if (c.max_renders >= 0) CHECK(cuts->renders <= std::min<int64_t>(c.max_renders + kRoleChecks, next.size() - 1));
    }
  }
}

TEST_CASE("a template that shows the first message further on reads no span past it when it changes", "[sync_memo]") {
  std::vector<OtherwiseCase> cases = otherwise_cases();
  // The system prompt's length in every turn: every kept turn renders otherwise with a new one, so every
  // prefix is rendered.
  cases.push_back({"system prompt counted in every turn",
                   "{% for message in messages %}{{ message.role }} ({{ messages[0].content | length }}): "
                   "{{ message.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
                   1000});
  // The system prompt after the turns: no proper prefix is a prefix of a rendering.
  cases.push_back({"system prompt at the end",
                   "{% for message in messages %}{% if not loop.first %}{{ message.role }}: {{ message.content }}\n"
                   "{% endif %}{% endfor %}[{{ messages[0].content }}]{% if add_generation_prompt %}assistant:"
                   "{% endif %}",
                   1000});
  // The system prompt in the last user turn (as Mistral's places it): a prefix that ends with a user turn is
  // no prefix of a rendering that goes on, in either list.
  cases.push_back({"system prompt in the last user turn",
                   "{% for message in messages %}{% if loop.first %}{% elif message.role == 'user' and loop.last %}"
                   "user: {{ messages[0].content }} {{ message.content }}\n{% else %}{{ message.role }}: "
                   "{{ message.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
                   1000});
  const runtime::ChatRenderOptions o;
  int64_t lists = 0, spans = 0;
  for (const OtherwiseCase& c : cases) {
    std::mt19937_64 rng(36);
    const std::vector<runtime::ChatMessage> list = agent_list(rng, 44);  // ending with a tool result
    for (const SystemEdit edit : {SystemEdit::kSame, SystemEdit::kStep, SystemEdit::kTrim}) {
      std::vector<runtime::ChatMessage> next = new_system_list(list, edit, 4, rng);
      if (edit == SystemEdit::kTrim) next.back().role = "assistant";  // the earlier list ended with a tool result
      const runtime::ChatTemplate t(otherwise_source(c, next.size()), c.what);
      orbit::detail::clear_cuts_memo();
      REQUIRE(list_cuts(t, o, list, true));
      INFO(c.what << ", " << system_edit_name(edit));
      const std::optional<ListCuts> cuts = cuts_both(t, o, next);
      REQUIRE(cuts);
      ++lists;
      spans += cuts->spans;
      // A trimmed list renders what the trimmed case does, and one more prefix (its new system prompt alone).
      if (edit == SystemEdit::kTrim && c.max_renders >= 0) {
        CHECK(cuts->renders <= std::min<int64_t>(c.max_renders + 1 + kRoleChecks, next.size() - 1));
      }
      if (edit != SystemEdit::kTrim && c.max_new_system >= 0) CHECK(cuts->renders <= c.max_new_system + kRoleChecks);
    }
  }
  CHECK(lists == 3 * static_cast<int64_t>(cases.size()));
  CHECK(spans > 0);
}

TEST_CASE("a list no positions can hold is refused before any prefix is rendered", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  const MemoOn restore;
  orbit::detail::set_cuts_memo(false);  // every prefix rendered, as for a list no earlier list knew
  Window w = engine->new_window();
  const SyncOptions o = orbit::test::sync_support::options("", 16);
  // 4,096 short messages render to some 66 KB, past 512 positions × the longest piece's bytes: the refusal
  // used to come after step 2 rendered each of the 4,096 prefixes (seconds), now after the one whole render.
  std::vector<ChatMessage> far;
  for (int i = 0; i < 4096; ++i) far.push_back(msg(i % 2 == 0 ? "user" : "assistant", "hi " + std::to_string(i)));
  const int64_t before = orbit::detail::prefix_renders_so_far();
  CHECK_THROWS_WITH(w.plan_sync(far, o),
                    Catch::Matchers::StartsWith("plan_sync: the rendered messages: the text is ") &&
                        Catch::Matchers::Contains("more than the model's 512 positions can hold"));
  CHECK_THROWS_WITH(w.sync(far, o), Catch::Matchers::StartsWith("sync: the rendered messages: the text is "));
  CHECK(orbit::detail::prefix_renders_so_far() == before);
  // A list within the bound but past the positions in tokens is still refused by its token count, and a list
  // that fits plans as before, its prefixes rendered.
  const std::vector<ChatMessage> tokens_over(far.begin(), far.begin() + 60);
  CHECK_THROWS_WITH(w.plan_sync(tokens_over, o),
                    Catch::Matchers::StartsWith("plan_sync: the rendered messages are ") &&
                        Catch::Matchers::Contains("tokens, more than the model's 512 positions"));
  const std::vector<ChatMessage> fits(far.begin(), far.begin() + 8);
  const int64_t fits_before = orbit::detail::prefix_renders_so_far();
  const SyncPlan plan = w.plan_sync(fits, o);
  CHECK(orbit::detail::prefix_renders_so_far() > fits_before);
  w.sync(fits, plan);
  CHECK(w.instances().size() > 0);
}

}  // namespace ORBIT_TEST_FILE
