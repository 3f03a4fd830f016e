// Numbers under minimum, maximum, exclusiveMinimum, exclusiveMaximum and multipleOf (schema_regular.h).
// Each bound is a regular language of decimal texts, written as a regular expression over digit strings
// (so no bound overflows anything): a magnitude above c is either a longer or larger integer part, or c's
// integer part and a fraction that compares digit by digit. multipleOf is an automaton of remainders.
// The languages are intersected; numbers are written without exponent.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>
#include <utility>

#include "constrain/dfa_memo.h"
#include "constrain/regex.h"
#include "constrain/schema_regular.h"
#include "orbit/common/error.h"

namespace orbit::constrain {

namespace {

// A decimal as digit strings: the integer part without leading zeros ("0" for none), the fraction without
// trailing zeros.
struct Decimal {
  bool negative = false;
  std::string whole = "0";
  std::string fraction;
  bool zero() const { return whole == "0" && fraction.empty(); }
};

// A JSON number's text (as nlohmann writes it, exponent included) as a Decimal.
Decimal parse_decimal(const std::string& text, const std::string& what) {
  std::size_t i = 0;
  Decimal d;
  if (i < text.size() && text[i] == '-') d.negative = true, ++i;
  std::string digits;
  long point = -1;
  long exponent = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == '.' && point < 0) {
      point = static_cast<long>(digits.size());
    } else if (c == 'e' || c == 'E') {
      exponent = std::stol(text.substr(i + 1));
      break;
    } else {
      ORBIT_FAIL(what << ": expected a number, not " << text);
    }
  }
  ORBIT_CHECK(!digits.empty() && exponent > -400 && exponent < 400, what << ": expected a number, not " << text);
  long at = (point < 0 ? static_cast<long>(digits.size()) : point) + exponent;
  if (at < 0) digits.insert(0, static_cast<std::size_t>(-at), '0'), at = 0;
  if (at > static_cast<long>(digits.size())) digits.append(static_cast<std::size_t>(at) - digits.size(), '0');
  d.whole = digits.substr(0, static_cast<std::size_t>(at));
  d.fraction = digits.substr(static_cast<std::size_t>(at));
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size()));
  if (d.whole.empty()) d.whole = "0";
  d.fraction.erase(d.fraction.find_last_not_of('0') + 1);
  if (d.zero()) d.negative = false;
  return d;
}

// The next double past the bound `text` (up: above it), as the shortest text that reads back as that double:
// a decimal past an exclusive bound that is nearer the bound's double than that one is read as the bound
// itself by every client that parses JSON numbers as doubles (JSON.parse, json.loads, zod, pydantic), and
// fails the bound there ("0.500000000000000000001" under exclusiveMinimum 0.5). The text is above the bound
// exactly too (it lies nearer the next double than the bound's own), so at or above it is past the bound both
// ways. nullopt where its digits reach past `chars` characters: no number written here is then that near.
std::optional<Decimal> next_double(const std::string& text, bool up, int64_t chars, const std::string& what) {
  const double bound = std::strtod(text.c_str(), nullptr);
  const double next = std::nextafter(bound, up ? HUGE_VAL : -HUGE_VAL);
  if (!std::isfinite(next)) return std::nullopt;
  char buffer[64];
  const auto written = std::to_chars(buffer, buffer + sizeof buffer, next);
  ORBIT_CHECK(written.ec == std::errc(), what << ": " << text << " could not be written as a double");
  Decimal d = parse_decimal(std::string(buffer, written.ptr), what);
  if (static_cast<int64_t>(d.whole.size() + d.fraction.size()) > chars) return std::nullopt;
  return d;
}

std::string digit_class(int lo, int hi) {
  if (lo == hi) return std::string(1, static_cast<char>('0' + lo));
  if (lo == 0 && hi == 9) return "\\d";
  return std::string("[") + static_cast<char>('0' + lo) + "-" + static_cast<char>('0' + hi) + "]";
}

