// An assistant message's reasoning_content (orbit/sync.h ChatMessage, runtime::ChatMessage) through the SDK:
// rendered by a reasoning model's template (Qwen3's, tests/data/templates) where the template shows it, part
// of a message's list key (sync_memo.h list_keys: lists that differ only there share no memo entry) and of
// what makes two messages the same (list_memory.h same_message), and planned by Window::plan_sync as the
// rendering's tokens whether the memo knows the list it differs from or not. Likewise a message's content_form
// (orbit/common/chat_content.h: a content of None or none at all, as Hugging Face passes them).
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_test_support.h"
#include "window/list_memory.h"
#include "window/sync_memo.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_support::msg;

std::string qwen3_template() {
  std::ifstream in(std::filesystem::path(ORBIT_TEST_DATA_DIR) / "templates" / "qwen3-0.6b.jinja", std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  REQUIRE(!s.str().empty());
  return s.str();
}

ChatMessage thought(const std::string& content, std::optional<std::string> reasoning) {
  ChatMessage m = msg("assistant", content);
  m.reasoning_content = std::move(reasoning);
  return m;
}

runtime::ChatMessage runtime_thought(const std::string& content, std::optional<std::string> reasoning) {
  runtime::ChatMessage m;
  m.role = "assistant";
  m.content = content;
  m.reasoning_content = std::move(reasoning);
  return m;
}

// The conversation's answer turn (after the last user query: Qwen3 shows its reasoning) with `reasoning`.
std::vector<ChatMessage> answered(std::optional<std::string> reasoning) {
  return {msg("system", "You are brief."), msg("user", "What is 2 + 2?"), thought("4", std::move(reasoning))};
}

// Plans each list on one window in turn, syncing it after (so the memos know the lists before it); checks every
// plan is its list's rendering and returns the plans' tokens.
std::vector<std::vector<int64_t>> planned_in_turn(const std::shared_ptr<Engine>& engine,
                                                  const std::vector<std::vector<ChatMessage>>& lists,
                                                  const SyncOptions& o) {
  Window w = engine->new_window();
  std::vector<std::vector<int64_t>> planned;
  for (std::size_t i = 0; i < lists.size(); ++i) {
    INFO("list " << i);
    const SyncPlan plan = w.plan_sync(lists[i], o);
    CHECK(plan.tokens == engine->tokenize_chat(lists[i], false, o.chat));
    planned.push_back(plan.tokens);
    w.sync(lists[i], o);
  }
  return planned;
}

}  // namespace

TEST_CASE("a message's list key covers its reasoning_content, unset and empty apart", "[sync_reasoning]") {
  const runtime::ChatTemplate tmpl(qwen3_template(), "qwen3-0.6b.jinja");
  const runtime::ChatRenderOptions options;
  runtime::ChatMessage user;
  user.role = "user";
  user.content = "What is 2 + 2?";
  std::vector<orbit::detail::ListKeys> keys;
  for (const std::optional<std::string>& reasoning :
       {std::optional<std::string>(), std::optional<std::string>(""), std::optional<std::string>("Two and two."),
        std::optional<std::string>("Add them.")}) {
    keys.push_back(orbit::detail::list_keys(tmpl, options, {user, runtime_thought("4", reasoning), user}));
  }
  for (std::size_t a = 0; a < keys.size(); ++a) {
    for (std::size_t b = a + 1; b < keys.size(); ++b) {
      INFO("lists " << a << " and " << b);
      CHECK(keys[a].lists[0] == keys[b].lists[0]);  // the same first message
      CHECK(keys[a].messages[1] != keys[b].messages[1]);
      CHECK(keys[a].lists[1] != keys[b].lists[1]);
      CHECK(keys[a].lists[2] != keys[b].lists[2]);  // and every list that holds it
    }
  }
}

TEST_CASE("messages that differ only in reasoning_content are not the same message", "[sync_reasoning]") {
  CHECK(orbit::detail::same_message(thought("4", "Add."), thought("4", "Add.")));
  CHECK_FALSE(orbit::detail::same_message(thought("4", "Add."), thought("4", "Sum.")));
  CHECK_FALSE(orbit::detail::same_message(thought("4", std::nullopt), thought("4", "")));
}

