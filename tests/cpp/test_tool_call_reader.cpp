// ToolCallReader (orbit/tool_calls.h): a growing text's calls, read keeping the complete ones, against
// parse_tool_calls(text, format, CutToolCall::kCall) of the whole text at every length: fed byte by byte and
// in random pieces, the reading after each piece must be the whole parse's (names, arguments, cut,
// cut_name_whole), for well-formed answers of several calls (one holding a closing mark inside a string) and
// for those whose calls end early (a block or
// a ';'-separated object that is not a call, text after the calls, a NUL
// byte), and for calls at the corners of JSON as they are written.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "orbit/tool_calls.h"
#include "orbit_catch.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::ChatToolCall;
using orbit::CutToolCall;
using orbit::ToolCallFormat;
using orbit::ToolCallParse;
using orbit::ToolCallReader;
using orbit::ToolCallReading;

namespace {

struct Answer {
  ToolCallFormat format;
  std::string text;
};

const std::vector<Answer>& answers() {
  static const std::vector<Answer> all = {
      {ToolCallFormat::kHermes,
       "Let me look.\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cat <3 \", \"n\": 12}}</tool_call>\n"
       "<tool_call>{\"name\": \"open\", \"arguments\": {\"url\": \"a;b\", \"tabs\": [1, 2]}}</tool_call>\n"
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\u00e9 y\\\"}\"}</tool_call> done"},
      // A closed block that is not a call ends the calls; a closing mark inside a string does not end its call.
      {ToolCallFormat::kHermes,
       "a <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call> b <tool_call>not json</tool_call> "
       "<tool_call>{\"name\": \"y\", \"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call><tool_call>{\"name\": "
       "\"g\", \"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kLlama3,
       "  <|python_tag|> {\"name\": \"search\", \"parameters\": {\"q\": \"a;b\", \"d\": {\"e\": [1, {}]}}}; "
       "{\"name\": \"open\", \"parameters\": {\"u\": 1}};{\"name\": \"close\", \"arguments\": {}}; "},
      // A ';'-separated object that is not a call: no calls at all, whatever follows.
      {ToolCallFormat::kLlama3,
       "{\"name\": \"a\", \"parameters\": {}}; {\"x\": 1}; {\"name\": \"b\", \"parameters\": {\"k\": 2}}"},
      // Text after whole calls stays content, the calls kept.
      {ToolCallFormat::kLlama3, "{\"name\": \"a\", \"parameters\": {\"k\": \"v\"}}; then some words"},
      {ToolCallFormat::kLlama3, "not a call; {\"name\": \"a\", \"parameters\": {}}"},
      // nlohmann's parser ends a text at a NUL byte: the ';' after it splits nothing, the first object is it.
      {ToolCallFormat::kLlama3, std::string("{\"name\": \"a\", \"parameters\": {}} ") + '\0' +
                                    "; {\"name\": \"b\", \"parameters\": {\"k\": 2}}"},
      // Calls being written, at the corners of JSON: arguments as JSON text cut inside a surrogate pair, a
      // number past double's range (no call once whole), a string where a ',' goes (cut short until it closes).
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\\\ud83d\\\\ude00 \\\\u00e9\\\"}\"}"
       "</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"n\": 1" +
           std::string(400, '0') + "e-400, \"m\": 1e999}}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"h\" \"arguments\": {\"a\": 1 2.5}}</tool_call>"},
      {ToolCallFormat::kMistral,
       "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"q\": 1}}, {\"name\": \"b\", \"arguments\": {}}]"},
  };
  return all;
}

// The reading against the whole text's parse; "" when they agree, else what differs.
std::string difference(const ToolCallReading& read, const ToolCallParse& whole) {
  if (read.calls.size() != whole.calls.size()) {
    return std::to_string(read.calls.size()) + " calls read, " + std::to_string(whole.calls.size()) + " parsed";
  }
  for (std::size_t i = 0; i < read.calls.size(); ++i) {
    if (read.calls[i].name != whole.calls[i].name) return "call " + std::to_string(i) + "'s name";
    if (read.calls[i].arguments != whole.calls[i].arguments) return "call " + std::to_string(i) + "'s arguments";
  }
  if (read.cut != whole.cut) return "cut";
  if (read.cut_name_whole != whole.cut_name_whole) return "cut_name_whole";
  return "";
}

// read(first) against read(): the calls from `first` on, the rest as read() has them.
void check_from(const ToolCallReader& reader, const ToolCallReading& all, std::size_t first) {
  const ToolCallReading tail = reader.read(first);
  CHECK(tail.first == first);
  CHECK(tail.complete == all.complete);
  CHECK(tail.cut == all.cut);
  CHECK(tail.cut_name_whole == all.cut_name_whole);
  REQUIRE(tail.calls.size() == all.calls.size() - std::min(first, all.calls.size()));
  for (std::size_t i = 0; i < tail.calls.size(); ++i) {
    CHECK(tail.calls[i].name == all.calls[first + i].name);
    CHECK(tail.calls[i].arguments == all.calls[first + i].arguments);
  }
}

