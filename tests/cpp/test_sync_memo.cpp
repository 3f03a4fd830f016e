// Window::plan_sync / sync's message boundaries (orbit/sync.h step 2) read from the cuts memo (sync_memo.h: what
// each prefix of an earlier list rendered to) give exactly the plan that rendering every prefix gives
// (detail::set_cuts_memo switches between the two): over agents whose lists grow, get trimmed, edited and cut
// back, or get a new system prompt at every request, under templates whose boundaries hold, templates that refuse
// shorter lists or render the last message differently, and a template that reads the clock (read from the memo
// while its date holds: test_sync_memo_clock.cpp). A list that only grew renders no prefix at all. Also
// ChatTemplate::render_prefix against render, and the parsed-template cache. The spans read for trimmed lists and
// changed first messages: test_sync_memo_edits.cpp.
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
#include "sync_test_support.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_cuts::content;
using orbit::test::sync_cuts::random_list;
using orbit::test::sync_cuts::require_same;
using orbit::test::sync_support::msg;
using orbit::test::sync_support::sentence;

// Turns the memo back on however the test leaves.
struct MemoOn {
  ~MemoOn() { orbit::detail::set_cuts_memo(true); }
};

// plan_sync, or the error it threw.
struct Planned {
  std::optional<SyncPlan> plan;
  std::string error;
};

Planned plan_or_error(const Window& w, const std::vector<ChatMessage>& messages, const SyncOptions& o) {
  try {
    return {w.plan_sync(messages, o), ""};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  }
}

// plan_sync with the memo off, then on (reading what earlier lists left), checked equal (or the same error);
// the memo's plan. Adds the prefixes the memo's side rendered to `renders`.
std::optional<SyncPlan> plan_both(const Window& w, const std::vector<ChatMessage>& messages, const SyncOptions& o,
                                  int64_t* renders = nullptr) {
  const MemoOn restore;
  orbit::detail::set_cuts_memo(false);
  const Planned every = plan_or_error(w, messages, o);
  orbit::detail::set_cuts_memo(true);
  const int64_t before = orbit::detail::prefix_renders_so_far();
  const Planned memo = plan_or_error(w, messages, o);
  if (renders != nullptr) *renders += orbit::detail::prefix_renders_so_far() - before;
  REQUIRE(memo.error == every.error);
  REQUIRE(memo.plan.has_value() == every.plan.has_value());
  if (memo.plan) require_same(*memo.plan, *every.plan);
  return memo.plan;
}

