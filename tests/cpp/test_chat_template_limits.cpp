// Chat templates (orbit/runtime/chat_template.h) against hostile templates and inputs: nesting that would
// overflow the stack, JSON nested past the input guard, loops and strings that would exhaust memory, and
// numbers no int64 holds. Each must be refused with an orbit::Error naming what was exceeded and the limit,
// quickly and within a small, fixed rise of the process's peak memory. Real templates
// (tests/data/templates) must still render a conversation larger than `orbit serve` accepts.
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using orbit::runtime::ChatMessage;
using orbit::runtime::ChatRenderOptions;
using orbit::runtime::ChatTemplate;
using orbit::runtime::ChatToolCall;

const char* const kOneTurn = R"([{"role": "user", "content": "Hi"}])";

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

std::string render(const std::string& source, const std::string& messages = kOneTurn,
                   const ChatRenderOptions& options = {}) {
  return ChatTemplate(source, "t.jinja").render_json(messages, options);
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs `f`, which must throw orbit::Error with a message containing every one of `parts`, within 20 s and
// raising the process's peak memory by at most 640 MiB (the limits allow a rendering 512 MiB of work and a
// few 64 MiB strings in flight; the hostile inputs here would take gigabytes, or crash).
template <typename F>
void refused(F&& f, const std::vector<std::string>& parts) {
  const long peak_before = peak_rss_kib();
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    f();
  } catch (const orbit::Error& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("error: " << message);
  REQUIRE(!message.empty());
  for (const std::string& p : parts) CHECK_THAT(message, Contains(p));
  CHECK(seconds < 20);
  CHECK(peak_rss_kib() - peak_before < 640 * 1024);
}

}  // namespace

TEST_CASE("templates nesting 10,000 parentheses, brackets or braces are refused at parse time") {
  const int n = 10000;
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{
           {"(", ")"}, {"[", "]"}, {"{'a': ", "}"}, {"f(", ")"}, {"x[", "]"}}) {
    INFO(open);
    refused([&] { ChatTemplate("{{ " + repeat(open, n) + "1" + repeat(close, n) + " }}", "t.jinja"); },
            {"t.jinja: line 1: nesting deeper than 256 levels"});
  }
}

TEST_CASE("templates nesting 30,000 blocks, not, unary minus or filters are refused at parse time") {
  const int n = 30000;
  const std::vector<std::pair<std::string, std::string>> blocks = {
      {repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n), "nesting deeper than 256 levels"},
      {repeat("{% for i in [1] %}", n) + "x" + repeat("{% endfor %}", n), "nesting deeper than 256 levels"},
      {repeat("{% set x %}", n) + "x" + repeat("{% endset %}", n), "nesting deeper than 256 levels"},
      {"{% if a %}" + repeat("{% elif a %}", n) + "{% endif %}", "nesting deeper than 256 levels"},
      {"{{ " + repeat("not ", n) + "true }}", "nesting deeper than 256 levels"},
      {"{{ " + repeat("- ", n) + "1 }}", "nesting deeper than 256 levels"},
      {"{{ 1 " + repeat("if true else 1 ", n) + "}}", "nesting deeper than 256 levels"},
      // Chains parsed by a loop, not by recursion: the tree would still be as deep as the chain is long.
      {"{{ 'x'" + repeat("|trim", n) + " }}", "an expression nests deeper than 256 levels"},
      {"{{ 1" + repeat(" + 1", n) + " }}", "an expression nests deeper than 256 levels"},
      {"{{ x" + repeat(".a", n) + " }}", "an expression nests deeper than 256 levels"},
      {"{{ x" + repeat("[0]", n) + " }}", "an expression nests deeper than 256 levels"},
      {"{{ x" + repeat(" is defined", n) + " }}", "an expression nests deeper than 256 levels"},
      {"{{ x" + repeat(" or x", n) + " }}", "an expression nests deeper than 256 levels"},
  };
  for (const auto& [source, message] : blocks) {
    INFO(source.substr(0, 40));
    refused([&] { ChatTemplate(source, "t.jinja"); }, {"t.jinja: line 1: " + message});
  }
}

