// What a window learns of its agent's list edits (sdk/src/window/list_memory.h), without a model: the drops
// between two lists by class and rank, patterns applied to a list, and the candidates a memory predicts
// for an agent that drops its oldest turn at every step and its oldest screenshot when a new one comes.
#include <algorithm>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "window/list_memory.h"

namespace orbit::detail {
// How Catch prints a drop in a failed check.
std::ostream& operator<<(std::ostream& os, const ListDrop& d) { return os << d.cls << "#" << d.rank; }
}  // namespace orbit::detail

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace od = orbit::detail;
using orbit::ChatMessage;

namespace {

ChatMessage text(const std::string& role, const std::string& content) { return ChatMessage{role, content}; }

ChatMessage shot(const std::string& key) {
  ChatMessage m{"tool", ""};
  orbit::ChunkRef ref;
  ref.key = key;
  ref.kind = orbit::ChunkKind::kEmbeddings;
  m.parts = {orbit::ContentPart::of_text("page: "), orbit::ContentPart::of_chunk(ref)};
  return m;
}

std::vector<std::string> contents(const std::vector<ChatMessage>& list) {
  std::vector<std::string> out;
  for (const ChatMessage& m : list) out.push_back(m.parts.empty() ? m.content : m.parts.back().chunk->key);
  return out;
}

}  // namespace

TEST_CASE("list memory: drops by class and rank", "[sync]") {
  CHECK(od::message_class(text("user", "hi")) == "user|text");
  CHECK(od::message_class(shot("p1")) == "tool|text,embeddings");
  const std::vector<ChatMessage> before = {text("system", "s"), text("user", "u1"), text("assistant", "a1"),
                                           shot("p1"),          text("user", "u2"), shot("p2")};
  // The oldest user message and the oldest screenshot left; a message came at the end.
  const std::vector<ChatMessage> after = {text("system", "s"), text("assistant", "a1"), text("user", "u2"), shot("p2"),
                                          text("user", "u3")};
  const od::ListTransition t = od::transition_between(before, after);
  const std::optional<od::DropPattern> drops = t.drops;
  CHECK(*drops == od::DropPattern{{"tool|text,embeddings", 0}, {"user|text", 0}});
  CHECK(t.moves.empty());
  // A message shown again at the end moved: it is not a drop.
  const od::ListTransition moved = od::transition_between(
      before,
      {text("system", "s"), text("user", "u1"), text("assistant", "a1"), text("user", "u2"), shot("p2"), shot("p1")});
  CHECK(moved.drops.empty());
  CHECK(moved.moves == od::DropPattern{{"tool|text,embeddings", 0}});
  CHECK(od::transition_between(before, before).drops.empty());
  CHECK(od::transition_between(before, before).moves.empty());

  const auto made = od::apply_drops(after, *drops);
  REQUIRE(made.has_value());
  CHECK(contents(*made) == std::vector<std::string>{"s", "a1", "u3"});
  CHECK_FALSE(od::apply_drops(after, {{"tool|text,embeddings", 3}}).has_value());  // no 4th screenshot
  CHECK_FALSE(od::apply_drops(after, {}).has_value());
}

