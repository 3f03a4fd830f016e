// The window's tentative tail (docs/ARCHITECTURE.md §4, window_state.h): a generate's query (the chat
// template's generation prompt) and answer stay reusable behind the window's KV states, the next sync reuses
// them token by token as far as the list it renders starts with them, and an idle-time heal, which re-forms
// the KV before them, carries them along in the background instead of leaving them to the next read's
// critical path. Checked against the re-prefill oracle, on TinyStories-656K with a ChatML template.
#include "orbit_catch.h"

#include <algorithm>
#include <random>

#include "orbit/engine.h"
#include "sync_test_support.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::kExactWindowTolerance;
using orbit::test::window_error;
using orbit::test::sync_support::msg;
using orbit::test::sync_support::open_engine;

namespace {

// ChatML as Qwen-style templates write it: the generation prompt "<|im_start|>assistant\n" is how an
// assistant message starts, so an answer sent back renders as the prompt and the answer's text.
const char* kChatMl =
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

SyncOptions chatml() {
  SyncOptions o;
  o.chat.chat_template = kChatMl;
  o.chunk_min_tokens = 24;
  return o;
}

WindowOptions with(const std::string& spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return o;
}

const std::string kDocA =
    "The little dog ran to the park and found a big red ball under the old tree near the pond. He was very happy.";
const std::string kDocB =
    "Tom and Sue played all day in the sun until their mom called them home for a warm dinner with soup and bread.";

// How many leading tokens of `a` and `b` agree.
std::size_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

TEST_CASE("an answer synced back with a tool result after it is not forwarded again, after an idle heal too",
          "[window][reuse][sync]") {
  // patch:16:heal keeps the survivors of a trim approximate and heals them in idle time: the heal re-forms
  // the KV the answer was computed behind. The default heals what its budget left approximate.
  for (const std::string spec : {"patch:16:heal", "default"}) {
    INFO(spec);
    auto engine = open_engine();
    Window w = engine->new_window(with(spec));
    const SyncOptions o = chatml();
    std::vector<ChatMessage> list = {msg("system", "You help."), msg("user", kDocA), msg("user", kDocB),
                                     msg("user", "What did they do?")};
    GenerateOptions g;
    g.max_tokens = 4;
    const Generation first = w.generate(w.sync(list, o).generation_prompt, g);
    // The agent sends its answer back (its answers come back: a heal carries the next one) and trims its
    // history: the survivors' context changed.
    list.push_back(msg("assistant", first.text));
    list.push_back(msg("user", "Tell me more."));
    list.erase(list.begin() + 1);
    const SyncReport trimmed = w.sync(list, o);
    g.max_tokens = 6;
    const Generation answer = w.generate(trimmed.generation_prompt, g);
    const Plan heal = w.plan_heal();
    const IdleReport idle = w.idle();
    std::vector<int64_t> tail = trimmed.generation_prompt;
    tail.insert(tail.end(), answer.tokens.begin(), answer.tokens.end());
    if (spec == "patch:16:heal") REQUIRE(idle.healed_instances > 0);
    if (idle.healed_instances > 0) {
      // The heal's background forwards carry the tail behind the healed window.
      CHECK(idle.heal_forward_tokens == Approx(heal.forward_tokens + static_cast<double>(tail.size())));
    }

    list.push_back(msg("assistant", answer.text));
    list.push_back(msg("tool", "The ball is red."));
    const SyncPlan next = w.plan_sync(list, o);
    const std::size_t held = trimmed.plan.tokens.size();
    REQUIRE(next.tokens.size() > held);
    REQUIRE(std::equal(trimmed.plan.tokens.begin(), trimmed.plan.tokens.end(), next.tokens.begin()));
    const std::vector<int64_t> appended(next.tokens.begin() + static_cast<std::ptrdiff_t>(held), next.tokens.end());
    // The answer's text renders back to the prompt and the tokens it was decoded as.
    REQUIRE(common_prefix(appended, tail) == tail.size());
    const WindowStats before = w.stats();
    const SyncReport synced = w.sync(list, next);
    const WindowStats after = w.stats();
    INFO(synced.plans.back().describe());
    CHECK(after.critical_forward_tokens - before.critical_forward_tokens ==
          Approx(static_cast<double>(appended.size() - tail.size())));
    CHECK(synced.plans.back().exact);
    CHECK(window_error(w, engine->tokenize("And then?", false)) < kExactWindowTolerance);
  }
}

TEST_CASE("a heal carries the tail: the answer appended as a turn after it forwards nothing", "[window][reuse]") {
  auto engine = orbit::test::open_stories_small_pages(BackgroundMode::kInline);
  std::mt19937_64 rng(41);
  const ChunkRef first = engine->add_tokens(orbit::test::random_tokens(rng, 20));
  const ChunkRef second = engine->add_tokens(orbit::test::random_tokens(rng, 20));
  const std::vector<int64_t> query = orbit::test::random_tokens(rng, 4), probe = orbit::test::random_tokens(rng, 3);
  for (const std::string spec : {"patch:16:heal", "patch:16:heal:noreuse"}) {
    INFO(spec);
    Window w = engine->new_window(with(spec));
    w.add_turn(orbit::test::random_tokens(rng, 5));
    w.admit(first);
    w.admit(second);
    w.evict(w.instances()[1].id);  // `second` survives, kept approximate
    GenerateOptions g;
    g.max_tokens = 6;
    const Generation answer = w.generate(query, g);
    const Plan heal = w.plan_heal();
    REQUIRE(heal.forward_tokens > 0);
    const ApplyReport healed = w.heal();
    std::vector<int64_t> turn = query;
    turn.insert(turn.end(), answer.tokens.begin(), answer.tokens.end());
    const Plan p = w.plan_add_turn(turn);
    INFO(p.describe());
    if (w.policy().reuse_computed) {
      CHECK(p.forward_tokens == 0);
      CHECK(p.steps.back().how == ServeActionId::kReuse);
      // The carry, in the heal's (background) time.
      CHECK(healed.forward_tokens == Approx(heal.forward_tokens + static_cast<double>(turn.size())));
    } else {
      CHECK(healed.forward_tokens == Approx(heal.forward_tokens));
      CHECK(p.forward_tokens == Approx(static_cast<double>(turn.size())));
    }
    w.apply(p).value();
    CHECK(window_error(w, probe) < kExactWindowTolerance);
  }
}

TEST_CASE("a window whose answers do not come back carries no tail", "[window][reuse][sync]") {
  auto engine = open_engine();
  Window w = engine->new_window(with("patch:16:heal"));
  const SyncOptions o = chatml();
  std::vector<ChatMessage> list = {msg("system", "You help."), msg("user", kDocA), msg("user", kDocB),
                                   msg("user", "What did they do?")};
  GenerateOptions g;
  g.max_tokens = 4;
  w.generate(w.sync(list, o).generation_prompt, g);
  list.erase(list.begin() + 1);
  const SyncReport trimmed = w.sync(list, o);  // the answer is not sent back: the tail is dropped
  const Plan heal = w.plan_heal();
  REQUIRE(heal.forward_tokens > 0);
  CHECK(w.heal().forward_tokens == Approx(heal.forward_tokens));
  // The next answer is not carried through a heal either: this agent's answers do not come back.
  w.generate(trimmed.generation_prompt, g);
  list.erase(list.begin() + 1);
  w.sync(list, o);
  w.generate(w.plan_sync(list, o).generation_prompt, g);
  // A fork is a branch of the same agent: what the window learned of its answers holds there too (its heal,
  // like the window's, forwards what it plans and carries no tail).
  Window branch = w.fork();
  const Plan forked = branch.plan_heal();
  const Plan again = w.plan_heal();
  REQUIRE(again.forward_tokens > 0);
  CHECK(w.heal().forward_tokens == Approx(again.forward_tokens));
  CHECK(forked.forward_tokens == Approx(again.forward_tokens));
  CHECK(branch.heal().forward_tokens <= forked.forward_tokens);  // reuses what the window's heal computed
}

TEST_CASE("a turn served from the carried tail is priced by its measured sensitivity, as a prefilled one is",
          "[window][reuse][fidelity]") {
  // An agent that appends its answer as a note (a turn of its own) after the idle heal: the carry serves the
  // note by exact reuse, so no prefill-turn measures its sensitivity. The carry measures it instead, so the
  // keep an edit before the note leaves is priced as it is where the note was prefilled (`:noreuse`, the same
  // in-context KV behind the healed window) and not at the reference sensitivity: an unmeasured note priced
  // too low once left the video agent's window below the heal threshold, approximate through its idle time.
  const auto run = [](const std::string& spec, double* heal_extra) {
    auto engine = orbit::test::open_stories_small_pages(BackgroundMode::kInline);
    std::mt19937_64 rng(43);
    const ChunkRef first = engine->add_tokens(orbit::test::random_tokens(rng, 20));
    const ChunkRef second = engine->add_tokens(orbit::test::random_tokens(rng, 20));
    const std::vector<int64_t> lead = orbit::test::random_tokens(rng, 5), query = orbit::test::random_tokens(rng, 4);
    Window w = engine->new_window(with(spec));
    w.add_turn(lead);
    w.admit(first);
    w.admit(second);
    GenerateOptions g;
    g.max_tokens = 6;
    std::vector<int64_t> note = query;
    for (int round = 0; round < 2; ++round) {        // the first note, appended exactly, shows answers come back
      if (round == 1) w.evict(w.instances()[1].id);  // `second` survives, kept approximate: a heal re-forms it
      const Generation answer = w.generate(query, g);
      note = query;
      note.insert(note.end(), answer.tokens.begin(), answer.tokens.end());
      if (round == 1) {
        const Plan heal = w.plan_heal();
        REQUIRE(heal.forward_tokens > 0);
        *heal_extra = w.heal().forward_tokens - heal.forward_tokens;
      }
      w.add_turn(note);
    }
    const InstanceId id = w.instances().back().id;
    const Plan p = w.plan_evict(w.instances().front().id);  // the lead turn leaves: the note's context changes
    const auto at = std::find_if(p.steps.begin(), p.steps.end(), [&](const PlanStep& s) { return s.instance == id; });
    REQUIRE(at != p.steps.end());
    INFO(p.describe());
    REQUIRE(at->action == StepAction::kKeep);
    return std::pair<double, double>{at->sensitivity, at->predicted_kl};
  };
  double carried_extra = 0, prefilled_extra = 0;
  const auto [carried, carried_kl] = run("patch:16:kl=1:heal", &carried_extra);
  const auto [prefilled, prefilled_kl] = run("patch:16:kl=1:heal:noreuse", &prefilled_extra);
  REQUIRE(prefilled >= 0);
  CHECK(carried == Approx(prefilled).epsilon(1e-3));
  CHECK(carried_kl == Approx(prefilled_kl).epsilon(1e-3));
  CHECK(carried_kl > 0);
  // The heal's background time: the carry (the note's 10 tokens) and the measurement (10 more, alone).
  CHECK(carried_extra == Approx(20.0));
  CHECK(prefilled_extra == Approx(0.0));
}

}  // namespace ORBIT_TEST_FILE