TEST_CASE("nesting within the limits still parses and renders") {
  CHECK(render("{{ " + repeat("(", 100) + "1" + repeat(")", 100) + " }}") == "1");
  CHECK(render(repeat("{% if true %}", 100) + "x" + repeat("{% endif %}", 100)) == "x");
  CHECK(render("{{ 'x'" + repeat("|trim", 200) + " }}") == "x");
  CHECK(render("{{ 0" + repeat(" + 1", 200) + " }}") == "200");
}

TEST_CASE("tools, extra variables, messages and tool arguments nested 50,000 deep are refused") {
  const std::string deep_array = repeat("[", 50000) + repeat("]", 50000);
  const std::string deep_object = "{\"a\": " + repeat("{\"a\": ", 50000) + "1" + repeat("}", 50001);
  const std::string source = "{{ tools }}{{ a }}{{ messages }}";
  ChatRenderOptions tools;
  tools.tools_json = deep_array;
  refused([&] { render(source, kOneTurn, tools); }, {"t.jinja: tools_json: JSON nests deeper than 128 levels"});
  ChatRenderOptions extra;
  extra.extra_json = deep_object;
  refused([&] { render(source, kOneTurn, extra); }, {"t.jinja: extra_json: JSON nests deeper than 128 levels"});
  refused([&] { render(source, "[{\"role\": \"user\", \"content\": " + deep_array + "}]"); },
          {"t.jinja: the messages", "JSON nests deeper than 128 levels"});
  ChatMessage call{"assistant", "", {}, {}, {ChatToolCall{"c1", "f", deep_object}}};
  refused([&] { ChatTemplate(source, "t.jinja").render({call}); },
          {"arguments of tool call 'f'", "JSON nests deeper than 128 levels"});
}

TEST_CASE("extra variables: the rendering's own are refused, the special tokens replaced (as Hugging Face's)") {
  // {"messages": []} rendered nothing where the window took the messages for synced.
  for (const char* own : {"messages", "add_generation_prompt", "tools"}) {
    ChatRenderOptions extra;
    extra.extra_json = std::string("{\"") + own + "\": []}";
    refused([&] { render("{{ messages|length }}", kOneTurn, extra); },
            {std::string("t.jinja: extra_json: '") + own + "' is the rendering's own variable, not an extra one"});
  }
  ChatRenderOptions tokens;
  tokens.extra_json = R"({"bos_token": "<B>", "date": "today"})";
  CHECK(render("{{ bos_token }}{{ date }}", kOneTurn, tokens) == "<B>today");  // was the template's own bos_token
}

TEST_CASE("JSON as deep as the input guard allows still renders") {
  ChatRenderOptions tools;
  tools.tools_json = repeat("[", 127) + repeat("]", 127);
  CHECK(render("{{ tools|tojson }}", kOneTurn, tools) == tools.tools_json);
  ChatMessage call{"assistant", "", {}, {}, {ChatToolCall{"c1", "f", repeat("[", 127) + repeat("]", 127)}}};
  CHECK(ChatTemplate("{{ messages[0].tool_calls[0].function.arguments|tojson }}", "t.jinja").render({call}) ==
        repeat("[", 127) + repeat("]", 127));
}