// The templates of sync_cuts_support.h, and four whose prefixes are not all prefixes: one that refuses a list
// whose last message is not a user's (as Mistral's wants alternating turns), one that marks the last message
// (every prefix renders its last message otherwise), one that numbers turns from the end, one whose first line
// depends on the last message (as Mistral's places the system prompt by the last user turn).
std::vector<std::string> templates() {
  std::vector<std::string> out = orbit::test::sync_cuts::kTemplates;
  out.push_back(
      "{% if messages[-1].role != 'user' and messages[-1].role != 'tool' %}{{ raise_exception('the last message "
      "must be a user turn') }}{% endif %}{% for message in messages %}{{ message.role }}: {{ message.content }}\n"
      "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
  out.push_back(
      "{% for message in messages %}{{ message.role }}{% if loop.last %} (last){% endif %}: {{ message.content }}\n"
      "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
  out.push_back(
      "{% for message in messages %}[{{ messages | length - loop.index }}] {{ message.role }}: {{ message.content }}"
      "\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
  // A header that names the last message's role: a prefix is a prefix of an earlier, longer list's rendering
  // where their last roles agree, and of this one's only where this one's last role agrees too.
  out.push_back(
      "({{ messages[-1].role }} last)\n{% for message in messages %}{{ message.role }}: {{ message.content }}\n"
      "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
  return out;
}

// One step of an agent's list: mostly appends, sometimes a trim of the oldest turn, an edit of a message, the
// last messages cut back (a retried branch), or a message removed from the middle.
void step(std::mt19937_64& rng, std::vector<ChatMessage>& list) {
  const std::size_t r = rng() % 10;
  if (r < 5 || list.size() < 4) {
    for (std::size_t k = 1 + rng() % 2; k > 0; --k) list.push_back(random_list(rng, 1).front());
  } else if (r == 5) {
    list.erase(list.begin() + 1, list.begin() + 3);
  } else if (r == 6) {
    list[rng() % list.size()].content = content(rng);
  } else if (r == 7) {
    list.resize(list.size() - 1 - rng() % 2);
  } else if (r == 8) {
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(1 + rng() % (list.size() - 1)));
  } else {
    list.push_back(list[rng() % list.size()]);  // a message again
  }
}

}  // namespace

TEST_CASE("the cuts memo plans as rendering every prefix does", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  orbit::detail::clear_cuts_memo();
  std::mt19937_64 rng(11);
  int64_t renders = 0;
  int64_t refused = 0;  // lists the refusing template refused as a whole
  for (const std::string& tmpl : templates()) {
    for (int agent = 0; agent < 3; ++agent) {
      Window w = engine->new_window();
      SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 8 + static_cast<int64_t>(rng() % 24));
      if (agent == 2) o.chat.tools_json = R"([{"type": "function", "function": {"name": "lookup"}}])";
      std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
      for (int request = 0; request < 14; ++request) {
        step(rng, list);
        INFO("template '" << tmpl << "', agent " << agent << ", request " << request << ", " << list.size()
                          << " messages");
        const std::optional<SyncPlan> plan = plan_both(w, list, o, &renders);
        refused += plan ? 0 : 1;
        if (plan && rng() % 3 != 0) w.sync(list, *plan);
      }
    }
  }
  CHECK(renders > 0);  // the edits rendered what no earlier list knew
  CHECK(refused > 0);
}

TEST_CASE("a list that only grew renders none of its prefixes", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  for (const std::string& tmpl : {std::string(), std::string(orbit::test::sync_support::kTemplate)}) {
    orbit::detail::clear_cuts_memo();
    std::mt19937_64 rng(12);
    Window w = engine->new_window();
    const SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 16);
    std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
    for (int request = 0; request < 10; ++request) {
      // A request, then its answer appended as the server plans it (Window::prepare_sync): each list is the
      // one before and one more message.
      for (const char* role : {"user", "assistant"}) {
        list.push_back(msg(role, sentence(rng, 2 + static_cast<int>(rng() % 6))));
        int64_t renders = 0;
        INFO("template '" << tmpl << "', request " << request << ", " << role);
        w.sync(list, plan_both(w, list, o, &renders).value());
        // Every prefix is the last list or one of its prefixes (but for the first list's).
        CHECK(renders == (list.size() == 2 ? 1 : 0));
      }
    }
  }
}

TEST_CASE("a template that reads the clock reads the memo while the year holds", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  const char* clock =
      "{% for message in messages %}{{ strftime_now('%Y') }} {{ message.role }}: {{ message.content }}\n"
      "{% endfor %}";
  CHECK_FALSE(runtime::ChatTemplate(clock, "clock").deterministic());
  CHECK(runtime::ChatTemplate(orbit::test::sync_support::kTemplate, "story").deterministic());
  struct Unpin {
    ~Unpin() { runtime::set_template_clock(std::nullopt); }
  } unpin;
  std::tm day{};
  day.tm_year = 126;  // 2026
  day.tm_mon = 11;
  day.tm_mday = 31;
  day.tm_hour = 12;
  day.tm_isdst = -1;
  runtime::set_template_clock(std::mktime(&day));
  const Window w = engine->new_window();
  const SyncOptions o = orbit::test::sync_support::options(clock, 16);
  std::vector<ChatMessage> list = {msg("system", "You tell short stories."), msg("user", "A story.")};
  (void)plan_both(w, list, o);
  list.push_back(msg("assistant", "Once upon a time."));
  int64_t renders = 0;
  (void)plan_both(w, list, o, &renders);
  CHECK(renders == 0);  // the list before it, read from the memo
  day.tm_mday = 32;     // 1 Jan 2027: every entry rendered 2026
  day.tm_isdst = -1;
  runtime::set_template_clock(std::mktime(&day));
  list.push_back(msg("user", "Another."));
  (void)plan_both(w, list, o, &renders);
  CHECK(renders == 3);
}

