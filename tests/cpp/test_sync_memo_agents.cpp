// Agents taking turns on the memos (sync_memo.h, sync_latest.h): each rewrites its system prompt and trims its
// oldest turns at every request, so neither its first nor its second message is its last list's, and the latest
// list under the template is another agent's. Each reads its own last list (by the anchors its messages name):
// step 2 renders a few prefixes, not every one, and the boundaries and tokens are those of rendering every prefix
// and encoding the whole rendering, under every bundled template; and where the agents' lists share messages, and
// under templates that move or repeat content, the results stay exact.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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
using orbit::test::sync_memo::ListCuts;
using orbit::test::sync_memo::runtime_msg;
using orbit::test::sync_memo::template_source;
using orbit::test::sync_support::sentence;
using Messages = std::vector<runtime::ChatMessage>;

// Round `i` of an agent's turns (`tools`: a user turn, an assistant answer that calls a tool, its result, an
// answer; else a user turn and an answer). `user`, when given, is the user turn's text.
Messages round(std::mt19937_64& rng, std::size_t i, bool tools, const std::string& agent,
               const std::optional<std::string>& user = std::nullopt) {
  Messages out = {runtime_msg("user", user ? *user : sentence(rng, 6) + " What happened next?")};
  if (tools) {
    const std::string id = "call_" + agent + std::to_string(i);
    out.push_back(runtime_msg("assistant", "Let me look."));
    out.back().tool_calls.push_back({id, "lookup", "{\"query\": \"" + sentence(rng, 2) + "\"}"});
    out.push_back(runtime_msg("tool", sentence(rng, 20)));
    out.back().tool_call_id = id;
  }
  out.push_back(runtime_msg("assistant", sentence(rng, 10)));
  return out;
}

// An agent that rewrites its system prompt at every request and drops its oldest round as it adds one: its list
// of a system prompt and `rounds` rounds, and the next.
struct MovingAgent {
  std::string name;
  bool tools = false;
  bool keep_system = false;               // the system prompt stays (only the rounds move)
  std::vector<std::string> shared_users;  // user turns drawn from these when not empty (agents share them)
  Messages list;
  std::size_t next_round = 0;

  void start(std::mt19937_64& rng, std::size_t rounds) {
    list = {runtime_msg("system", system(rng))};
    for (std::size_t r = 0; r < rounds; ++r) add_round(rng);
  }
  // The next request's list: a new system prompt (unless keep_system), the oldest round dropped, one added.
  void step(std::mt19937_64& rng) {
    if (!keep_system) list.front().content = system(rng);
    const std::size_t round_size = tools ? 4 : 2;
    list.erase(list.begin() + 1, list.begin() + 1 + static_cast<std::ptrdiff_t>(round_size));
    add_round(rng);
  }

 private:
  std::string system(std::mt19937_64& rng) const {
    return "You are " + name + ". Step " + std::to_string(next_round) + ", notes: " + sentence(rng, 4);
  }
  void add_round(std::mt19937_64& rng) {
    std::optional<std::string> user;
    if (!shared_users.empty()) user = shared_users[rng() % shared_users.size()];
    const Messages r = round(rng, next_round++, tools, name, user);
    list.insert(list.end(), r.begin(), r.end());
  }
};

// Two agents (`a`, `b`, started) taking turns for `requests` requests each under `t`: each list's cuts checked
// equal to rendering every prefix's (cuts_both), `check` called on each with the agent's index.
void take_turns(const runtime::ChatTemplate& t, const runtime::ChatRenderOptions& o, std::mt19937_64& rng,
                std::vector<MovingAgent>& agents, int requests,
                const std::function<void(const ListCuts&, const Messages&, std::size_t)>& check) {
  for (const MovingAgent& a : agents) REQUIRE(cuts_both(t, o, a.list));
  for (int request = 0; request < requests; ++request) {
    for (std::size_t k = 0; k < agents.size(); ++k) {
      agents[k].step(rng);
      INFO("request " << request << ", agent " << agents[k].name << ", " << agents[k].list.size() << " messages");
      const std::optional<ListCuts> cuts = cuts_both(t, o, agents[k].list);
      REQUIRE(cuts);
      check(*cuts, agents[k].list, k);
    }
  }
}

}  // namespace

