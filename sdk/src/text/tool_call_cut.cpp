// Reading a tool call cut short (tool_call_cut.h).
#include "text/tool_call_cut.h"

#include <string>

#include "orbit/tool_calls.h"
#include "text/json_spans.h"

namespace orbit::tool_call_cut {

using namespace json_spans;

std::string string_so_far(std::string_view s) {
  const nlohmann::json whole = parse_json(s);
  if (whole.is_string()) return whole.get<std::string>();
  for (std::size_t drop = 0; drop <= 6 && drop < s.size(); ++drop) {  // "\u00e" or 3 bytes of a 4-byte sequence
    const nlohmann::json v = parse_json(std::string(s.substr(0, s.size() - drop)) + "\"");
    if (v.is_string()) return v.get<std::string>();
  }
  return "";
}

std::size_t whole_characters_size(std::string_view s) {
  std::size_t i = s.size(), continuation = 0;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80 && continuation < 3) --i, ++continuation;
  if (i == 0) return s.size();
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const std::size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return lead >= 0xC0 && continuation < need ? i - 1 : s.size();
}

std::string whole_characters(std::string s) {
  s.resize(whole_characters_size(s));
  return s;
}

namespace {

constexpr std::string_view kCallKeys[] = {"name", "arguments", "parameters", "id"};

// Whether `key` (a key cut short where `whole` is false) is, or may still become, a key a call has.
bool call_key(std::string_view key, bool whole) {
  for (std::string_view k : kCallKeys) {
    if (whole ? key == k : k.substr(0, key.size()) == key) return true;
  }
  return false;
}

}  // namespace

void take_member(const std::string& key, std::string_view value, bool followed, CutCall* out, bool* from_arguments) {
  const bool is_string = !value.empty() && value.front() == '"';
  const bool arguments = key == "arguments" || key == "parameters";
  if (!call_key(key, true) || (key == "name" && !is_string) ||
      (arguments && !is_string && !value.empty() && value.front() != '{'))
    out->foreign = true;
  if (key == "name" && is_string) {
    out->call.name = string_so_far(value);
    out->named = !out->call.name.empty();
    out->name_whole = out->named && parse_json(value).is_string();
  } else if (key == "id" && is_string && followed) {
    out->call.id = string_so_far(value);
  } else if (key == "arguments" || (key == "parameters" && !*from_arguments)) {
    // Arguments given as JSON text are that text decoded, less the whitespace between its tokens as a whole
    // call's are (call_from), so that each cut reading is a prefix of the whole one.
    out->call.arguments = is_string ? compact(string_so_far(value)) : whole_characters(compact(value));
    *from_arguments = key == "arguments";
  }
}

std::optional<CutCall> read(std::string_view body) {
  CutCall out;
  out.call.arguments.clear();  // "" until they begin
  std::size_t at = skip_space(body, 0);
  if (at < body.size() && body[at] != '{') return std::nullopt;
  bool from_arguments = false;
  for (at = at + 1; at < body.size();) {
    at = skip_space(body, at);
    if (at < body.size() && body[at] == ',') at = skip_space(body, at + 1);
    if (at >= body.size() || body[at] != '"') break;
    const std::size_t key_end = value_end(body, at);
    if (key_end >= body.size()) {  // cut inside the key
      out.foreign = out.foreign || !call_key(string_so_far(body.substr(at)), false);
      break;
    }
    const std::string key = string_so_far(body.substr(at, key_end - at));
    at = skip_space(body, key_end);
    if (at >= body.size() || body[at] != ':') break;
    at = skip_space(body, at + 1);
    if (at >= body.size()) break;  // cut before the value
    const std::size_t end = value_end(body, at);
    take_member(key, body.substr(at, end - at), end < body.size(), &out, &from_arguments);
    at = end;
  }
  if (out.call.id.empty()) out.call.id = new_tool_call_id();
  return out;
}

}  // namespace orbit::tool_call_cut
