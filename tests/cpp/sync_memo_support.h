// Helpers the tests of step 2's memo share (test_sync_memo_edits.cpp, test_sync_memo_agents.cpp): one list's
// cuts with the memo on or off and how many prefixes they rendered, the two checked equal, messages, templates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "orbit/runtime/chat_template.h"
#include "orbit_catch.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace orbit::test::sync_memo {

// Turns the memo back on however the test leaves.
struct MemoOn {
  ~MemoOn() { orbit::detail::set_cuts_memo(true); }
};

// Step 2 of one list (detail::text_cuts) with the memo on or off: the cuts, the merged boundaries, and how many
// prefixes it rendered and read from a latest list's spans.
struct ListCuts {
  std::vector<orbit::detail::TextCut> cuts;
  int64_t merged = 0;
  int64_t renders = 0;
  int64_t spans = 0;
};

// ListCuts of `list` under `t` with `o`; nullopt when the template refuses the whole list.
inline std::optional<ListCuts> list_cuts(const runtime::ChatTemplate& t, const runtime::ChatRenderOptions& o,
                                         const std::vector<runtime::ChatMessage>& list, bool memo) {
  const MemoOn restore;
  orbit::detail::set_cuts_memo(memo);
  runtime::PreparedChat chat;
  std::string text;
  runtime::ClockReads reads;
  try {
    chat = t.prepare(list, o);
    text = t.render_prefix(chat, list.size(), false, &reads);
  } catch (const Error&) {
    return std::nullopt;
  }
  ListCuts out;
  const int64_t renders = orbit::detail::prefix_renders_so_far();
  const int64_t spans = orbit::detail::prefix_spans_so_far();
  out.cuts = orbit::detail::text_cuts(t, chat, orbit::detail::list_keys(t, o, list), text, reads, &out.merged);
  out.renders = orbit::detail::prefix_renders_so_far() - renders;
  out.spans = orbit::detail::prefix_spans_so_far() - spans;
  return out;
}

// Step 2 of `list` with the memo on (after whatever lists it saw) and off, checked equal; the memo's side.
inline std::optional<ListCuts> cuts_both(const runtime::ChatTemplate& t, const runtime::ChatRenderOptions& o,
                                         const std::vector<runtime::ChatMessage>& list) {
  const std::optional<ListCuts> every = list_cuts(t, o, list, false);
  const std::optional<ListCuts> memo = list_cuts(t, o, list, true);
  REQUIRE(every.has_value() == memo.has_value());
  if (!memo) return memo;
  REQUIRE(memo->merged == every->merged);
  REQUIRE(memo->cuts.size() == every->cuts.size());
  for (std::size_t i = 0; i < memo->cuts.size(); ++i) {
    INFO("cut " << i);
    REQUIRE(memo->cuts[i].text == every->cuts[i].text);
    REQUIRE(memo->cuts[i].message == every->cuts[i].message);
  }
  return memo;
}

inline runtime::ChatMessage runtime_msg(const std::string& role, const std::string& content) {
  runtime::ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// The source of tests/data/templates/<name>.jinja.
inline std::string template_source(const std::string& name) {
  std::ifstream in(std::filesystem::path(ORBIT_TEST_DATA_DIR) / "templates" / (name + ".jinja"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How many prefixes the spans' check renders per anchor beyond the shortest and the longest read (sync_memo.h):
// the shortest read that ends with each other role, of a user turn, an answer and a tool's result.
inline constexpr int64_t kRoleChecks = 2;

// One function tool, `lookup(query)`, as a request's tools JSON (the agent lists' tool turns call it).
inline constexpr const char* kLookupTool =
    R"([{"type": "function", "function": {"name": "lookup", "description": "Look a story up.", "parameters": )"
    R"({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}])";

}  // namespace orbit::test::sync_memo
