#include "orbit/trigger_watch.h"

#include <algorithm>
#include <utility>

#include "orbit/common/error.h"

namespace orbit {

namespace {

std::size_t leading_space(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && (s[n] == ' ' || s[n] == '\t' || s[n] == '\n' || s[n] == '\r')) ++n;
  return n;
}

// The last bytes of `s` that may begin `looked_for` (fewer than its length).
std::string tail_for(const std::string& s, const std::string& looked_for) {
  const std::size_t keep = std::min(s.size(), looked_for.empty() ? 0 : looked_for.size() - 1);
  return s.substr(s.size() - keep);
}

}  // namespace

TriggerWatch::TriggerWatch(std::string trigger, TriggerBlock block)
    : trigger_(std::move(trigger)), block_(std::move(block)) {
  ORBIT_CHECK(!trigger_.empty() || !block_.close.empty(), "TriggerWatch: neither a trigger nor a block");
  ORBIT_CHECK(block_.open.empty() || !block_.close.empty(),
              "constraint_trigger_block: open = \"" << block_.open << "\" needs a close string");
  phase_ = block_.close.empty() ? Phase::kWatching : block_.open.empty() ? Phase::kInBlock : Phase::kMayOpen;
}

std::optional<std::string> TriggerWatch::push(std::string_view piece) {
  held_.append(piece);
  for (;;) {
    if (phase_ == Phase::kMayOpen) {
      const std::string_view rest = std::string_view(held_).substr(leading_space(held_));
      if (rest.substr(0, block_.open.size()) == block_.open) {
        held_ = std::string(rest.substr(block_.open.size()));
        phase_ = Phase::kInBlock;
      } else if (std::string_view(block_.open).substr(0, rest.size()) == rest) {
        return std::nullopt;  // whitespace, or the open string's start
      } else {
        phase_ = Phase::kWatching;  // no block: the text held (its whitespace too) is looked at from its first byte
      }
    } else if (phase_ == Phase::kInBlock) {
      const std::size_t at = held_.find(block_.close);
      if (at == std::string::npos) {
        held_ = tail_for(held_, block_.close);
        return std::nullopt;
      }
      held_.erase(0, at + block_.close.size());
      phase_ = Phase::kWatching;
    } else {
      const std::size_t at = held_.find(trigger_);
      if (at != std::string::npos) return held_.substr(at);
      held_ = tail_for(held_, trigger_);
      return std::nullopt;
    }
  }
}

std::optional<std::size_t> TriggerWatch::find(std::string_view text, const std::string& trigger,
                                              const TriggerBlock& block) {
  TriggerWatch watch(trigger, block);
  const std::optional<std::string> from = watch.push(text);
  if (!from) return std::nullopt;
  return text.size() - from->size();
}

}  // namespace orbit
