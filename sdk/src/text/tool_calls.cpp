// Reading tool calls back from a model's text (orbit/tool_calls.h).
#include "orbit/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "text/json_spans.h"
#include "text/tool_call_cut.h"
#include "text/tool_call_parts.h"

namespace orbit {

using nlohmann::json;
using namespace json_spans;

namespace tool_call_parts {

bool call_from(const json& v, std::string_view raw, ChatToolCall* call) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string() || v["name"].get<std::string>().empty())
    return false;
  const char* field = v.contains("arguments") ? "arguments" : "parameters";
  json args = v.contains(field) ? v[field] : json::object();
  std::string written;     // "": as json holds them (no field, or a key written with escapes)
  if (args.is_string()) {  // arguments given as JSON text
    written = args.get<std::string>();
    args = parse_json(written);
  } else {
    for (const auto& [key, value] : raw_children(raw)) {
      if (key == "\"" + std::string(field) + "\"") written = std::string(value);  // the last one, as json keeps
    }
  }
  if (!args.is_object()) return false;
  call->name = v["name"].get<std::string>();
  call->arguments = written.empty() ? args.dump() : compact(written);
  call->id = v.contains("id") && v["id"].is_string() && !v["id"].get<std::string>().empty() ? v["id"].get<std::string>()
                                                                                            : new_tool_call_id();
  return true;
}

}  // namespace tool_call_parts

using namespace tool_call_parts;

namespace tool_call_parts {

std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool cut_call_from(const std::string& raw, ChatToolCall* call, ToolCallParse* r) {
  // A text cut short is no JSON value: it is read as cut without parsing it whole (what a streamed answer's
  // call is after every token but its last).
  const bool short_of_value = !raw.empty() && cut_short(raw);
  if (!short_of_value && call_from(parse_json(raw), raw, call)) {
    r->cut = false;  // whole, only what came after it was cut
    r->cut_name_whole = false;
    return true;
  }
  if (!raw.empty() && !short_of_value) return false;
  std::optional<tool_call_cut::CutCall> c = tool_call_cut::read(raw);
  if (!c || !c->named) return false;
  *call = std::move(c->call);
  r->cut = true;
  r->cut_name_whole = c->name_whole;
  return true;
}

std::size_t hermes_close(std::string_view text, std::size_t body, ChatToolCall* call) {
  for (std::size_t close = text.find(kHermesClose, body); close != std::string_view::npos;
       close = text.find(kHermesClose, close + 1)) {
    const std::string raw = trim(text.substr(body, close - body));
    if (call_from(parse_json(raw), raw, call)) return close;
  }
  return std::string_view::npos;
}

ToolCallParse parse_hermes(std::string_view text, CutToolCall cut) {
  ToolCallParse r;
  std::string content;
  std::size_t at = 0;
  while (true) {
    const std::size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    const std::size_t body = open + kHermesOpen.size();
    ChatToolCall call;
    const std::size_t close = hermes_close(text, body, &call);
    if (close == std::string_view::npos && cut == CutToolCall::kCall) {
      std::string_view rest = text.substr(body);
      rest.remove_suffix(partial_marker(rest, kHermesClose));
      if (cut_call_from(trim(rest), &call, &r)) {
        content += text.substr(at, open - at);
        r.calls.push_back(std::move(call));
        at = text.size();
        break;
      }
    }
    if (close == std::string_view::npos) {
      r.malformed = true;  // cut, or not a call: the rest stays content
      break;
    }
    content += text.substr(at, open - at);
    r.calls.push_back(std::move(call));
    at = close + kHermesClose.size();
  }
  content += text.substr(at);
  r.content = trim(content);
  return r;
}

std::size_t llama3_separator(std::string_view json_text, std::size_t from) {
  return SeparatorScan(from).find(json_text);
}

std::size_t SeparatorScan::find(std::string_view text) {
  for (; at_ < text.size(); ++at_) {
    const char c = text[at_];
    if (c == '\0' && nul_ == std::string_view::npos) nul_ = at_;
    if (scan_.step(c) != JsonScan::At::kOutside) continue;
    if (c == '{' || c == '[') ++depth_;
    if (c == '}' || c == ']') --depth_;
    if (depth_ == 0 && c == ';') return at_;  // not stepped past: asked again, the same answer
  }
  return std::string_view::npos;
}

}  // namespace tool_call_parts