// Digit strings of lo's length between lo and hi (equal lengths, leading zeros allowed).
std::string fixed_range(const std::string& lo, const std::string& hi) {
  const std::size_t n = lo.size();
  if (n == 0) return "";
  const int a = lo[0] - '0';
  const int b = hi[0] - '0';
  const std::string rest_lo = lo.substr(1);
  const std::string rest_hi = hi.substr(1);
  if (rest_lo == std::string(n - 1, '0') && rest_hi == std::string(n - 1, '9')) {
    return digit_class(a, b) + (n > 1 ? "\\d{" + std::to_string(n - 1) + "}" : "");
  }
  if (a == b) return digit_class(a, a) + "(?:" + fixed_range(rest_lo, rest_hi) + ")";
  std::string out = digit_class(a, a) + "(?:" + fixed_range(rest_lo, std::string(n - 1, '9')) + ")";
  if (b - a > 1) out += "|" + digit_class(a + 1, b - 1) + "\\d{" + std::to_string(n - 1) + "}";
  return out + "|" + digit_class(b, b) + "(?:" + fixed_range(std::string(n - 1, '0'), rest_hi) + ")";
}

// Integers without leading zeros in [lo, hi] (lo <= hi, digit strings).
std::string int_range(const std::string& lo, const std::string& hi) {
  if (lo.size() < hi.size()) {
    return "(?:(?:" + fixed_range(lo, std::string(lo.size(), '9')) + ")|" +
           int_range("1" + std::string(lo.size(), '0'), hi) + ")";
  }
  return "(?:" + fixed_range(lo, hi) + ")";
}

std::string plus_one(std::string digits) {
  for (std::size_t i = digits.size(); i-- > 0;) {
    if (digits[i] != '9') {
      ++digits[i];
      return digits;
    }
    digits[i] = '0';
  }
  return "1" + digits;
}

std::string minus_one(std::string digits) {  // digits > 0
  for (std::size_t i = digits.size(); i-- > 0;) {
    if (digits[i] != '0') {
      --digits[i];
      break;
    }
    digits[i] = '9';
  }
  const std::size_t nz = digits.find_first_not_of('0');
  return nz == std::string::npos ? "0" : digits.substr(nz);
}

std::string at_least(const std::string& lo) {
  return "(?:" + int_range(lo, std::string(lo.size(), '9')) + "|[1-9]\\d{" + std::to_string(lo.size()) + ",})";
}

// The most digits before the point a bound within reach may have (its automaton's states grow with them).
constexpr std::size_t kMaxBoundDigits = 200;

const char* kAnyWhole = "(?:0|[1-9]\\d*)";
const char* kAnyFraction = "(?:\\.\\d+)?";

// Fraction digits (after the point, at least one) whose value is above 0.<f> (or at or above).
std::string fraction_above(const std::string& f, bool strict) {
  if (f.empty()) return strict ? "\\d*[1-9]\\d*" : "\\d+";
  const int d = f[0] - '0';
  std::string out = d < 9 ? digit_class(d + 1, 9) + "\\d*|" : "";
  const std::string rest = f.substr(1);
  return "(?:" + out + digit_class(d, d) +
         (rest.empty() ? (strict ? "\\d*[1-9]\\d*" : "\\d*") : "(?:" + fraction_above(rest, strict) + ")") + ")";
}

// Fraction digits (possibly none) whose value is below 0.<f> (or at or below); nullopt: none is.
std::optional<std::string> fraction_below(const std::string& f, bool strict) {
  if (f.empty()) return strict ? std::nullopt : std::optional<std::string>("0*");
  const int d = f[0] - '0';
  std::string out = "(?:";  // the empty fraction: f ends in a non-zero digit, so it is below
  if (d > 0) out += "|" + digit_class(0, d - 1) + "\\d*";
  const std::optional<std::string> rest = fraction_below(f.substr(1), strict);
  if (rest) out += "|" + digit_class(d, d) + *rest;
  return out + ")";
}

