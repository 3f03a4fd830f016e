// bench_sync_render: the rendering half of Window::plan_sync (orbit/sync.h steps 1-3: the chat template, the
// message cuts, the tokens) on long message lists, as an agent sends them (a system prompt, then user turns,
// assistant answers with tool calls and tool results, three tools' schemas), against the list's length.
//
// Per template and list length N, microseconds of the thread's CPU time (the fastest of --reps):
//   render      one rendering of the whole list (Engine::render_chat): what each of step 2's renders costs at
//               most, so step 2 renders N prefixes for at most N times this;
//   tokenize    Engine::tokenize_chat of it: the render and one encode of the text (the same text every rep:
//               the BPE word cache holds it when it is under 64 KiB);
//   prefixes    step 2's renders of every proper prefix through runtime::ChatTemplate alone, each prefix copied
//               and converted for the template (messages, tools) as before ChatTemplate::prepare, against
//   prepared    the same renders from one prepare (the list converted once), and the ratio;
//   fresh       plan_sync of a list no earlier sync rendered (a trimmed list: every prefix rendered);
//   grown       plan_sync of the list after the list without its last message was planned (an agent's next
//               request: the list only grew; the memos hold that list alone, and the last message's text is
//               new at every run, so the BPE word cache never holds the whole rendering, as at a real request);
// each with the memos off (every prefix rendered, every segment encoded whole) and on, side by side, and the
// ratio off / on; and grown with the cuts memo on but incremental encoding off (`whole`: the memo of
// encodings, sync_encode.h, is what `whole` / `grown-on` measures), and how many prefixes step 2 rendered for the
// grown list with the memos on (grown-r). Then, per list, a second table:
//   trim        plan_sync of the list after its --trim oldest messages after the system prompt were dropped and
//               one new message added, once the whole list was planned (an agent that trims its context at the
//               start: the memos hold the untrimmed list);
//   summ        the same with the --summ (default --trim) oldest messages replaced by one assistant message
//               summarizing them;
// and a third:
//   sys         plan_sync of the list with a new system prompt (an agent that writes the date, a memory digest or
//               a step counter into it at every request), once the list was planned;
//   step        the same and two messages added (an agent's usual request with such a system prompt);
//   systrim     a new system prompt, the --trim oldest messages after it dropped and one message added;
// each with the memos off and on, the on side against grown-on (what the same list costs when it only grew), and
// how many prefixes step 2 rendered for it with the memos on (trim-r, ...; the rest read from the memo). And a
// fourth:
//   pair        two agents taking turns on the memos, each rewriting its system prompt and dropping its two oldest
//               messages after it as it adds two at every request (so neither its first nor its second message
//               is its last list's, and the latest list under the template is the other agent's): microseconds
//               per request and prefixes rendered per request (pair-r).
// All sides must give the same plan (tokens, units, merged boundaries, generation prompt). Not a test: the times
// depend on the machine and its load; the off, whole and on runs alternate.
//
// The model: TinyStories-656K (tokenizer.json, prefix-stable) with its positions raised so the longest list
// fits (a copy of its directory under --cache with config.json's max_position_embeddings changed; plan_sync
// runs no forward, so the weights never see those positions). Templates: the bundled plain template and
// --templates (tests/data/templates/*.jinja by name, or all of them: those that refuse the agent list, as Gemma 2
// refuses a system prompt, are named and skipped; their special tokens are spelled out by this tokenizer,
// which changes the tokens, not the renders).
//
//   bench_sync_render [--sizes 25,50,100,200] [--reps 5] [--templates qwen2.5-7b-instruct,llama-3.1-8b-instruct|all]
//                     [--trim 4] [--summ TRIM] [--cache /tmp/orbit-bench]
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "window/sync_render.h"

using namespace orbit;

namespace {

namespace fs = std::filesystem;

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Microseconds of `f`, the fastest of `reps` runs.
double fastest_us(int64_t reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = cpu_now();
    f();
    best = std::min(best, cpu_now() - t0);
  }
  return best * 1e6;
}

