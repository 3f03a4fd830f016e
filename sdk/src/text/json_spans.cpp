// JSON text read as written (json_spans.h).
#include "text/json_spans.h"

#include "orbit/common/json_input.h"

namespace orbit::json_spans {

using nlohmann::json;

JsonScan::At JsonScan::step(char c) {
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

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::size_t skip_space(std::string_view t, std::size_t at) {
  while (at < t.size() && is_space(t[at])) ++at;
  return at;
}

namespace {

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

}  // namespace

json parse_json(std::string_view text) {
  if (too_deep(text)) return json(json::value_t::discarded);
  return json::parse(text.begin(), text.end(), nullptr, false);
}

namespace {

// Reads a JSON text for where the parser first failed, if it did (never throws: a number past double's range
// is a failure here, not an exception).
struct FailureAt : JsonSaxWalk {
  std::size_t at = 0;  // 0: none; else the parser's position at the failure (1-based)
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    at = e.id == 101 ? position : std::string::npos;  // 101: a syntax error; others (a number's range) never cut
    return false;
  }
};

}  // namespace

bool cut_short(std::string_view text) {
  if (text.empty() || too_deep(text)) return false;
  FailureAt failure;
  json::sax_parse(text.begin(), text.end(), &failure);
  return failure.at == text.size() + 1;  // the parser wanted a byte past the end: everything before it was JSON
}

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
      at = skip_space(t, key_end) + 1;  // past the ':'
      if (at >= t.size()) break;        // not a complete object: no more members
      at = skip_space(t, at);
    }
    const std::size_t end = value_end(t, at);
    out.emplace_back(key, t.substr(at, end - at));
    at = skip_space(t, end);
    if (at < t.size() && t[at] == ',') at = skip_space(t, at + 1);
  }
  return out;
}

std::string compact(std::string_view raw) {
  std::string out;
  JsonScan scan;
  for (char c : raw) {
    if (scan.step(c) == JsonScan::At::kOutside && is_space(c)) continue;
    out += c;
  }
  return out;
}

}  // namespace orbit::json_spans