namespace {

// Llama 3's calls: one JSON object (whole, or cut short where `cut` reads cut calls), or several separated by
// ";" (between them: one inside a string, or nested, is the arguments').
std::vector<std::string> llama3_pieces(const std::string& json_text, CutToolCall cut) {
  // (A text cut short is no JSON value: asked first, it spares a streamed call's text a whole parse per token.)
  if (cut == CutToolCall::kCall && cut_short(json_text)) return {json_text};
  if (!parse_json(json_text).is_discarded()) return {json_text};
  std::vector<std::string> pieces;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(llama3_separator(json_text, start), json_text.size());
    pieces.push_back(trim(std::string_view(json_text).substr(start, end - start)));
    if (end == json_text.size()) return pieces;
    start = end + 1;
  }
}

ToolCallParse parse_llama3(std::string_view text, CutToolCall cut) {
  ToolCallParse r;
  std::string body = trim(text);
  std::string_view rest(body);
  if (rest.substr(0, kPythonTag.size()) == kPythonTag) rest.remove_prefix(kPythonTag.size());
  const std::string json_text = trim(rest);
  if (json_text.empty() || json_text.front() != '{') {
    r.content = body;
    return r;
  }
  std::vector<std::string> pieces = llama3_pieces(json_text, cut);
  if (cut == CutToolCall::kCall && pieces.size() > 1 && pieces.back().empty()) pieces.pop_back();  // cut at "; "
  std::vector<ChatToolCall> calls;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    ChatToolCall call;
    const bool last_cut = cut == CutToolCall::kCall && i + 1 == pieces.size();
    if (last_cut ? !cut_call_from(pieces[i], &call, &r) : !call_from(parse_json(pieces[i]), pieces[i], &call)) {
      r.malformed = true;
      r.cut = r.cut_name_whole = false;
      // A text cut after whole calls, in one whose name had not begun: those calls, the rest content (as
      // Hermes' cut text keeps its whole calls). Otherwise all of it is content.
      r.content = last_cut && i > 0 ? pieces[i] : body;
      if (last_cut && i > 0) r.calls = std::move(calls);
      return r;
    }
    calls.push_back(std::move(call));
  }
  r.calls = std::move(calls);
  return r;
}

// Mistral's array of calls cut short after `[`: its whole items, then the one it ended in.
bool mistral_cut(const std::string& raw, std::vector<ChatToolCall>* calls, ToolCallParse* r) {
  if (raw.empty() || raw.front() != '[' || !cut_short(raw)) return false;
  for (std::size_t at = skip_space(raw, 1); at < raw.size();) {
    const std::size_t end = value_end(raw, at);
    const std::string item = trim(std::string_view(raw).substr(at, end - at));
    ChatToolCall call;
    if (end < raw.size() ? !call_from(parse_json(item), item, &call) : !cut_call_from(item, &call, r)) {
      return false;
    }
    calls->push_back(std::move(call));
    at = skip_space(raw, end);
    if (at < raw.size() && raw[at] == ',') at = skip_space(raw, at + 1);
  }
  return !calls->empty();
}

