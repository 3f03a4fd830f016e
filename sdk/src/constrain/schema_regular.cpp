// Strings under pattern and format (schema_regular.h): each format is a regular expression of its syntax
// (RFC 3339 for dates and times, RFC 3986 for URIs and IPv6, RFC 1123 for host names, RFC 4122 for UUIDs,
// RFC 5321's dot-atom at a domain of two labels or more for e-mail, RFC 4648 for base64 and base64url,
// RFC 7519 for JWTs), made an automaton and intersected with the pattern and the length bounds. (zod's emoji
// is not among them: it is a string of Unicode's Extended_Pictographic and Emoji_Component characters,
// properties this tree has no table of.)
#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "constrain/dfa_memo.h"
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

// RFC 4648's encodings in their canonical form (§3.5: the pad bits of a last partial group are zero, so each
// byte string has one spelling): `alphabet` a character class of the 64 digits, padded with '=' or not. A
// last group of two digits holds one byte (the second digit's low four bits zero: A Q g w), of three digits
// two bytes (the third digit's low two bits zero).
std::string base64_regex(const std::string& alphabet, bool padded) {
  const std::string one = alphabet + "[AQgw]" + (padded ? "==" : "");
  const std::string two = alphabet + "{2}[AEIMQUYcgkosw048]" + (padded ? "=" : "");
  return "(?:" + alphabet + "{4})*(?:" + one + "|" + two + ")?";
}

// The unpadded base64url spelling of `bytes` (RFC 4648 §5).
std::string base64url(const std::string& bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = 0;
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    for (std::size_t k = 0; k < 3; ++k) group = group << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k <= n; ++k) out += kDigits[(group >> (18 - 6 * k)) & 63];
  }
  return out;
}

// A JWT (RFC 7519) in the JWS compact serialization zod checks: three base64url parts joined by dots, the
// first a JOSE header that names its algorithm ("alg") and, when it says "typ", says JWT. The headers of
// every JSON text are not a regular language; these are its common forms: {"alg":A,"typ":"JWT"},
// {"typ":"JWT","alg":A} and {"alg":A}, A one of JWA's (RFC 7518) signing algorithms, as compact JSON. Only
// encodings without '-' or '_' are kept: zod reads the header with atob, which takes the base64 alphabet
// only. The payload is a non-empty base64url text; the signature may be empty (an unsecured JWS).
std::string jwt_regex(const std::string& b64url) {
  std::string headers;
  for (const char* alg : {"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256",
                          "PS384", "PS512", "EdDSA"}) {
    const std::string a = std::string("\"alg\":\"") + alg + "\"";
    for (const std::string& json : {"{" + a + ",\"typ\":\"JWT\"}", "{\"typ\":\"JWT\"," + a + "}", "{" + a + "}"}) {
      const std::string header = base64url(json);
      if (header.find_first_of("-_") == std::string::npos) headers += (headers.empty() ? "" : "|") + header;
    }
  }
  const std::string digit = "[A-Za-z0-9_\\-]";
  const std::string payload =
      "(?:" + digit + "{4})*(?:" + digit + "{4}|" + digit + "[AQgw]|" + digit + "{2}[AEIMQUYcgkosw048])";
  return "(?:" + headers + ")\\." + payload + "\\." + b64url;
}

// Two digits of `n`.
std::string two(int n) { return std::string(1, static_cast<char>('0' + n / 10)) + static_cast<char>('0' + n % 10); }