// TinyStories-656K with `positions` positions: its files linked from a directory under `cache`, config.json
// rewritten.
std::string model_with_positions(const std::string& cache, int64_t positions) {
  const fs::path source = fs::path(ORBIT_MODELS_DIR) / "tinystories-656k";
  const fs::path dir = fs::path(cache) / ("tinystories-656k-positions-" + std::to_string(positions));
  if (fs::exists(dir / "config.json")) return dir.string();
  fs::create_directories(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(source)) {
    if (e.path().filename() == "config.json") continue;
    const fs::path link = dir / e.path().filename();
    if (!fs::exists(link)) fs::create_symlink(fs::absolute(e.path()), link);
  }
  std::ifstream in(source / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const std::string key = "\"max_position_embeddings\": 512";
  const std::size_t at = config.find(key);
  ORBIT_CHECK(at != std::string::npos, source / "config.json"
                                           << ": no " << key);
  config.replace(at, key.size(), "\"max_position_embeddings\": " + std::to_string(positions));
  const fs::path tmp = dir / "config.json.tmp";
  std::ofstream(tmp) << config;
  fs::rename(tmp, dir / "config.json");
  return dir.string();
}

const char* const kSentences[] = {
    "Once upon a time, there was a little girl named Lily. She liked to play outside in the sun.",
    "One day, Tom found a big red ball in the park. He was very happy and ran to show his mom.",
    "The cat sat by the window and watched the birds. It wanted to catch one, but the glass was in the way.",
    "Sue and Ben built a tall tower of blocks. When it fell down, they laughed and built it again.",
    "The old man gave the boy a shiny coin. \"Keep it safe,\" he said, and the boy put it in his pocket.",
};

// What an agent sends as `tools`: three functions with their parameters' schemas.
const char* const kTools = R"([
  {"type": "function", "function": {"name": "lookup", "description": "Look up a story by a phrase in it.",
   "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "The phrase."},
   "limit": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["query"]}}},
  {"type": "function", "function": {"name": "read_page", "description": "Read one page of a story.",
   "parameters": {"type": "object", "properties": {"story": {"type": "string"}, "page": {"type": "integer"}},
   "required": ["story", "page"]}}},
  {"type": "function", "function": {"name": "write_note", "description": "Keep a note for later.",
   "parameters": {"type": "object", "properties": {"text": {"type": "string"}, "tags": {"type": "array",
   "items": {"type": "string"}}}, "required": ["text"]}}}])";

std::string text_of(int64_t i, int sentences) {
  std::string s;
  for (int k = 0; k < sentences; ++k) s += std::string(k > 0 ? " " : "") + kSentences[(i + k) % 5];
  return s;
}

// Message i (1, 2, ...) of agent `agent`'s list after its system prompt: rounds of a user turn, an assistant
// answer that calls a tool, the tool's result (a page), and an assistant answer. Agent 1's texts start two
// sentences on and its call ids differ, so some of its messages equal agent 0's elsewhere in the list (they draw
// on the same five sentences), as agents' lists share messages. Call ids are nine letters and digits (c, the
// agent, x, six digits), which Mistral Nemo's template demands.
std::string call_id(int agent, int64_t i) {
  char id[16];
  std::snprintf(id, sizeof id, "c%dx%06lld", agent % 10, static_cast<long long>(i % 1000000));
  return id;
}

ChatMessage agent_message(int64_t i, int agent) {
  const int64_t s = i + 2 * agent;
  ChatMessage m;
  switch (i % 4) {
    case 1: m = {"user", text_of(s, 1) + " What happened next?"}; break;
    case 2:
      m = {"assistant", "Let me look."};
      m.tool_calls.push_back({call_id(agent, i), "lookup", "{\"query\": \"" + text_of(s, 1) + "\"}"});
      break;
    case 3:
      m = {"tool", text_of(s, 4)};
      m.tool_call_id = call_id(agent, i - 1);
      break;
    default: m = {"assistant", text_of(s, 2)}; break;
  }
  return m;
}

// An agent's list of `n` messages: a system prompt, then agent_message(1, 0), ...
std::vector<ChatMessage> agent_list(int64_t n) {
  std::vector<ChatMessage> out;
  out.push_back({"system", "You tell short stories. Use the tools to look things up."});
  for (int64_t i = 1; static_cast<int64_t>(out.size()) < n; ++i) out.push_back(agent_message(i, 0));
  return out;
}

