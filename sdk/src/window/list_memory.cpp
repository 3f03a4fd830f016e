#include "window/list_memory.h"

#include <algorithm>
#include <map>

namespace orbit::detail {

namespace {

const char* part_kind(const ContentPart& p) {
  if (!p.chunk) return "text";
  return p.chunk->kind == ChunkKind::kTokens ? "tokens" : "embeddings";
}

bool same_part(const ContentPart& a, const ContentPart& b) {
  if (a.chunk.has_value() != b.chunk.has_value()) return false;
  return a.chunk ? a.chunk->key == b.chunk->key : a.text == b.text;
}

bool same_call(const ChatToolCall& a, const ChatToolCall& b) {
  return a.id == b.id && a.name == b.name && a.arguments == b.arguments;
}

// The rank of each message of `list` among those of its class (0 = the oldest).
std::vector<int64_t> ranks(const std::vector<ChatMessage>& list, std::vector<std::string>* classes) {
  std::map<std::string, int64_t> seen;
  std::vector<int64_t> out;
  for (const ChatMessage& m : list) {
    classes->push_back(message_class(m));
    out.push_back(seen[classes->back()]++);
  }
  return out;
}

DropPattern sorted(DropPattern p) {
  std::sort(p.begin(), p.end(),
            [](const ListDrop& a, const ListDrop& b) { return a.cls != b.cls ? a.cls < b.cls : a.rank < b.rank; });
  return p;
}

}  // namespace

std::string message_class(const ChatMessage& m) {
  std::string out = m.role + "|";
  if (m.parts.empty()) return out + "text";
  for (std::size_t i = 0; i < m.parts.size(); ++i) out += std::string(i ? "," : "") + part_kind(m.parts[i]);
  return out;
}

bool same_message(const ChatMessage& a, const ChatMessage& b) {
  return a.role == b.role && a.content == b.content && a.name == b.name && a.tool_call_id == b.tool_call_id &&
         a.reasoning_content == b.reasoning_content && a.content_form == b.content_form &&
         std::equal(a.tool_calls.begin(), a.tool_calls.end(), b.tool_calls.begin(), b.tool_calls.end(), same_call) &&
         std::equal(a.parts.begin(), a.parts.end(), b.parts.begin(), b.parts.end(), same_part);
}

namespace {

// Whether after[j], a message `before` does not have, is followed by before[i] and before[i + 1]: inserted there.
bool inserted_at(const std::vector<ChatMessage>& before, std::size_t i, const std::vector<ChatMessage>& after,
                 std::size_t j) {
  if (i + 1 >= before.size() || j + 2 >= after.size()) return false;
  if (!same_message(before[i], after[j + 1]) || !same_message(before[i + 1], after[j + 2])) return false;
  return std::none_of(before.begin(), before.end(), [&](const ChatMessage& m) { return same_message(m, after[j]); });
}

}  // namespace

ListTransition transition_between(const std::vector<ChatMessage>& before, const std::vector<ChatMessage>& after) {
  // Greedy in order: each message of `before` is kept when it is the next one `after` has (inserted ones
  // passed over); the rest of `after` is what came at the end.
  std::vector<std::string> classes;
  const std::vector<int64_t> rank = ranks(before, &classes);
  std::vector<std::size_t> left;
  std::size_t j = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    while (j < after.size() && !same_message(before[i], after[j]) && inserted_at(before, i, after, j)) ++j;
    if (j < after.size() && same_message(before[i], after[j])) {
      ++j;
    } else {
      left.push_back(i);
    }
  }
  ListTransition out;
  for (const std::size_t i : left) {
    const bool again = std::any_of(after.begin() + static_cast<std::ptrdiff_t>(j), after.end(),
                                   [&](const ChatMessage& m) { return same_message(before[i], m); });
    (again ? out.moves : out.drops).push_back(ListDrop{classes[i], rank[i]});
  }
  out.drops = sorted(std::move(out.drops));
  out.moves = sorted(std::move(out.moves));
  return out;
}