// RFC 3339's time (5.6) with its leap second (5.7): second 60 only where the time is 23:59 UTC, at the local
// time its offset shifts that to (23:59:60Z, 05:29:60+05:30, 15:59:60-08:00), as ajv-formats' full mode
// checks it. Two lookaheads over the time that follows tie a leap second's local hour and minute to its
// offset: the hour one to the offset's hours (and to whether its minutes carry one into the hour), the minute
// one to the offset's minutes. Where ajv-formats' arithmetic also takes an hour past 23 or a minute past 59
// before a leap second (24:59:60+01:00, 23:89:60+00:30), RFC 3339's grammar does not, and neither does this.
std::string time_regex() {
  const std::string leap = ":60[.\\d]*";  // the seconds and any fraction, which the time itself spells out
  std::string hours = "23:\\d\\d" + leap + "[Zz]";
  std::string minutes = "\\d\\d:59" + leap + "(?:[Zz]|\\+\\d\\d:00)";
  for (int h = 0; h < 24; ++h) {
    // Ahead of UTC by h:00 (local hour h-1), by h:mm with mm >= 1 (local hour h, as the minutes carry one);
    // behind it by h:mm, any mm (local hour 23-h).
    hours += "|" + two((h + 23) % 24) + ":\\d\\d" + leap + "\\+" + two(h) + ":00";
    hours += "|" + two(h) + ":\\d\\d" + leap + "\\+" + two(h) + ":(?:0[1-9]|[1-5]\\d)";
    hours += "|" + two(23 - h) + ":\\d\\d" + leap + "-" + two(h) + ":\\d\\d";
  }
  for (int m = 0; m < 60; ++m) {
    if (m > 0) minutes += "|\\d\\d:" + two(m - 1) + leap + "\\+\\d\\d:" + two(m);
    minutes += "|\\d\\d:" + two(59 - m) + leap + "-\\d\\d:" + two(m);
  }
  const std::string hour = "(?:[01]\\d|2[0-3])";
  const std::string offset = "(?:[Zz]|[+-]" + hour + ":[0-5]\\d)";
  return "(?:" + hour + ":[0-5]\\d:[0-5]\\d(?:\\.\\d+)?" + offset + "|(?=" + hours + ")(?=" + minutes + ")" + hour +
         ":[0-5]\\d:60(?:\\.\\d+)?" + offset + ")";
}

