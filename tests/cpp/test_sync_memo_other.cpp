// Prefixes a template renders as other text than the head of the whole rendering (Qwen3 shows an answer's
// reasoning after the last user turn and drops it once a user turn follows), read from the spans of the latest
// list (sync_memo.h) for lists trimmed or summarized at their start, with a new system prompt, and of two agents
// taking turns: the boundaries are those of rendering every prefix, and only a few prefixes are rendered (every
// other-text prefix was rendered before, about half the list).
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "orbit/runtime/chat_template.h"
#include "orbit_catch.h"
#include "sync_memo_support.h"
#include "sync_test_support.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_memo::cuts_both;
using orbit::test::sync_memo::kLookupTool;
using orbit::test::sync_memo::list_cuts;
using orbit::test::sync_memo::ListCuts;
using orbit::test::sync_memo::runtime_msg;
using orbit::test::sync_memo::template_source;
using orbit::test::sync_support::sentence;
using Messages = std::vector<runtime::ChatMessage>;

// Round `i` of an agent `name`'s turns: a user turn, with `tools` an answer that calls a tool and its result,
// and an answer; every other answer carries its reasoning (reasoning_content).
Messages round(std::mt19937_64& rng, std::size_t i, bool tools, const std::string& name) {
  Messages out = {runtime_msg("user", sentence(rng, 6) + " What happened next?")};
  if (tools) {
    const std::string id = "call_" + name + std::to_string(i);
    out.push_back(runtime_msg("assistant", "Let me look."));
    out.back().tool_calls.push_back({id, "lookup", "{\"query\": \"" + sentence(rng, 2) + "\"}"});
    out.push_back(runtime_msg("tool", sentence(rng, 12)));
    out.back().tool_call_id = id;
  }
  out.push_back(runtime_msg("assistant", sentence(rng, 8)));
  if (i % 2 == 1) out.back().reasoning_content = sentence(rng, 5);
  return out;
}

// An agent's list: a system prompt and `rounds` rounds (round), its rounds numbered from `first`.
Messages agent_list(std::mt19937_64& rng, std::size_t rounds, bool tools, const std::string& name,
                    std::size_t first = 0) {
  Messages out = {runtime_msg("system", "You are " + name + ". " + sentence(rng, 4))};
  for (std::size_t r = first; r < first + rounds; ++r) {
    const Messages m = round(rng, r, tools, name);
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

// How an agent edits its last list into the next (each adds a user turn, or a round).
enum class Edit { kTrim, kSummary, kSystem, kSystemTrim };

const char* edit_name(Edit e) {
  return e == Edit::kTrim      ? "trim 2"
         : e == Edit::kSummary ? "summary of 10"
         : e == Edit::kSystem  ? "new system"
                               : "new system, trim 2";
}

Messages edited(const Messages& list, Edit e, std::mt19937_64& rng) {
  Messages out = {list.front()};
  if (e == Edit::kSummary) out.push_back(runtime_msg("assistant", "Earlier: " + sentence(rng, 12)));
  const std::size_t drop = e == Edit::kSummary ? 10 : e == Edit::kSystem ? 0 : 2;
  out.insert(out.end(), list.begin() + 1 + static_cast<std::ptrdiff_t>(drop), list.end());
  if (e == Edit::kSystem || e == Edit::kSystemTrim) out.front().content += " Step " + sentence(rng, 3);
  out.push_back(runtime_msg("user", sentence(rng, 5)));
  return out;
}

// The most prefixes one list may render here: the edit's prefix and the anchors' (a few, as for a template that
// renders every prefix as a head), the other text before the list's first user turn past the edit, and the
// check's renders (6-10 here). Every other-text prefix (about half the list's, 23-35 here) was rendered before.
constexpr int64_t kMaxRenders = 12;

}  // namespace

TEST_CASE("Qwen3's other-text prefixes of edited lists are read from the spans and cut as rendering every prefix",
          "[sync_memo]") {
  const runtime::ChatTemplate t(template_source("qwen3-0.6b"), "qwen3");
  std::mt19937_64 rng(7);
  for (const bool tools : {false, true}) {
    runtime::ChatRenderOptions o;
    if (tools) o.tools_json = kLookupTool;
    for (const Edit e : {Edit::kTrim, Edit::kSummary, Edit::kSystem, Edit::kSystemTrim}) {
      orbit::detail::clear_cuts_memo();
      Messages list = agent_list(rng, tools ? 15 : 30, tools, "Ada");  // 61 messages
      for (int request = 0; request < 3; ++request) {
        REQUIRE(list_cuts(t, o, list, true));  // the memo holds this list
        const Messages next = edited(list, e, rng);
        INFO((tools ? "tools, " : "") << edit_name(e) << ", request " << request << ", " << next.size() << " messages");
        const std::optional<ListCuts> cuts = cuts_both(t, o, next);
        REQUIRE(cuts);
        CHECK(cuts->renders <= kMaxRenders);
        CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(next.size()) - 1);
        list = next;
        list.push_back(runtime_msg("assistant", sentence(rng, 8)));
        list.back().reasoning_content = sentence(rng, 4);
      }
    }
  }
}

