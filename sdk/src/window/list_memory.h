// What a window learns of its agent's list edits from the lists it is synced to (Window::sync), so that idle
// time can prepare the next list without a hint (Window::idle, WindowPolicy::prepare_lists).
//
// Agents edit their message lists by rules: the oldest turns leave past a length, the oldest screenshot
// leaves when a new one comes, a result shown again moves to the end. Between two lists the memory finds
// the messages that left (the new list holds the old one's messages in order, minus those, plus what came
// at the end; a message that left and came again at the end moved) and describes each by its class (role and content
// kind: text, a token chunk, an embedding chunk) and its rank among the old list's messages of that class (0 = the
// oldest). Such a set of (class, rank) drops is a pattern; the memory keeps the patterns of its last kHistory
// transitions. Agents combine rules (the oldest turn leaves at every step past a length, and the oldest screenshot too
// when the tool showed a new page), so the candidates are made of drops, not whole patterns (patterns()). A prediction
// is the current list with a candidate's drops made: the start of the next list, when the agent drops those (what it
// adds at the end is unknown, and not needed: a sync whose list starts the same way reuses what a preparation computed
// for that start, up to the first message that differs).
//
// No model, no torch: message lists only.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "orbit/sync.h"

namespace orbit::detail {

struct ListDrop {
  std::string cls;   // message_class()
  int64_t rank = 0;  // among the list's messages of that class, from the oldest
  bool operator==(const ListDrop& o) const { return cls == o.cls && rank == o.rank; }
};
using DropPattern = std::vector<ListDrop>;  // ordered by (class, rank)

// "role|kinds": the role, then each part's kind ("text", "tokens", "embeddings") or "text" for plain content.
std::string message_class(const ChatMessage& m);
// Same role, content, name, tool call id, reasoning content, tool calls and parts (chunk parts by key).
bool same_message(const ChatMessage& a, const ChatMessage& b);

// How `before` became `after`: the messages of `before` left out when `after` is matched against it in
// order, greedily (the rest of `after` came at the end), split into those that left (`drops`) and those
// that came again among what came at the end (`moves`: a result shown again, a page gone back to). A message
// new to `before` followed by two of its messages in their order was inserted there (a summary in place of the
// oldest messages, a reminder before the last turn): it is passed over, and neither those after it nor it count.
struct ListTransition {
  DropPattern drops;
  DropPattern moves;
};
ListTransition transition_between(const std::vector<ChatMessage>& before, const std::vector<ChatMessage>& after);
// `list` with the pattern's drops made; nullopt when a drop names a rank the list does not have, or the
// pattern is empty.
std::optional<std::vector<ChatMessage>> apply_drops(const std::vector<ChatMessage>& list, const DropPattern& pattern);
// `list` with its message at `index` moved to the end.
std::vector<ChatMessage> move_to_end(const std::vector<ChatMessage>& list, std::size_t index);

// The drop patterns of the last kHistory transitions, and the candidates they suggest.
class DropHistory {
 public:
  static constexpr std::size_t kHistory = 8;  // transitions remembered

  void add(std::optional<DropPattern> pattern);  // nullopt: a transition with no pattern
  // Up to `max` candidate drop patterns, the most likely first, over the remembered transitions that
  // dropped something: the most frequent whole pattern; the drops made in at least 60% of them ("usual")
  // with the most frequent other drop; the last pattern; the usual ones with each other drop seen; the
  // usual ones alone. Distinct and non-empty.
  std::vector<DropPattern> patterns(int64_t max) const;
  // Whether `pattern` is one of the remembered transitions' patterns.
  bool holds(const DropPattern& pattern) const;

 private:
  std::deque<std::optional<DropPattern>> patterns_;  // oldest first
};

class ListMemory {
 public:
  // A list the window was synced to (with its options: the prediction is synced with them).
  void observe(const std::vector<ChatMessage>& list, const SyncOptions& options);
  std::vector<DropPattern> patterns(int64_t max) const { return history_.patterns(max); }
  // Up to `max` distinct lists the next one may start with: the last list with patterns()' drops made
  // (skipping those naming a message the list does not have).
  std::vector<std::vector<ChatMessage>> predict(int64_t max) const;
  // The lists the next one may start with when the agent moves a message to the end, as it did in one of
  // the remembered transitions (none when it never did): which message it will show again is up to its
  // tool, so each of the `max` newest messages of a class seen moving is a candidate (the newest first: the
  // cheapest to prepare, only what follows it changes), moved to the end of the last list as it is and of
  // the first of predict()'s lists (the agent also trims): up to 2 * max lists. The last message moving
  // is no change.
  std::vector<std::vector<ChatMessage>> predict_moves(int64_t max, int64_t max_trims) const;
  const SyncOptions& options() const { return options_; }
  bool empty() const { return !last_.has_value(); }
  // At a sync to `list`, before observe(list): the lists idle time prepared, or would have, from the memory as it
  // is (`learned`: predict() and predict_moves()) scored: a hit when one of them reaches further into `list`
  // (common_start) than the last list does, a miss otherwise. Not scored without a learned list.
  void score(const std::vector<ChatMessage>& list, const std::vector<std::vector<ChatMessage>>& learned);
  // Whether idle time prepares the learned lists: the last transition observed showed a pattern (drops or
  // moves) the memory did not hold, or fewer than kTrials syncs were scored, or one of the last kHistory scored
  // was a hit. An edit the agent made once (a summary in place of the oldest half of the list) teaches a pattern
  // it does not repeat: its preparations stop once they missed (twice in a new window), and resume at a new
  // pattern or at the first sync the learned lists would have served (scoring goes on while none is prepared).
  static constexpr std::size_t kTrials = 2;
  bool predicting() const;
  // The last list observed; nullptr before the first.
  const std::vector<ChatMessage>* last() const { return last_ ? &*last_ : nullptr; }

