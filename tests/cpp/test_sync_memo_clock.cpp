// Step 2's memo (sync_memo.h) under templates that read the clock (strftime_now; Llama 3.2 writes today's date):
// a memo entry is read only while every strftime_now call its renders made gives the same text at the sync's time
// (runtime::set_template_clock pins that time here), so the plans equal rendering every prefix across a date
// change, and a format with seconds renders every prefix once its second has passed. Also what render_prefix
// records of those calls, and that a prepared list renders at the time it was prepared.
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <utility>
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
using orbit::test::sync_memo::kRoleChecks;
using orbit::test::sync_memo::ListCuts;
using orbit::test::sync_memo::runtime_msg;
using orbit::test::sync_memo::template_source;
using orbit::test::sync_support::sentence;
using Messages = std::vector<runtime::ChatMessage>;

// Pins the time every rendering reads until it goes.
struct PinnedClock {
  explicit PinnedClock(std::time_t t) { set(t); }
  void set(std::time_t t) { runtime::set_template_clock(t); }
  ~PinnedClock() { runtime::set_template_clock(std::nullopt); }
};

// Local time on `day` November 2026 (past 30: December) at h:m:s.
std::time_t local_time(int day, int h, int m, int s) {
  std::tm tm{};
  tm.tm_year = 126;
  tm.tm_mon = 10;
  tm.tm_mday = day;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = s;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// A system prompt and `rounds` user and assistant turns.
Messages agent_list(std::mt19937_64& rng, int rounds) {
  Messages list = {runtime_msg("system", "You tell stories. " + sentence(rng, 2))};
  for (int r = 0; r < rounds; ++r) {
    list.push_back(runtime_msg("user", sentence(rng, 1 + r % 3)));
    list.push_back(runtime_msg("assistant", sentence(rng, 2 + r % 4)));
  }
  return list;
}

void add_round(std::mt19937_64& rng, Messages& list) {
  list.push_back(runtime_msg("user", sentence(rng, 2)));
  list.push_back(runtime_msg("assistant", sentence(rng, 3)));
}

// The templates: Llama 3.2's (today's date in the system header), and one that writes the date on its first line.
std::vector<std::pair<std::string, std::string>> clock_templates() {
  return {{"llama-3.2-3b-instruct", template_source("llama-3.2-3b-instruct")},
          {"date first",
           "{{ strftime_now('%d %b %Y') }}\n{% for message in messages %}{{ message.role }}: "
           "{{ message.content }}\n{% endfor %}"}};
}

}  // namespace

TEST_CASE("render_prefix records what strftime_now returned, at the time its list was prepared", "[sync_memo]") {
  const std::time_t day = local_time(30, 10, 0, 0);
  PinnedClock clock(day);
  const runtime::ChatTemplate t(
      "{{ strftime_now('%Y-%m-%d') }}{% for m in messages %}[{{ strftime_now('%Y-%m-%d') }}"
      " {{ strftime_now('%H') }} {{ m.content }}]{% endfor %}",
      "clock");
  const Messages list = {runtime_msg("user", "a"), runtime_msg("assistant", "b")};
  const runtime::PreparedChat chat = t.prepare(list);
  runtime::ClockReads reads;
  const std::string text = t.render_prefix(chat, 2, false, &reads);
  const std::string date = runtime::format_time("%Y-%m-%d", day);
  CHECK(text == date + "[" + date + " 10 a][" + date + " 10 b]");
  REQUIRE(reads.size() == 2);  // each format once, in call order
  CHECK(reads[0] == std::make_pair(std::string("%Y-%m-%d"), date));
  CHECK(reads[1] == std::make_pair(std::string("%H"), std::string("10")));
  CHECK(runtime::clock_reads_hold(reads, day + 59 * 60));
  CHECK_FALSE(runtime::clock_reads_hold(reads, day + 3600));            // 11:00
  CHECK_FALSE(runtime::clock_reads_hold({reads[0]}, day + 14 * 3600));  // 1 Dec
  CHECK(runtime::clock_reads_hold({reads[0]}, day + 13 * 3600));
  // The prepared list renders at the time it was prepared; render reads the clock when it renders.
  clock.set(local_time(31, 9, 0, 0));
  CHECK(t.render_prefix(chat, 2, false) == text);
  CHECK(t.render(list, {false}) != text);
  // Past 32 formats the reads end with one that holds at no time.
  const runtime::ChatTemplate many("{% for i in range(40) %}{{ strftime_now('%Y' + i|string) }}{% endfor %}", "many");
  runtime::ClockReads overflow;
  (void)many.render_prefix(many.prepare(list), 2, false, &overflow);
  REQUIRE(overflow.size() == 33);
  CHECK(overflow[31].first == "%Y31");
  CHECK(runtime::clock_reads_hold({overflow.begin(), overflow.begin() + 32}, day));
  CHECK_FALSE(runtime::clock_reads_hold(overflow, day));
  // A template that never calls strftime_now records nothing (its entries always hold).
  runtime::ClockReads none;
  const runtime::ChatTemplate plain("{% for m in messages %}{{ m.content }}{% endfor %}", "plain");
  (void)plain.render_prefix(plain.prepare(list), 2, false, &none);
  CHECK(none.empty());
}

