// The harness test_sync_rerender.cpp and test_sync_rerender_ops.cpp share: a scenario (a template and the message
// lists an agent sends it, step by step, each with its tools and clock) synced through Window::sync step by step,
// and at every step:
//   - the window's tokens are the tokenization of the whole list's rendering by an independent renderer
//     (@huggingface/jinja through node where tests/node has it, else orbit's Engine::render_chat of the list
//     alone), and the generation prompt the rendering with it continues with;
//   - the units start exactly where rendering every prefix of the list says (a prefix rendered as a head of the
//     whole rendering whose tokens are the head of its tokens: sync.h steps 2 and 3), by the same renderer;
//   - what still lines up is reused: every instance inside the tokens the old and the new rendering share stays
//     in the window, step 3 takes at least those tokens from the earlier list's encoding, and step 2 renders only
//     the prefixes the lists before did not show where messages were only appended.
// Each list is synced again into a second window, once every list is known to the memos (sync_memo.h: read, not
// rendered).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orbit/engine.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_test_support.h"
#include "window/sync_render.h"

namespace orbit::test::rerender {

using nlohmann::ordered_json;
using orbit::test::sync_support::msg;
using Messages = std::vector<ChatMessage>;

// One function tool, `lookup(query)`, as the request's tools JSON.
inline constexpr const char* kTools =
    R"([{"type": "function", "function": {"name": "lookup", "description": "Look a story up.", "parameters": )"
    R"({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}])";

// How a step's whole rendering relates to the step before's.
enum class Step {
  kGrows,     // messages appended, and the rendering before is a head of this one's
  kRewrites,  // messages appended, and an earlier message renders otherwise: the rendering before is no head
  kAppends,   // messages appended; the template decides whether the rendering before is a head (not checked)
  kEdits,     // the list edited anywhere (a new system prompt, turns dropped or summarized, the tools changed)
};

// One request: the list, whether the tools go with it, and the time strftime_now reads (nullopt: no template of
// the scenario's reads the clock; the step is rendered by node with `date_string` set to that day, which Llama 3.2
// renders as it renders strftime_now's day).
struct ScenarioStep {
  Step kind;
  Messages list;
  std::optional<bool> tools = std::nullopt;  // nullopt: the scenario's
  std::optional<std::time_t> now = std::nullopt;
  std::optional<std::string> tools_json = std::nullopt;  // the step's tools where it has them; nullopt: the scenario's
};

struct Scenario {
  std::string name;
  std::string template_name;  // tests/data/templates/<name>.jinja
  bool tools = false;         // the steps' tools unless a step says
  std::vector<ScenarioStep> steps;
  std::string tools_json = kTools;  // the tools, where a step has them
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The source of the scenario's template.
inline std::string template_text(const Scenario& s) {
  return read_file(std::filesystem::path(ORBIT_TEST_DATA_DIR) / "templates" / (s.template_name + ".jinja"));
}

inline bool step_tools(const Scenario& s, std::size_t k) { return s.steps[k].tools.value_or(s.tools); }

// Step k's tools JSON where it has tools.
inline const std::string& step_tools_json(const Scenario& s, std::size_t k) {
  return s.steps[k].tools_json ? *s.steps[k].tools_json : s.tools_json;
}

// Whether step k's tools differ from step k - 1's and a step before that had them (none: "").
inline bool tools_seen_before(const Scenario& s, std::size_t k) {
  const auto tools = [&](std::size_t j) { return step_tools(s, j) ? step_tools_json(s, j) : std::string(); };
  if (k == 0 || tools(k) == tools(k - 1)) return false;
  for (std::size_t j = 0; j + 1 < k; ++j)
    if (tools(j) == tools(k)) return true;
  return false;
}

// Step k's template, tools and clock; units of 24 tokens and more are chunks, shorter ones at the tail turns.
inline SyncOptions sync_options(const Scenario& s, std::size_t k) {
  SyncOptions o;
  o.chunk_min_tokens = 24;
  o.chat.chat_template = template_text(s);
  if (step_tools(s, k)) o.chat.tools_json = step_tools_json(s, k);
  o.chat.now = s.steps[k].now;
  return o;
}

// The day strftime_now('%d %b %Y') gives at `t` (local time, as orbit's strftime_now reads it).
inline std::string day_of(std::time_t t) {
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof buf, "%d %b %Y", &local));
}

inline ChatMessage answer(const std::string& content, std::optional<std::string> reasoning = std::nullopt) {
  ChatMessage m = msg("assistant", content);
  m.reasoning_content = std::move(reasoning);
  return m;
}