void require_same(const SyncPlan& a, const SyncPlan& b, const std::string& what) {
  bool same = a.tokens == b.tokens && a.merged_boundaries == b.merged_boundaries &&
              a.generation_prompt == b.generation_prompt && a.units.size() == b.units.size();
  for (std::size_t i = 0; same && i < a.units.size(); ++i) {
    same = a.units[i].first_message == b.units[i].first_message && a.units[i].end_message == b.units[i].end_message &&
           a.units[i].key == b.units[i].key;
  }
  ORBIT_CHECK(same, "bench_sync_render: " << what << ": the memo's plan differs from rendering every prefix");
}

struct Row {
  double render = 0, tokenize = 0, convert = 0, prepared = 0, fresh_off = 0, fresh_on = 0, grown_off = 0,
         grown_whole = 0, grown_on = 0;
  int64_t grown_renders = 0;  // prefixes step 2 rendered for the grown list with the memos on (the last run)
};

// The memos of plan_sync: the cuts memo (step 2) and incremental encoding (step 3).
enum class Memos { kOff, kCutsOnly, kOn };

void set_memos(Memos m) {
  detail::set_cuts_memo(m != Memos::kOff);
  detail::set_incremental_encode(m == Memos::kOn);
  detail::clear_cuts_memo();
  detail::clear_encode_memo();
}

// Seconds of `f`'s thread CPU time, into `best` (the least so far; `first`: none so far).
void keep_fastest(bool first, double& best, const std::function<void()>& f) {
  const double t0 = cpu_now();
  f();
  const double us = (cpu_now() - t0) * 1e6;
  best = first ? us : std::min(best, us);
}

std::vector<runtime::ChatMessage> runtime_list(const std::vector<ChatMessage>& list) {
  std::vector<runtime::ChatMessage> out;
  for (const ChatMessage& m : list) {
    runtime::ChatMessage r{m.role, m.content, m.name, m.tool_call_id, {}};
    for (const ChatToolCall& c : m.tool_calls) r.tool_calls.push_back({c.id, c.name, c.arguments});
    out.push_back(std::move(r));
  }
  return out;
}

// Step 2's renders of every proper prefix of `list` through runtime::ChatTemplate alone, as it renders without
// the memo: each prefix copied and converted for the template (`prepared` false: how it rendered before
// ChatTemplate::prepare), or the list converted once and each prefix rendered from that (true).
void render_prefixes(const runtime::ChatTemplate& t, const std::vector<runtime::ChatMessage>& list,
                     const runtime::ChatRenderOptions& o, bool prepared) {
  const runtime::PreparedChat chat = prepared ? t.prepare(list, o) : runtime::PreparedChat();
  for (std::size_t i = 1; i < list.size(); ++i) {
    try {
      if (prepared) {
        (void)t.render_prefix(chat, i, false);
      } else {
        (void)t.render(std::vector<runtime::ChatMessage>(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i)),
                       o);
      }
    } catch (const Error&) {  // a prefix the template refuses (as step 2 takes it)
    }
  }
}

