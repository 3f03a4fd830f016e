// Chat templates' strings are sequences of code points, as Python's str is to Jinja2 (transformers'
// apply_chat_template) and, in the Basic Multilingual Plane, JavaScript's to @huggingface/jinja: indexing,
// slicing and loops never split a character's UTF-8 bytes, strip/trim/split know Unicode's whitespace, case
// mapping is Unicode's, and title() and replace('') are Python's.
#include <catch2/catch.hpp>
#include <string>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using orbit::runtime::ChatTemplate;

// Renders `expression` over one user message whose content is `content` (JSON-escaped by the caller).
std::string render(const std::string& expression, const std::string& content) {
  const std::string messages = R"([{"role": "user", "content": ")" + content + R"("}])";
  return ChatTemplate("{{ " + expression + " }}", "t.jinja").render_json(messages, {});
}

std::string render_block(const std::string& source, const std::string& content) {
  const std::string messages = R"([{"role": "user", "content": ")" + content + R"("}])";
  return ChatTemplate(source, "t.jinja").render_json(messages, {});
}

}  // namespace

TEST_CASE("chat template strings index, slice and loop by code point", "[chat_template][cpu]") {
  CHECK(render("messages[0].content[0]", "\u00e9x") == "\u00e9");
  CHECK(render("messages[0].content[-1]", "x\u00e9") == "\u00e9");
  CHECK(render("messages[0].content[1:]", "\u00e9x\u4f60") == "x\u4f60");
  CHECK(render("messages[0].content[::-1]", "a\u00e9\U0001F600") == "\U0001F600\u00e9a");
  CHECK(render("messages[0].content|length", "a\u00e9\U0001F600") == "3");
  CHECK(render("messages[0].content[5]", "\u00e9") == "");  // past the end: undefined, as before
  CHECK(render_block("{% for c in messages[0].content %}[{{ c }}]{% endfor %}", "\u00e9\u4f60") == "[\u00e9][\u4f60]");
}

TEST_CASE("chat template strip, trim and split know Unicode's whitespace", "[chat_template][cpu]") {
  CHECK(render("messages[0].content|trim", "\\u00a0x\\u2028") == "x");
  CHECK(render("messages[0].content.strip()", "\\u3000x\\t") == "x");
  CHECK(render("messages[0].content.lstrip()", "\\u3000x ") == "x ");
  CHECK(render("messages[0].content.rstrip()", " x\\u3000") == " x");
  CHECK(render("messages[0].content.split()|join(',')", "a\\u00a0b\\u3000 c") == "a,b,c");
  // With characters to strip: code points, not bytes (U+00A9's bytes C2 A9 must not strip U+00E9's C3 A9).
  CHECK(render("messages[0].content.rstrip('\u00a9')", "\u00e9") == "\u00e9");
  CHECK(render("messages[0].content.strip('\u00e9x')", "x\u00e9yx") == "y");
  CHECK(render("messages[0].content|trim('x')", "xxyx") == "y");
  CHECK(render("messages[0].content.strip(none)", " y ") == "y");
  CHECK_THROWS_AS(render("messages[0].content.strip(5)", " y "), orbit::Error);
}

TEST_CASE("chat template case mapping is Unicode's and title() is Python's", "[chat_template][cpu]") {
  CHECK(render("messages[0].content|upper", "\u00e9\u00df") == "\u00c9SS");
  CHECK(render("messages[0].content|lower", "\u00c9A") == "\u00e9a");
  CHECK(render("messages[0].content|capitalize", "\u00e9COLE") == "\u00c9cole");
  CHECK(render("messages[0].content.title()", "a b-c it's \u00e9t\u00e9") == "A B-C It'S \u00c9t\u00e9");
  CHECK(render("messages[0].content.upper()", "ab") == "AB");
}

TEST_CASE("chat template title, int and float filters on strings, and hex escapes, as Jinja's",
          "[chat_template][cpu]") {
  // The filter capitalizes words between '-', whitespace and openers; the method is str.title().
  CHECK(render("messages[0].content|title", "it's a b-c (d) \u00e9t\u00e9") == "It's A B-C (D) \u00c9t\u00e9");
  CHECK(render("messages[0].content|int + 1", " 12 ") == "13");
  CHECK(render("messages[0].content|int", "-12.7") == "-12");
  CHECK(render("messages[0].content|int", "twelve") == "0");
  CHECK(render("messages[0].content|int(5)", "twelve") == "5");
  CHECK(render("messages[0].content|float", "2.5") == "2.5");
  CHECK(render("messages[0].content|float", "x") == "0.0");
  CHECK(render("'\\u00e9\\x41\\U0001F600'", "x") == "\u00e9A\U0001F600");
  CHECK_THROWS_WITH(render("'\\ud800'", "x"), Catch::Contains("hex digits of a character"));
  CHECK_THROWS_WITH(render("'\\x4'", "x"), Catch::Contains("hex digits of a character"));
}

TEST_CASE("chat template replace: an empty old string and a count, as Python's", "[chat_template][cpu]") {
  CHECK(render("messages[0].content.replace('', '-')", "a\u00e9") == "-a-\u00e9-");
  CHECK(render("messages[0].content.replace('', '-', 2)", "abc") == "-a-bc");
  CHECK(render("messages[0].content.replace('a', 'x', 1)", "aaa") == "xaa");
  CHECK(render("messages[0].content|replace('a', 'x', count=2)", "aaa") == "xxa");
  CHECK(render("messages[0].content|replace('a', 'x')", "aaa") == "xxx");
  CHECK_THROWS_AS(render("messages[0].content.replace('a', 'x', 'y')", "aaa"), orbit::Error);
}

}  // namespace ORBIT_TEST_FILE