// An answer calling lookup(query) as call `id` (nine letters and digits, as Mistral Nemo wants), and its result.
inline Messages call_and_result(const std::string& id, const std::string& query, const std::string& result,
                                std::optional<std::string> reasoning = std::nullopt) {
  ChatMessage call = answer("", std::move(reasoning));
  call.tool_calls.push_back({id, "lookup", "{\"query\": \"" + query + "\"}"});
  ChatMessage tool = msg("tool", result);
  tool.tool_call_id = id;
  return {call, tool};
}

// `list` and then `more`.
inline Messages plus(Messages list, const Messages& more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}

// What a list renders to: each prefix's text (prefix[i - 1]: its first i messages; prefix[n - 1], the whole
// list; nullopt where the template refuses it) and the whole list with the generation prompt.
struct Rendered {
  std::vector<std::optional<std::string>> prefix;
  std::optional<std::string> with_prompt;
  const std::string& whole() const { return *prefix.back(); }
};

// The template's variables for `list` as a chat API sends them (orbit/sync.h: ChatMessage, ChatToolCall).
inline ordered_json messages_json(const Messages& list) {
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

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Step k's jobs for the node oracle: every prefix of its list, then the whole list with the generation prompt,
// with the model's bos_token and eos_token from its tokenizer_config.json as Hugging Face passes them.
inline void add_node_jobs(const Scenario& s, std::size_t k, const ordered_json& config, ordered_json& jobs) {
  const Messages& list = s.steps[k].list;
  const ordered_json all = messages_json(list);
  for (std::size_t i = 1; i <= list.size() + 1; ++i) {  // the last job: the whole list with the prompt
    ordered_json vars = {{"messages", ordered_json(all.begin(), all.begin() + std::min(i, list.size()))},
                         {"add_generation_prompt", i > list.size()},
                         {"bos_token", config["bos_token"]},
                         {"eos_token", config["eos_token"]}};
    if (step_tools(s, k)) vars["tools"] = ordered_json::parse(step_tools_json(s, k));
    if (s.steps[k].now) vars["date_string"] = day_of(*s.steps[k].now);
    jobs.push_back({{"template", s.template_name}, {"vars", std::move(vars)}});
  }
}

// Runs tests/node/chat_template_oracle.mjs on `request`; nullopt where the package cannot be loaded.
inline std::optional<ordered_json> run_node_oracle(const ordered_json& request) {
  namespace fs = std::filesystem;
  const fs::path req = fs::temp_directory_path() / ("orbit-sync-rerender-" + std::to_string(::getpid()) + ".json");
  const fs::path res = req.string() + ".out";
  std::ofstream(req) << request.dump();
  const std::string cmd = "cd " + shell_quote(ORBIT_NODE_DIR) + " && node chat_template_oracle.mjs " +
                          shell_quote(req.string()) + " > " + shell_quote(res.string());
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(res);
  fs::remove(req);
  fs::remove(res);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) return std::nullopt;  // the package cannot be loaded
  REQUIRE(rc == 0);
  return ordered_json::parse(out);
}

// Every prefix of each step's list, and each whole list with the generation prompt, rendered by
// @huggingface/jinja (tests/node/chat_template_oracle.mjs); nullopt where node or the package is missing.
inline std::optional<std::vector<Rendered>> render_by_node(const Scenario& s) {
  namespace fs = std::filesystem;
  if (std::system("node --version > /dev/null 2>&1") != 0) return std::nullopt;
  if (!fs::exists(fs::path(ORBIT_NODE_DIR) / "node_modules" / "@huggingface" / "jinja")) return std::nullopt;
  const ordered_json config =
      ordered_json::parse(read_file(fs::path(orbit::test::sync_support::kModel) / "tokenizer_config.json"));
  ordered_json request = {{"templates", {{s.template_name, template_text(s)}}}, {"jobs", ordered_json::array()}};
  for (std::size_t k = 0; k < s.steps.size(); ++k) add_node_jobs(s, k, config, request["jobs"]);
  const std::optional<ordered_json> results = run_node_oracle(request);
  if (!results) return std::nullopt;
  std::vector<Rendered> rendered;
  std::size_t job = 0;
  for (const ScenarioStep& step : s.steps) {
    Rendered r;
    for (std::size_t i = 1; i <= step.list.size() + 1; ++i, ++job) {
      const ordered_json& j = results->at(job);
      std::optional<std::string> text;
      if (j.contains("text")) text = j["text"].get<std::string>();
      (i > step.list.size() ? r.with_prompt : r.prefix.emplace_back()) = std::move(text);
    }
    rendered.push_back(std::move(r));
  }
  return rendered;
}