TEST_CASE("numbers no int64 holds are refused or kept as floats, never converted") {
  ChatRenderOptions big;
  big.extra_json = R"({"big": 1e300, "huge": 18446744073709551615, "edge": 9223372036854775808.0, "whole": 4.0})";
  // Whole JSON numbers past int64 stay floats (as JavaScript holds every number); inside it they are integers.
  // An integer literal past int64 prints and writes as written (Python's Jinja keeps it exact).
  CHECK(render("{{ big }}|{{ huge }}|{{ edge }}|{{ whole }}|{{ whole is integer }}", kOneTurn, big) ==
        "1e+300|18446744073709551615|9223372036854775808.0|4|True");
  CHECK(render("{{ huge|tojson }}", kOneTurn, big) == "18446744073709551615");
  // So are a tool call's arguments, byte for byte, as the client sent them (a JSON round trip through
  // doubles would print 1.2345678901234568e+29 and -9223372036854775808).
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"c1", "f",
                             R"({"a": 9007199254740993, "b": 123456789012345678901234567890, )"
                             R"("c": -9223372036854775809, "d": 18446744073709551616})"});
  CHECK(ChatTemplate("{{ messages[0].tool_calls[0].function.arguments|tojson }}", "t.jinja").render({call}) ==
        R"({"a": 9007199254740993, "b": 123456789012345678901234567890, "c": -9223372036854775809, )"
        R"("d": 18446744073709551616})");
  refused([&] { render("{{ big|int }}", kOneTurn, big); },
          {"t.jinja: line 1: int: ", "out of the 64-bit integer range"});
  refused([&] { render("{{ 9223372036854775807 + 1 }}"); },
          {"line 1: the integer result of '+' is out of the 64-bit range"});
  refused([&] { render("{{ 10 ** 30 }}"); }, {"the integer result of '**' is out of the 64-bit range"});
  refused([&] { render("{{ 1 // 0 }}"); }, {"integer division or modulo by zero"});
  refused([&] { render("{{ 1 % 0 }}"); }, {"integer division or modulo by zero"});
  refused([&] { render("{{ 99999999999999999999 }}"); },
          {"the integer 99999999999999999999 is out of the 64-bit range"});
  refused([&] { render("{{ -(-9223372036854775807 - 1) }}"); }, {"out of the 64-bit range"});
  // As @huggingface/jinja: int rounds down, a negative power is a float, float division by zero is infinite.
  CHECK(render("{{ 2.7|int }} {{ -1.5|int }} {{ 2 ** -1 }} {{ 1 / 0 }} {{ 7 // 2 }} {{ -7 % 3 }}") ==
        "2 -2 0.5 Infinity 3 -1");
}

TEST_CASE("range() and loops are bounded across the whole rendering") {
  refused([&] { render("{% for i in range(100000000) %}{% endfor %}"); },
          {"t.jinja: line 1: range() of 100000000 items exceeds the limit of 1000000"});
  refused([&] { render("{{ range(-9223372036854775807 - 1, 9223372036854775807)|length }}"); },
          {"range() of 18446744073709551615 items exceeds the limit of 1000000"});
  // Each range is small; together the loops run 10,000,000 iterations.
  refused(
      [&] {
        render(
            "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(10) %}"
            "{% endfor %}{% endfor %}{% endfor %}");
      },
      {"t.jinja: line 1: loops ran more than 1000000 iterations"});
  refused([&] { render("{% for a in range(1000) %}{% for b in range(1000) if b > 2000 %}{% endfor %}{% endfor %}"); },
          {"loops ran more than 1000000 iterations"});
  // Within the loop limit, each iteration evaluating a long expression: 40,000,000 steps.
  refused([&] { render("{% for i in range(1000000) %}{% if " + repeat("i + ", 19) + "i %}{% endif %}{% endfor %}"); },
          {"t.jinja: line 1: the rendering ran more than 10000000 steps"});
  CHECK(render("{% for i in range(3, -9223372036854775807, -4611686018427387904) %}{{ i }},{% endfor %}") ==
        "3,-4611686018427387901,-9223372036854775805,");
  CHECK(render("{{ 'abcdef'[1::9223372036854775807] }}|{{ 'abcdef'[::-9223372036854775807 - 1] }}") == "b|f");
}