TEST_CASE("Qwen3's two agents taking turns read their other-text prefixes and cut as rendering every prefix",
          "[sync_memo]") {
  const runtime::ChatTemplate t(template_source("qwen3-0.6b"), "qwen3");
  std::mt19937_64 rng(11);
  for (const bool tools : {false, true}) {
    runtime::ChatRenderOptions o;
    if (tools) o.tools_json = kLookupTool;
    orbit::detail::clear_cuts_memo();
    const std::size_t rounds = tools ? 12 : 24, size = tools ? 4 : 2;
    std::vector<Messages> agents = {agent_list(rng, rounds, tools, "Ada"), agent_list(rng, rounds, tools, "Bob")};
    std::vector<std::size_t> next_round = {rounds, rounds};
    for (const Messages& a : agents) REQUIRE(cuts_both(t, o, a));
    for (int request = 0; request < 3; ++request) {
      for (std::size_t k = 0; k < agents.size(); ++k) {
        // A new system prompt, the oldest round dropped and one added.
        Messages& a = agents[k];
        a.front().content += " Step " + std::to_string(request);
        a.erase(a.begin() + 1, a.begin() + 1 + static_cast<std::ptrdiff_t>(size));
        const Messages r = round(rng, next_round[k]++, tools, k == 0 ? "Ada" : "Bob");
        a.insert(a.end(), r.begin(), r.end());
        INFO((tools ? "tools, " : "") << "request " << request << ", agent " << k << ", " << a.size() << " messages");
        const std::optional<ListCuts> cuts = cuts_both(t, o, a);
        REQUIRE(cuts);
        CHECK(cuts->renders <= kMaxRenders);
        CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(a.size()) - 1);
      }
    }
  }
}

namespace {

// Mistral Nemo's agent list: a system prompt and `rounds` rounds of a user turn, (with `tools`) an answer calling
// the tool and its result (call ids of nine characters, as the template demands), and an answer.
Messages nemo_list(std::mt19937_64& rng, std::size_t rounds, bool tools) {
  Messages out = {runtime_msg("system", "You are Ada. " + sentence(rng, 4))};
  for (std::size_t r = 0; r < rounds; ++r) {
    out.push_back(runtime_msg("user", sentence(rng, 6) + " What happened next?"));
    if (tools) {
      std::string id = std::to_string(r);
      id = "call" + std::string(5 - id.size(), '0') + id;
      out.push_back(runtime_msg("assistant", ""));
      out.back().tool_calls.push_back({id, "lookup", "{\"query\": \"" + sentence(rng, 2) + "\"}"});
      out.push_back(runtime_msg("tool", sentence(rng, 12)));
      out.back().tool_call_id = id;
    }
    out.push_back(runtime_msg("assistant", sentence(rng, 8)));
  }
  return out;
}

}  // namespace