std::optional<std::vector<ChatMessage>> apply_drops(const std::vector<ChatMessage>& list, const DropPattern& pattern) {
  if (pattern.empty()) return std::nullopt;
  std::vector<std::string> classes;
  const std::vector<int64_t> rank = ranks(list, &classes);
  std::vector<ChatMessage> out;
  std::size_t made = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const bool drop = std::any_of(pattern.begin(), pattern.end(),
                                  [&](const ListDrop& d) { return d.cls == classes[i] && d.rank == rank[i]; });
    if (drop) {
      ++made;
    } else {
      out.push_back(list[i]);
    }
  }
  if (made != pattern.size()) return std::nullopt;
  return out;
}

bool DropHistory::holds(const DropPattern& pattern) const {
  return std::any_of(patterns_.begin(), patterns_.end(),
                     [&](const std::optional<DropPattern>& p) { return p && *p == pattern; });
}

void DropHistory::add(std::optional<DropPattern> pattern) {
  patterns_.push_back(std::move(pattern));
  if (patterns_.size() > kHistory) patterns_.pop_front();
}

std::vector<ChatMessage> move_to_end(const std::vector<ChatMessage>& list, std::size_t index) {
  std::vector<ChatMessage> out = list;
  std::rotate(out.begin() + static_cast<std::ptrdiff_t>(index), out.begin() + static_cast<std::ptrdiff_t>(index) + 1,
              out.end());
  return out;
}

std::size_t common_start(const std::vector<ChatMessage>& a, const std::vector<ChatMessage>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && same_message(a[n], b[n])) ++n;
  return n;
}

bool one_past(const std::vector<ChatMessage>& list, const std::vector<ChatMessage>& start) {
  return list.size() == start.size() + 1 && common_start(list, start) == start.size();
}

void HintWatch::hinted(const std::vector<ChatMessage>& list) {
  const auto same = [&](const std::vector<ChatMessage>& h) {
    return h.size() == list.size() && common_start(h, list) == list.size();
  };
  hints_.erase(std::remove_if(hints_.begin(), hints_.end(), same), hints_.end());
  if (hints_.size() >= kMaxHints) hints_.erase(hints_.begin());
  hints_.push_back(list);
}

void HintWatch::synced(const std::vector<ChatMessage>& list, const std::vector<std::vector<ChatMessage>>& learned,
                       const std::vector<ChatMessage>* last) {
  std::size_t hinted = 0;  // how far the best hint reached: served from its exact KV
  for (const std::vector<ChatMessage>& h : hints_) hinted = std::max(hinted, common_start(h, list));
  // What the window held already reaches as far as it did without any preparation.
  const std::size_t held = std::max(hinted, last ? common_start(*last, list) : 0);
  bool learned_further = false;
  for (const std::vector<ChatMessage>& l : learned) {
    // A learned list one message past a hint is prepared with it while the hints are trusted (Window::prepare_sync).
    const bool with_hint =
        std::any_of(hints_.begin(), hints_.end(), [&](const std::vector<ChatMessage>& h) { return one_past(l, h); });
    learned_further = learned_further || (!with_hint && common_start(l, list) > held);
  }
  streak_ = !hints_.empty() && !learned_further ? streak_ + 1 : 0;
  hints_.clear();
}

void ListMemory::score(const std::vector<ChatMessage>& list, const std::vector<std::vector<ChatMessage>>& learned) {
  if (!last_ || learned.empty()) return;
  const std::size_t held = common_start(*last_, list);
  hits_.push_back(std::any_of(learned.begin(), learned.end(),
                              [&](const std::vector<ChatMessage>& l) { return common_start(l, list) > held; }));
  if (hits_.size() > DropHistory::kHistory) hits_.pop_front();
  novel_ = false;
}

bool ListMemory::predicting() const {
  return novel_ || hits_.size() < kTrials || std::find(hits_.begin(), hits_.end(), true) != hits_.end();
}

