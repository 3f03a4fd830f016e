#include "serve/run/choice_order.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "orbit/common/error.h"

namespace orbit::serve {

namespace {

using Key = std::tuple<int64_t, int, std::size_t>;  // (step, 0 end / 1 token, choice)

constexpr Key kNone{std::numeric_limits<int64_t>::max(), 0, 0};

}  // namespace

void ChoiceOrder::token(std::size_t choice) {
  State& s = choices_.at(choice);
  ORBIT_CHECK(!s.ended, "ChoiceOrder: a token of choice " << choice << " after its end");
  ++s.arrived;
}

void ChoiceOrder::end(std::size_t choice) {
  State& s = choices_.at(choice);
  ORBIT_CHECK(!s.ended, "ChoiceOrder: choice " << choice << " ended twice");
  s.ended = true;
}

std::vector<ChoiceOrder::Item> ChoiceOrder::ready() {
  // Nothing at or past the bound can go out: a choice not yet ended may still end there, or add tokens after.
  Key bound = kNone;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].ended) bound = std::min(bound, Key{choices_[i].arrived, 0, i});
  }
  std::vector<Item> out;
  while (true) {
    Key next = kNone;
    std::size_t at = 0;
    for (std::size_t i = 0; i < choices_.size(); ++i) {
      const State& s = choices_[i];
      // A choice's end sorts after its tokens, so it is pending only once they all went out.
      const std::optional<Key> pending = s.sent < s.arrived       ? std::optional<Key>(Key{s.sent, 1, i})
                                         : s.ended && !s.end_sent ? std::optional<Key>(Key{s.arrived, 0, i})
                                                                  : std::nullopt;
      if (pending && *pending < next) {
        next = *pending;
        at = i;
      }
    }
    if (next == kNone || !(next < bound)) return out;
    State& s = choices_[at];
    const bool end = std::get<1>(next) == 0;
    if (end) {
      s.end_sent = true;
    } else {
      ++s.sent;
    }
    out.push_back(Item{at, end});
  }
}

bool ChoiceOrder::finished() const {
  for (const State& s : choices_) {
    if (!s.end_sent) return false;
  }
  return true;
}

std::optional<std::size_t> ChoiceOrder::laggard() const {
  std::optional<std::size_t> out;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].ended && (!out || choices_[i].arrived < choices_[*out].arrived)) out = i;
  }
  return out;
}

}  // namespace orbit::serve