ToolCallParse parse_mistral(std::string_view text, CutToolCall cut) {
  ToolCallParse r;
  const std::size_t mark = text.find(kMistralMark);
  if (mark == std::string_view::npos) {
    r.content = trim(text);
    return r;
  }
  const std::string raw = trim(text.substr(mark + kMistralMark.size()));
  const json v = parse_json(raw);
  const auto items = v.is_array() ? raw_children(raw) : decltype(raw_children(raw)){};
  std::vector<ChatToolCall> calls;
  bool ok = v.is_array() && !v.empty() && items.size() == v.size();
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ChatToolCall call;
    ok = call_from(v[i], items[i].second, &call);
    calls.push_back(std::move(call));
  }
  if (!ok && cut == CutToolCall::kCall) {
    calls.clear();
    ok = mistral_cut(raw, &calls, &r);
  }
  if (!ok) {
    r.malformed = true;
    r.cut = r.cut_name_whole = false;
    r.content = trim(text);
    return r;
  }
  r.content = trim(text.substr(0, mark));
  r.calls = std::move(calls);
  return r;
}

std::size_t marker_free_prefix(std::string_view text, std::string_view marker) {
  const std::size_t at = text.find(marker);
  if (at != std::string_view::npos) return at;
  return text.size() - partial_marker(text, marker);
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) noexcept {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

ToolCallFormat parse_tool_call_format(std::string_view name, std::string_view what) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral}) {
    if (name == tool_call_format_name(f)) return f;
  }
  ORBIT_FAIL(what << ": '" << name << "' is not a tool call format (known: hermes, llama3, mistral)");
}

namespace {

ToolCallParse parse_format(std::string_view text, ToolCallFormat format, CutToolCall cut) {
  switch (format) {
    case ToolCallFormat::kHermes: return parse_hermes(text, cut);
    case ToolCallFormat::kLlama3: return parse_llama3(text, cut);
    case ToolCallFormat::kMistral: return parse_mistral(text, cut);
  }
  return {};
}

}  // namespace

ToolCallParse parse_tool_calls(std::string_view text, ToolCallFormat format, CutToolCall cut) {
  if (cut != CutToolCall::kForcedCall) return parse_format(text, format, cut);
  ToolCallParse r = parse_format(text, format, CutToolCall::kCall);
  if (!r.calls.empty() || trim(text).empty()) return r;
  // A forced call that ran out before its name began: the call so far has no name and no arguments yet.
  ChatToolCall call;
  call.id = new_tool_call_id();
  call.arguments.clear();
  r.calls.push_back(std::move(call));
  r.content.clear();
  r.malformed = false;
  r.cut = true;
  return r;
}

std::size_t tool_call_free_prefix(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return marker_free_prefix(text, kHermesOpen);
    case ToolCallFormat::kMistral: return marker_free_prefix(text, kMistralMark);
    case ToolCallFormat::kLlama3: {
      // A JSON call is the whole answer: once the answer starts with "{" or the python tag (after spaces),
      // it may be a call.
      const std::size_t first = text.find_first_not_of(" \n\t\r");
      if (first == std::string_view::npos) return 0;
      const std::string_view rest = text.substr(first);
      if (rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag ||
          kPythonTag.substr(0, rest.size()) == rest)
        return 0;
      return text.size();
    }
  }
  return text.size();
}

ToolCallOptions tool_call_options(ToolCallFormat format, std::string only, int32_t max_calls) {
  ORBIT_CHECK(max_calls >= 1, "tool_call_options: max_calls = " << max_calls << " must be >= 1");
  ToolCallOptions o;
  o.only = std::move(only);
  o.max_calls = max_calls;
  switch (format) {
    case ToolCallFormat::kHermes: break;  // <tool_call>{"name": ..., "arguments": ...}</tool_call>, the defaults
    case ToolCallFormat::kLlama3:
      o.begin = o.end = "";
      o.arguments_key = "parameters";
      o.separator = "; ";
      break;
    case ToolCallFormat::kMistral:
      o.begin = std::string(kMistralMark) + " [";
      o.end = "]";
      o.max_calls = 1;  // one array per answer
      break;
  }
  return o;
}

std::string tool_call_trigger(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return ToolCallOptions().begin;
    case ToolCallFormat::kLlama3: return "";
    case ToolCallFormat::kMistral: return std::string(kMistralMark);
  }
  return "";
}

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace orbit