TEST_CASE("agents taking turns, each with a new system prompt and its oldest turn dropped, read their own list",
          "[sync_memo]") {
  runtime::ChatRenderOptions o;
  o.tools_json = kLookupTool;
  std::mt19937_64 rng(41);
  for (const std::string& name : {std::string(""), std::string("qwen2.5-7b-instruct")}) {
    const runtime::ChatTemplate t(name.empty() ? kPlainChatTemplate : template_source(name), "agents");
    orbit::detail::clear_cuts_memo();
    std::vector<MovingAgent> agents = {{"Ada", true}, {"Bob", true}};
    agents[0].start(rng, 10);  // 41 messages
    agents[1].start(rng, 9);   // 37
    int64_t renders = 0, spans = 0;
    take_turns(t, o, rng, agents, 6, [&](const ListCuts& cuts, const Messages& list, std::size_t) {
      // The new system prompt's prefix, the added round's prefixes before its last, and the check's two and one
      // per other role.
      CHECK(cuts.renders <= 6 + kRoleChecks);
      CHECK(cuts.spans + cuts.renders >= static_cast<int64_t>(list.size()) - 1);
      renders += cuts.renders;
      spans += cuts.spans;
    });
    std::printf("%s: two agents taking turns, 12 lists: %lld prefixes rendered, %lld read from spans\n",
                name.empty() ? "plain" : name.c_str(), static_cast<long long>(renders), static_cast<long long>(spans));
  }
}

namespace {

// TinyStories-656K with 16,384 positions (a copy of its directory, config.json changed; plan_sync runs no
// forward), so an agent's list under a bundled template with a tool fits.
std::shared_ptr<Engine> long_engine() {
  namespace fs = std::filesystem;
  const fs::path source = orbit::test::sync_support::kModel;
  const fs::path dir = fs::temp_directory_path() / ("orbit-sync-agents-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(source)) {
    const fs::path to = dir / e.path().filename();
    if (e.path().filename() != "config.json" && !fs::exists(to)) fs::create_symlink(fs::absolute(e.path()), to);
  }
  std::ifstream in(source / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const std::string key = "\"max_position_embeddings\": 512";
  const std::size_t at = config.find(key);
  REQUIRE(at != std::string::npos);
  config.replace(at, key.size(), "\"max_position_embeddings\": 16384");
  std::ofstream(dir / "config.json") << config;
  EngineOptions o;
  o.model = dir.string();
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 16;
  o.background = BackgroundMode::kInline;
  std::shared_ptr<Engine> engine = Engine::open(o);
  fs::remove_all(dir);
  return engine;
}

std::vector<ChatMessage> sdk_messages(const Messages& list) {
  std::vector<ChatMessage> out;
  for (const runtime::ChatMessage& m : list) {
    ChatMessage c;
    c.role = m.role;
    c.content = m.content;
    c.tool_call_id = m.tool_call_id;
    c.reasoning_content = m.reasoning_content;
    for (const runtime::ChatToolCall& call : m.tool_calls) c.tool_calls.push_back({call.id, call.name, call.arguments});
    out.push_back(std::move(c));
  }
  return out;
}

// Turns the memos back on however the test leaves.
struct MemosOn {
  ~MemosOn() {
    orbit::detail::set_cuts_memo(true);
    orbit::detail::set_incremental_encode(true);
  }
};

// What plan_sync of one list cost with the memos on: prefixes rendered, tokens reused, tokens in all.
struct PlanCost {
  int64_t renders = 0, reused = 0, tokens = 0, merged = 0;
};

// plan_sync of `list` on `w` with the memos on (after whatever lists they saw) and off: the plans equal, the
// tokens those of rendering the whole list and encoding it; the memos' side's cost.
PlanCost plan_both(Engine& engine, const Window& w, const std::vector<ChatMessage>& list, const SyncOptions& o) {
  const MemosOn restore;
  PlanCost cost;
  const int64_t renders = orbit::detail::prefix_renders_so_far();
  const int64_t reused = orbit::detail::tokens_reused_so_far();
  const SyncPlan on = w.plan_sync(list, o);
  cost.renders = orbit::detail::prefix_renders_so_far() - renders;
  cost.reused = orbit::detail::tokens_reused_so_far() - reused;
  cost.tokens = static_cast<int64_t>(on.tokens.size());
  cost.merged = on.merged_boundaries;
  orbit::detail::set_cuts_memo(false);  // the memos off keep nothing
  orbit::detail::set_incremental_encode(false);
  const SyncPlan off = w.plan_sync(list, o);
  orbit::test::sync_cuts::require_same(on, off);
  REQUIRE(on.tokens == engine.tokenize_chat(list, false, o.chat));
  return cost;
}

}  // namespace

TEST_CASE("agents taking turns plan as rendering and encoding whole under every bundled template", "[sync_memo]") {
  namespace fs = std::filesystem;
  const std::shared_ptr<Engine> engine = long_engine();
  std::mt19937_64 rng(42);
  int64_t configurations = 0, lists = 0, renders = 0, prefixes = 0, reused = 0, tokens = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(ORBIT_TEST_DATA_DIR) / "templates")) {
    if (e.path().extension() != ".jinja") continue;
    const std::string name = e.path().stem().string();
    for (const bool tools : {false, true}) {
      SyncOptions o;
      o.chat.chat_template = template_source(name);
      if (tools) o.chat.tools_json = kLookupTool;
      o.chat.extra_json = R"({"date_string": "26 Jul 2024"})";
      orbit::detail::clear_cuts_memo();
      orbit::detail::clear_encode_memo();
      const Window w = engine->new_window();
      std::vector<MovingAgent> agents = {{"Ada", tools}, {"Bob", tools}};
      agents[0].start(rng, tools ? 6 : 12);  // 25 messages
      agents[1].start(rng, tools ? 5 : 10);  // 21
      try {
        for (const MovingAgent& a : agents) (void)w.plan_sync(sdk_messages(a.list), o);
      } catch (const Error&) {  // a template that refuses the lists (a system prompt, or tools, it cannot take)
        continue;
      }
      ++configurations;
      for (int request = 0; request < 3; ++request) {
        for (MovingAgent& a : agents) {
          a.step(rng);
          INFO(name << (tools ? ", tools" : "") << ", request " << request << ", agent " << a.name);
          const PlanCost cost = plan_both(*engine, w, sdk_messages(a.list), o);
          ++lists;
          reused += cost.reused;
          tokens += cost.tokens;
          // Each template renders the prefixes it refuses or renders otherwise, the new system prompt's (and the
          // first user turn's, where the template moves the system prompt there), the added round's before its
          // last, and the check's two and one per other role: the rest is read.
          CHECK(cost.renders <= cost.merged + (tools ? 6 : 5) + kRoleChecks);
          renders += cost.renders - cost.merged;
          prefixes += static_cast<int64_t>(a.list.size()) - 1 - cost.merged;
          CHECK(cost.reused * 2 > cost.tokens);  // the agent's own last list's tokens
        }
      }
    }
  }
  std::printf(
      "bundled templates: %lld lists of two agents taking turns planned as whole under %lld templates with and "
      "without a tool: %lld of %lld prefixes rendered beyond the merged boundaries, %lld of "
      "%lld tokens reused\n",
      static_cast<long long>(lists), static_cast<long long>(configurations), static_cast<long long>(renders),
      static_cast<long long>(prefixes), static_cast<long long>(reused), static_cast<long long>(tokens));
  // Ten bundled templates, with and without a tool; Mistral 7B and Gemma 2 take no system prompt, and some
  // templates no tool.
  CHECK(configurations >= 14);
  CHECK(renders * 3 < prefixes);
}