// The same by orbit's renderer, each list rendered alone (Engine::render_chat: no memo, no earlier list).
inline std::vector<Rendered> render_by_orbit(Engine& engine, const Scenario& s) {
  std::vector<Rendered> rendered;
  for (std::size_t k = 0; k < s.steps.size(); ++k) {
    const ChatOptions chat = sync_options(s, k).chat;
    const auto render = [&](const Messages& list, bool prompt) -> std::optional<std::string> {
      try {
        return engine.render_chat(list, prompt, chat);
      } catch (const Error&) {
        return std::nullopt;
      }
    };
    const Messages& list = s.steps[k].list;
    Rendered r;
    for (std::size_t i = 1; i <= list.size(); ++i)
      r.prefix.push_back(render(Messages(list.begin(), list.begin() + i), false));
    r.with_prompt = render(list, true);
    rendered.push_back(std::move(r));
  }
  return rendered;
}

inline bool starts_with(const std::string& all, const std::string& head) {
  return all.compare(0, head.size(), head) == 0;
}

inline bool starts_with(const std::vector<int64_t>& all, const std::vector<int64_t>& head) {
  return head.size() <= all.size() && std::equal(head.begin(), head.end(), all.begin());
}

// Where the units start (token position, first message), as rendering every prefix says: step 2's message
// boundaries (a prefix rendered as a head of the whole text, longer than the last boundary and shorter than the
// text), those whose text's tokens are the head of the whole text's (step 3; the bundled tokenizer is
// prefix-stable, so that is a token boundary of the whole).
inline std::vector<std::pair<int64_t, int64_t>> expected_starts(const Engine& engine, const Rendered& r,
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
inline std::size_t common_head(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// What one window holds between steps: its instances and their tokens.
struct Held {
  std::vector<InstanceInfo> instances;
  std::vector<int64_t> tokens;
  std::string text;  // their rendering
};

// What one sync rendered and reused: step 2's prefixes rendered, step 3's tokens taken from an earlier list's
// encoding, how many tokens the window's old and new tokens start with alike, of those how many step 3 can take
// (reusable), and how many instances inside them stayed (every one: sync_step checks it); the window's tokens, of
// them those of the new instances inside the tokens the old and new end with alike (tail_units: a tools block
// written before the messages leaves them there), and the tokens the sync forwarded (SyncReport::forward_tokens).
struct Counts {
  int64_t renders = 0;
  int64_t reused = 0;
  std::size_t same = 0;
  std::size_t reusable = 0;
  std::size_t kept = 0;
  std::size_t tokens = 0;
  std::size_t tail_units = 0;
  double forward = 0;
};

// Common trailing elements of two sequences.
inline std::size_t common_tail(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}

// The tokens of the instances of `after` that lie inside its last `tail` tokens.
inline std::size_t tokens_in_tail(const Held& after, std::size_t tail) {
  const auto from = static_cast<int64_t>(after.tokens.size() - tail);
  std::size_t n = 0;
  for (const InstanceInfo& i : after.instances) n += i.position >= from ? static_cast<std::size_t>(i.length) : 0;
  return n;
}

// The bundled model's tokenizer, read once (immutable: safe from any thread).
inline const runtime::Tokenizer& model_tokenizer() {
  static const std::unique_ptr<runtime::Tokenizer> tok = runtime::load_tokenizer(orbit::test::sync_support::kModel);
  return *tok;
}

// How many tokens the encodings of `a` and `b` start with alike, ids and bytes: a tokenizer that fuses unknown
// characters into one token gives one id for "}}" and "}}]", so the ids alone may count one token more than an
// encoding of `a` holds of `b`.
inline std::size_t common_encoded(const std::string& a, const std::string& b) {
  const runtime::Encoding ea = model_tokenizer().encode_with_bytes(a), eb = model_tokenizer().encode_with_bytes(b);
  std::size_t n = 0;
  while (n < ea.ids.size() && n < eb.ids.size() && ea.ids[n] == eb.ids[n] && ea.bytes[n].begin == eb.bytes[n].begin &&
         ea.bytes[n].end == eb.bytes[n].end)
    ++n;
  return n;
}

// Of the first `same` tokens of `text`'s encoding (`tokens`), how many step 3 can take from an earlier encoding
// of a text they share: those before the latest cut the safe-cut rule takes (runtime::Tokenizer::encode_rest;
// the text's end always). Where the text goes on past them with two characters some merge could join (Mistral
// 7B's "[/INST]" and the answer after it), the rule refuses that cut, and the tokens from the cut before are
// encoded again.
inline std::size_t reusable_tokens(const std::string& text, const std::vector<int64_t>& tokens, std::size_t same) {
  const runtime::Tokenizer& tok = model_tokenizer();
  const runtime::Encoding e = tok.encode_with_bytes(text);
  REQUIRE(e.ids == tokens);
  for (std::size_t j = same; j > 0; --j) {
    const std::size_t c = e.bytes[j - 1].end;
    if (j < e.bytes.size() && e.bytes[j].begin < c) continue;  // the next token holds c's character too
    if (c == text.size() || tok.encode_rest(text, c)) return j;
  }
  return 0;
}

// Every instance of `before` inside the `same` tokens it shares with the new tokens, where the new units still
// start at its start and its end (`bounds`: the units' starts and the tokens' end), is still in the window
// (`after`); returns how many. An instance whose span the new units no longer bound cannot stay as it was: Mistral
// Nemo's tools given again go in front of the last user turn, and every prefix before that renders them in front
// of its own last user turn, so the turns before merge into one unit over the instances that held them.
inline std::size_t require_shared_kept(const Held& before, const Held& after, std::size_t same,
                                       const std::set<int64_t>& bounds) {
  std::set<InstanceId> now;
  for (const InstanceInfo& i : after.instances) now.insert(i.id);
  std::size_t kept = 0;
  for (const InstanceInfo& i : before.instances) {
    if (i.position + i.length > static_cast<int64_t>(same)) break;
    if (bounds.count(i.position) == 0 || bounds.count(i.position + i.length) == 0) continue;
    INFO("instance " << i.id << " at " << i.position << ", " << i.length << " tokens; " << same << " tokens alike");
    REQUIRE(now.count(i.id) == 1);
    ++kept;
  }
  return kept;
}

// One step synced into `w` (holding `before`) and checked against the rendering `r`: the tokens, the generation
// prompt, the units' starts, and every instance inside the tokens `before` shares with the new ones kept.
inline Held sync_step(Engine& engine, Window& w, const Held& before, const Messages& list, const Rendered& r,
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
  std::set<int64_t> bounds = {static_cast<int64_t>(tokens.size())};
  for (const SyncUnit& u : report.plan.units) {
    starts.emplace_back(u.position, u.first_message);
    bounds.insert(u.position);
  }
  REQUIRE(starts == expected_starts(engine, r, tokens));

  Held after{w.instances(), tokens, r.whole()};
  counts.same = common_head(before.tokens, tokens);
  counts.reusable = reusable_tokens(r.whole(), tokens, std::min(counts.same, common_encoded(before.text, r.whole())));
  counts.kept = require_shared_kept(before, after, counts.same, bounds);
  counts.tokens = tokens.size();
  counts.tail_units = tokens_in_tail(after, common_tail(before.tokens, tokens));
  counts.forward = report.forward_tokens;
  return after;
}

// Each step of `s` synced into a fresh window and checked (sync_step), the rendering each step parts from the
// one before where the scenario says; returns the counts per step.
inline std::vector<Counts> run_scenario(Engine& engine, const Scenario& s, const std::vector<Rendered>& rendered) {
  Window w = engine.new_window();
  Held held;
  std::vector<Counts> counts(s.steps.size());
  for (std::size_t k = 0; k < s.steps.size(); ++k) {
    const ScenarioStep& step = s.steps[k];
    INFO(s.name << ", step " << k << " (" << step.list.size() << " messages)");
    const Rendered& r = rendered[k];
    REQUIRE(r.prefix.back().has_value());  // the template takes the whole list
    if (k > 0 && (step.kind == Step::kGrows || step.kind == Step::kRewrites)) {
      CHECK(starts_with(r.whole(), rendered[k - 1].whole()) == (step.kind == Step::kGrows));
    }
    held = sync_step(engine, w, held, step.list, r, sync_options(s, k), counts[k]);
  }
  return counts;
}

// `s` synced step by step into one window, then again into a second once the memos know every list, each step
// checked against the renderings of @huggingface/jinja (orbit's own where node or the package is missing);
// returns the first window's counts per step.
inline std::vector<Counts> check_scenario(const Scenario& s) {
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
    // Step 3 took at least the tokens the two renderings start with alike from the list before, up to the latest
    // cut the safe-cut rule takes (more where the generation prompt or a run after an edit lines up too), also
    // under other tools (the memos name each list whatever its variables too: any_variables_key, sync_memo.h),
    // but where an earlier list under this step's tools holds as many of its messages: that one is read first
    // (sync_latest.h), and it may start with fewer tokens alike.
    if (!tools_seen_before(s, k)) CHECK(first[k].reused >= static_cast<int64_t>(first[k].reusable));
    if (s.steps[k].kind == Step::kEdits) continue;
    // Messages appended: step 2 renders at most the new prefixes, whatever the earlier messages render to now,
    // and the window keeps what lines up (the instances before the first turn that renders otherwise).
    const std::size_t added = s.steps[k].list.size() - s.steps[k - 1].list.size();
    CHECK(first[k].renders <= static_cast<int64_t>(added));
    CHECK(first[k].kept > 0);
  }
  // Every list known to the memos: none of its prefixes rendered, the same window.
  const std::vector<Counts> again = run_scenario(*engine, s, *rendered);
  for (std::size_t k = 0; k < again.size(); ++k) CHECK(again[k].renders == 0);
  return first;
}

}  // namespace orbit::test::rerender
