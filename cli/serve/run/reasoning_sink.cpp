#include "serve/run/reasoning_sink.h"

#include <algorithm>

namespace orbit::serve {

ReasoningRun::ReasoningRun(bool in_reasoning, int64_t choices, TokenCount count)
    : in_reasoning_(in_reasoning),
      splitters_(static_cast<std::size_t>(std::max<int64_t>(1, choices)), ReasoningSplitter(in_reasoning)),
      count_(std::move(count)) {}

RunSink ReasoningRun::wrap(const RunSink& sink, const RunSink& content) {
  sink_ = sink;
  content_ = content;
  RunSink out = content;
  if (content.on_text) out.on_text = [this](const std::string& delta) { return push(0, delta); };
  if (content.on_choice_text) {
    out.on_choice_text = [this](int64_t choice, const std::string& delta) { return push(choice, delta); };
  }
  return out;
}

bool ReasoningRun::send_reasoning(int64_t choice, const std::string& text) {
  if (text.empty()) return true;
  return !sink_.on_reasoning || sink_.on_reasoning(choice, text);  // unset: the result holds it
}

bool ReasoningRun::push(int64_t choice, const std::string& delta) {
  const ReasoningPieces p = splitters_[static_cast<std::size_t>(choice)].push(delta);
  if (!send_reasoning(choice, p.reasoning)) return false;
  if (p.content.empty()) return true;
  return content_.on_choice_text ? content_.on_choice_text(choice, p.content) : content_.on_text(p.content);
}

bool ReasoningRun::finish(int64_t choice, RunResult& r) {
  const ReasoningPieces held = splitters_[static_cast<std::size_t>(choice)].finish();
  send_reasoning(choice, held.reasoning);  // a client that left ends the run anyway
  ReasoningSplit whole = split_reasoning(r.text, in_reasoning_);
  r.reasoning = std::move(whole.reasoning);
  r.text = std::move(whole.content);
  r.unstreamed = held.content;
  const auto all = static_cast<int64_t>(r.tokens.size());
  r.usage.reasoning_tokens = !whole.reasoning_end        ? all
                             : *whole.reasoning_end == 0 ? 0
                                                         : std::min(all, count_(r.tokens, *whole.reasoning_end));
  return whole.reasoning_end.has_value();
}

}  // namespace orbit::serve