TEST_CASE("a list that grew reads the prefixes its last list rendered otherwise, under every bundled template",
          "[sync_memo]") {
  // Qwen3 renders an answer after the last user turn with its reasoning and drops it once a user turn follows, and
  // Mistral Nemo puts the system prompt and tools in the last user turn: about half of a list's prefixes render
  // otherwise than its head. A grown list reads them from its last list where that text parts from the last
  // rendering before the new rendering does (PrefixRender::agrees), instead of rendering each again.
  namespace fs = std::filesystem;
  const std::shared_ptr<Engine> engine = long_engine();
  std::mt19937_64 rng(46);
  int64_t configurations = 0, other_templates = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(ORBIT_TEST_DATA_DIR) / "templates")) {
    if (e.path().extension() != ".jinja") continue;
    const std::string name = e.path().stem().string();
    for (const bool tools : {false, true}) {
      SyncOptions o;
      o.chat.chat_template = template_source(name);
      if (tools) o.chat.tools_json = kLookupTool;
      o.chat.extra_json = R"({"date_string": "26 Jul 2024"})";
      orbit::detail::clear_cuts_memo();
      orbit::detail::clear_encode_memo();
      const Window w = engine->new_window();
      Messages list = {runtime_msg("system", "You tell stories. " + sentence(rng, 3))};
      std::size_t next = 0;
      const auto grow = [&] {
        Messages r = round(rng, next, tools, "Ada");
        r.back().reasoning_content = "I think " + sentence(rng, 4);
        list.insert(list.end(), r.begin(), r.end());
        ++next;
      };
      for (int k = 0; k < 6; ++k) grow();
      try {
        (void)w.plan_sync(sdk_messages(list), o);
      } catch (const Error&) {  // a template that refuses the lists (a system prompt, or tools, it cannot take)
        continue;
      }
      ++configurations;
      for (int request = 0; request < 3; ++request) {
        grow();
        INFO(name << (tools ? ", tools" : "") << ", request " << request);
        const PlanCost cost = plan_both(*engine, w, sdk_messages(list), o);
        // The new round's prefixes and the last list's whole rendering (which the new rendering may part from):
        // nothing the last list rendered is rendered again.
        CHECK(cost.renders <= (tools ? 4 : 2) + 1);
        other_templates += cost.merged > 4 ? 1 : 0;
      }
    }
  }
  CHECK(configurations >= 14);
  CHECK(other_templates > 0);  // Qwen3's and Mistral Nemo's merge boundaries, and read them
}

