// Strings under pattern and format (schema_regular.h): each format is a regular expression of its syntax
// (RFC 3339 for dates and times, RFC 3986 for URIs and IPv6, RFC 1123 for host names, RFC 4122 for UUIDs,
// RFC 5321's dot-atom for e-mail), made an automaton and intersected with the pattern and the length bounds.
#include <algorithm>
#include <map>
#include <utility>

#include "constrain/regex.h"
#include "constrain/schema_regular.h"
#include "orbit/common/error.h"

namespace orbit::constrain {

namespace {

std::string ipv6_regex(const std::string& ipv4) {
  const std::string h16 = "[0-9A-Fa-f]{1,4}";
  const std::string ls32 = "(?:" + h16 + ":" + h16 + "|" + ipv4 + ")";
  const auto reps = [&](int n) { return "(?:" + h16 + ":){" + std::to_string(n) + "}"; };
  // Up to n groups before the "::".
  const auto head = [&](int n) {
    return n == 0 ? std::string() : "(?:(?:" + h16 + ":){0," + std::to_string(n - 1) + "}" + h16 + ")?";
  };
  std::vector<std::string> alts{reps(6) + ls32,
                                "::" + reps(5) + ls32,
                                head(1) + "::" + reps(4) + ls32,
                                head(2) + "::" + reps(3) + ls32,
                                head(3) + "::" + reps(2) + ls32,
                                head(4) + "::" + h16 + ":" + ls32,
                                head(5) + "::" + ls32,
                                head(6) + "::" + h16,
                                head(7) + "::"};
  std::string out = "(?:";
  for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? "|" : "") + alts[i];
  return out + ")";
}

const std::map<std::string, std::string>& format_regexes() {
  static const std::map<std::string, std::string> k = [] {
    const std::string date =
        "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|[12]"
        "\\d))";
    const std::string time =
        "(?:[01]\\d|2[0-3]):[0-5]\\d:(?:[0-5]\\d|60)(?:\\.\\d+)?(?:[Zz]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
    const std::string days = "(?:\\d+Y(?:\\d+M)?(?:\\d+D)?|\\d+M(?:\\d+D)?|\\d+D)";
    const std::string clock = "T(?:\\d+H(?:\\d+M)?(?:\\d+S)?|\\d+M(?:\\d+S)?|\\d+S)";
    const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    const std::string hostname = label + "(?:\\." + label + ")*";
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    const std::string ipv4 = octet + "(?:\\." + octet + "){3}";
    const std::string hex = "[0-9A-Fa-f]";
    return std::map<std::string, std::string>{
        {"date", date},
        {"time", time},
        {"date-time", date + "[Tt]" + time},
        {"duration", "P(?:" + days + "(?:" + clock + ")?|" + clock + "|\\d+W)"},
        {"email", atom + "(?:\\." + atom + ")*@" + hostname},
        {"hostname", hostname},
        {"ipv4", ipv4},
        {"ipv6", ipv6_regex(ipv4)},
        {"uuid", hex + "{8}-" + hex + "{4}-" + hex + "{4}-" + hex + "{4}-" + hex + "{12}"},
        {"uri", "[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@/?#\\[\\]]|%" + hex + hex + ")*"},
    };
  }();
  return k;
}

// Every string of JSON content: any characters.
ByteDfa any_content(const std::string& what) {
  return regex_dfa("", RegexSyntax::kSearch, RegexText::kJsonString, what);
}

}  // namespace

const std::vector<std::string>& string_formats() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> out;
    for (const auto& [name, regex] : format_regexes()) out.push_back(name);
    return out;
  }();
  return k;
}

namespace {

// The content of a string under `rules`' pattern, format and minLength.
ByteDfa content_dfa(const StringRules& rules, const std::string& path) {
  std::optional<ByteDfa> content;
  if (rules.pattern != nullptr) {
    content = regex_dfa(*rules.pattern, RegexSyntax::kSearch, RegexText::kJsonString, path + ".pattern");
  }
  // A format this list lacks beside a pattern names what the pattern says: zod writes each of its string
  // checks so (startsWith as {"format": "starts_with", "pattern": "^ab.*"}, cuid, nanoid, e164, ...), and the
  // pattern alone serves it. Alone, it would constrain nothing: refused.
  const auto found = rules.format != nullptr ? format_regexes().find(*rules.format) : format_regexes().end();
  if (rules.format != nullptr && found == format_regexes().end() && rules.pattern == nullptr) {
    std::string names;
    for (const std::string& f : string_formats()) names += (names.empty() ? "" : ", ") + f;
    ORBIT_FAIL(path << ".format: \"" << *rules.format << "\" is not supported (supported: " << names
                    << "; another format is served beside a pattern, by the pattern)");
  }
  if (found != format_regexes().end()) {
    ByteDfa f = regex_dfa(found->second, RegexSyntax::kAnchored, RegexText::kJsonString, path + ".format");
    content = content ? intersect(*content, f, path + ": pattern and format together") : std::move(f);
  }
  if (!content) content = any_content(path);
  if (rules.min_chars > 0) content = with_min_chars(*content, rules.min_chars, path + ".minLength");
  return std::move(*content);
}

// String content with a \u escape's hex digits in lowercase only: the regular expressions write a control
// character's \u00XX in either case (regex.h), json_quote() in lowercase.
ByteDfa lowercase_escapes(const std::string& what) {
  ByteNfa nfa;
  const int32_t body = nfa.add();
  const int32_t escape = nfa.add(true);
  std::vector<int32_t> hex{nfa.add(true), nfa.add(true), nfa.add(true), nfa.add(true)};
  nfa.start = nfa.accept = body;
  nfa.edge(body, 0x00, '\\' - 1, body);
  nfa.edge(body, '\\', '\\', escape);
  nfa.edge(body, '\\' + 1, 0xFF, body);
  nfa.edge(escape, 0x00, 'u' - 1, body);
  nfa.edge(escape, 'u', 'u', hex[0]);
  nfa.edge(escape, 'u' + 1, 0xFF, body);
  for (std::size_t k = 0; k < hex.size(); ++k) {
    const int32_t to = k + 1 < hex.size() ? hex[k + 1] : body;
    nfa.edge(hex[k], 0x00, 'A' - 1, to);
    nfa.edge(hex[k], 'F' + 1, 0xFF, to);
  }
  return determinize(nfa, what);
}

}  // namespace

int32_t add_string_dfa(Grammar& g, const StringRules& rules, const std::string& path) {
  return add_dfa(g, quoted(content_dfa(rules, path), path), rules.max_chars, path);
}

ByteDfa canonical_string_dfa(const StringRules& rules, const std::string& path) {
  return quoted(intersect(content_dfa(rules, path), lowercase_escapes(path), path), path);
}

}  // namespace orbit::constrain