 private:
  std::optional<std::vector<ChatMessage>> last_;
  SyncOptions options_;
  DropHistory history_;
  std::deque<DropPattern> moves_;  // the moves of the last DropHistory::kHistory transitions, oldest first
  std::deque<bool> hits_;          // score() of the last DropHistory::kHistory scored syncs, oldest first
  bool novel_ = false;             // the last transition showed a pattern the memory did not hold; not scored yet
};

// How many messages `a` and `b` share from their start (same_message): how far a sync to `b` reuses what a
// sync or a preparation of `a` computed.
std::size_t common_start(const std::vector<ChatMessage>& a, const std::vector<ChatMessage>& b);

// Whether `list` is the whole of `start` and one message more: a learned list that goes one message past a hint
// (a message moved to the end of the trimmed list). What it adds to the hint is the head of the message after it,
// whatever that message is: its rendering starts the same (the role, a tool result's label).
bool one_past(const std::vector<ChatMessage>& list, const std::vector<ChatMessage>& start);

// Whether the agent's own hints leave the learned lists nothing to add (WindowPolicy::trust_hints): the lists
// it prepared itself (Window::prepare_sync) since the last sync and, at each sync, whether one of them reached
// as far into the synced list (common_start) as every list idle time learned to prepare and as the list before
// it. A learned list that reaches no further than both saves the sync nothing; nor does one that goes one
// message past a hint (one_past()), which a trusted hint's prepare_sync prepares too. Message lists only.
class HintWatch {
 public:
  // A list the agent prepared (Window::prepare_sync called by the agent, not by Window::idle). The kMaxHints most
  // recent distinct ones are kept (a list prepared again moves to the end): an agent that prepares at every tick,
  // or never syncs, holds a bounded number of copies.
  static constexpr std::size_t kMaxHints = 8;
  void hinted(const std::vector<ChatMessage>& list);
  bool has_hints() const { return !hints_.empty(); }
  std::size_t hints() const { return hints_.size(); }
  // At a sync to `list`, before the list memory learns it: `learned` are the lists Window::idle prepares from
  // the memory as it is (ListMemory::predict, predict_moves: what it prepared, or would have, since the last
  // sync), `last` the list the window was synced to before (nullptr: none). Counts the sync into streak() and
  // forgets the hints. A learned list one message past a hint counts with the hints, not against them.
  void synced(const std::vector<ChatMessage>& list, const std::vector<std::vector<ChatMessage>>& learned,
              const std::vector<ChatMessage>* last);
  // Syncs in a row, the last one included, that found a hint reaching as far as every learned list (but those
  // one message past a hint) and the list before; 0 after a sync with no hint or one that such a learned list reached
  // further into.
  int64_t streak() const { return streak_; }

 private:
  std::vector<std::vector<ChatMessage>> hints_;  // since the last sync, in the order prepared
  int64_t streak_ = 0;
};

// The same for a window edited instance by instance (admit, evict, turn: what `orbit replay` and agents
// without message lists do): the instances it held at each Window::idle call, by content key and class
// ("turn", "chunk:tokens", "chunk:embeddings"), and which left between two calls.
struct InstanceMark {
  uint64_t id = 0;
  std::string key;  // content key (a recalled chunk is the same chunk under a new instance id)
  std::string cls;
};

class InstanceMemory {
 public:
  void observe(const std::vector<InstanceMark>& now);
  // Up to `max` distinct sets of instances of `now` (ids) to evict: patterns()' drops made on it.
  std::vector<std::vector<uint64_t>> predict(const std::vector<InstanceMark>& now, int64_t max) const;

 private:
  std::optional<std::vector<InstanceMark>> last_;
  DropHistory history_;
};

}  // namespace orbit::detail