TEST_CASE("strings, output and work are bounded") {
  // 2^40 bytes by doubling a string.
  refused(
      [&] {
        render("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
      },
      {"'~' would make a string of 134217728 bytes, over the limit of 67108864 bytes"});
  refused(
      [&] {
        render("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
      },
      {"'+' would make a string of 134217728 bytes"});
  // 1 MB of input, each byte replaced by 100.
  ChatRenderOptions text;
  text.extra_json = "{\"s\": \"" + std::string(1 << 20, 'a') + "\"}";
  refused([&] { render("{{ s|replace('a', '" + std::string(100, 'y') + "') }}", kOneTurn, text); },
          {"replace would make a string of 104857600 bytes"});
  // 8 MB of separators split into 8 million strings.
  ChatRenderOptions spaces;
  spaces.extra_json = "{\"s\": \"" + std::string(8 << 20, ' ') + "\"}";
  refused([&] { render("{{ s.split(' ')|length }}", kOneTurn, spaces); },
          {"t.jinja: line 1: the rendering built, copied or scanned more than 536870912 bytes"});
  // A string indexed, sliced or walked by code point inside a loop: each scan is charged, so a long string
  // read a million times is refused, not rendered for minutes.
  ChatRenderOptions long_text;
  long_text.extra_json = "{\"s\": \"" + std::string(1 << 20, 'a') + "\"}";
  for (const char* read : {"s[-1]", "s[1000000]", "s[1:2]", "s|length", "s.strip()|length"}) {
    refused(
        [&] {
          render(std::string("{% for i in range(1000000) %}{{ ") + read + " }}{% endfor %}", kOneTurn, long_text);
        },
        {"more than 536870912 bytes"});
  }
  // A million namespaces, each kept until the rendering ends.
  refused(
      [&] {
        render("{% for i in range(1000000) %}{% set n = namespace(a='" + std::string(1000, 'x') + "') %}{% endfor %}");
      },
      {"more than 536870912 bytes"});
  // 100 MB of output from a short template.
  refused([&] { render("{% for i in range(100000) %}{{ '" + std::string(1000, 'x') + "' }}{% endfor %}"); },
          {"t.jinja: line 1: the output exceeds the limit of 67108864 bytes"});
  // A list that grows by copying itself: quadratic work long before its memory shows.
  refused(
      [&] {
        render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}");
      },
      {"more than 536870912 bytes of strings and lists"});
  // Eight references to a list, ten levels deep, print as a billion items.
  std::string source = "{% set l0 = [1] %}";
  for (int k = 1; k <= 10; ++k) {
    const std::string p = "l" + std::to_string(k - 1);
    source += "{% set l" + std::to_string(k) + " = [" + repeat(p + ",", 7) + p + "] %}";
  }
  refused([&] { render(source + "{{ l10 }}"); }, {"printing a value as JSON would make a string of"});
  refused([&] { render("{{ [1]|tojson(indent=-1) }}"); }, {"tojson: indent must not be negative"});
  refused([&] { render("{{ [1]|tojson(indent=9223372036854775807) }}"); }, {"tojson: an indent of"});
}

TEST_CASE("searches in long strings are linear: in, replace, split and strip with long needles") {
  // Before, each was |string| x |needle| (std::string::find, a linear scan of the characters per place): 2 MB
  // searched for a 1 MB needle took 38 s, an rstrip of 128 KB by 128 KB of characters 5 s.
  ChatRenderOptions big;
  const std::string a(1 << 20, 'a');
  big.extra_json = "{\"a\": \"" + a + "\", \"b\": \"" + std::string(1 << 17, 'b') + "\"}";
  CHECK(render("{{ (a ~ 'b') in (a ~ a) }} {{ (a ~ 'b') in (a ~ a ~ 'b') }}", kOneTurn, big) == "False True");
  CHECK(render("{{ (a ~ a)|replace(a ~ 'b', 'x')|length }} {{ (a ~ 'b' ~ a)|replace(a ~ 'b', 'x')|length }}", kOneTurn,
               big) == "2097152 1048577");
  CHECK(render("{{ (a ~ 'b' ~ a).split(a)|length }} {{ (b ~ a).rstrip(b ~ 'a')|length }}", kOneTurn, big) == "3 0");
  // KMP against the plain search on needles that overlap themselves.
  for (const char* hay : {"abababababac", "aaaaaaaaaaab", "abcabcabdabcabcabcabd"}) {
    for (const char* needle : {"ababababac", "aaaaaaaaab", "abcabcabcabd", "abcabcabd", "zzzzzzzzzz"}) {
      const std::string source = std::string("{{ '") + needle + "' in '" + hay + "' }}|{{ '" + hay + "'|replace('" +
                                 needle + "', '_') }}|{{ '" + hay + "'.split('" + needle + "')|length }}";
      const std::string h = hay, n = needle;
      const std::size_t at = h.find(n);
      std::string replaced = h;
      std::size_t parts = 1;
      for (std::size_t p = replaced.find(n); p != std::string::npos; p = replaced.find(n, p + 1)) {
        replaced.replace(p, n.size(), "_");
        ++parts;
      }
      INFO(source);
      CHECK(render(source) ==
            std::string(at != std::string::npos ? "True" : "False") + "|" + replaced + "|" + std::to_string(parts));
    }
  }
}

TEST_CASE("values built deeper than the limit, or holding themselves, are refused") {
  refused(
      [&] { render("{% set ns = namespace(x=0) %}{% for i in range(1000000) %}{% set ns.x = [ns.x] %}{% endfor %}"); },
      {"t.jinja: line 1: a value nests deeper than 256 levels"});
  refused(
      [&] {
        render(
            "{% set ns = namespace(d={}) %}{% for i in range(1000000) %}{% set ns.d = {'f': ns.d.items} %}{% endfor "
            "%}");
      },
      {"a value nests deeper than 256 levels"});
  refused([&] { render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); },
          {"t.jinja: line 1: a value nests deeper than 256 levels where it is printed"});
  refused([&] { render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns|tojson }}"); },
          {"a value nests deeper than 256 levels where it is printed"});
  // A chain of 100,000 namespaces, each holding the one before: built and freed without recursing.
  CHECK(render("{% set ns = namespace(cur=none) %}{% for i in range(100000) %}"
               "{% set ns.cur = namespace(next=ns.cur) %}{% endfor %}done") == "done");
  // A namespace holding itself is freed (LeakSanitizer runs this test in the fuzz and sanitizer builds).
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.f = ns.items %}ok") == "ok");
}

