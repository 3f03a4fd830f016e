// The schema keywords whose values form regular languages, compiled to byte automata (byte_dfa.h) and added
// to a grammar as kDfa nodes:
//
//   strings   pattern (regex.h), format (string_formats() lists them), with minLength / maxLength
//   numbers   minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, and the range a format of numbers
//             names (number_format)
//
// A number under any of these is written without an exponent; one under an exclusive bound is past it once read
// as a double, as clients read it. Every refusal names the keyword under `path`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "constrain/grammar.h"

namespace orbit::constrain {

// The formats `format` takes, in the order errors list them.
const std::vector<std::string>& string_formats();

struct StringRules {
  const std::string* pattern = nullptr;  // JSON Schema's pattern (a search unless anchored)
  const std::string* format = nullptr;   // one of string_formats(), or any beside a pattern
  int64_t min_chars = 0;
  int64_t max_chars = 0;
};
// Lowers rules.max_chars to the most characters its format admits where the format bounds them: a hostname
// holds at most 253 (RFC 1035 2.3.4's 255 octets on the wire, less the first length and the root's), an
// e-mail address 254 (RFC 5321 4.5.3.1.3's 256-octet path, less its angle brackets), applied as maxLength is,
// by the kDfa node's count. Call it once the format is set; a minLength over the bound
// throws naming `path`.minLength.
void cap_format_chars(StringRules& rules, const std::string& path);
int32_t add_string_dfa(Grammar& g, const StringRules& rules, const std::string& path);
// The JSON strings (quotes included) `rules` admit, each in one spelling only: the one json_quote() writes
// (no escapes but \" \\ \b \f \n \r \t and lowercase \u00xx), so that two keys are the same text exactly when
// they are the same bytes. Without the maxLength bound (the kDfa node holding it applies it).
ByteDfa canonical_string_dfa(const StringRules& rules, const std::string& path);

// Bounds as the schema writes them (a JSON number's text, such as "0.5" or "1e3"); format_minimum and
// format_maximum, the range of the format's machine type (number_format), apply beside them.
struct NumberRules {
  bool integer = false;
  std::optional<std::string> minimum, maximum, exclusive_minimum, exclusive_maximum, multiple_of;
  std::optional<std::string> format_minimum, format_maximum;
};

// OpenAPI's formats of numbers (its data types, and its format registry's sized integers): the range of the
// machine type each names. An integer format makes the number an integer; double has no bound to add (every
// number written here, with at most 2 exponent digits, is a finite double).
struct NumberFormat {
  const char* name;
  bool integer;
  const char* minimum;  // null: none
  const char* maximum;
};
// The format of numbers `s`'s "format" names, or null (none, or not one of numbers); by name likewise.
const NumberFormat* number_format(const nlohmann::ordered_json& s);
const NumberFormat* number_format_named(const std::string& name);
// The decimal texts of the integers of an integer format's range (no sign on 0, no leading zeros), as a string's
// content: proto3's JSON (gRPC gateways, Google's APIs) writes 64-bit integers as strings of digits, {"type":
// "string", "format": "int64"}. The whole range: such strings are read exactly, not as doubles.
ByteDfa integer_text_dfa(const NumberFormat& format, const std::string& path);
// Their names, for errors: "int8, uint8, ...".
std::string number_format_names();
int32_t add_number_dfa(Grammar& g, const NumberRules& rules, int64_t max_chars, const std::string& path);

}  // namespace orbit::constrain