void ListMemory::observe(const std::vector<ChatMessage>& list, const SyncOptions& options) {
  if (last_) {
    ListTransition t = transition_between(*last_, list);
    novel_ = (!t.drops.empty() && !history_.holds(t.drops)) ||
             (!t.moves.empty() && std::find(moves_.begin(), moves_.end(), t.moves) == moves_.end());
    history_.add(std::move(t.drops));
    moves_.push_back(std::move(t.moves));
    if (moves_.size() > DropHistory::kHistory) moves_.pop_front();
  }
  last_ = list;
  options_ = options;
  options_.chat.now.reset();  // a plan's time (ChatOptions::now): the next list renders at its own
}

namespace {

// Each drop's count over the remembered transitions, most frequent first (the latest on ties).
std::vector<std::pair<ListDrop, int64_t>> drop_counts(const std::deque<std::optional<DropPattern>>& patterns) {
  std::vector<std::pair<ListDrop, std::pair<int64_t, std::size_t>>> seen;
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    if (!patterns[i]) continue;
    for (const ListDrop& d : *patterns[i]) {
      auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == d; });
      if (it == seen.end()) {
        seen.push_back({d, {1, i}});
      } else {
        ++it->second.first;
        it->second.second = i;
      }
    }
  }
  std::sort(seen.begin(), seen.end(), [](const auto& a, const auto& b) {
    return a.second.first != b.second.first ? a.second.first > b.second.first : a.second.second > b.second.second;
  });
  std::vector<std::pair<ListDrop, int64_t>> out;
  for (const auto& [d, stats] : seen) out.emplace_back(d, stats.first);
  return out;
}

// The whole pattern seen most often (the latest on ties).
DropPattern most_frequent(const std::deque<std::optional<DropPattern>>& patterns) {
  DropPattern best;
  int64_t best_count = 0;
  for (std::size_t i = patterns.size(); i-- > 0;) {
    const int64_t count = std::count(patterns.begin(), patterns.end(), patterns[i]);
    if (count > best_count) {
      best = *patterns[i];
      best_count = count;
    }
  }
  return best;
}

}  // namespace

std::vector<DropPattern> DropHistory::patterns(int64_t max) const {
  // Over the transitions that dropped something (an agent's syncs between its trims, such as a server's
  // answer prefilled before the next request, drop nothing): the most frequent whole pattern; the drops
  // made in at least 60% of them ("usual": the oldest turn past a length) with the most frequent other
  // drop (the oldest screenshot, when a new one came); the last pattern; the usual drops with each other
  // drop seen; the usual ones alone. Agents combine rules, so a whole pattern may not repeat where its
  // parts do.
  std::deque<std::optional<DropPattern>> dropping;
  for (const auto& p : patterns_) {
    if (p && !p->empty()) dropping.push_back(p);
  }
  std::vector<DropPattern> out;
  const auto add = [&](DropPattern p) {
    p = sorted(std::move(p));
    if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
  };
  if (dropping.empty()) return out;
  add(most_frequent(dropping));
  const std::vector<std::pair<ListDrop, int64_t>> counts = drop_counts(dropping);
  const auto n = static_cast<double>(dropping.size());
  DropPattern usual;
  std::vector<ListDrop> others;
  for (const auto& [d, count] : counts) (static_cast<double>(count) >= 0.6 * n ? usual : others).push_back(d);
  const auto with_usual = [&](const ListDrop& d) {
    DropPattern p = usual;
    p.push_back(d);
    add(std::move(p));
  };
  if (!others.empty()) with_usual(others.front());
  add(*dropping.back());
  for (std::size_t i = 1; i < others.size(); ++i) with_usual(others[i]);
  add(usual);
  if (out.size() > static_cast<std::size_t>(std::max<int64_t>(max, 0))) out.resize(static_cast<std::size_t>(max));
  return out;
}