TEST_CASE("list memory: an agent's trims become the lists idle time prepares", "[sync]") {
  od::ListMemory memory;
  CHECK(memory.empty());
  CHECK(memory.predict(3).empty());
  // Every step a user and an assistant message come and the oldest ones leave; on odd steps a new screenshot
  // comes too and the oldest one leaves.
  std::vector<ChatMessage> list = {text("system", "s"), shot("p0"), text("user", "u0"), text("assistant", "a0")};
  memory.observe(list, orbit::SyncOptions{});
  const auto erase_first = [&](const std::function<bool(const ChatMessage&)>& which) {
    list.erase(std::find_if(list.begin(), list.end(), which));
  };
  for (int step = 1; step <= 8; ++step) {
    list.push_back(text("user", "u" + std::to_string(step)));
    list.push_back(text("assistant", "a" + std::to_string(step)));
    erase_first([](const ChatMessage& m) { return m.role == "user"; });
    erase_first([](const ChatMessage& m) { return m.role == "assistant"; });
    if (step % 2 == 1) {
      list.push_back(shot("p" + std::to_string(step)));
      erase_first([](const ChatMessage& m) { return !m.parts.empty(); });
    }
    memory.observe(list, orbit::SyncOptions{});
  }
  const std::vector<od::DropPattern> patterns = memory.patterns(4);
  REQUIRE(!patterns.empty());
  // The usual drops (the oldest user and assistant) are in every candidate; the first two are the agent's
  // two patterns: with the oldest screenshot (every other step) and without.
  const od::ListDrop user{"user|text", 0}, assistant{"assistant|text", 0}, screenshot{"tool|text,embeddings", 0};
  for (const od::DropPattern& p : patterns) {
    CHECK(std::find(p.begin(), p.end(), user) != p.end());
    CHECK(std::find(p.begin(), p.end(), assistant) != p.end());
  }
  REQUIRE(patterns.size() >= 2);
  const auto has_shot = [&](const od::DropPattern& p) { return std::find(p.begin(), p.end(), screenshot) != p.end(); };
  CHECK(has_shot(patterns[0]) != has_shot(patterns[1]));
  CHECK(patterns[0].size() + patterns[1].size() == 5);
  const auto lists = memory.predict(2);
  REQUIRE(lists.size() == 2);
  for (const auto& l : lists) {
    CHECK(l.front().role == "system");
    CHECK(l.size() < list.size());
  }
  CHECK(memory.predict(0).empty());
}

TEST_CASE("list memory: a result shown again is a move, and idle time prepares the candidates", "[sync]") {
  od::ListMemory memory;
  std::vector<ChatMessage> list = {text("system", "s"), shot("p0"), text("assistant", "a0"), shot("p1"),
                                   text("assistant", "a1")};
  memory.observe(list, orbit::SyncOptions{});
  CHECK(memory.predict_moves(4, 1).empty());  // no move seen: nothing to prepare
  // p0 shown again at the end, with the step's assistant message; the oldest assistant message left.
  list = {text("system", "s"), shot("p1"), text("assistant", "a1"), shot("p0"), text("assistant", "a2")};
  memory.observe(list, orbit::SyncOptions{});
  CHECK(memory.patterns(3) == std::vector<od::DropPattern>{{{"assistant|text", 0}}});  // the move is no drop
  // Candidates: the screenshots (the class seen moving), newest first, in the list as it is and trimmed.
  const auto lists = memory.predict_moves(4, 1);
  REQUIRE(lists.size() == 4);
  CHECK(contents(lists[0]) == std::vector<std::string>{"s", "p1", "a1", "a2", "p0"});
  CHECK(contents(lists[1]) == std::vector<std::string>{"s", "p1", "a2", "p0"});
  CHECK(contents(lists[2]) == std::vector<std::string>{"s", "a1", "p0", "a2", "p1"});
  CHECK(contents(lists[3]) == std::vector<std::string>{"s", "p0", "a2", "p1"});
  CHECK(memory.predict_moves(1, 0).size() == 1);  // one candidate, no trimmed base
  CHECK(memory.predict_moves(0, 1).empty());
}