Row measure(Engine& engine, const std::vector<ChatMessage>& list, const SyncOptions& o, int64_t reps,
            const std::string& what) {
  Row row;
  const Window w = engine.new_window();
  const std::vector<ChatMessage> before(list.begin(), list.end() - 1);
  row.render = fastest_us(reps, [&] { (void)engine.render_chat(list, false, o.chat); });
  row.tokenize = fastest_us(reps, [&] { (void)engine.tokenize_chat(list, false, o.chat); });
  const runtime::ChatTemplate t(o.chat.chat_template.empty() ? kPlainChatTemplate : o.chat.chat_template, "bench");
  const std::vector<runtime::ChatMessage> rl = runtime_list(list);
  runtime::ChatRenderOptions ro;
  ro.add_generation_prompt = false;
  ro.tools_json = o.chat.tools_json;
  for (int64_t r = 0; r < reps; ++r) {  // alternating
    const double c = fastest_us(1, [&] { render_prefixes(t, rl, ro, false); });
    const double p = fastest_us(1, [&] { render_prefixes(t, rl, ro, true); });
    row.convert = r == 0 ? c : std::min(row.convert, c);
    row.prepared = r == 0 ? p : std::min(row.prepared, p);
  }
  SyncPlan off, on;
  std::vector<ChatMessage> grown = list;
  for (int64_t r = 0; r < reps; ++r) {
    // fresh: the memos forget every list first; grown: they know only the list before it, and its last
    // message is new text (the BPE word cache has not seen the rendering).
    for (Memos m : {Memos::kOff, Memos::kCutsOnly, Memos::kOn}) {
      const bool memo = m == Memos::kOn;
      if (m != Memos::kCutsOnly) {
        set_memos(m);
        keep_fastest(r == 0, memo ? row.fresh_on : row.fresh_off, [&] { (memo ? on : off) = w.plan_sync(list, o); });
        if (memo) require_same(on, off, what + ", fresh");
      }
      set_memos(m);
      (void)w.plan_sync(before, o);
      grown.back().content =
          list.back().content + " (run " + std::to_string(r) + "." + std::to_string(static_cast<int>(m)) + ")";
      double& best = m == Memos::kOff ? row.grown_off : (memo ? row.grown_on : row.grown_whole);
      const int64_t renders = detail::prefix_renders_so_far();
      keep_fastest(r == 0, best, [&] { (void)w.plan_sync(grown, o); });
      if (memo) row.grown_renders = detail::prefix_renders_so_far() - renders;
    }
  }
  // The three ways plan a grown list alike (the timed runs each planned other text).
  SyncPlan reference;
  for (Memos m : {Memos::kOff, Memos::kCutsOnly, Memos::kOn}) {
    set_memos(m);
    (void)w.plan_sync(before, o);
    const SyncPlan p = w.plan_sync(list, o);
    if (m == Memos::kOff) reference = p;
    if (m != Memos::kOff) require_same(p, reference, what + ", grown");
  }
  set_memos(Memos::kOn);
  return row;
}

// `list` without its `k` oldest messages after the first (the system prompt), one assistant message summarizing
// them in their place when `summarize`, and the message agent_list would add next, its text ending in `tag`.
std::vector<ChatMessage> trimmed_list(const std::vector<ChatMessage>& list, int64_t k, bool summarize,
                                      const std::string& tag) {
  std::vector<ChatMessage> out{list.front()};
  if (summarize) out.push_back({"assistant", "Earlier: " + text_of(k, 3)});
  out.insert(out.end(), list.begin() + 1 + k, list.end());
  ChatMessage next = agent_list(static_cast<int64_t>(list.size()) + 1).back();
  next.content += " " + tag;
  out.push_back(std::move(next));
  return out;
}

// `list` with a new system prompt (as an agent writes the date, a memory digest or a step counter into it at
// every request; `tag` makes it new at every run), then, per `mode`: nothing else changed (kSame); the two
// messages agent_list would add next (kStep: the usual agent step); or the `k` oldest messages after it dropped
// and the next message added (kTrim).
enum class SystemEdit { kSame, kStep, kTrim };

std::vector<ChatMessage> new_system_list(const std::vector<ChatMessage>& list, SystemEdit mode, int64_t k,
                                         const std::string& tag) {
  std::vector<ChatMessage> out = mode == SystemEdit::kTrim ? trimmed_list(list, k, false, "") : list;
  out.front().content += " Step " + std::to_string(list.size()) + ", " + tag + "; notes so far: " + text_of(3, 1);
  if (mode == SystemEdit::kStep) {
    const std::vector<ChatMessage> longer = agent_list(static_cast<int64_t>(list.size()) + 2);
    out.insert(out.end(), longer.end() - 2, longer.end());
  }
  return out;
}

// One way an agent edits its last list: its name, and the next list (`tag`: text new at every run).
struct Edit {
  std::string name;
  std::function<std::vector<ChatMessage>(const std::vector<ChatMessage>&, const std::string&)> next;
};

struct EditRow {
  double off = 0, on = 0;
  int64_t renders = 0;  // prefixes step 2 rendered for the list, memos on
};