// `text` appended in the pieces `ends` (increasing offsets, the last its size) makes; checked after each:
// the reading is the whole parse's, read(first) its calls from `first` on, and the calls a reading says are
// complete are in every later reading as they were (or, Llama 3 after a piece that is no call, none is).
void check_fed(const Answer& a, const std::vector<std::size_t>& ends) {
  ToolCallReader reader(a.format);
  std::size_t from = 0;
  std::vector<ChatToolCall> complete;  // the calls readings said were complete so far
  for (std::size_t end : ends) {
    reader.append(std::string_view(a.text).substr(from, end - from));
    from = end;
    REQUIRE(reader.text() == a.text.substr(0, end));
    const ToolCallParse whole = orbit::parse_tool_calls(reader.text(), a.format, CutToolCall::kCall);
    INFO(orbit::tool_call_format_name(a.format) << " after " << end << " bytes: " << reader.text());
    const ToolCallReading read = reader.read();
    REQUIRE(difference(read, whole).empty());
    REQUIRE(read.complete <= read.calls.size());
    if (!read.calls.empty()) {
      REQUIRE(read.complete >= complete.size());
      for (std::size_t i = 0; i < complete.size(); ++i) {
        CHECK(read.calls[i].id == complete[i].id);  // kept: not read again
        CHECK(read.calls[i].arguments == complete[i].arguments);
      }
      complete.assign(read.calls.begin(), read.calls.begin() + static_cast<std::ptrdiff_t>(read.complete));
    }
    for (std::size_t first : {std::size_t{1}, read.complete, read.calls.size(), read.calls.size() + 1}) {
      check_from(reader, read, first);
    }
  }
}

// A caller that keeps the arguments of the call being written (ToolCallHeld): after each piece it reads with
// what it holds; the arguments it puts together equal the whole reading's, and where they grow under the
// number it holds, what it held is a prefix of them or they of it. Returns how many bytes readings left out.
std::size_t check_held(const Answer& a, const std::vector<std::size_t>& ends) {
  ToolCallReader reader(a.format);
  std::size_t from = 0, left_out = 0;
  std::string held;  // the last call's arguments as last read
  uint64_t grown = 0;
  for (std::size_t end : ends) {
    reader.append(std::string_view(a.text).substr(from, end - from));
    from = end;
    INFO(orbit::tool_call_format_name(a.format) << " after " << end << " bytes: " << reader.text());
    const ToolCallReading whole = reader.read();
    const ToolCallReading read = reader.read(0, {grown, held.size()});
    REQUIRE(read.calls.size() == whole.calls.size());
    if (read.calls.empty()) {
      CHECK(read.growing == 0);
      continue;
    }
    CHECK(read.growing == whole.growing);
    REQUIRE(read.arguments_from <= held.size());
    if (read.arguments_from > 0) REQUIRE(read.growing == grown);
    const std::string arguments = held.substr(0, read.arguments_from) + read.calls.back().arguments;
    CHECK(arguments == whole.calls.back().arguments);
    if (read.growing != 0 && read.growing == grown) {
      const std::size_t shorter = std::min(held.size(), arguments.size());
      CHECK(held.compare(0, shorter, arguments, 0, shorter) == 0);
    }
    left_out += read.arguments_from;
    held = arguments;
    grown = read.growing;
  }
  return left_out;
}

}  // namespace

TEST_CASE("tool call reader: a caller holding the arguments being written gets only what they add", "[tool_calls]") {
  std::mt19937 rng(11);
  std::size_t left_out = 0;
  for (const Answer& a : answers()) {
    std::vector<std::size_t> bytes, pieces;
    for (std::size_t i = 1; i <= a.text.size(); ++i) bytes.push_back(i);
    left_out += check_held(a, bytes);
    for (std::size_t at = 0; at < a.text.size();) {
      at = std::min(a.text.size(), at + 1 + rng() % 24);
      pieces.push_back(at);
    }
    left_out += check_held(a, pieces);
  }
  CHECK(left_out > 1000);  // the held bytes were left out, not read again
}

TEST_CASE("tool call reader: a copy's call being written grows under a number of its own", "[tool_calls]") {
  ToolCallReader reader(ToolCallFormat::kHermes);
  reader.append("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"ab");
  const ToolCallReading read = reader.read();
  REQUIRE(read.calls.size() == 1);
  REQUIRE(read.growing != 0);
  CHECK(reader.read().growing == read.growing);
  ToolCallReader copy = reader;
  copy.append("x\"}");
  reader.append("c");
  const ToolCallReading copied = copy.read(0, {read.growing, read.calls[0].arguments.size()});
  CHECK(copied.growing != read.growing);
  CHECK(copied.arguments_from == 0);  // a number it does not know: the arguments whole
  CHECK(copied.calls[0].arguments == "{\"q\":\"abx\"}");
  CHECK(reader.read().growing == read.growing);
}

TEST_CASE("tool call reader: fed byte by byte, reads what the whole text parses to at every length", "[tool_calls]") {
  for (const Answer& a : answers()) {
    std::vector<std::size_t> ends;
    for (std::size_t i = 1; i <= a.text.size(); ++i) ends.push_back(i);
    check_fed(a, ends);
  }
}

TEST_CASE("tool call reader: fed in random pieces, reads what the whole text parses to", "[tool_calls]") {
  std::mt19937 rng(7);
  for (const Answer& a : answers()) {
    for (int run = 0; run < 20; ++run) {
      std::vector<std::size_t> ends;
      for (std::size_t at = 0; at < a.text.size();) {
        at = std::min(a.text.size(), at + 1 + rng() % 24);
        ends.push_back(at);
      }
      check_fed(a, ends);
    }
  }
}

TEST_CASE("tool call reader: the answers read calls, and those that end early end them", "[tool_calls]") {
  const std::vector<std::size_t> expected = {3, 1, 2, 3, 0, 1, 0, 1, 1, 0, 2};
  REQUIRE(answers().size() == expected.size());
  for (std::size_t i = 0; i < answers().size(); ++i) {
    ToolCallReader reader(answers()[i].format);
    reader.append(answers()[i].text);
    INFO(answers()[i].text);
    CHECK(reader.read().calls.size() == expected[i]);
  }
}

}  // namespace ORBIT_TEST_FILE
