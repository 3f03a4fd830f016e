// Which earlier list a list whose key the memos do not know reads from (sync_memo.h's K, sync_encode.h's K): the
// latest list named by one of its aliases (latest_keys, anchor_key) that holds the most of its messages.
//
// Why more than the first alias that names a list. Several agents sync under one template (one process serves
// them all), and an alias names the latest list of its kind, whoever's it was: the latest with a system prompt
// that several agents share, with a first user message that several share, under the template alone. An agent
// that rewrites its system prompt and trims its oldest turns keeps neither its first nor its second message, so
// the template's alias alone named a list for it, and that list was another agent's whenever one synced between:
// its spans share no messages, so step 2 rendered every prefix (24-44 ms at 200 messages instead of 2-3) and step
// 3 encoded the text whole. Its last list's later messages are still there (an agent appends at the end and trims
// at the start), so each list is also named by its last message and by a few anchors (anchor_messages), and a
// list whose key is unknown looks up its own messages' anchors from its end. Each list found is scored by how
// many of this list's messages it holds; the most wins, the earlier found among equals (first message, second
// message, anchors from the end, template, then the same whatever the variables: offer_any_variables), so where the
// old order's list holds as many it is still chosen, and a list under this list's tools before one under others.
// Lists hold as many where they share nearly every message (agents whose messages are each other's), and then
// either reads about as well: a tie-break by the longer run of this list's messages at a list's end changed
// test_sync_memo_agents' such agents from 143 prefixes rendered of 704 to 144, so there is none.
//
// The choice changes only which list is read from, never a result: step 2 checks what it reads from any list
// (the byte check, the check renders, the fallback: sync_memo.h), and step 3 compares the texts it reuses
// (sync_encode.h); a wrong list only reads less. Cost: one locked map lookup per anchor looked up (its key hashed
// once per sync, ListKeys' cache, and the memo's names are exact pairs of a key and a tokenizer, MemoKey, hashed
// no further), at most kMaxAnchorLookups, and the scan stops once the best list holds every message up to where
// it has looked (the common case stops after the messages the agent appended); scoring looks each of a list's
// message keys up in a table of this list's, built once. The lists offered are peeked at, and only the one
// chosen is marked used in the memo's LRU. Step 2 chooses (text_cuts), and step 3 reads the encodings of the
// lists step 2 chose (ListChoice, known_encodings), choosing again only where the encodings memo lacks them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "window/sync_memo.h"

namespace orbit::detail {

// How many of a list's messages, from its end, are looked up as anchors (marked ones further back are looked up
// too), how many lookups at most, and how many lists found by anchors are scored at most.
inline constexpr std::size_t kTailAnchorLookups = 16;
inline constexpr std::size_t kMaxAnchorLookups = 32;
inline constexpr std::size_t kMaxAnchorLists = 6;

// The lists offered for this one (keys: its list_keys), and the best: the one holding the most of its messages
// past the first; the first offered among equals.
class LatestChoice {
 public:
  explicit LatestChoice(const ListKeys& keys) : messages_(keys.messages) {}

