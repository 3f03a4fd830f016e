#include "serve/run/tool_stream.h"

#include <algorithm>
#include <string>
#include <string_view>

namespace orbit::serve {

namespace {

// The first byte at which `a` and `b` differ (the shorter's length when one is a prefix of the other).
std::size_t first_difference(const std::string& a, const std::string& b) {
  return static_cast<std::size_t>(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
                                  a.begin());
}

}  // namespace

ToolStreamOut ToolCallStream::push(const std::string& delta) {
  text_ += delta;
  ToolStreamOut out;
  const std::size_t free = tool_call_free_prefix(text_, calls_.format);
  if (free > sent_) {
    out.content = text_.substr(sent_, free - sent_);
    sent_ = free;
  }
  if (progressive_) read_calls(delta, out.calls);
  return out;
}

void ToolCallStream::read_calls(const std::string& delta, std::vector<ToolCallDelta>& out) {
  if (reader_ && reader_at_ == sent_) {
    reader_->append(delta);
  } else {  // the content grew: what follows it is read from its start
    reader_.emplace(calls_.format);
    reader_at_ = sent_;
    reader_->append(std::string_view(text_).substr(sent_));
  }
  if (sent_ == text_.size()) return;
  // Neither the calls complete and sent nor what went out of the call being written are read again.
  streamed_.offer(reader_->read(streamed_.done(), streamed_.held()), out);
}

void ToolCallStream::finish(RunResult& r) const {
  const std::string rest = r.text.substr(std::min(sent_, r.text.size()));
  const bool ran_out = r.finish_reason == "length";
  AnswerCalls all = read_answer_calls(r.text, ran_out, calls_);
  r.tool_calls_dropped = all.dropped;
  r.tool_call_left_out = all.left_out;
  if (all.read.calls.empty() && !all.left_out && !all.markup_cut) {
    r.unstreamed = rest;
  } else {
    const bool whole = all.whole();
    r.tool_calls = std::move(all.read.calls);
    r.tool_call_cut = all.read.cut;
    r.text = std::move(all.read.content);
    r.unstreamed = read_answer_calls(rest, ran_out, calls_).read.content;
    // Whole calls are "tool_calls" also where the budget ended the answer after them (inside the last one's
    // closing mark): agent clients (the AI SDK) run a step's tools only on "tool_calls".
    if (r.finish_reason != "cancelled" && whole) r.finish_reason = "tool_calls";
  }
  SettledCalls settled = streamed_.settle(r.tool_calls);
  r.unstreamed_calls = std::move(settled.unsent);
  if (r.finish_reason != "cancelled") r.tool_stream_mismatch = std::move(settled.mismatch);
}

std::vector<std::string> grammar_tool_names(const ChatRequest& request) {
  if (request.tool_choice.mode == "function") return {request.tool_choice.function};
  if (!request.tool_choice.allowed.empty()) return request.tool_choice.allowed;
  return request.tool_names;
}

ApiError tool_stream_error(const ToolStreamMismatch& m, int64_t choice) {
  std::string how;
  if (m.what == "missing") {
    how = "the answer holds no such call (it was not written whole)";
  } else if (m.what == "name") {
    how = "the answer's call is named '" + m.answered_name + "'";
  } else {
    how = "its arguments streamed (" + std::to_string(m.streamed.size()) +
          " bytes) are not a prefix of the answer's (" + std::to_string(m.answered.size()) +
          " bytes): they differ at byte " + std::to_string(first_difference(m.streamed, m.answered));
  }
  return api_error(500,
                   "choice " + std::to_string(choice) + "'s tool call " + std::to_string(m.index) + " (id " + m.id +
                       ", function '" + m.name + "') was streamed as the answer does not hold it: " + how +
                       "; the pieces streamed of it are not the call",
                   "server_error", "tool_call_stream_mismatch", "tool_calls");
}

}  // namespace orbit::serve