TEST_CASE("agents whose lists share messages each read their own list and cut as rendering every prefix does",
          "[sync_memo]") {
  const runtime::ChatRenderOptions o;
  const std::vector<std::string> users = {"Go on.", "Continue.", "And then?"};
  std::mt19937_64 rng(43);
  for (const std::string& name : {std::string(""), std::string("qwen2.5-7b-instruct")}) {
    const runtime::ChatTemplate t(name.empty() ? kPlainChatTemplate : template_source(name), "shared");
    // One system prompt both keep, or each rewritten at every request; user turns from one short list either way.
    for (const bool keep_system : {true, false}) {
      orbit::detail::clear_cuts_memo();
      std::vector<MovingAgent> agents = {{"Ada", false, keep_system, users}, {"Bob", false, keep_system, users}};
      agents[0].start(rng, 16);
      agents[1].start(rng, 14);
      if (keep_system) agents[1].list.front() = agents[0].list.front();
      INFO((name.empty() ? "plain" : name) << (keep_system ? ", one system prompt" : ", new system prompts"));
      take_turns(t, o, rng, agents, 6, [&](const ListCuts& cuts, const Messages& list, std::size_t) {
        // The first alias (one system prompt) and the anchors of the shared user turns name the other agent's
        // list as often as not; this agent's holds more of its messages.
        CHECK(cuts.renders <= 5);
        CHECK(cuts.spans + cuts.renders >= static_cast<int64_t>(list.size()) - 1);
      });
    }
  }
}

TEST_CASE("agents whose last messages are each other's cut as rendering every prefix does", "[sync_memo]") {
  // Every message but the system prompts drawn from six texts: each list's last message is the other agent's
  // last (or earlier) message too, so its anchors name either agent's list; whichever is read, the cuts are
  // those of rendering every prefix.
  const runtime::ChatRenderOptions o;
  std::mt19937_64 rng(44);
  const runtime::ChatTemplate t(template_source("qwen2.5-7b-instruct"), "qwen2.5");
  orbit::detail::clear_cuts_memo();
  int64_t lists = 0, spans = 0, renders = 0;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<MovingAgent> agents = {{"Ada", false, false, {"Go on.", "More.", "And then?"}},
                                       {"Bob", false, false, {"Go on.", "More.", "And then?"}}};
    for (MovingAgent& a : agents) {
      a.start(rng, 10);
      for (std::size_t i = 2; i < a.list.size(); i += 2) a.list[i].content = "Fine." + std::string(rng() % 3, '!');
    }
    take_turns(t, o, rng, agents, 4, [&](const ListCuts& cuts, const Messages&, std::size_t) {
      ++lists;
      spans += cuts.spans;
      renders += cuts.renders;
    });
  }
  std::printf("agents whose last messages are each other's: %lld lists, %lld prefixes rendered, %lld read\n",
              static_cast<long long>(lists), static_cast<long long>(renders), static_cast<long long>(spans));
  CHECK(lists == 4 * 2 * 4);
  CHECK(spans > 0);
}

namespace {

// Templates that move or repeat content: a message rendered again further on or in another place, so the spans'
// byte check and check renders are what keep the cuts exact.
std::vector<std::pair<const char*, const char*>> moving_templates() {
  return {
      {"system prompt in every turn",
       "{% for message in messages %}{% if not loop.first %}[{{ messages[0].content }}] {% endif %}"
       "{{ message.role }}: {{ message.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"},
      {"system prompt in the last user turn",
       "{% for message in messages %}{% if loop.first %}{% elif message.role == 'user' and loop.last %}"
       "user: {{ messages[0].content }} {{ message.content }}\n{% else %}{{ message.role }}: {{ message.content }}\n"
       "{% endif %}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"},
      {"last message first",
       "({{ messages[-1].content }})\n{% for message in messages %}{{ message.role }}: {{ message.content }}\n"
       "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"},
      {"each message twice",
       "{% for message in messages %}{{ message.role }}: {{ message.content }} / {{ message.content }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant:{% endif %}"},
      {"turns numbered",
       "{% for message in messages %}{{ loop.index }}. {{ message.role }}: {{ message.content }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant:{% endif %}"},
      {"the previous message repeated",
       "{% for message in messages %}{% if not loop.first %}(after: {{ messages[loop.index0 - 1].content }}) "
       "{% endif %}{{ message.role }}: {{ message.content }}\n{% endfor %}"},
      {"system prompt at the end",
       "{% for message in messages %}{% if not loop.first %}{{ message.role }}: {{ message.content }}\n{% endif %}"
       "{% endfor %}[{{ messages[0].content }}]"},
  };
}

}  // namespace