  // Offers list `id` with message keys `held`; true when it is the best now. A list offered again is not scored.
  bool offer(const void* id, const std::vector<Sha256::Digest>& held) {
    if (std::find(offered_.begin(), offered_.end(), id) != offered_.end()) return false;
    offered_.push_back(id);
    if (slots_.empty()) index();
    std::vector<char> in(messages_.size(), 0);
    for (const Sha256::Digest& m : held) {
      for (uint32_t j = find(m); j != kNone; j = next_[j]) in[j] = 1;
    }
    std::size_t count = 0, covered = 0;
    for (std::size_t j = 1; j < messages_.size(); ++j) {
      count += in[j] != 0 ? 1 : 0;
      if (covered + 1 == j && in[j] != 0) covered = j;
    }
    if (best_ != nullptr && count <= best_count_) return false;
    best_ = id;
    best_count_ = count;
    best_covers_ = covered;
    return true;
  }
  // Whether the best list holds every message of this list from its second to its `j`th (0-based): the lists
  // that anchors at or before `j` name are older lists of the agent's (which hold no more of them) or others'.
  bool settled(std::size_t j) const { return best_ != nullptr && best_covers_ >= j; }
  std::size_t offered() const { return offered_.size(); }
  // The messages whose anchors are looked up, latest first: the last kTailAnchorLookups, and marked ones before
  // them, at most kMaxAnchorLookups in all.
  std::vector<std::size_t> lookups() const {
    std::vector<std::size_t> out;
    const std::size_t n = messages_.size();
    for (std::size_t j = n; j > 1 && out.size() < kMaxAnchorLookups; --j) {
      if (j + kTailAnchorLookups > n || marked_anchor(messages_[j - 1])) out.push_back(j - 1);
    }
    return out;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  static std::size_t fingerprint(const Sha256::Digest& d) {
    std::size_t h = 0;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
  // An open-addressed table of this list's messages past the first (slots_: the latest index of each key;
  // next_[j]: the index before j with the same key), built once for every list offered.
  void index() {
    std::size_t size = 16;
    while (size < 2 * messages_.size()) size *= 2;
    slots_.assign(size, kNone);
    next_.assign(messages_.size(), kNone);
    for (std::size_t j = 1; j < messages_.size(); ++j) {
      std::size_t s = fingerprint(messages_[j]) & (size - 1);
      while (slots_[s] != kNone && messages_[slots_[s]] != messages_[j]) s = (s + 1) & (size - 1);
      next_[j] = slots_[s];
      slots_[s] = static_cast<uint32_t>(j);
    }
  }
  // The latest index past the first with key `m`; kNone: none.
  uint32_t find(const Sha256::Digest& m) const {
    for (std::size_t s = fingerprint(m) & (slots_.size() - 1); slots_[s] != kNone; s = (s + 1) & (slots_.size() - 1)) {
      if (messages_[slots_[s]] == m) return slots_[s];
    }
    return kNone;
  }

  const std::vector<Sha256::Digest>& messages_;
  std::vector<const void*> offered_;
  std::vector<uint32_t> slots_, next_;
  const void* best_ = nullptr;
  std::size_t best_count_ = 0, best_covers_ = 0;
};

// The lists named whatever their variables (any_variables_key of this list's last kTailAnchorLookups messages,
// latest first, then its template alone), offered to `choice` after every alias under its variables (which win
// among equals), and only while the best list lacks some of this list's messages past the first: a list that
// re-syncs or grows under the same tools looks none of them up.
template <class Offer>
void offer_any_variables(const LatestChoice& choice, const ListKeys& keys, const Offer& offer) {
  const std::size_t n = keys.messages.size();
  if (n < 2 || choice.settled(n - 1)) return;
  const std::size_t before = choice.offered();
  for (std::size_t j = n; j > 1 && j + kTailAnchorLookups > n; --j) {
    if (choice.settled(j - 1) || choice.offered() >= before + kMaxAnchorLists) break;
    offer(any_variables_key(keys, j - 1));
  }
  if (!choice.settled(n - 1)) offer(keys.template_only);
}

// The list a memo reads from: its key and value (null: none).
template <class Value>
struct LatestList {
  MemoKey key;
  std::shared_ptr<const Value> value;
};

// The list `memo` reads from for a list with keys `keys` (the header's choice; null: none named); the aliases are
// latest_keys, anchor_key and then offer_any_variables' under `tokenizer` (MemoKey's). The lists offered are peeked at
// (ListMemo::peek_alias): only the one chosen is marked used. `Value` keeps its list's message keys (`messages`). Only
// lists `accept` takes are offered.
template <class Value, class Accept>
LatestList<Value> latest_list(ListMemo<Value>& memo, const ListKeys& keys, uint64_t tokenizer, const Accept& accept) {
  const std::vector<Sha256::Digest>& named = latest_keys(keys);  // first message, second, template
  if (named.empty()) return {};
  LatestChoice choice(keys);
  LatestList<Value> best;
  const auto offer = [&](const Sha256::Digest& alias) {
    std::pair<MemoKey, std::shared_ptr<const Value>> v = memo.peek_alias({alias, tokenizer});
    if (v.second == nullptr || !accept(*v.second)) return;
    if (choice.offer(v.second.get(), v.second->messages)) best = {v.first, std::move(v.second)};
  };
  for (std::size_t k = 0; k + 1 < named.size(); ++k) offer(named[k]);
  const std::size_t before_anchors = choice.offered();
  for (const std::size_t j : choice.lookups()) {
    if (choice.settled(j) || choice.offered() >= before_anchors + kMaxAnchorLists) break;
    offer(anchor_key(keys, j));
  }
  offer(named.back());
  offer_any_variables(choice, keys, offer);
  if (best.value != nullptr) (void)memo.get(best.key);  // now the most recently used
  return best;
}

template <class Value>
LatestList<Value> latest_list(ListMemo<Value>& memo, const ListKeys& keys, uint64_t tokenizer) {
  return latest_list(memo, keys, tokenizer, [](const Value&) { return true; });
}

}  // namespace orbit::detail
