// Parsing JSON that comes from outside the process (traces, config.json, safetensors headers), bounded.
//
// nlohmann's parser is iterative, but copying a value, dump() and most code that walks a document recurse
// once per nesting level: a file with 100k nested arrays would overflow the stack long after parsing.
// Every untrusted document goes through parse_json_input(), which refuses nesting past a fixed depth, and
// error messages describe a hostile value with json_brief(), which never recurses.
//
// Header-only (needs nlohmann_json, which every user of it links already).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>

#include "orbit/common/error.h"

namespace orbit {

// Deepest nesting (open arrays and objects around a value) a JSON input may have. Real inputs nest
// fewer than 10 levels; 128 keeps recursive code far from the stack's limit.
inline constexpr int kMaxJsonDepth = 128;

struct JsonInputOptions {
  int max_depth = kMaxJsonDepth;
  // Optional observer of parse events, nlohmann's parser_callback_t contract: (depth, event, value),
  // return false to drop the value. Called after the depth check. nlohmann's callback parser scans a
  // container's values at every object or array that closes in it (to drop a discarded one), so with an
  // observer the parse costs the square of the values a container holds: only for bounded inputs.
  std::function<bool(int, nlohmann::json::parse_event_t, nlohmann::json&)> observer;
};

// Whether [first, last) opens more than `max_depth` arrays and objects around a value, read in one pass: a
// bracket counts only outside strings. For text that is not JSON the answer is meaningless but harmless
// (the parse that follows refuses it).
inline bool json_nests_deeper(const char* first, const char* last, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (const char* p = first; p != last; ++p) {
    if (in_string) {
      if (*p == '\\' && p + 1 != last) {
        ++p;
      } else if (*p == '"') {
        in_string = false;
      }
    } else if (*p == '"') {
      in_string = true;
    } else if (*p == '[' || *p == '{') {
      if (++depth > max_depth) return true;
    } else if (*p == ']' || *p == '}') {
      --depth;
    }
  }
  return false;
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag (the library's internals, not the
// reader's): "parse error at line 1, column 69: syntax error while parsing value - ...".
inline std::string json_parser_message(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const std::size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

// Parses one JSON document from [first, last). `origin` names the input in errors ("web.json",
// "m.safetensors: header (88 bytes)"). Throws orbit::Error, never a nlohmann exception:
//   "<origin>: not valid JSON: <parser message>"          syntax, bad UTF-8, trailing garbage;
//   "<origin>: not valid JSON: a number is out of range"  1e999 and the like (no float64 holds them);
//   "<origin>: JSON nests deeper than <max_depth> levels"
inline nlohmann::json parse_json_input(const char* first, const char* last, const std::string& origin,
                                       const JsonInputOptions& options = {}) {
  const int max_depth = options.max_depth;
  const auto& observer = options.observer;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= max_depth) {
      ORBIT_FAIL(origin << ": JSON nests deeper than " << max_depth << " levels (arrays and objects)");
    }
    return observer(depth, event, parsed);
  };
  try {
    // Without an observer, the depth is checked by a scan of the text and the parse takes no callback:
    // nlohmann's callback parser costs the square of a container's values (a request body's array of
    // 100,000 messages took seconds before its size was checked).
    if (!observer) {
      if (json_nests_deeper(first, last, max_depth)) {
        ORBIT_FAIL(origin << ": JSON nests deeper than " << max_depth << " levels (arrays and objects)");
      }
      return nlohmann::json::parse(first, last);
    }
    return nlohmann::json::parse(first, last, callback);
  } catch (const nlohmann::json::out_of_range& e) {
    ORBIT_FAIL(origin << ": not valid JSON: a number is out of range (" << json_parser_message(e.what()) << ")");
  } catch (const nlohmann::json::exception& e) {
    ORBIT_FAIL(origin << ": not valid JSON: " << json_parser_message(e.what()));
  }
}

inline nlohmann::json parse_json_input(const std::string& text, const std::string& origin,
                                       const JsonInputOptions& options = {}) {
  return parse_json_input(text.data(), text.data() + text.size(), origin, options);
}

// A short description of `value` for an error message, without recursing: numbers, booleans and null
// as written (5, true), strings quoted and cut to 40 bytes ("abc"), containers by kind and size
// ("an array of 3 items").
inline std::string json_brief(const nlohmann::json& value) {
  constexpr std::size_t kMaxString = 40;
  if (value.is_array()) return "an array of " + std::to_string(value.size()) + " items";
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " fields";
  if (value.is_binary()) return "binary data";
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    const auto quoted = [](const nlohmann::json& text) {
      return text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    if (s.size() <= kMaxString) return quoted(value);
    return quoted(nlohmann::json(s.substr(0, kMaxString))) + "... (" + std::to_string(s.size()) + " bytes)";
  }
  return value.dump();
}

// A SAX reader that takes every event and stops at a parse error: a reader derives from it and overrides only the
// events it reads (nlohmann::json::sax_parse(first, last, &reader)).
struct JsonSaxWalk : nlohmann::json_sax<nlohmann::json> {
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace orbit