TEST_CASE("a memo entry of a template that reads the date is read until midnight, never past it", "[sync_memo]") {
  std::mt19937_64 rng(71);
  for (const auto& [name, source] : clock_templates()) {
    INFO(name);
    const runtime::ChatTemplate t(source, name, "<s>", "</s>");
    const runtime::ChatRenderOptions o;  // no date_string: Llama 3.2 calls strftime_now
    orbit::detail::clear_cuts_memo();
    PinnedClock clock(local_time(30, 23, 59, 50));
    Messages list = agent_list(rng, 10);
    REQUIRE(cuts_both(t, o, list));
    add_round(rng, list);
    clock.set(local_time(30, 23, 59, 55));
    std::optional<ListCuts> cuts = cuts_both(t, o, list);
    REQUIRE(cuts);
    CHECK(cuts->renders <= 2);  // the new round's first message and the last list's whole rendering
    CHECK(cuts->merged == 0);
    // Past midnight every entry rendered 30 Nov: every prefix is rendered, as with the memo off.
    add_round(rng, list);
    clock.set(local_time(31, 0, 0, 5));
    cuts = cuts_both(t, o, list);
    REQUIRE(cuts);
    CHECK(cuts->renders == static_cast<int64_t>(list.size()) - 1);
    CHECK(cuts->merged == 0);
    // Later that day the entries of 1 Dec hold again: trimmed, summarized and new-system-prompt lists read them.
    clock.set(local_time(31, 12, 0, 0));
    add_round(rng, list);
    cuts = cuts_both(t, o, list);
    CHECK(cuts->renders <= 2);
    Messages trimmed = list;
    trimmed.erase(trimmed.begin() + 1, trimmed.begin() + 3);
    add_round(rng, trimmed);
    cuts = cuts_both(t, o, trimmed);
    CHECK(cuts->renders <= 5 + kRoleChecks);
    Messages summary = {list[0], runtime_msg("user", "Summary: " + sentence(rng, 6))};
    summary.insert(summary.end(), list.begin() + 11, list.end());
    add_round(rng, summary);
    cuts = cuts_both(t, o, summary);
    CHECK(cuts->renders <= 5 + kRoleChecks);
    Messages prompt = list;
    prompt[0].content = "You tell stories. Step 7.";
    add_round(rng, prompt);
    cuts = cuts_both(t, o, prompt);
    CHECK(cuts->renders <= 5 + kRoleChecks);
    // The trimmed list again past the next midnight: nothing holds.
    clock.set(local_time(32, 0, 0, 1));
    add_round(rng, trimmed);
    cuts = cuts_both(t, o, trimmed);
    CHECK(cuts->renders == static_cast<int64_t>(trimmed.size()) - 1);
  }
}

TEST_CASE("a template that prints the seconds reads the memo within one second only", "[sync_memo]") {
  std::mt19937_64 rng(72);
  const runtime::ChatTemplate t(
      "{% for message in messages %}{{ message.role }} at {{ strftime_now('%H:%M:%S') }}: {{ message.content }}\n"
      "{% endfor %}",
      "seconds");
  orbit::detail::clear_cuts_memo();
  const std::time_t at = local_time(30, 8, 0, 0);
  PinnedClock clock(at);
  Messages list = agent_list(rng, 4);
  REQUIRE(cuts_both(t, {}, list));
  add_round(rng, list);
  CHECK(cuts_both(t, {}, list)->renders <= 2);
  add_round(rng, list);
  clock.set(at + 1);
  CHECK(cuts_both(t, {}, list)->renders == static_cast<int64_t>(list.size()) - 1);
}

