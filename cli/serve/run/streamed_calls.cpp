#include "serve/run/streamed_calls.h"

#include <algorithm>
#include <string_view>

namespace orbit::serve {

namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

}  // namespace

void StreamedCalls::offer(const ToolCallReading& reading, std::vector<ToolCallDelta>& out) {
  const bool last_name_open = reading.cut && !reading.cut_name_whole;
  const std::size_t end = reading.first + reading.calls.size();
  for (std::size_t i = std::max(reading.first, done_); i < end && i <= sent_.size(); ++i) {
    const ChatToolCall& call = reading.calls[i - reading.first];
    if (last_name_open && i + 1 == end) return;  // its name may still grow
    if (i == sent_.size()) {
      sent_.push_back(Sent{call.id, call.name, "", 0});
      out.push_back(ToolCallDelta{i, true, call.id, call.name, ""});
    }
    Sent& s = sent_[i];
    // The last call's arguments may come without the bytes held (held()): where they grow under the number
    // s.arguments was read under, what went out is a prefix of theirs once they are longer; else compared.
    const bool last = i + 1 == end;
    const uint64_t growing = last ? reading.growing : 0;
    const std::size_t from = last ? reading.arguments_from : 0;
    const std::size_t had = s.arguments.size();
    const bool extends =
        growing != 0 && growing == s.growing ? from <= had : from == 0 && starts_with(call.arguments, s.arguments);
    if (call.name == s.name && from + call.arguments.size() > had && extends) {
      s.arguments.append(call.arguments, had - from, std::string::npos);
      out.push_back(ToolCallDelta{i, false, "", "", s.arguments.substr(had)});
      s.growing = growing;
    }  // else nothing to add; settle() says whether the answer holds what went out
    if (i == done_ && i < reading.complete) ++done_;  // it never changes again
  }
}

SettledCalls StreamedCalls::settle(std::vector<ChatToolCall>& calls) const {
  SettledCalls out;
  for (std::size_t i = 0; i < sent_.size(); ++i) {
    const Sent& s = sent_[i];
    const char* what = i >= calls.size()                               ? "missing"
                       : calls[i].name != s.name                       ? "name"
                       : !starts_with(calls[i].arguments, s.arguments) ? "arguments"
                                                                       : nullptr;
    if (what != nullptr) {
      ToolStreamMismatch m{i, s.id, what, s.name, "", s.arguments, ""};
      if (i < calls.size()) {
        m.answered_name = calls[i].name;
        m.answered = calls[i].arguments;
      }
      out.mismatch = std::move(m);
      out.unsent.clear();
      return out;
    }
    calls[i].id = s.id;
    if (calls[i].arguments.size() > s.arguments.size()) {
      out.unsent.push_back(ToolCallDelta{i, false, "", "", calls[i].arguments.substr(s.arguments.size())});
    }
  }
  for (std::size_t i = sent_.size(); i < calls.size(); ++i) {
    out.unsent.push_back(ToolCallDelta{i, true, calls[i].id, calls[i].name, calls[i].arguments});
  }
  return out;
}

}  // namespace orbit::serve