TEST_CASE("render_chat and plan_sync pass reasoning_content to the template", "[sync_reasoning]") {
  const std::shared_ptr<Engine> engine = orbit::test::sync_support::open_engine();
  SyncOptions o = orbit::test::sync_support::options();
  o.chat.chat_template = qwen3_template();
  const std::string shown = engine->render_chat(answered("Two and two make four."), false, o.chat);
  CHECK(shown.find("<|im_start|>assistant\n<think>\nTwo and two make four.\n</think>\n\n4<|im_end|>") !=
        std::string::npos);
  // Unset, the template reads the thinking from <think> tags in the content; set to "", it reads none.
  const std::vector<ChatMessage> tagged = {msg("user", "Hi"), thought("<think>hmm</think>Hello.", std::nullopt)};
  CHECK(engine->render_chat(tagged, false, o.chat).find("<think>\nhmm\n</think>\n\nHello.") != std::string::npos);
  const std::vector<ChatMessage> empty = {msg("user", "Hi"), thought("<think>hmm</think>Hello.", "")};
  CHECK(engine->render_chat(empty, false, o.chat).find("<think>\n\n</think>\n\n<think>hmm</think>Hello.") !=
        std::string::npos);

  // Lists that differ only in the reasoning plan as their own renderings, one after the other (the memos
  // know the earlier list when the later one is planned), and their plans differ.
  std::vector<std::vector<ChatMessage>> lists;
  for (const char* reasoning : {"Two and two make four.", "Add them: 2 + 2 = 4, which I say plainly.", ""}) {
    lists.push_back(answered(std::string(reasoning)));
  }
  const std::vector<std::vector<int64_t>> planned = planned_in_turn(engine, lists, o);
  CHECK(planned[0] != planned[1]);
  CHECK(planned[1] != planned[2]);
}

// A template that shows what message.content is: N for None, U for undefined, [text] for a string.
constexpr const char* kContentProbe =
    "{% for m in messages %}{{ m.role }}={% if m.content is none %}N{% elif m.content is defined %}[{{ m.content }}]"
    "{% else %}U{% endif %};{% endfor %}{% if add_generation_prompt %}assistant={% endif %}";

ChatMessage call_turn(ContentForm form) {
  ChatMessage m = msg("assistant", "");
  m.tool_calls.push_back({"c1", "get_weather", "{\"city\": \"Paris\"}"});
  m.content_form = form;
  return m;
}

TEST_CASE("a content of None or none reaches the template as such, and plans as its own list", "[sync_reasoning]") {
  const std::shared_ptr<Engine> engine = orbit::test::sync_support::open_engine();
  SyncOptions o = orbit::test::sync_support::options();
  o.chat.chat_template = kContentProbe;
  const auto shown = [&](ContentForm form) {
    return engine->render_chat({msg("user", "Hi"), call_turn(form)}, false, o.chat);
  };
  CHECK(shown(ContentForm::kText) == "user=[Hi];assistant=[];");
  CHECK(shown(ContentForm::kNull) == "user=[Hi];assistant=N;");
  CHECK(shown(ContentForm::kAbsent) == "user=[Hi];assistant=U;");
  // Printed, None is "None" as Python's Jinja writes it; undefined is "".
  ChatOptions prints = o.chat;
  prints.chat_template = "{% for m in messages %}<{{ m.content }}>{% endfor %}";
  CHECK(engine->render_chat({call_turn(ContentForm::kNull), call_turn(ContentForm::kAbsent)}, false, prints) ==
        "<None><>");
  // None and undefined hold no text.
  ChatMessage both = msg("assistant", "text");
  both.content_form = ContentForm::kNull;
  CHECK_THROWS_WITH(engine->render_chat({msg("user", "Hi"), both}, false, o.chat),
                    Catch::Contains("messages[1] has content and content_form null"));

  CHECK_FALSE(orbit::detail::same_message(call_turn(ContentForm::kText), call_turn(ContentForm::kNull)));
  CHECK_FALSE(orbit::detail::same_message(call_turn(ContentForm::kNull), call_turn(ContentForm::kAbsent)));
  std::vector<std::vector<ChatMessage>> lists;
  for (const ContentForm form : {ContentForm::kText, ContentForm::kNull, ContentForm::kAbsent, ContentForm::kText}) {
    lists.push_back({msg("user", "Weather in Paris?"), call_turn(form), msg("user", "Thanks.")});
  }
  const std::vector<std::vector<int64_t>> planned = planned_in_turn(engine, lists, o);
  CHECK(planned[0] != planned[1]);
  CHECK(planned[1] != planned[2]);
  CHECK(planned[3] == planned[0]);
}

TEST_CASE("tool_call_format reads a template that takes a turn of calls only with content None", "[sync_reasoning]") {
  const std::shared_ptr<Engine> engine = orbit::test::sync_support::open_engine();
  ChatOptions o;
  // Mistral's call markup, written only under the None branch; "" is refused as such a template might.
  o.chat_template =
      "{% for m in messages %}{% if m.tool_calls %}{% if m.content is none %}[TOOL_CALLS]{{ m.tool_calls | tojson }}"
      "{% else %}{{ raise_exception('content must be None beside tool calls') }}{% endif %}"
      "{% else %}{{ m.content }}{% endif %}{% endfor %}";
  CHECK(engine->tool_call_format(o) == ToolCallFormat::kMistral);
}

}  // namespace ORBIT_TEST_FILE