// Non-negative texts (no sign) whose value is above |c| (or at or above).
std::string magnitude_above(const Decimal& c, bool strict, bool integer) {
  const std::string any_fraction = integer ? "" : kAnyFraction;
  std::string out = at_least(plus_one(c.whole)) + any_fraction;
  if (integer) return strict || !c.fraction.empty() ? out : out + "|" + c.whole;
  if (c.fraction.empty() && !strict) return out + "|" + c.whole + any_fraction;
  return out + "|" + c.whole + "\\." + fraction_above(c.fraction, strict);
}

// Non-negative texts whose value is below |c| (or at or below); nullopt: none is.
std::optional<std::string> magnitude_below(const Decimal& c, bool strict, bool integer) {
  const std::string any_fraction = integer ? "" : kAnyFraction;
  std::vector<std::string> alts;
  if (c.whole != "0") alts.push_back(int_range("0", minus_one(c.whole)) + any_fraction);
  if (integer) {
    if (!strict || !c.fraction.empty()) alts.push_back(c.whole);
  } else if (c.fraction.empty()) {
    if (!strict) alts.push_back(c.whole + "(?:\\.0+)?");
  } else {
    const int d = c.fraction[0] - '0';
    std::string first = d > 0 ? digit_class(0, d - 1) + "\\d*" : "";
    const std::optional<std::string> rest = fraction_below(c.fraction.substr(1), strict);
    if (rest) first += std::string(first.empty() ? "" : "|") + digit_class(d, d) + *rest;
    alts.push_back(c.whole + (first.empty() ? "" : "(?:\\.(?:" + first + "))?"));
  }
  if (alts.empty()) return std::nullopt;
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(?:" : "|(?:") + a + ")";
  return out;
}

// Texts whose value is above c (or at or above), or below it.
std::optional<std::string> above(const Decimal& c, bool strict, bool integer) {
  const std::string any = std::string(kAnyWhole) + (integer ? "" : kAnyFraction);
  if (!c.negative) return "(?:" + magnitude_above(c, strict, integer) + ")";
  const std::optional<std::string> neg = magnitude_below(c, strict, integer);
  return "(?:" + any + (neg ? "|-(?:" + *neg + ")" : "") + ")";
}

std::optional<std::string> below(const Decimal& c, bool strict, bool integer) {
  const std::string any = std::string(kAnyWhole) + (integer ? "" : kAnyFraction);
  if (c.negative) return "-(?:" + magnitude_above(c, strict, integer) + ")";
  if (c.zero() && strict) return "-(?:" + magnitude_above(c, true, integer) + ")";
  const std::optional<std::string> pos = magnitude_below(c, strict, integer);
  return "(?:-" + any + (pos ? "|" + *pos : "") + ")";
}

ByteDfa language(const std::optional<std::string>& regex, const std::string& what) {
  ORBIT_CHECK(regex.has_value(), what << ": admits no value");
  return regex_dfa(*regex, RegexSyntax::kAnchored, RegexText::kAscii, what);
}

// Numbers that are multiples of m: with m = M / 10^e, x * 10^e is a multiple of M, so the automaton keeps
// the remainder mod M of the digits read (the integer part, then up to e fraction digits); past e fraction
// digits only zeros may follow.
ByteDfa multiples(const Decimal& m, bool integer, const std::string& what) {
  ORBIT_CHECK(!m.zero() && !m.negative, what << ": expected a number above 0");
  std::string scaled = m.whole + m.fraction;
  scaled.erase(0, std::min(scaled.find_first_not_of('0'), scaled.size()));
  const auto e = static_cast<long>(m.fraction.size());
  constexpr long kMaxStates = 50000;
  ORBIT_CHECK(scaled.size() <= 5 && std::stol(scaled) * (e + 3) <= kMaxStates,
              what << ": " << m.whole << (e ? "." + m.fraction : "") << " is too fine or too large to constrain (its "
                   << "significant digits times its decimals plus 3 must stay under " << kMaxStates << ")");
  const long big_m = std::stol(scaled);
  ByteNfa nfa;
  const int32_t start = nfa.add();
  const int32_t minus = nfa.add();
  const int32_t zero = nfa.add();
  nfa.start = start;
  nfa.accept = nfa.add();
  // whole[r]: the integer part so far; point[r]: after the point; frac[k][r]: k fraction digits (k = e: any
  // more must be zeros).
  std::vector<int32_t> whole, point;
  std::vector<std::vector<int32_t>> frac(static_cast<std::size_t>(e) + 1);
  for (long r = 0; r < big_m; ++r) {
    whole.push_back(nfa.add());
    point.push_back(nfa.add());
    for (auto& f : frac) f.push_back(nfa.add());
  }
  const auto digit = [&](int32_t from, int d, int32_t to) {
    nfa.edge(from, static_cast<uint8_t>('0' + d), static_cast<uint8_t>('0' + d), to);
  };
  // Whether remainder r with k fraction digits read makes a multiple (the missing digits are zeros).
  const auto multiple = [&](long k, long r) {
    for (long j = k; j < e; ++j) r = (r * 10) % big_m;
    return r == 0;
  };
  const auto fraction_digits = [&](int32_t from, long k, long r) {
    if (k == e) return digit(from, 0, frac[static_cast<std::size_t>(e)][static_cast<std::size_t>(r)]);
    for (int d = 0; d <= 9; ++d)
      digit(from, d, frac[static_cast<std::size_t>(k) + 1][static_cast<std::size_t>((r * 10 + d) % big_m)]);
  };
  nfa.edge(start, '-', '-', minus);
  for (int32_t from : {start, minus}) {
    digit(from, 0, zero);
    for (int d = 1; d <= 9; ++d) digit(from, d, whole[static_cast<std::size_t>(d % big_m)]);
  }
  nfa.empty(zero, nfa.accept);
  if (!integer) nfa.edge(zero, '.', '.', point[0]);
  for (long r = 0; r < big_m; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    for (int d = 0; d <= 9; ++d) digit(whole[ur], d, whole[static_cast<std::size_t>((r * 10 + d) % big_m)]);
    if (multiple(0, r)) nfa.empty(whole[ur], nfa.accept);
    if (integer) continue;
    nfa.edge(whole[ur], '.', '.', point[ur]);
    fraction_digits(point[ur], 0, r);
    for (long k = 0; k <= e; ++k) {
      fraction_digits(frac[static_cast<std::size_t>(k)][ur], k, r);
      if (multiple(k, r)) nfa.empty(frac[static_cast<std::size_t>(k)][ur], nfa.accept);
    }
  }
  return determinize(nfa, what);
}

// The language of numbers of at most `chars` characters under `rules` (add_number_dfa).
ByteDfa number_language(const NumberRules& rules, int64_t chars, const std::string& path) {
  std::optional<ByteDfa> dfa;
  const auto add = [&](ByteDfa d) { dfa = dfa ? intersect(*dfa, d, path) : std::move(d); };
  const auto bound = [&](const std::optional<std::string>& text, const char* key, bool is_above, bool strict) {
    if (!text) return;
    const std::string what = path + "." + key;
    const Decimal c = parse_decimal(*text, what);
    // A bound whose integer part has more digits than a number here has characters (texts without exponent)
    // is past every number that can be written: it leaves out none of them (maximum 1e300) or all (minimum
    // 1e300). Its language is not built: its automaton, hundreds of digits long, would be refused as too
    // complex, which blames the wrong thing.
    if (static_cast<int64_t>(c.whole.size()) > chars) {
      ORBIT_CHECK(is_above == c.negative, what << ": " << *text << " is " << (is_above ? "above" : "below")
                                               << " every number of at most " << chars
                                               << " characters (the longest a number may be here)");
      return;
    }
    // Within reach (max_number_chars over 200), a bound's automaton past 200 digits outgrows the NFA limit.
    ORBIT_CHECK(c.whole.size() <= kMaxBoundDigits, what << ": " << *text << " has " << c.whole.size()
                                                        << " digits before the point, over the " << kMaxBoundDigits
                                                        << " a bound may have");
    // An exclusive bound is taken as at or past the next double (next_double) where a number could be nearer.
    const std::optional<Decimal> past = strict ? next_double(*text, is_above, chars, what) : std::nullopt;
    const Decimal& at = past ? *past : c;
    const bool open = strict && !past;
    add(language(is_above ? above(at, open, rules.integer) : below(at, open, rules.integer), what));
  };
  bound(rules.minimum, "minimum", true, false);
  bound(rules.exclusive_minimum, "exclusiveMinimum", true, true);
  bound(rules.maximum, "maximum", false, false);
  bound(rules.exclusive_maximum, "exclusiveMaximum", false, true);
  bound(rules.format_minimum, "format", true, false);
  bound(rules.format_maximum, "format", false, false);
  if (rules.multiple_of) {
    const std::string what = path + ".multipleOf";
    add(multiples(parse_decimal(*rules.multiple_of, what), rules.integer, what));
  }
  ORBIT_CHECK(rules.minimum || rules.maximum || rules.exclusive_minimum || rules.exclusive_maximum ||
                  rules.multiple_of || rules.format_minimum || rules.format_maximum,
              path << ": no number keyword to compile");
  // Every bound left out as beyond reach: numbers written as the bounded ones are (no exponent, which
  // would reach past the bounds: 9e99 has 4 characters).
  if (!dfa) add(language(std::string("-?") + kAnyWhole + (rules.integer ? "" : kAnyFraction), path));
  count_ahead(*dfa);
  return std::move(*dfa);
}

}  // namespace

