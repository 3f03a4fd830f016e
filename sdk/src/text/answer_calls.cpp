// The tool calls of a finished answer, the cut one settled (orbit/answer_calls.h).
#include "orbit/answer_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "text/json_spans.h"
#include "text/tool_call_cut.h"
#include "text/tool_call_parts.h"

namespace orbit {

namespace {

using namespace json_spans;
using namespace tool_call_parts;

constexpr std::size_t kNone = std::string::npos;

// Settles `all`'s last call where max_tokens cut it inside its name: gives it the one of `names` its written
// part begins, or leaves it out. True where it was left out.
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

// Where the call markup a cut answer's content ends with begins (kNone: none), and whether it is a call begun
// (Hermes' <tool_call> with no closing mark after it, Mistral's [TOOL_CALLS] before an array not yet whole,
// Llama 3's <|python_tag|> or an object whose first key is "name") rather than the start of a mark.
struct HalfMarkup {
  std::size_t at = kNone;
  bool call = false;
};

// `after_calls`: whole calls and their "; " come before `content`, and under their separator only a call follows,
// so an object cut before its first key was read whole ("{", "{\"na") is one begun too.
HalfMarkup llama3_half_markup(const std::string& content, bool after_calls) {
  if (content.rfind(kPythonTag, 0) == 0) return {0, true};
  if (!content.empty() && kPythonTag.substr(0, content.size()) == content) return {0, false};
  if (content.empty() || content[0] != '{') return {};
  std::size_t at = skip_space(content, 1);
  const std::string key = trim(std::string_view(content).substr(at));
  if (after_calls && std::string_view("\"name\"").substr(0, key.size()) == key) return {0, true};
  if (content.compare(at, 6, "\"name\"") != 0) return {};
  at = skip_space(content, at + 6);
  return at < content.size() && content[at] == ':' ? HalfMarkup{0, true} : HalfMarkup{};
}

// Whether the Hermes answer `text` ends in a start of the call mark right after a whole call (whitespace
// between): after a call only a call follows under the tools' grammar, so that start is a call begun.
bool mark_after_call(std::string_view text) {
  const std::string t = trim(text);
  const std::size_t part = partial_marker(t, kHermesOpen);
  if (part == 0) return false;
  const std::string before = trim(std::string_view(t).substr(0, t.size() - part));
  return before.size() >= kHermesClose.size() &&
         before.compare(before.size() - kHermesClose.size(), kHermesClose.size(), kHermesClose) == 0;
}

// `text` is the whole answer, `content` what parse_tool_calls left of it after the whole calls `after_calls`.
HalfMarkup half_markup(std::string_view text, const std::string& content, ToolCallFormat format, bool after_calls) {
  if (format == ToolCallFormat::kLlama3) return llama3_half_markup(content, after_calls);
  const std::string mark = tool_call_trigger(format);
  if (format == ToolCallFormat::kHermes) {
    const std::size_t at = content.rfind(mark);
    if (at != kNone && content.find(kHermesClose, at) == kNone) return {at, true};
  } else {
    const std::size_t at = content.find(mark);
    if (at != kNone && !nlohmann::json::accept(content.substr(at + mark.size()))) return {at, true};
  }
  const std::size_t part = partial_marker(content, mark);
  if (part == 0) return {};
  return {content.size() - part, format == ToolCallFormat::kHermes && mark_after_call(text)};
}

// The object a Llama 3 answer ends in, after the whole calls before it ("" where <|python_tag|> marks it
// as calls).
std::string llama3_last_object(std::string_view text) {
  const std::string body = trim(text);
  if (body.rfind(kPythonTag, 0) == 0) return "";
  std::size_t start = 0;
  for (std::size_t sep = llama3_separator(body, 0); sep != kNone; sep = llama3_separator(body, start)) start = sep + 1;
  return trim(std::string_view(body).substr(start));
}

// Whether the Llama 3 object `object` (whole or cut short) is, or may still become, a call: its members a
// call's (no tool_call_cut::CutCall::foreign), its name one of `tools` (cut inside it: the start of one; any
// name where `tools` is empty).
bool llama3_may_call(std::string_view object, const std::vector<std::string>& tools) {
  const std::optional<tool_call_cut::CutCall> c = tool_call_cut::read(object);
  if (!c || c->foreign) return false;
  if (tools.empty()) return true;
  const std::string& name = c->call.name;
  return std::any_of(tools.begin(), tools.end(), [&](const std::string& tool) {
    return c->name_whole ? tool == name : tool.compare(0, name.size(), name) == 0;
  });
}

// A Llama 3 answer (`all` its reading) that ends in an object that cannot be a call (llama3_may_call; Llama 3's
// calls have no mark, so it is a JSON answer, a response_format's or one in free text): that object is
// content as written, the whole calls before it kept (as parse_tool_calls keeps them before a piece that is
// not a call). False where the answer does not end so.
bool keep_llama3_json(std::string_view text, const AnswerCallsOptions& o, ToolCallParse* all) {
  const std::string object = llama3_last_object(text);
  if (object.empty() || object.front() != '{') return false;
  if (llama3_may_call(object, o.names.empty() ? o.tools : o.names)) return false;
  if (all->content.empty() && !all->calls.empty()) all->calls.pop_back();  // it was read as a call
  all->content = all->calls.empty() ? trim(text) : object;
  all->cut = all->cut_name_whole = all->malformed = false;
  return true;
}

// Whether `text` (after whitespace) begins with `format`'s call mark, or is a start of it no JSON text begins
// with (Mistral's lone "[" may be a JSON array's). False for a format without a mark (Llama 3).
bool begins_as_call(std::string_view text, ToolCallFormat format) {
  const std::string mark = tool_call_trigger(format);
  if (mark.empty()) return false;
  const std::string t = trim(text);
  if (t.empty()) return false;
  if (t.size() >= mark.size()) return t.compare(0, mark.size(), mark) == 0;
  return mark.compare(0, t.size(), t) == 0 && t != "[" && t != "{";
}

// Mistral's whole items before the one `markup` ("[TOOL_CALLS] [...", cut inside its last item) was cut in;
// none where one of them is not a call.
std::vector<ChatToolCall> mistral_whole_items(std::string_view markup) {
  const std::size_t mark = markup.find(kMistralMark);
  if (mark == kNone) return {};
  const std::string raw = trim(markup.substr(mark + kMistralMark.size()));
  std::vector<ChatToolCall> calls;
  if (raw.empty() || raw.front() != '[') return {};
  for (std::size_t at = skip_space(raw, 1); at < raw.size();) {
    const std::size_t end = value_end(raw, at);
    if (end >= raw.size()) break;  // the item the answer was cut in
    const std::string item = trim(std::string_view(raw).substr(at, end - at));
    ChatToolCall call;
    if (!call_from(parse_json(item), item, &call)) return {};
    calls.push_back(std::move(call));
    at = skip_space(raw, end);
    if (at < raw.size() && raw[at] == ',') at = skip_space(raw, at + 1);
  }
  return calls;
}

// Reads `text`, which max_tokens cut: a call cut after its name began as parse_tool_calls (CutToolCall::kCall)
// reads it; call markup at the content's end (a call cut before its name began, a mark's start) taken out.
void read_cut(std::string_view text, const AnswerCallsOptions& o, AnswerCalls* a) {
  ToolCallParse& all = a->read;
  all = parse_tool_calls(text, o.format, CutToolCall::kCall);
  if (o.format == ToolCallFormat::kLlama3 && !o.forced && keep_llama3_json(text, o, &all)) return;
  if (all.cut) return;
  const bool marked = !tool_call_trigger(o.format).empty();
  const bool began_as_call = o.calls_or_json && begins_as_call(text, o.format);
  if (o.calls_or_json && marked && !began_as_call && !o.forced) return;  // the JSON answer: no call markup in it
  // Calls from the first byte: what is not a call is the call the answer was cut in, begun or inside its mark.
  const HalfMarkup half = o.forced || began_as_call ? HalfMarkup{all.content.empty() ? kNone : 0, true}
                                                    : half_markup(text, all.content, o.format, !all.calls.empty());
  if (half.at == kNone) return;
  a->markup_cut = true;
  const std::string markup = all.content.substr(half.at);
  all.content = trim(std::string_view(all.content).substr(0, half.at));
  all.malformed = false;
  if (!half.call) return;
  ToolCallParse call = parse_tool_calls(markup, o.format, CutToolCall::kForcedCall);
  if (call.calls.empty()) return;
  if (o.format == ToolCallFormat::kMistral) {  // the array was read as one cut call: its whole items first
    for (ChatToolCall& whole : mistral_whole_items(markup)) all.calls.push_back(std::move(whole));
  }
  all.calls.push_back(std::move(call.calls.back()));
  all.cut = call.cut;
  all.cut_name_whole = call.cut_name_whole;
}

}  // namespace

AnswerCalls read_answer_calls(std::string_view text, bool ran_out, const AnswerCallsOptions& options) {
  AnswerCalls a;
  if (ran_out) {
    read_cut(text, options, &a);
  } else {
    a.read = parse_tool_calls(text, options.format, CutToolCall::kContent);
    if (options.format == ToolCallFormat::kLlama3 && !options.forced) keep_llama3_json(text, options, &a.read);
  }
  if (options.one_call && a.read.calls.size() > 1) {  // the first call only
    a.dropped = a.read.calls.size() - 1;
    a.read.calls.resize(1);
    a.read.cut = a.markup_cut = false;  // a cut call is the last one, which went
  }
  a.left_out = settle_cut_name(a.read, options.names);
  return a;
}

}  // namespace orbit