TEST_CASE("Llama 3.2 reading today's date plans as rendering every prefix, and reads the memo", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  const Window w = engine->new_window();
  std::mt19937_64 rng(73);
  orbit::detail::clear_cuts_memo();
  orbit::detail::clear_encode_memo();
  PinnedClock clock(local_time(30, 9, 0, 0));
  SyncOptions o;
  o.chat.chat_template = template_source("llama-3.2-3b-instruct");
  Messages list = agent_list(rng, 3);
  // The plan with the memos on and off, the same, its tokens tokenize_chat's; the prefixes the memo's side rendered.
  const auto plan_both = [&](const Messages& m) {
    std::vector<ChatMessage> sdk;
    for (const runtime::ChatMessage& r : m) sdk.push_back(orbit::test::sync_support::msg(r.role, r.content));
    const int64_t before = orbit::detail::prefix_renders_so_far();
    const SyncPlan on = w.plan_sync(sdk, o);
    const int64_t renders = orbit::detail::prefix_renders_so_far() - before;
    const orbit::test::sync_memo::MemoOn restore;
    orbit::detail::set_cuts_memo(false);
    const SyncPlan off = w.plan_sync(sdk, o);
    orbit::test::sync_cuts::require_same(on, off);
    REQUIRE(on.tokens == engine->tokenize_chat(sdk, false, o.chat));
    CHECK(on.merged_boundaries == 0);
    return renders;
  };
  (void)plan_both(list);
  add_round(rng, list);
  CHECK(plan_both(list) <= 2);  // grown
  Messages trimmed = list;
  trimmed.erase(trimmed.begin() + 1, trimmed.begin() + 3);
  add_round(rng, trimmed);
  CHECK(plan_both(trimmed) <= 5 + kRoleChecks);
  Messages summary = {list[0], runtime_msg("user", "Summary: " + sentence(rng, 4))};
  summary.insert(summary.end(), list.begin() + 5, list.end());
  add_round(rng, summary);
  CHECK(plan_both(summary) <= 5 + kRoleChecks);
  Messages prompt = list;
  prompt[0].content = "You tell stories. Step 2.";
  add_round(rng, prompt);
  CHECK(plan_both(prompt) <= 5 + kRoleChecks);
  clock.set(local_time(31, 9, 0, 0));  // the next day: every prefix rendered again
  add_round(rng, list);
  CHECK(plan_both(list) == static_cast<int64_t>(list.size()) - 1);
}

TEST_CASE("tokenize_chat given a plan's options renders at the plan's time, not the clock's", "[sync_memo]") {
  const auto engine = orbit::test::sync_support::open_engine();
  const Window w = engine->new_window();
  std::mt19937_64 rng(79);
  PinnedClock clock(local_time(30, 23, 59, 59));
  SyncOptions o;
  o.chat.chat_template = clock_templates()[1].second;  // the date on its first line
  std::vector<ChatMessage> list;
  for (const runtime::ChatMessage& r : agent_list(rng, 2))
    list.push_back(orbit::test::sync_support::msg(r.role, r.content));
  const SyncPlan plan = w.plan_sync(list, o);
  REQUIRE(plan.options.chat.now == local_time(30, 23, 59, 59));
  clock.set(local_time(31, 0, 0, 1));  // midnight passed between the plan and the count of its tokens
  CHECK(engine->tokenize_chat(list, false, plan.options.chat) == plan.tokens);
  CHECK(engine->render_chat(list, false, plan.options.chat).rfind("30 Nov 2026\n", 0) == 0);
  CHECK(engine->render_chat(list, false, o.chat).rfind("01 Dec 2026\n", 0) == 0);  // no time given: the clock's
  ChatOptions at = o.chat;
  at.now = local_time(12, 8, 0, 0);
  CHECK(engine->render_chat(list, false, at).rfind("12 Nov 2026\n", 0) == 0);
  CHECK(w.plan_sync(list, SyncOptions{at, o.chunk_min_tokens}).tokens == engine->tokenize_chat(list, false, at));
  CHECK(w.plan_sync(list, SyncOptions{at, o.chunk_min_tokens}).tokens != plan.tokens);
}

}  // namespace ORBIT_TEST_FILE