// plan_sync of each edit of `list` once `list` was planned, the memos off and on alternating; the two sides'
// plans compared on one more list of each edit.
std::vector<EditRow> measure_edits(Engine& engine, const std::vector<ChatMessage>& list, const SyncOptions& o,
                                   const std::vector<Edit>& edits, int64_t reps, const std::string& what) {
  std::vector<EditRow> rows(edits.size());
  const Window w = engine.new_window();
  for (int64_t r = 0; r < reps; ++r) {
    for (std::size_t e = 0; e < edits.size(); ++e) {
      for (Memos m : {Memos::kOff, Memos::kOn}) {
        set_memos(m);
        (void)w.plan_sync(list, o);
        const std::vector<ChatMessage> next =
            edits[e].next(list, "(run " + std::to_string(r) + "." + std::to_string(static_cast<int>(m)) + ")");
        const int64_t renders = detail::prefix_renders_so_far();
        keep_fastest(r == 0, m == Memos::kOn ? rows[e].on : rows[e].off, [&] { (void)w.plan_sync(next, o); });
        if (m == Memos::kOn) rows[e].renders = detail::prefix_renders_so_far() - renders;
      }
    }
  }
  for (const Edit& edit : edits) {
    const std::vector<ChatMessage> next = edit.next(list, "(check)");
    SyncPlan reference;
    for (Memos m : {Memos::kOff, Memos::kOn}) {
      set_memos(m);
      (void)w.plan_sync(list, o);
      const SyncPlan p = w.plan_sync(next, o);
      if (m == Memos::kOff) reference = p;
      if (m == Memos::kOn) require_same(p, reference, what + ", " + edit.name);
    }
  }
  set_memos(Memos::kOn);
  return rows;
}