int32_t add_number_dfa(Grammar& g, const NumberRules& rules, int64_t max_chars, const std::string& path) {
  check_dfa_room(g, path);
  const int64_t chars = rules.integer ? std::min<int64_t>(max_chars, kMaxIntegerChars) : max_chars;
  const auto part = [](const std::optional<std::string>& text) { return text ? memo_part(*text) : std::string("-"); };
  const std::string key = "number|" + std::to_string(rules.integer) + "|" + std::to_string(chars) + "|" +
                          part(rules.minimum) + part(rules.exclusive_minimum) + part(rules.maximum) +
                          part(rules.exclusive_maximum) + part(rules.multiple_of) + part(rules.format_minimum) +
                          part(rules.format_maximum);
  return add_dfa(g, memo_dfa(key, [&] { return number_language(rules, chars, path); }), chars, path);
}

const NumberFormat* number_format_named(const std::string& name) {
  static const NumberFormat k[] = {
      {"int8", true, "-128", "127"},
      {"uint8", true, "0", "255"},
      {"int16", true, "-32768", "32767"},
      {"uint16", true, "0", "65535"},
      {"int32", true, "-2147483648", "2147483647"},
      {"uint32", true, "0", "4294967295"},
      {"int64", true, "-9223372036854775808", "9223372036854775807"},
      {"uint64", true, "0", "18446744073709551615"},
      {"float", false, "-3.4028234663852886e38", "3.4028234663852886e38"},
      {"double", false, nullptr, nullptr},
  };
  for (const NumberFormat& n : k) {
    if (name == n.name) return &n;
  }
  return nullptr;
}

const NumberFormat* number_format(const nlohmann::ordered_json& s) {
  const auto f = s.find("format");
  return f == s.end() || !f->is_string() ? nullptr : number_format_named(f->get_ref<const std::string&>());
}

ByteDfa integer_text_dfa(const NumberFormat& format, const std::string& path) {
  NumberRules rules;
  rules.integer = true;
  rules.format_minimum = format.minimum;
  rules.format_maximum = format.maximum;
  return number_language(rules, 20, path);  // -9223372036854775808 and 18446744073709551615: 20 characters
}

std::string number_format_names() { return "int8, uint8, int16, uint16, int32, uint32, int64, uint64, float, double"; }

}  // namespace orbit::constrain