// Mistral Nemo renders the system prompt only in the last message, where that is a user turn, and the tools before
// the last user turn: a list that ends otherwise renders as before under a new system prompt, and each prefix that
// ends with a user turn carries the new prompt there, past where it parts from the rendering (the tools, or that
// turn's start), so its text is longer or shorter than the spans give, and where it parts is as they give. The
// check compared the longest such prefix's length too and rendered every prefix (all but a few heads with a tool).
TEST_CASE("Mistral Nemo's list that ends past its last user turn reads its prefixes under a new system prompt",
          "[sync_memo]") {
  const runtime::ChatTemplate t(template_source("mistral-nemo-instruct-2407"), "nemo", "<s>", "</s>");
  std::mt19937_64 rng(13);
  for (const bool tools : {false, true}) {
    for (const bool answer_last : {false, true}) {
      runtime::ChatRenderOptions o;
      if (tools) o.tools_json = kLookupTool;
      orbit::detail::clear_cuts_memo();
      Messages list = nemo_list(rng, tools ? 15 : 30, tools);  // 61 messages
      if (!answer_last) list.pop_back();                       // a tool's result last (with a tool)
      REQUIRE(cuts_both(t, o, list));
      for (int request = 0; request < 3; ++request) {
        list.front().content += " Step " + std::to_string(request) + ": " + sentence(rng, request + 1);
        INFO((tools ? "tools, " : "") << (answer_last ? "answer last" : "") << ", request " << request);
        const std::optional<ListCuts> cuts = cuts_both(t, o, list);
        REQUIRE(cuts);
        // The new system prompt's prefix (and a longer one), and the check's renders.
        CHECK(cuts->renders <= 6);
        CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(list.size()) - 1);
      }
    }
  }
}

// The same with the oldest rounds trimmed as well. With a tool, every prefix of the latest list K before its last
// user turn writes the tools before its own last user turn, so none is a head of K's rendering, and the spans
// found no place in K to anchor this list's first message on: every prefix was rendered (48-57 a list here). The
// anchor now takes the place in K where this list's rendering past its first message starts again.
TEST_CASE("Mistral Nemo's list with a new system prompt and its oldest rounds trimmed reads its prefixes",
          "[sync_memo]") {
  const runtime::ChatTemplate t(template_source("mistral-nemo-instruct-2407"), "nemo", "<s>", "</s>");
  std::mt19937_64 rng(17);
  for (const bool tools : {false, true}) {
    for (const int last : {0, 1, 2}) {  // the last round's answer dropped (a tool's result or a user turn last),
                                        // kept, or a user turn added
      runtime::ChatRenderOptions o;
      if (tools) o.tools_json = kLookupTool;
      orbit::detail::clear_cuts_memo();
      const std::size_t round_size = tools ? 4 : 2;
      Messages list = nemo_list(rng, tools ? 15 : 30, tools);  // 61 messages
      if (last == 0) list.pop_back();
      if (last == 2) list.push_back(runtime_msg("user", sentence(rng, 6)));
      REQUIRE(cuts_both(t, o, list));
      for (int request = 0; request < 3; ++request) {
        list.front().content += " Step " + std::to_string(request) + ": " + sentence(rng, request + 1);
        list.erase(list.begin() + 1, list.begin() + 1 + static_cast<std::ptrdiff_t>(round_size));
        INFO((tools ? "tools, " : "") << "last " << last << ", request " << request << ", " << list.size()
                                      << " messages");
        const std::optional<ListCuts> cuts = cuts_both(t, o, list);
        REQUIRE(cuts);
        // The first message's prefix, the prefixes past the bytes the two renderings agree on (a user turn last
        // carries the system prompt), and the check's renders.
        CHECK(cuts->renders <= 8);
        CHECK(cuts->spans + cuts->renders >= static_cast<int64_t>(list.size()) - 1);
      }
    }
  }
}

}  // namespace ORBIT_TEST_FILE
