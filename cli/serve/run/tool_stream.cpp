#include "serve/run/tool_stream.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace orbit::serve {

namespace {

// The first byte at which `a` and `b` differ (the shorter's length when one is a prefix of the other).
std::size_t first_difference(const std::string& a, const std::string& b) {
  return static_cast<std::size_t>(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
                                  a.begin());
}

// Settles `all`'s last call where max_tokens cut it inside its name (see ToolCallStream::finish): gives it the
// one of `names` its written part begins, or leaves it out. True where it was left out.
bool settle_cut_name(ToolCallParse& all, const std::vector<std::string>& names) {
  if (!all.cut || all.cut_name_whole || all.calls.empty()) return false;
  ChatToolCall& call = all.calls.back();
  // Its string was not closed: a name it spells whole is as open as one it begins ("sea": "sea" or "search").
  const std::string* only = nullptr;
  std::size_t begun = 0;
  for (const std::string& name : names) {
    if (name.compare(0, call.name.size(), call.name) == 0) {
      only = &name;
      ++begun;
    }
  }
  if (begun == 1) {
    call.name = *only;
    call.arguments.clear();
    all.cut_name_whole = true;
    return false;
  }
  all.calls.pop_back();
  all.cut = all.cut_name_whole = false;
  return true;
}

std::string trimmed(std::string_view s) {
  const std::size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  return std::string(s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1));
}

// How many of `text`'s last bytes begin `mark` (a mark not yet whole); 0 where none do.
std::size_t mark_start_at_end(std::string_view text, std::string_view mark) {
  for (std::size_t n = std::min(text.size(), mark.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == mark.substr(0, n)) return n;
  }
  return 0;
}

// Where the call markup a cut answer's content ends with begins (npos: none), and whether it is a call begun
// (Hermes' <tool_call> with no closing mark after it, Mistral's [TOOL_CALLS] before an array not yet whole,
// Llama 3's <|python_tag|> or an object whose first key is "name") rather than the start of a mark.
struct HalfMarkup {
  std::size_t at = std::string::npos;
  bool call = false;
};

HalfMarkup half_markup(const std::string& content, ToolCallFormat format) {
  if (format == ToolCallFormat::kLlama3) {
    constexpr std::string_view kTag = "<|python_tag|>";
    if (content.rfind(kTag, 0) == 0) return {0, true};
    if (!content.empty() && kTag.substr(0, content.size()) == content) return {0, false};
    std::size_t at = 0;
    const auto skip = [&] { at = std::min(content.size(), content.find_first_not_of(" \t\r\n", at)); };
    if (content.empty() || content[0] != '{') return {};
    ++at;
    skip();
    if (content.compare(at, 6, "\"name\"") != 0) return {};
    at += 6;
    skip();
    return at < content.size() && content[at] == ':' ? HalfMarkup{0, true} : HalfMarkup{};
  }
  const std::string mark = tool_call_trigger(format);
  if (format == ToolCallFormat::kHermes) {
    const std::size_t at = content.rfind(mark);
    if (at != std::string::npos && content.find("</tool_call>", at) == std::string::npos) return {at, true};
  } else {
    const std::size_t at = content.find(mark);
    if (at != std::string::npos && !nlohmann::json::accept(content.substr(at + mark.size()))) return {at, true};
  }
  const std::size_t part = mark_start_at_end(content, mark);
  return part > 0 ? HalfMarkup{content.size() - part, false} : HalfMarkup{};
}

}  // namespace

ToolCallParse ToolCallStream::read_answer(const std::string& text, CutToolCall cut, bool* markup_cut) const {
  ToolCallParse all = parse_tool_calls(text, format_, cut);
  *markup_cut = false;
  if (cut != CutToolCall::kCall || all.cut) return all;
  // A call max_tokens cut before its name began (or the start of its mark): its markup never stays content.
  // A call begun is read as a forced one is (CutToolCall::kForcedCall: name "" or as far as it was written),
  // for finish() to settle as a forced call cut there; a mark not yet whole is left out.
  const HalfMarkup half = half_markup(all.content, format_);
  if (half.at == std::string::npos) return all;
  *markup_cut = true;
  const std::string markup = all.content.substr(half.at);
  all.content = trimmed(std::string_view(all.content).substr(0, half.at));
  all.malformed = false;
  if (!half.call) return all;
  ToolCallParse call = parse_tool_calls(markup, format_, CutToolCall::kForcedCall);
  if (call.calls.empty()) return all;
  all.calls.push_back(std::move(call.calls.back()));
  all.cut = call.cut;
  all.cut_name_whole = call.cut_name_whole;
  return all;
}

ToolStreamOut ToolCallStream::push(const std::string& delta) {
  text_ += delta;
  ToolStreamOut out;
  const std::size_t free = tool_call_free_prefix(text_, format_);
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
    reader_.emplace(format_);
    reader_at_ = sent_;
    reader_->append(std::string_view(text_).substr(sent_));
  }
  if (sent_ == text_.size()) return;
  // Neither the calls complete and sent nor what went out of the call being written are read again.
  streamed_.offer(reader_->read(streamed_.done(), streamed_.held()), out);
}

void ToolCallStream::finish(RunResult& r) const {
  const std::string rest = r.text.substr(std::min(sent_, r.text.size()));
  const CutToolCall cut = r.finish_reason != "length" ? CutToolCall::kContent
                          : forced_                   ? CutToolCall::kForcedCall
                                                      : CutToolCall::kCall;
  bool markup_cut = false;
  ToolCallParse all = read_answer(r.text, cut, &markup_cut);
  if (one_call_ && all.calls.size() > 1) {  // parallel_tool_calls false: the first call only
    r.tool_calls_dropped = all.calls.size() - 1;
    all.calls.resize(1);
    all.cut = markup_cut = false;  // a cut call is the last one, which went
  }
  const bool left_out = settle_cut_name(all, names_);
  if (all.calls.empty() && !left_out && !markup_cut) {
    r.unstreamed = rest;
  } else {
    r.tool_calls = std::move(all.calls);
    r.tool_call_cut = all.cut;
    r.text = std::move(all.content);
    bool rest_cut = false;
    r.unstreamed = read_answer(rest, cut, &rest_cut).content;
    const bool whole = !all.cut && !left_out && !markup_cut && !r.tool_calls.empty();
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