TEST_CASE("agents taking turns under templates that move or repeat content cut as rendering every prefix does",
          "[sync_memo]") {
  const runtime::ChatRenderOptions o;
  int64_t lists = 0, spans = 0;
  for (const auto& [what, source] : moving_templates()) {
    std::mt19937_64 rng(45);
    const runtime::ChatTemplate t(source, what);
    orbit::detail::clear_cuts_memo();
    std::vector<MovingAgent> agents = {{"Ada", true}, {"Bob", true, false, {"Go on.", "More."}}};
    agents[0].start(rng, 8);
    agents[1].start(rng, 7);
    INFO(what);
    take_turns(t, o, rng, agents, 4, [&](const ListCuts& cuts, const Messages&, std::size_t) {
      ++lists;
      spans += cuts.spans;
    });
  }
  CHECK(lists == 7 * 2 * 4);
  CHECK(spans > 0);  // the templates that only repeat a message in place read spans still
}

TEST_CASE("a memo keeps at most kMaxEntries aliases and a list names itself by at most nine anchors", "[sync_memo]") {
  using orbit::detail::ListRenders;
  using Memo = orbit::detail::ListMemo<ListRenders>;
  const auto digest = [](const std::string& text) {
    Sha256 h;
    h.update(text);
    return h.digest();
  };
  Memo memo;
  const auto value = std::make_shared<ListRenders>();
  memo.put(digest("list"), value);
  const std::size_t n = Memo::kMaxEntries + 100;
  for (std::size_t i = 0; i < n; ++i) {
    memo.alias(digest("alias " + std::to_string(i)), digest("list"));
    if (i == 200) memo.alias(digest("alias 0"), digest("list"));  // set again: now the most recent
  }
  CHECK(memo.aliases() == Memo::kMaxEntries);
  // The least recently set are forgotten first: alias 0 was set again after 1..200 were set, so the 100
  // forgotten are 1..100.
  const auto named = [&](Memo& m, const std::string& alias) { return m.peek_alias(digest(alias)).second; };
  CHECK(named(memo, "alias 0") == value);
  CHECK(named(memo, "alias 1") == nullptr);
  CHECK(named(memo, "alias 100") == nullptr);
  CHECK(named(memo, "alias 101") == value);
  CHECK(named(memo, "alias " + std::to_string(n - 1)) == value);
  // An alias read once its value was dropped (kMaxEntries values put after it) names nothing, and is forgotten.
  Memo other;
  other.put(digest("first"), std::make_shared<ListRenders>());
  other.alias(digest("names first"), digest("first"));
  for (std::size_t i = 0; i < Memo::kMaxEntries; ++i) other.put(digest(std::to_string(i)), value);
  CHECK(other.aliases() == 1);
  CHECK(named(other, "names first") == nullptr);
  CHECK(other.aliases() == 0);

  // A list of 1,000 messages names itself by its last message and at most eight marked ones before it.
  const runtime::ChatTemplate t(kPlainChatTemplate, "plain");
  Messages list;
  for (int i = 0; i < 1000; ++i) list.push_back(runtime_msg(i % 2 ? "assistant" : "user", std::to_string(i)));
  const orbit::detail::ListKeys keys = orbit::detail::list_keys(t, {}, list);
  const std::vector<std::size_t> anchors = orbit::detail::anchor_messages(keys);
  REQUIRE(anchors.size() == 1 + orbit::detail::kMaxMarkedAnchors);
  CHECK(anchors.front() == 999);
  for (std::size_t k = 1; k < anchors.size(); ++k) {
    CHECK(orbit::detail::marked_anchor(keys.messages[anchors[k]]));
    CHECK(anchors[k] < anchors[k - 1]);
  }
  CHECK(orbit::detail::anchor_messages(orbit::detail::list_keys(t, {}, {list.front()})).empty());
}

}  // namespace ORBIT_TEST_FILE