std::vector<std::vector<ChatMessage>> ListMemory::predict(int64_t max) const {
  std::vector<std::vector<ChatMessage>> out;
  if (!last_ || max <= 0) return out;
  for (const DropPattern& pattern : history_.patterns(static_cast<int64_t>(DropHistory::kHistory) * 2)) {
    if (static_cast<int64_t>(out.size()) >= max) break;
    std::optional<std::vector<ChatMessage>> next = apply_drops(*last_, pattern);
    if (!next) continue;
    const bool repeated = std::any_of(out.begin(), out.end(), [&](const std::vector<ChatMessage>& o) {
      return std::equal(o.begin(), o.end(), next->begin(), next->end(), same_message);
    });
    if (!repeated) out.push_back(std::move(*next));
  }
  return out;
}

std::vector<std::vector<ChatMessage>> ListMemory::predict_moves(int64_t max, int64_t max_trims) const {
  std::vector<std::vector<ChatMessage>> out;
  if (!last_ || max <= 0) return out;
  std::vector<std::string> moving;  // the classes of the messages moved in the remembered transitions
  for (const DropPattern& p : moves_) {
    for (const ListDrop& d : p) {
      if (std::find(moving.begin(), moving.end(), d.cls) == moving.end()) moving.push_back(d.cls);
    }
  }
  if (moving.empty()) return out;
  std::vector<std::vector<ChatMessage>> bases = {*last_};
  for (std::vector<ChatMessage>& trimmed : predict(max_trims)) bases.push_back(std::move(trimmed));
  // Newest first, each candidate moved in every base before the next older one.
  std::vector<std::size_t> next(bases.size());
  for (std::size_t b = 0; b < bases.size(); ++b) next[b] = bases[b].empty() ? 0 : bases[b].size() - 1;
  for (int64_t made = 0; made < max; ++made) {
    bool any = false;
    for (std::size_t b = 0; b < bases.size(); ++b) {
      const std::vector<ChatMessage>& base = bases[b];
      // The candidate before next[b] (the last message moving to the end is no change).
      while (next[b] > 0 && std::find(moving.begin(), moving.end(), message_class(base[next[b] - 1])) == moving.end()) {
        --next[b];
      }
      if (next[b] == 0) continue;
      any = true;
      out.push_back(move_to_end(base, --next[b]));
    }
    if (!any) break;
  }
  return out;
}

namespace {

// The (class, rank) of each mark, rank among the marks of its class in order.
std::vector<ListDrop> ranked(const std::vector<InstanceMark>& marks) {
  std::map<std::string, int64_t> seen;
  std::vector<ListDrop> out;
  for (const InstanceMark& m : marks) out.push_back(ListDrop{m.cls, seen[m.cls]++});
  return out;
}

}  // namespace

void InstanceMemory::observe(const std::vector<InstanceMark>& now) {
  if (last_) {
    DropPattern drops;
    const std::vector<ListDrop> rank = ranked(*last_);
    for (std::size_t i = 0; i < last_->size(); ++i) {
      const std::string& key = (*last_)[i].key;
      const bool kept = std::any_of(now.begin(), now.end(), [&](const InstanceMark& m) { return m.key == key; });
      if (!kept) drops.push_back(rank[i]);
    }
    history_.add(sorted(std::move(drops)));
  }
  last_ = now;
}

std::vector<std::vector<uint64_t>> InstanceMemory::predict(const std::vector<InstanceMark>& now, int64_t max) const {
  std::vector<std::vector<uint64_t>> out;
  if (max <= 0) return out;
  const std::vector<ListDrop> rank = ranked(now);
  for (const DropPattern& pattern : history_.patterns(static_cast<int64_t>(DropHistory::kHistory) * 2)) {
    if (static_cast<int64_t>(out.size()) >= max) break;
    std::vector<uint64_t> ids;
    for (std::size_t i = 0; i < now.size(); ++i) {
      if (std::find(pattern.begin(), pattern.end(), rank[i]) != pattern.end()) ids.push_back(now[i].id);
    }
    if (ids.size() == pattern.size() && std::find(out.begin(), out.end(), ids) == out.end()) out.push_back(ids);
  }
  return out;
}

}  // namespace orbit::detail
