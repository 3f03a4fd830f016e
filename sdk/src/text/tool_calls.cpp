// Reading tool calls back from a model's text (orbit/tool_calls.h).
#include "orbit/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/error.h"

namespace orbit {

using nlohmann::json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMark = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
// JSON nesting accepted in a call's arguments (deeper is malformed, never a crash).
constexpr int kMaxDepth = 64;

std::string trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

// Where each character of a JSON text falls, read one at a time: between tokens, or a string's opening quote,
// inside, or closing quote.
class JsonScan {
 public:
  enum class At { kOutside, kOpen, kInside, kClose };
  At step(char c) {
    if (!in_string_) {
      in_string_ = c == '"';
      return in_string_ ? At::kOpen : At::kOutside;
    }
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
      return At::kClose;
    }
    return At::kInside;
  }

 private:
  bool in_string_ = false, escaped_ = false;
};

bool too_deep(std::string_view text) {
  int depth = 0;
  JsonScan scan;
  for (char c : text) {
    if (scan.step(c) != JsonScan::At::kOutside) continue;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (depth > kMaxDepth) return true;
  }
  return false;
}

// `text` as JSON, or null (discarded) when it is not JSON or nests too deeply.
json parse_json(std::string_view text) {
  if (too_deep(text)) return json(json::value_t::discarded);
  return json::parse(text.begin(), text.end(), nullptr, false);
}

// JSON text that parse_json accepted, read as written: spans of its values, never converted, so that numbers
// of any length (json holds at most 64-bit integers and doubles) and escapes stay as the model wrote them.
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::size_t skip_space(std::string_view t, std::size_t at) {
  while (at < t.size() && is_space(t[at])) ++at;
  return at;
}

// One past the end of the value (or object key) that starts at `at`.
std::size_t value_end(std::string_view t, std::size_t at) {
  int depth = 0;
  JsonScan scan;
  for (; at < t.size(); ++at) {
    const char c = t[at];
    const JsonScan::At where = scan.step(c);
    if (where == JsonScan::At::kClose && depth == 0) return at + 1;
    if (where != JsonScan::At::kOutside) continue;
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) return depth == 0 ? at + 1 : at;
    } else if (depth == 0 && (c == ',' || is_space(c))) {
      return at;
    }
  }
  return at;
}

// The members of the object or the items of the array `t` as written: (the key with its quotes, "" for an
// item; the value).
std::vector<std::pair<std::string_view, std::string_view>> raw_children(std::string_view t) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  std::size_t at = skip_space(t, 0);
  if (at >= t.size() || (t[at] != '{' && t[at] != '[')) return out;
  const bool object = t[at] == '{';
  at = skip_space(t, at + 1);
  while (at < t.size() && t[at] != '}' && t[at] != ']') {
    std::string_view key;
    if (object) {
      const std::size_t key_end = value_end(t, at);
      key = t.substr(at, key_end - at);
      at = skip_space(t, skip_space(t, key_end) + 1);  // past the ':'
    }
    const std::size_t end = value_end(t, at);
    out.emplace_back(key, t.substr(at, end - at));
    at = skip_space(t, end);
    if (at < t.size() && t[at] == ',') at = skip_space(t, at + 1);
  }
  return out;
}

// `raw` without the whitespace between its tokens (as json::dump() writes), each token as written.
std::string compact(std::string_view raw) {
  std::string out;
  JsonScan scan;
  for (char c : raw) {
    if (scan.step(c) == JsonScan::At::kOutside && is_space(c)) continue;
    out += c;
  }
  return out;
}

// One call from {"name": ..., "arguments" | "parameters": {...}, "id"?} (`raw`: that object as written); false
// when it is not one. The arguments are kept as written, less the whitespace between tokens.
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

ToolCallParse parse_hermes(std::string_view text) {
  ToolCallParse r;
  std::string content;
  std::size_t at = 0;
  while (true) {
    const std::size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    const std::size_t body = open + kHermesOpen.size();
    const std::size_t close = text.find(kHermesClose, body);
    ChatToolCall call;
    const std::string raw = close == std::string_view::npos ? "" : trim(text.substr(body, close - body));
    if (close == std::string_view::npos || !call_from(parse_json(raw), raw, &call)) {
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

ToolCallParse parse_llama3(std::string_view text) {
  ToolCallParse r;
  std::string body = trim(text);
  std::string_view rest(body);
  if (rest.substr(0, kPythonTag.size()) == kPythonTag) rest.remove_prefix(kPythonTag.size());
  const std::string json_text = trim(rest);
  if (json_text.empty() || json_text.front() != '{') {
    r.content = body;
    return r;
  }
  // One object, or several separated by ";".
  std::vector<std::string> pieces;
  json whole = parse_json(json_text);
  if (!whole.is_discarded()) {
    pieces.push_back(json_text);
  } else {
    std::size_t start = 0;
    for (std::size_t i = 0; i <= json_text.size(); ++i) {
      if (i == json_text.size() || json_text[i] == ';') {
        pieces.push_back(trim(std::string_view(json_text).substr(start, i - start)));
        start = i + 1;
      }
    }
  }
  std::vector<ChatToolCall> calls;
  for (const std::string& piece : pieces) {
    ChatToolCall call;
    if (!call_from(parse_json(piece), piece, &call)) {
      r.malformed = true;
      r.content = body;
      return r;
    }
    calls.push_back(std::move(call));
  }
  r.calls = std::move(calls);
  return r;
}

ToolCallParse parse_mistral(std::string_view text) {
  ToolCallParse r;
  const std::size_t mark = text.find(kMistralMark);
  if (mark == std::string_view::npos) {
    r.content = trim(text);
    return r;
  }
  const std::string raw = trim(text.substr(mark + kMistralMark.size()));
  const json v = parse_json(raw);
  const auto items = raw_children(raw);
  std::vector<ChatToolCall> calls;
  bool ok = v.is_array() && !v.empty() && items.size() == v.size();
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ChatToolCall call;
    ok = call_from(v[i], items[i].second, &call);
    calls.push_back(std::move(call));
  }
  if (!ok) {
    r.malformed = true;
    r.content = trim(text);
    return r;
  }
  r.content = trim(text.substr(0, mark));
  r.calls = std::move(calls);
  return r;
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
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

ToolCallParse parse_tool_calls(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return parse_hermes(text);
    case ToolCallFormat::kLlama3: return parse_llama3(text);
    case ToolCallFormat::kMistral: return parse_mistral(text);
  }
  return {};
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