TEST_CASE("render_prefix renders as render does over each prefix", "[sync_memo]") {
  namespace fs = std::filesystem;
  std::mt19937_64 rng(13);
  std::vector<runtime::ChatMessage> list;
  for (int k = 0; k < 12; ++k) {
    runtime::ChatMessage m;
    m.role = k == 0 ? "system" : (k % 2 == 1 ? "user" : "assistant");
    m.content = sentence(rng, 1 + k % 3);
    if (k % 4 == 2) m.tool_calls.push_back({"call_" + std::to_string(k), "lookup", "{\"q\": [1, 2.5, \"x\"]}"});
    list.push_back(std::move(m));
  }
  runtime::ChatRenderOptions o;
  o.tools_json = R"([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}])";
  o.extra_json = R"({"date_string": "26 Jul 2024"})";
  int64_t checked = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(ORBIT_TEST_DATA_DIR) / "templates")) {
    if (e.path().extension() != ".jinja") continue;
    std::ifstream in(e.path());
    std::stringstream source;
    source << in.rdbuf();
    const runtime::ChatTemplate t(source.str(), e.path().filename().string(), "<s>", "</s>");
    const runtime::PreparedChat prepared = t.prepare(list, o);
    REQUIRE(prepared.size() == list.size());
    for (std::size_t n = 0; n <= list.size(); ++n) {
      for (bool prompt : {false, true}) {
        INFO(e.path().filename().string() << ", " << n << " messages, prompt " << prompt);
        runtime::ChatRenderOptions with = o;
        with.add_generation_prompt = prompt;
        const std::vector<runtime::ChatMessage> prefix(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n));
        std::string expected, got;
        try {
          expected = t.render(prefix, with);
        } catch (const Error& error) {
          expected = std::string("error: ") + error.what();
        }
        try {
          got = t.render_prefix(prepared, n, prompt);
        } catch (const Error& error) {
          got = std::string("error: ") + error.what();
        }
        REQUIRE(got == expected);
        ++checked;
      }
    }
  }
  CHECK(checked >= 9 * 2 * 13);
  const runtime::ChatTemplate plain(kPlainChatTemplate, "plain");
  CHECK_THROWS_WITH(plain.render_prefix(plain.prepare(list, o), list.size() + 1, false),
                    Catch::Matchers::Contains("count 13 is past the list's 12 messages"));
  runtime::ChatRenderOptions bad = o;
  bad.tools_json = "{\"not\": \"a list\"}";
  CHECK_THROWS_WITH(plain.prepare(list, bad), Catch::Matchers::Contains("tools_json must be a JSON array"));
}

TEST_CASE("a template given in the options is parsed once", "[sync_memo]") {
  const auto a = orbit::detail::parsed_template(orbit::test::sync_support::kTemplate, "options", "<s>", "");
  const auto b = orbit::detail::parsed_template(orbit::test::sync_support::kTemplate, "options", "<s>", "");
  const auto c = orbit::detail::parsed_template(orbit::test::sync_support::kTemplate, "options", "", "");
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a->key() != c->key());  // bos_token is part of what it renders
  CHECK_THROWS_WITH(orbit::detail::parsed_template("{% for %}", "ChatOptions::chat_template", "", ""),
                    Catch::Matchers::Contains("ChatOptions::chat_template"));
}

}  // namespace ORBIT_TEST_FILE