// The table of `edits` per template and size: per edit the memos off and on and their ratio, then the on side
// against grown-on (`grown_on`, per template and size in order), then how many prefixes each rendered.
void print_edits(Engine& engine, const std::vector<std::pair<std::string, std::string>>& templates,
                 const std::vector<int64_t>& sizes, const std::vector<Edit>& edits,
                 const std::vector<std::pair<std::string, double>>& grown_on, int64_t reps) {
  const auto width = [](const Edit& e, int least) { return std::max(least, static_cast<int>(e.name.size()) + 4); };
  std::printf("%-22s %4s", "template", "N");
  for (const Edit& e : edits) {
    std::printf(" %*s %*s %6s", width(e, 9), (e.name + "-off").c_str(), width(e, 9), (e.name + "-on").c_str(), "ratio");
  }
  std::printf(" %9s", "grown-on");
  for (const Edit& e : edits) std::printf(" %*s", width(e, 8), (e.name + "/g").c_str());
  for (const Edit& e : edits) std::printf(" %*s", width(e, 7), (e.name + "-r").c_str());
  std::printf("\n");
  std::size_t row = 0;
  for (const auto& [name, source] : templates) {
    SyncOptions o;
    o.chat.chat_template = source;
    o.chat.tools_json = kTools;
    for (int64_t n : sizes) {
      const double g = grown_on[row++].second;
      std::vector<EditRow> r;
      try {
        r = measure_edits(engine, agent_list(n), o, edits, reps, name + ", N = " + std::to_string(n));
      } catch (const Error& e) {  // an edit the template refuses (Mistral Nemo: roles that do not alternate)
        set_memos(Memos::kOn);
        std::printf("%-22s %4lld refused: %s\n", name.c_str(), static_cast<long long>(n), e.what());
        continue;
      }
      std::printf("%-22s %4lld", name.c_str(), static_cast<long long>(n));
      for (std::size_t k = 0; k < r.size(); ++k) {
        std::printf(" %*.0f %*.0f %6.2f", width(edits[k], 9), r[k].off, width(edits[k], 9), r[k].on,
                    r[k].off / r[k].on);
      }
      std::printf(" %9.0f", g);
      for (std::size_t k = 0; k < r.size(); ++k) std::printf(" %*.2f", width(edits[k], 8), r[k].on / g);
      for (std::size_t k = 0; k < r.size(); ++k) {
        std::printf(" %*lld", width(edits[k], 7), static_cast<long long>(r[k].renders));
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

// Agent `agent`'s list of `n` messages at request `step` when it rewrites its system prompt at every request (the
// step and `tag`, text new at every run, in it) and drops its two oldest messages after it as it adds two: the
// system prompt, then agent_message(1 + 2 * step, agent) on. Neither its first nor its second message is its last
// list's.
std::vector<ChatMessage> moving_list(int64_t n, int agent, int64_t step, const std::string& tag) {
  std::vector<ChatMessage> out;
  out.push_back({"system", std::string(agent == 0 ? "You tell short stories." : "You write short poems.") +
                               " Use the tools to look things up. Step " + std::to_string(step) + ", " + tag +
                               "; notes so far: " + text_of(step, 1)});
  for (int64_t i = 1 + 2 * step; static_cast<int64_t>(out.size()) < n; ++i) out.push_back(agent_message(i, agent));
  return out;
}

// How many requests of each of the two agents measure_pair times.
constexpr int64_t kPairSteps = 3;

// Two agents taking turns on one window's memos (agents 0 and 1, moving_list): their first lists planned, then
// kPairSteps requests of each, alternating, so the latest list under the template is always the other agent's.
// Per side, the plans of the timed requests (`plans`, when given) and their mean microseconds; `renders`: the
// prefixes step 2 rendered for them.
double pair_requests(const Window& w, int64_t n, const SyncOptions& o, const std::string& tag, int64_t& renders,
                     std::vector<SyncPlan>* plans) {
  for (int agent = 0; agent < 2; ++agent) (void)w.plan_sync(moving_list(n, agent, 0, tag), o);
  double seconds = 0;
  const int64_t before = detail::prefix_renders_so_far();
  for (int64_t step = 1; step <= kPairSteps; ++step) {
    for (int agent = 0; agent < 2; ++agent) {
      const std::vector<ChatMessage> list = moving_list(n, agent, step, tag);
      const double t0 = cpu_now();
      SyncPlan p = w.plan_sync(list, o);
      seconds += cpu_now() - t0;
      if (plans != nullptr) plans->push_back(std::move(p));
    }
  }
  renders = detail::prefix_renders_so_far() - before;
  return seconds * 1e6 / (2 * kPairSteps);
}

// pair_requests with the memos off and on alternating (the fastest rep of each), and how many prefixes the on
// side rendered per request; the two sides' plans compared on one more run.
EditRow measure_pair(Engine& engine, int64_t n, const SyncOptions& o, int64_t reps, const std::string& what) {
  EditRow row;
  const Window w = engine.new_window();
  for (int64_t r = 0; r < reps; ++r) {
    for (Memos m : {Memos::kOff, Memos::kOn}) {
      set_memos(m);
      int64_t renders = 0;
      const double us = pair_requests(
          w, n, o, "(run " + std::to_string(r) + "." + std::to_string(static_cast<int>(m)) + ")", renders, nullptr);
      double& best = m == Memos::kOn ? row.on : row.off;
      best = r == 0 ? us : std::min(best, us);
      if (m == Memos::kOn) row.renders = renders;
    }
  }
  std::vector<SyncPlan> plans[2];
  for (Memos m : {Memos::kOff, Memos::kOn}) {
    set_memos(m);
    int64_t renders = 0;
    (void)pair_requests(w, n, o, "(check)", renders, &plans[m == Memos::kOn ? 1 : 0]);
  }
  for (std::size_t k = 0; k < plans[0].size(); ++k) require_same(plans[1][k], plans[0][k], what + ", two agents");
  set_memos(Memos::kOn);
  return row;
}

// The table of two agents taking turns (measure_pair) per template and size: the memos off and on, their
// ratio, the on side against grown-on, and the prefixes rendered per request with the memos on.
void print_pair(Engine& engine, const std::vector<std::pair<std::string, std::string>>& templates,
                const std::vector<int64_t>& sizes, const std::vector<std::pair<std::string, double>>& grown_on,
                int64_t reps) {
  std::printf("%-22s %4s %9s %9s %6s %9s %8s %7s\n", "template", "N", "pair-off", "pair-on", "ratio", "grown-on",
              "pair/g", "pair-r");
  std::size_t row = 0;
  for (const auto& [name, source] : templates) {
    SyncOptions o;
    o.chat.chat_template = source;
    o.chat.tools_json = kTools;
    for (int64_t n : sizes) {
      const double g = grown_on[row++].second;
      EditRow r;
      try {
        r = measure_pair(engine, n, o, reps, name + ", N = " + std::to_string(n));
      } catch (const Error& e) {  // lists the template refuses (Mistral Nemo: roles that do not alternate)
        set_memos(Memos::kOn);
        std::printf("%-22s %4lld refused: %s\n", name.c_str(), static_cast<long long>(n), e.what());
        continue;
      }
      std::printf("%-22s %4lld %9.0f %9.0f %6.2f %9.0f %8.2f %7.1f\n", name.c_str(), static_cast<long long>(n), r.off,
                  r.on, r.off / r.on, g, r.on / g, static_cast<double>(r.renders) / (2 * kPairSteps));
      std::fflush(stdout);
    }
  }
}

// The plain template and the --templates named (`all`: every tests/data/templates/*.jinja, by name).
std::vector<std::pair<std::string, std::string>> read_templates(const std::string& names) {
  std::vector<std::string> wanted = cli::split_commas(names);
  if (names == "all") {
    wanted.clear();
    for (const auto& e : fs::directory_iterator(ORBIT_TEMPLATES_DIR)) {
      if (e.path().extension() == ".jinja") wanted.push_back(e.path().stem().string());
    }
    std::sort(wanted.begin(), wanted.end());
  }
  std::vector<std::pair<std::string, std::string>> templates = {{"plain", ""}};
  for (const std::string& name : wanted) {
    if (name.empty()) continue;
    const fs::path file = fs::path(ORBIT_TEMPLATES_DIR) / (name + ".jinja");
    std::ifstream in(file);
    ORBIT_CHECK(in, "--templates: " << file << ": no such file");
    std::stringstream text;
    text << in.rdbuf();
    templates.emplace_back(name, text.str());
  }
  return templates;
}

// `templates` less those that refuse the agent list (named on stdout with the template's error).
std::vector<std::pair<std::string, std::string>> usable_templates(
    Engine& engine, const std::vector<std::pair<std::string, std::string>>& templates) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, source] : templates) {
    ChatOptions o;
    o.chat_template = source;
    o.tools_json = kTools;
    try {
      (void)engine.render_chat(agent_list(8), false, o);
      out.emplace_back(name, source);
    } catch (const Error& e) {
      std::printf("skipped %s: it refuses the agent list: %s\n", name.c_str(), e.what());
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const cli::Args a(
        "bench_sync_render",
        cli::ArgSpec{
            {"--sizes", "--reps", "--templates", "--trim", "--summ", "--cache"},
            {},
            "usage: bench_sync_render [--sizes 25,50,100,200] [--reps 5]\n"
            "                         [--templates qwen2.5-7b-instruct,llama-3.1-8b-instruct|all] [--trim 4]\n"
            "                         [--summ TRIM] [--cache DIR]\n"
            "  plan_sync's rendering (orbit/sync.h steps 1-3) of agent lists of --sizes messages, with the\n"
            "  memos off, the cuts memo alone, and both memos on (the cuts memo and incremental encoding;\n"
            "  microseconds of thread CPU time, the fastest of --reps); then of each list with its --trim\n"
            "  oldest messages after the system prompt dropped (or its --summ oldest summarized), and with a new\n"
            "  system prompt (alone, with two messages added, with --trim messages dropped) once it was planned.\n"
            "  --templates:\n"
            "  tests/data/templates/<name>.jinja besides the plain template ('' for none; all: every one, those\n"
            "  that refuse the agent list, as Gemma 2 its system prompt, named and skipped). --cache: where\n"
            "  the copy of TinyStories-656K with more positions is made (default /tmp/orbit-bench).\n"},
        argc, argv, 1);
    const std::vector<int64_t> sizes = bench::parse_positive_list(a.get_or("--sizes", "25,50,100,200"), "--sizes");
    const int64_t reps = a.get_int("--reps", 5, 1);
    const int64_t trim = a.get_int("--trim", 4, 1);
    ORBIT_CHECK(trim + 1 < *std::min_element(sizes.begin(), sizes.end()),
                "--trim: " << trim << " leaves no message of the shortest list in --sizes after the system prompt");
    const int64_t summ = a.get_int("--summ", trim, 1);
    ORBIT_CHECK(summ + 1 < *std::min_element(sizes.begin(), sizes.end()),
                "--summ: " << summ << " leaves no message of the shortest list in --sizes after the system prompt");
    std::vector<std::pair<std::string, std::string>> templates =
        read_templates(a.get_or("--templates", "qwen2.5-7b-instruct,llama-3.1-8b-instruct"));
    const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
    EngineOptions eo;
    eo.model = model_with_positions(a.get_or("--cache", "/tmp/orbit-bench"), std::max<int64_t>(4096, 200 * largest));
    eo.pool_bytes = int64_t{16} << 20;
    eo.threads = 1;
    eo.background = BackgroundMode::kDeferred;
    const auto engine = Engine::open(eo);
    templates = usable_templates(*engine, templates);
    std::printf("model %s; microseconds of thread CPU time, the fastest of %lld\n\n", eo.model.c_str(),
                static_cast<long long>(reps));
    std::printf("%-22s %4s %7s %8s %9s %9s %6s %9s %9s %6s %9s %9s %9s %6s %6s %7s\n", "template", "N", "render",
                "tokenize", "prefixes", "prepared", "ratio", "fresh-off", "fresh-on", "ratio", "grown-off", "whole",
                "grown-on", "ratio", "whole/", "grown-r");
    std::vector<std::pair<std::string, double>> grown_on;  // per template and N, for the trimmed table
    for (const auto& [name, source] : templates) {
      SyncOptions o;
      o.chat.chat_template = source;
      o.chat.tools_json = kTools;
      for (int64_t n : sizes) {
        const Row r = measure(*engine, agent_list(n), o, reps, name + ", N = " + std::to_string(n));
        std::printf("%-22s %4lld %7.0f %8.0f %9.0f %9.0f %6.2f %9.0f %9.0f %6.2f %9.0f %9.0f %9.0f %6.2f %6.2f %7lld\n",
                    name.c_str(), static_cast<long long>(n), r.render, r.tokenize, r.convert, r.prepared,
                    r.convert / r.prepared, r.fresh_off, r.fresh_on, r.fresh_off / r.fresh_on, r.grown_off,
                    r.grown_whole, r.grown_on, r.grown_off / r.grown_on, r.grown_whole / r.grown_on,
                    static_cast<long long>(r.grown_renders));
        std::fflush(stdout);
        grown_on.emplace_back(name, r.grown_on);
      }
    }
    std::printf(
        "\nthe lists with their %lld oldest messages after the system prompt dropped (trim) or their %lld "
        "summarized in one message (summ), and one message added, once the whole list was planned\n\n",
        static_cast<long long>(trim), static_cast<long long>(summ));
    const std::vector<Edit> trims = {
        {"trim", [&](const auto& list, const std::string& tag) { return trimmed_list(list, trim, false, tag); }},
        {"summ", [&](const auto& list, const std::string& tag) { return trimmed_list(list, summ, true, tag); }}};
    print_edits(*engine, templates, sizes, trims, grown_on, reps);
    std::printf(
        "\nthe lists with a new system prompt (sys), that and two messages added (step: an agent's usual request), "
        "or that, their %lld oldest messages after it dropped and one added (systrim), once the whole list was "
        "planned\n\n",
        static_cast<long long>(trim));
    const auto system_edit = [&](SystemEdit mode) {
      return [mode, trim](const std::vector<ChatMessage>& list, const std::string& tag) {
        return new_system_list(list, mode, trim, tag);
      };
    };
    const std::vector<Edit> systems = {{"sys", system_edit(SystemEdit::kSame)},
                                       {"step", system_edit(SystemEdit::kStep)},
                                       {"systrim", system_edit(SystemEdit::kTrim)}};
    print_edits(*engine, templates, sizes, systems, grown_on, reps);
    std::printf(
        "\ntwo agents taking turns on the memos (pair), each with a new system prompt, its two oldest messages after "
        "it dropped and two added at each of %lld requests (neither its first nor its second message kept): "
        "microseconds per request, and prefixes rendered per request with the memos on\n\n",
        static_cast<long long>(kPairSteps));
    print_pair(*engine, templates, sizes, grown_on, reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sync_render: %s\n", e.what());
    return 1;
  }
}
