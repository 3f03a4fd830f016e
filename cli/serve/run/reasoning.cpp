#include "serve/run/reasoning.h"

#include <algorithm>

namespace orbit::serve {

namespace {

constexpr std::string_view kOpen = kReasoningOpen;
constexpr std::string_view kClose = kReasoningClose;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The bytes of leading whitespace in `s`.
std::size_t leading_space(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

// The longest end of `s` that is a proper prefix of `tag` (a tag that may still be written whole).
std::size_t partial_tag(std::string_view s, std::string_view tag) {
  for (std::size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// `s` without its trailing whitespace.
std::string_view trim_end(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_named(std::string_view name) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  return std::nullopt;
}

std::string reasoning_format_names() { return "none, deepseek_r1, qwen3"; }

bool starts_in_reasoning(ReasoningFormat format, std::string_view generation_prompt) {
  if (format == ReasoningFormat::kNone) return false;
  const std::size_t open = generation_prompt.rfind(kOpen);
  const std::size_t close = generation_prompt.rfind(kClose);
  if (open != std::string_view::npos) return close == std::string_view::npos || open > close;
  if (close != std::string_view::npos) return false;
  return format == ReasoningFormat::kDeepSeekR1;
}

bool may_open_reasoning(ReasoningFormat format, std::string_view generation_prompt) {
  return format != ReasoningFormat::kNone && !starts_in_reasoning(format, generation_prompt) &&
         generation_prompt.find(kClose) == std::string_view::npos;
}

ReasoningSplitter::ReasoningSplitter(bool in_reasoning) : state_(State::kMayOpen), fallback_reasoning_(in_reasoning) {}

ReasoningPieces ReasoningSplitter::push(std::string_view delta) {
  held_.append(delta);
  ReasoningPieces out;
  step(out);
  return out;
}

void ReasoningSplitter::step(ReasoningPieces& out) {
  for (;;) {
    if (state_ == State::kMayOpen) {
      const std::size_t space = leading_space(held_);
      const std::string_view rest = std::string_view(held_).substr(space);
      if (rest.substr(0, kOpen.size()) == kOpen) {
        consumed_ += space + kOpen.size();
        held_.erase(0, space + kOpen.size());
        opened_ = true;
        state_ = State::kReasoning;
      } else if (kOpen.substr(0, rest.size()) == rest) {
        return;  // whitespace, or the open tag's start: it may still open the reasoning
      } else {
        opened_ = fallback_reasoning_;
        state_ = fallback_reasoning_ ? State::kReasoning : State::kContent;
      }
    } else if (state_ == State::kReasoning) {
      reason(out, false);
      if (state_ == State::kReasoning) return;
    } else if (state_ == State::kAfterClose) {
      const std::size_t space = leading_space(held_);
      consumed_ += space;
      held_.erase(0, space);
      if (held_.empty()) return;
      state_ = State::kContent;
    } else {
      out.content += held_;
      consumed_ += held_.size();
      held_.clear();
      return;
    }
  }
}

// Lets out the reasoning held up to `</think>` (then kAfterClose), or, before it, all but a partial close tag
// and the whitespace before it (all of it `at_end`, trimmed).
void ReasoningSplitter::reason(ReasoningPieces& out, bool at_end) {
  if (!reasoning_text_) {
    const std::size_t space = leading_space(held_);
    consumed_ += space;
    held_.erase(0, space);
  }
  const std::size_t close = held_.find(kClose);
  std::size_t cut = held_.size();
  if (close != std::string::npos) {
    cut = close;
  } else if (!at_end) {
    cut -= partial_tag(held_, kClose);
  }
  const std::string_view text = trim_end(std::string_view(held_).substr(0, cut));
  const std::size_t let_out = close != std::string::npos ? close + kClose.size() : at_end ? held_.size() : text.size();
  if (!text.empty()) reasoning_text_ = true;
  out.reasoning.append(text);
  consumed_ += let_out;
  held_.erase(0, let_out);
  if (close != std::string::npos) {
    end_ = consumed_;
    state_ = State::kAfterClose;
  }
}

ReasoningPieces ReasoningSplitter::finish() {
  ReasoningPieces out;
  if (state_ == State::kMayOpen) {
    opened_ = fallback_reasoning_;
    state_ = fallback_reasoning_ ? State::kReasoning : State::kContent;
  }
  step(out);
  if (state_ == State::kReasoning) reason(out, true);
  return out;
}

std::optional<std::size_t> ReasoningSplitter::reasoning_end() const {
  if (end_) return end_;
  if (opened_) return std::nullopt;
  return 0;
}

ReasoningSplit split_reasoning(std::string_view answer, bool in_reasoning) {
  ReasoningSplitter splitter(in_reasoning);
  ReasoningPieces pushed = splitter.push(answer);
  ReasoningPieces rest = splitter.finish();
  ReasoningSplit out;
  out.reasoning = std::move(pushed.reasoning) + rest.reasoning;
  out.content = std::move(pushed.content) + rest.content;
  out.reasoning_end = splitter.reasoning_end();
  return out;
}

}  // namespace orbit::serve