TEST_CASE("the templates of tests/data/templates render a conversation larger than orbit serve accepts") {
  // 20,000 turns, 12 MB of text (orbit serve takes bodies of 4 MiB), with two tools: every template renders
  // it inside every limit, in well under the time a hostile input takes to be refused.
  const int turns = 20000;
  const std::string text = repeat("The quick brown fox jumps over the lazy dog. ", 13);  // 585 bytes
  std::string messages = "[";
  for (int k = 0; k < turns; ++k) {
    messages += std::string(k ? ", " : "") + "{\"role\": \"" + (k % 2 ? "assistant" : "user") + "\", \"content\": \"" +
                std::to_string(k) + " " + text + "\"}";
  }
  messages += "]";
  ChatRenderOptions options;
  options.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search.",
      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}])";
  int rendered = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ORBIT_TEST_DATA_DIR) / "templates")) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream source;
    source << in.rdbuf();
    INFO(entry.path().filename().string());
    const ChatTemplate t(source.str(), entry.path().filename().string(), "<s>", "</s>");
    const auto start = std::chrono::steady_clock::now();
    const std::string out = t.render_json(messages, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(out.size() > static_cast<std::size_t>(turns) * text.size());
    CHECK(out.find("19999 The quick") != std::string::npos);
    CHECK(seconds < 20);
    ++rendered;
  }
  CHECK(rendered == 10);
}

}  // namespace ORBIT_TEST_FILE
