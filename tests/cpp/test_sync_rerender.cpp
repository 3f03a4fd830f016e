// Templates that render an earlier turn otherwise once later messages arrive, through Window::sync: Qwen3 shows
// an answer's reasoning (and an empty <think> block for the last answer) only while no query follows it, and
// Mistral Nemo writes the system prompt (and, with tools, the tools) into the last user turn, so a user turn
// renders otherwise once another follows it. Their real templates (tests/data/templates) drive message lists
// through one window step by step, most steps changing what earlier messages rendered to, and at every step:
//   - the window's tokens are the tokenization of the whole list's rendering by an independent renderer
//     (@huggingface/jinja through node where tests/node has it, else orbit's Engine::render_chat of the list
//     alone), and the generation prompt the rendering with it continues with;
//   - the units start exactly where rendering every prefix of the list says (a prefix rendered as a head of the
//     whole rendering whose tokens are the head of its tokens: sync.h steps 2 and 3), by the same renderer;
//   - what still lines up is reused: every instance inside the tokens the old and the new rendering share stays
//     in the window, step 3 takes tokens from the earlier list's encoding, and step 2 renders only the prefixes
//     the lists before did not show.
// Each list is synced again into a second window, once every list is known to the memos (sync_memo.h: read, not
// rendered). Where the memos took an earlier list's text or cuts for this one's without comparing the renderings,
// the first two checks fail: step 3's stale tokens (window_sync_encode.cpp's common_prefix), step 2's stale cuts
// (window_sync_memo.cpp's known.common).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_test_support.h"
#include "window/sync_render.h"