const std::map<std::string, std::string>& format_regexes() {
  static const std::map<std::string, std::string> k = [] {
    // February 29th only in leap years (RFC 3339 5.7, Appendix C): a year divisible by 4 and not by 100
    // (its last two digits a multiple of 4 but 00), or by 400 (its first two a multiple of 4, then 00).
    const std::string leap_year = "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
    const std::string date =
        "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1"
        "\\d|2[0-8]))|" +
        leap_year + "-02-29)";
    const std::string time = time_regex();
    const std::string days = "(?:\\d+Y(?:\\d+M)?(?:\\d+D)?|\\d+M(?:\\d+D)?|\\d+D)";
    const std::string clock = "T(?:\\d+H(?:\\d+M)?(?:\\d+S)?|\\d+M(?:\\d+S)?|\\d+S)";
    const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    const std::string hostname = label + "(?:\\." + label + ")*";
    // E-mail as ajv-formats' (and regular-expressions.info's) common regex writes it: RFC 5321's dot-atom,
    // '@', a domain of two labels or more (a bare "a@b" is refused), each label here of 1 to 63 characters.
    // Quoted local parts and address literals (a@[192.0.2.1]) are not written. The local part holds at most
    // 64 characters (RFC 5321 4.5.3.1.1), a lookahead over what comes before the '@'; the whole at most 254
    // (cap_format_chars).
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    const std::string ipv4 = octet + "(?:\\." + octet + "){3}";
    const std::string v4_prefix = "(?:/(?:3[0-2]|[12]?\\d))?";
    const std::string v6_prefix = "(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?";
    const std::string hex = "[0-9A-Fa-f]";
    const std::string b64url = base64_regex("[A-Za-z0-9_\\-]", false);
    return std::map<std::string, std::string>{
        {"base64", base64_regex("[A-Za-z0-9+/]", true)},
        {"base64url", b64url},
        {"byte", base64_regex("[A-Za-z0-9+/]", true)},  // OpenAPI's name for base64
        {"jwt", jwt_regex(b64url)},
        {"date", date},
        {"time", time},
        {"date-time", date + "[Tt]" + time},
        {"duration", "P(?:" + days + "(?:" + clock + ")?|" + clock + "|\\d+W)"},
        {"email", "(?=[^@]{1,64}@)" + atom + "(?:\\." + atom + ")*@" + label + "(?:\\." + label + ")+"},
        {"hostname", hostname},
        {"ipv4", ipv4},
        {"ipv6", ipv6_regex(ipv4)},
        // Pydantic's: IPvAnyAddress, and IPv4Interface / IPv6Interface / IPvAnyInterface (an address, then
        // optionally '/' and a prefix length; the netmask form is not written).
        {"ipvanyaddress", "(?:" + ipv4 + "|" + ipv6_regex(ipv4) + ")"},
        {"ipv4interface", ipv4 + v4_prefix},
        {"ipv6interface", ipv6_regex(ipv4) + v6_prefix},
        {"ipvanyinterface", "(?:" + ipv4 + v4_prefix + "|" + ipv6_regex(ipv4) + v6_prefix + ")"},
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

namespace {

// Formats that admit any string: OpenAPI's binary (any octets) and password (a hint to UIs to hide the input), and
// Pydantic's path (a pathlib.Path: any text names one).
bool any_string_format(const std::string& name) { return name == "binary" || name == "password" || name == "path"; }

}  // namespace

const std::vector<std::string>& string_formats() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> out{"binary", "password", "path"};
    for (const auto& [name, regex] : format_regexes()) out.push_back(name);
    std::sort(out.begin(), out.end());
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
  const bool any = rules.format != nullptr && any_string_format(*rules.format);
  const NumberFormat* digits = rules.format != nullptr ? number_format_named(*rules.format) : nullptr;
  if (digits != nullptr && !digits->integer) digits = nullptr;
  if (rules.format != nullptr && found == format_regexes().end() && rules.pattern == nullptr && !any &&
      digits == nullptr) {
    std::string names;
    for (const std::string& f : string_formats()) names += (names.empty() ? "" : ", ") + f;
    ORBIT_FAIL(path << ".format: \"" << *rules.format << "\" is not supported (supported: " << names
                    << "; another format is served beside a pattern, by the pattern)");
  }
  if (found != format_regexes().end() || digits != nullptr) {
    ByteDfa f = digits != nullptr
                    ? integer_text_dfa(*digits, path + ".format")
                    : regex_dfa(found->second, RegexSyntax::kAnchored, RegexText::kJsonString, path + ".format");
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

void cap_format_chars(StringRules& rules, const std::string& path) {
  struct Cap {
    const char* format;
    int64_t chars;
    const char* holder;
  };
  static const Cap kCaps[] = {{"hostname", 253, "a hostname"}, {"email", 254, "an e-mail address"}};
  if (rules.format == nullptr) return;
  for (const Cap& cap : kCaps) {
    if (*rules.format != cap.format) continue;
    ORBIT_CHECK(rules.min_chars <= cap.chars, path << ".minLength: " << rules.min_chars << " is over the " << cap.chars
                                                   << " characters " << cap.holder << " holds");
    rules.max_chars = std::min(rules.max_chars, cap.chars);
  }
}

int32_t add_string_dfa(Grammar& g, const StringRules& rules, const std::string& path) {
  check_dfa_room(g, path);
  const auto part = [](const std::string* text) { return text ? memo_part(*text) : std::string("-"); };
  const std::string key =
      "string|" + part(rules.pattern) + "|" + part(rules.format) + "|" + std::to_string(rules.min_chars);
  std::shared_ptr<const ByteDfa> dfa = memo_dfa(key, [&] {
    ByteDfa d = quoted(content_dfa(rules, path), path);
    count_ahead(d);
    return d;
  });
  return add_dfa(g, std::move(dfa), rules.max_chars, path);
}

ByteDfa canonical_string_dfa(const StringRules& rules, const std::string& path) {
  return quoted(intersect(content_dfa(rules, path), lowercase_escapes(path), path), path);
}

}  // namespace orbit::constrain
