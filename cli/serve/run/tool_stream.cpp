#include "serve/run/tool_stream.h"

#include <algorithm>
#include <string_view>

namespace orbit::serve {

namespace {

// `longer` past `prefix`, when it extends it; "" otherwise.
std::string_view extension(std::string_view longer, std::string_view prefix) {
  if (longer.size() <= prefix.size() || longer.substr(0, prefix.size()) != prefix) return {};
  return longer.substr(prefix.size());
}

}  // namespace

ToolStreamOut ToolCallStream::push(const std::string& delta) {
  text_ += delta;
  ToolStreamOut out;
  const std::size_t free = tool_call_free_prefix(text_, format_);
  if (free > sent_) {
    out.content = text_.substr(sent_, free - sent_);
    sent_ = free;
  }
  if (progressive_ && sent_ < text_.size()) read_calls(out.calls);
  return out;
}

void ToolCallStream::read_calls(std::vector<ToolCallDelta>& out) {
  const ToolCallParse read = parse_tool_calls(std::string_view(text_).substr(sent_), format_, CutToolCall::kCall);
  for (std::size_t i = 0; i < read.calls.size(); ++i) {
    const ChatToolCall& call = read.calls[i];
    if (read.cut && i + 1 == read.calls.size() && !read.cut_name_whole) return;  // its name may still grow
    if (i == opened_.size()) {
      opened_.push_back(Opened{call.id, ""});
      out.push_back(ToolCallDelta{i, true, call.id, call.name, ""});
    }
    Opened& o = opened_[i];
    const std::string_view more = extension(call.arguments, o.arguments);
    if (more.empty()) continue;
    out.push_back(ToolCallDelta{i, false, "", "", std::string(more)});
    o.arguments = call.arguments;
  }
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
  for (std::size_t i = 0; i < r.tool_calls.size(); ++i) {
    ChatToolCall& call = r.tool_calls[i];
    if (i >= opened_.size()) {
      r.unstreamed_calls.push_back(ToolCallDelta{i, true, call.id, call.name, call.arguments});
      continue;
    }
    call.id = opened_[i].id;
    const std::string_view more = extension(call.arguments, opened_[i].arguments);
    if (!more.empty()) r.unstreamed_calls.push_back(ToolCallDelta{i, false, "", "", std::string(more)});
  }
}

}  // namespace orbit::serve
