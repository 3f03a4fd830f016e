// Helpers the tests of Window::sync's rendering share (test_sync_cuts.cpp, test_sync_memo.cpp): two plans of one
// list checked equal in every field, random message lists of several kinds of text, the templates they run under.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "orbit/sync.h"
#include "orbit_catch.h"
#include "sync_test_support.h"

namespace orbit::test::sync_cuts {

using orbit::test::sync_support::sentence;

// Two plans of one list on one window, made two ways, are the same in every field.
inline void require_same(const SyncPlan& one, const SyncPlan& other) {
  REQUIRE(one.tokens == other.tokens);
  REQUIRE(one.merged_boundaries == other.merged_boundaries);
  REQUIRE(one.generation_prompt == other.generation_prompt);
  REQUIRE(one.generation_prompt_exact == other.generation_prompt_exact);
  REQUIRE(one.evict == other.evict);
  REQUIRE(one.reorder == other.reorder);
  REQUIRE(one.units.size() == other.units.size());
  for (std::size_t i = 0; i < one.units.size(); ++i) {
    const SyncUnit& a = one.units[i];
    const SyncUnit& b = other.units[i];
    INFO("unit " << i);
    REQUIRE(a.first_message == b.first_message);
    REQUIRE(a.end_message == b.end_message);
    REQUIRE(a.position == b.position);
    REQUIRE(a.tokens == b.tokens);
    REQUIRE(a.key == b.key);
    REQUIRE(a.part == b.part);
    REQUIRE(a.is_turn == b.is_turn);
    REQUIRE(a.action == b.action);
    REQUIRE(a.moved == b.moved);
    REQUIRE(a.instance == b.instance);
  }
  REQUIRE(one.describe() == other.describe());
}

inline const std::vector<std::string> kRoles = {"system", "user", "assistant", "tool"};

// Message text of several kinds: stories, characters outside the vocabularies (unk runs), whitespace runs,
// nothing, added tokens written in text, a space first.
inline std::string content(std::mt19937_64& rng) {
  static const std::vector<std::string> kOdd = {
      "caf\xC3\xA9",  "\xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\x99\x82", "  ",  "\t",         "\n\n",
      "\xE2\x96\x81", "<|start_story|>",          " <|end_story|>",   "<s>", "{\"a\": 1}", "\xC2\xA0"};
  switch (rng() % 6) {
    case 0: return "";
    case 1: {
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i >= 0; --i) s += kOdd[rng() % kOdd.size()] + sentence(rng, 2);
      return s;
    }
    case 2: return " " + sentence(rng, 1 + static_cast<int>(rng() % 8));
    default: return sentence(rng, 1 + static_cast<int>(rng() % 20));
  }
}

inline std::vector<ChatMessage> random_list(std::mt19937_64& rng, std::size_t n) {
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < n; ++i) {
    ChatMessage m;
    m.role = kRoles[rng() % kRoles.size()];
    m.content = content(rng);
    if (m.role == "assistant" && rng() % 4 == 0) m.tool_calls.push_back({"call_1", "lookup", "{\"q\": \"ball\"}"});
    out.push_back(std::move(m));
  }
  return out;
}

// The bundled plain template (the models have none), turns after a special token, turns that run on into each
// other with a space, and turns with nothing between them.
inline const std::vector<std::string> kTemplates = {
    "", orbit::test::sync_support::kTemplate, orbit::test::sync_support::kRunOnTemplate,
    "{% for message in messages %}{{ message.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}"};

}  // namespace orbit::test::sync_cuts