TEST_CASE("list memory: a summary in place of the oldest messages is drops, not moves", "[sync]") {
  // system, user, then six call/result pairs; the summary replaces the first three pairs.
  std::vector<ChatMessage> before = {text("system", "s"), text("user", "u")};
  for (int i = 0; i < 6; ++i) {
    before.push_back(text("assistant", "c" + std::to_string(i)));
    before.push_back(text("tool", "r" + std::to_string(i)));
  }
  std::vector<ChatMessage> after = {before[0], before[1], text("user", "summary")};
  after.insert(after.end(), before.begin() + 8, before.end());
  after.push_back(text("assistant", "c6"));
  const od::ListTransition t = od::transition_between(before, after);
  CHECK(t.moves.empty());  // the kept messages after the summary stay where they were
  CHECK(t.drops == od::DropPattern{{"assistant|text", 0},
                                   {"assistant|text", 1},
                                   {"assistant|text", 2},
                                   {"tool|text", 0},
                                   {"tool|text", 1},
                                   {"tool|text", 2}});
  // A new message at the end, after a kept one the list ends with, is no insertion: a shown-again result moved.
  const od::ListTransition moved =
      od::transition_between({text("system", "s"), shot("p0"), text("assistant", "a0")},
                             {text("system", "s"), text("assistant", "a0"), text("assistant", "a1"), shot("p0")});
  CHECK(moved.moves == od::DropPattern{{"tool|text,embeddings", 0}});
  CHECK(moved.drops.empty());
}

TEST_CASE("list memory: learned lists that keep missing are not prepared, until one would have served", "[sync]") {
  od::ListMemory memory;
  std::vector<ChatMessage> list = {text("system", "s"), text("user", "u0"), text("assistant", "a0"), text("user", "u1"),
                                   text("assistant", "a1")};
  memory.observe(list, orbit::SyncOptions{});
  int next = 2;
  const auto append = [&] {
    list.push_back(text("user", "u" + std::to_string(next)));
    list.push_back(text("assistant", "a" + std::to_string(next++)));
  };
  const auto sync = [&] {  // as Window::sync does: the predictions scored, then the list learned
    memory.score(list, memory.predict(3));
    memory.observe(list, orbit::SyncOptions{});
  };
  // Once: the oldest user and assistant messages dropped (a new pattern: prepared).
  list.erase(list.begin() + 1, list.begin() + 3);
  append();
  sync();
  CHECK(memory.predicting());
  // Appends only: the learned trim misses; a new window tries twice, then stops.
  append();
  sync();
  CHECK(memory.predicting());
  append();
  sync();
  CHECK_FALSE(memory.predicting());
  append();
  sync();
  CHECK_FALSE(memory.predicting());
  // The agent trims as learned: the sync scores a hit, and idle time prepares again.
  list.erase(list.begin() + 1, list.begin() + 3);
  append();
  sync();
  CHECK(memory.predicting());
  // Misses since, but a hit among the last kHistory scored: still prepared.
  for (int i = 0; i < 3; ++i) {
    append();
    sync();
    CHECK(memory.predicting());
  }
  // A pattern not seen before (the two oldest pairs) is tried at once, after the misses.
  for (int i = 0; i < 8; ++i) {
    append();
    sync();
  }
  CHECK_FALSE(memory.predicting());
  list.erase(list.begin() + 1, list.begin() + 5);
  append();
  sync();
  CHECK(memory.predicting());
}

TEST_CASE("hint watch: the agent's prepared lists are kept bounded, a list prepared again once", "[sync]") {
  od::HintWatch watch;
  const std::vector<ChatMessage> far = {text("system", "s"), text("user", "u0"), text("assistant", "a0"),
                                        text("user", "u1")};
  watch.hinted(far);
  watch.hinted(far);  // the same list again: one copy
  CHECK(watch.hints() == 1);
  // An agent that prepares at every tick and never syncs holds at most kMaxHints lists, the most recent.
  for (int i = 0; i < 100; ++i) watch.hinted({text("system", "s"), text("user", "tick " + std::to_string(i))});
  CHECK(watch.hints() == od::HintWatch::kMaxHints);
  watch.hinted(far);
  CHECK(watch.hints() == od::HintWatch::kMaxHints);
  // The newest hint reaches the whole synced list: the sync counts it (no learned list reaches further).
  watch.synced(far, {}, nullptr);
  CHECK(watch.streak() == 1);
  CHECK(watch.hints() == 0);  // a sync forgets them
}

}  // namespace ORBIT_TEST_FILE