namespace {

using namespace orbit;
using nlohmann::ordered_json;
using orbit::test::sync_support::msg;
namespace fs = std::filesystem;
using Messages = std::vector<ChatMessage>;

// How a step's whole rendering relates to the step before's.
enum class Step {
  kGrows,     // messages appended, and the rendering before is a head of this one's
  kRewrites,  // messages appended, and an earlier message renders otherwise: the rendering before is no head
  kEdits,     // the list edited at its start (a new system prompt, the oldest round dropped)
};

struct Scenario {
  std::string name;
  std::string template_name;  // tests/data/templates/<name>.jinja
  bool tools = false;
  std::vector<std::pair<Step, Messages>> steps;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The source of the scenario's template.
std::string template_text(const Scenario& s) {
  return read_file(fs::path(ORBIT_TEST_DATA_DIR) / "templates" / (s.template_name + ".jinja"));
}

// One function tool, `lookup(query)`, as the request's tools JSON.
constexpr const char* kTools =
    R"([{"type": "function", "function": {"name": "lookup", "description": "Look a story up.", "parameters": )"
    R"({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}])";

// The scenario's template and tools; units of 24 tokens and more are chunks, shorter ones at the tail turns.
SyncOptions sync_options(const Scenario& s) {
  SyncOptions o;
  o.chunk_min_tokens = 24;
  o.chat.chat_template = template_text(s);
  if (s.tools) o.chat.tools_json = kTools;
  return o;
}

ChatMessage answer(const std::string& content, std::optional<std::string> reasoning = std::nullopt) {
  ChatMessage m = msg("assistant", content);
  m.reasoning_content = std::move(reasoning);
  return m;
}

// An answer calling lookup(query) as call `id` (nine letters and digits, as Mistral Nemo wants), and its result.
Messages call_and_result(const std::string& id, const std::string& query, const std::string& result,
                         std::optional<std::string> reasoning = std::nullopt) {
  ChatMessage call = answer("", std::move(reasoning));
  call.tool_calls.push_back({id, "lookup", "{\"query\": \"" + query + "\"}"});
  ChatMessage tool = msg("tool", result);
  tool.tool_call_id = id;
  return {call, tool};
}

// `list` and then `more`.
Messages plus(Messages list, const Messages& more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}

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

// What a list renders to: each prefix's text (prefix[i - 1]: its first i messages; prefix[n - 1], the whole
// list; nullopt where the template refuses it) and the whole list with the generation prompt.
struct Rendered {
  std::vector<std::optional<std::string>> prefix;
  std::optional<std::string> with_prompt;
  const std::string& whole() const { return *prefix.back(); }
};

// The template's variables for `list` as a chat API sends them (orbit/sync.h: ChatMessage, ChatToolCall).
ordered_json messages_json(const Messages& list) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& m : list) {
    ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
    if (m.name) j["name"] = *m.name;
    if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
    for (const ChatToolCall& c : m.tool_calls) {
      j["tool_calls"].push_back({{"id", c.id},
                                 {"type", "function"},
                                 {"function", {{"name", c.name}, {"arguments", ordered_json::parse(c.arguments)}}}});
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Every prefix of each step's list, and each whole list with the generation prompt, rendered by
// @huggingface/jinja (tests/node/chat_template_oracle.mjs), with the model's bos_token and eos_token from its
// tokenizer_config.json as Hugging Face passes them; nullopt where node or the package is missing.
std::optional<std::vector<Rendered>> render_by_node(const Scenario& s) {
  const fs::path node_dir = ORBIT_NODE_DIR;
  if (std::system("node --version > /dev/null 2>&1") != 0) return std::nullopt;
  if (!fs::exists(node_dir / "node_modules" / "@huggingface" / "jinja")) return std::nullopt;
  const ordered_json config =
      ordered_json::parse(read_file(fs::path(orbit::test::sync_support::kModel) / "tokenizer_config.json"));
  ordered_json request = {{"templates", {{s.template_name, template_text(s)}}}, {"jobs", ordered_json::array()}};
  for (const auto& [kind, list] : s.steps) {
    const ordered_json all = messages_json(list);
    for (std::size_t i = 1; i <= list.size() + 1; ++i) {  // the last job: the whole list with the prompt
      ordered_json vars = {{"messages", ordered_json(all.begin(), all.begin() + std::min(i, list.size()))},
                           {"add_generation_prompt", i > list.size()},
                           {"bos_token", config["bos_token"]},
                           {"eos_token", config["eos_token"]}};
      if (s.tools) vars["tools"] = ordered_json::parse(kTools);
      request["jobs"].push_back({{"template", s.template_name}, {"vars", std::move(vars)}});
    }
  }
  const fs::path req = fs::temp_directory_path() / ("orbit-sync-rerender-" + std::to_string(::getpid()) + ".json");
  const fs::path res = req.string() + ".out";
  std::ofstream(req) << request.dump();
  const std::string cmd = "cd " + shell_quote(node_dir.string()) + " && node chat_template_oracle.mjs " +
                          shell_quote(req.string()) + " > " + shell_quote(res.string());
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(res);
  fs::remove(req);
  fs::remove(res);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) return std::nullopt;  // the package cannot be loaded
  REQUIRE(rc == 0);
  const ordered_json results = ordered_json::parse(out);
  std::vector<Rendered> rendered;
  std::size_t job = 0;
  for (const auto& [kind, list] : s.steps) {
    Rendered r;
    for (std::size_t i = 1; i <= list.size() + 1; ++i, ++job) {
      const ordered_json& j = results.at(job);
      std::optional<std::string> text;
      if (j.contains("text")) text = j["text"].get<std::string>();
      (i > list.size() ? r.with_prompt : r.prefix.emplace_back()) = std::move(text);
    }
    rendered.push_back(std::move(r));
  }
  return rendered;
}

// The same by orbit's renderer, each list rendered alone (Engine::render_chat: no memo, no earlier list).
std::vector<Rendered> render_by_orbit(Engine& engine, const Scenario& s) {
  const ChatOptions chat = sync_options(s).chat;
  const auto render = [&](const Messages& list, bool prompt) -> std::optional<std::string> {
    try {
      return engine.render_chat(list, prompt, chat);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  std::vector<Rendered> rendered;
  for (const auto& [kind, list] : s.steps) {
    Rendered r;
    for (std::size_t i = 1; i <= list.size(); ++i)
      r.prefix.push_back(render(Messages(list.begin(), list.begin() + i), false));
    r.with_prompt = render(list, true);
    rendered.push_back(std::move(r));
  }
  return rendered;
}

bool starts_with(const std::string& all, const std::string& head) { return all.compare(0, head.size(), head) == 0; }

bool starts_with(const std::vector<int64_t>& all, const std::vector<int64_t>& head) {
  return head.size() <= all.size() && std::equal(head.begin(), head.end(), all.begin());
}

// Where the units start (token position, first message), as rendering every prefix says: step 2's message
// boundaries (a prefix rendered as a head of the whole text, longer than the last boundary and shorter than the
// text), those whose text's tokens are the head of the whole text's (step 3; the bundled tokenizer is
// prefix-stable, so that is a token boundary of the whole).
std::vector<std::pair<int64_t, int64_t>> expected_starts(const Engine& engine, const Rendered& r,
                                                         const std::vector<int64_t>& tokens) {
  std::vector<std::pair<int64_t, int64_t>> starts = {{0, 0}};
  std::size_t last = 0;
  for (std::size_t i = 1; i < r.prefix.size(); ++i) {
    const std::optional<std::string>& p = r.prefix[i - 1];
    if (!p || !starts_with(r.whole(), *p) || p->size() <= last || p->size() >= r.whole().size()) continue;
    last = p->size();
    const std::vector<int64_t> head = engine.tokenize(*p, false);
    if (starts_with(tokens, head)) starts.emplace_back(static_cast<int64_t>(head.size()), static_cast<int64_t>(i));
  }
  return starts;
}

// Common leading elements of two sequences.
std::size_t common_head(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// What one window holds between steps: its instances and their tokens.
struct Held {
  std::vector<InstanceInfo> instances;
  std::vector<int64_t> tokens;
};

// What one sync rendered and reused: step 2's prefixes rendered, step 3's tokens taken from an earlier list's
// encoding, how many tokens the window's old and new tokens start with alike, and how many instances inside
// those stayed (every one: sync_step checks it).
struct Counts {
  int64_t renders = 0;
  int64_t reused = 0;
  std::size_t same = 0;
  std::size_t kept = 0;
};

// One step synced into `w` (holding `before`) and checked against the rendering `r`: the tokens, the generation
// prompt, the units' starts, and every instance inside the tokens `before` shares with the new ones kept.
Held sync_step(Engine& engine, Window& w, const Held& before, const Messages& list, const Rendered& r,
               const SyncOptions& o, Counts& counts) {
  const int64_t renders = orbit::detail::prefix_renders_so_far();
  const int64_t reused = orbit::detail::tokens_reused_so_far();
  const SyncReport report = w.sync(list, o);
  counts.renders = orbit::detail::prefix_renders_so_far() - renders;
  counts.reused = orbit::detail::tokens_reused_so_far() - reused;
  const std::vector<int64_t> tokens = engine.tokenize(r.whole(), false);
  REQUIRE(report.plan.tokens == tokens);
  orbit::test::sync_support::require_window_is_tokens(engine, w, tokens);
  REQUIRE(r.with_prompt.has_value());
  REQUIRE(starts_with(*r.with_prompt, r.whole()));
  std::vector<int64_t> prompted = tokens;
  prompted.insert(prompted.end(), report.generation_prompt.begin(), report.generation_prompt.end());
  if (report.plan.generation_prompt_exact) REQUIRE(prompted == engine.tokenize(*r.with_prompt, false));

  std::vector<std::pair<int64_t, int64_t>> starts;
  for (const SyncUnit& u : report.plan.units) starts.emplace_back(u.position, u.first_message);
  REQUIRE(starts == expected_starts(engine, r, tokens));

  Held after{w.instances(), tokens};
  counts.same = common_head(before.tokens, tokens);
  std::set<InstanceId> now;
  for (const InstanceInfo& i : after.instances) now.insert(i.id);
  for (const InstanceInfo& i : before.instances) {
    if (i.position + i.length > static_cast<int64_t>(counts.same)) break;
    INFO("instance " << i.id << " at " << i.position << ", " << i.length << " tokens; " << counts.same
                     << " tokens alike");
    REQUIRE(now.count(i.id) == 1);
    ++counts.kept;
  }
  return after;
}

// Each step of `s` synced into a fresh window and checked (sync_step), the rendering each step parts from the
// one before where the scenario says; returns the counts per step.
std::vector<Counts> run_scenario(Engine& engine, const Scenario& s, const std::vector<Rendered>& rendered) {
  const SyncOptions o = sync_options(s);
  Window w = engine.new_window();
  Held held;
  std::vector<Counts> counts(s.steps.size());
  for (std::size_t k = 0; k < s.steps.size(); ++k) {
    INFO(s.name << ", step " << k << " (" << s.steps[k].second.size() << " messages)");
    const Rendered& r = rendered[k];
    REQUIRE(r.prefix.back().has_value());  // the template takes the whole list
    if (k > 0 && s.steps[k].first != Step::kEdits) {
      CHECK(starts_with(r.whole(), rendered[k - 1].whole()) == (s.steps[k].first == Step::kGrows));
    }
    held = sync_step(engine, w, held, s.steps[k].second, r, o, counts[k]);
  }
  return counts;
}

// `s` synced step by step into one window, then again into a second once the memos know every list, each step
// checked against the renderings of @huggingface/jinja (orbit's own where node or the package is missing).
void check_scenario(const Scenario& s) {
  const std::shared_ptr<Engine> engine = orbit::test::sync_support::open_engine();
  std::optional<std::vector<Rendered>> rendered = render_by_node(s);
  if (rendered) {
    std::cout << s.name << ": renderings by @huggingface/jinja\n";
  } else {
    std::cout << s.name << ": renderings by orbit's Engine::render_chat (node or @huggingface/jinja is missing)\n";
    rendered = render_by_orbit(*engine, s);
  }
  orbit::detail::clear_cuts_memo();
  orbit::detail::clear_encode_memo();
  const std::vector<Counts> first = run_scenario(*engine, s, *rendered);
  for (std::size_t k = 1; k < first.size(); ++k) {
    INFO(s.name << ", step " << k);
    // Step 3 took at least the tokens the two renderings start with alike from the list before (more where the
    // generation prompt or a run after an edit lines up too).
    CHECK(first[k].reused >= static_cast<int64_t>(first[k].same));
    if (s.steps[k].first == Step::kEdits) continue;
    // Messages appended: step 2 renders at most the new prefixes, whatever the earlier messages render to now,
    // and the window keeps what lines up (the instances before the first turn that renders otherwise).
    const std::size_t added = s.steps[k].second.size() - s.steps[k - 1].second.size();
    CHECK(first[k].renders <= static_cast<int64_t>(added));
    CHECK(first[k].kept > 0);
  }
  // Every list known to the memos: none of its prefixes rendered, the same window.
  const std::vector<Counts> again = run_scenario(*engine, s, *rendered);
  for (std::size_t k = 0; k < again.size(); ++k) CHECK(again[k].renders == 0);
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
