#include "serve/run/tool_stream.h"

#include <algorithm>

namespace orbit::serve {

std::string ToolCallStream::push(const std::string& delta) {
  text_ += delta;
  const std::size_t free = tool_call_free_prefix(text_, format_);
  if (free <= sent_) return "";
  std::string out = text_.substr(sent_, free - sent_);
  sent_ = free;
  return out;
}

void ToolCallStream::finish(RunResult& r) const {
  const std::string rest = r.text.substr(std::min(sent_, r.text.size()));
  const CutToolCall cut = r.finish_reason != "length" ? CutToolCall::kContent
                          : forced_                   ? CutToolCall::kForcedCall
                                                      : CutToolCall::kCall;
  ToolCallParse all = parse_tool_calls(r.text, format_, cut);
  if (all.calls.empty()) {
    r.unstreamed = rest;
    return;
  }
  r.tool_calls = std::move(all.calls);
  r.tool_call_cut = all.cut;
  r.text = std::move(all.content);
  r.unstreamed = parse_tool_calls(rest, format_, cut).content;
  if (r.finish_reason != "cancelled" && !all.cut) r.finish_reason = "tool_calls";
}

}  // namespace orbit::serve
