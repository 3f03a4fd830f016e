// Tool calls streamed as they are written, in answers max_tokens cut (cli/serve/run/tool_stream.h): a cut
// answer fed to a ToolCallStream piece by piece and finished with "length" must stream the calls the run
// settles, and those must be what parse_tool_calls reads of the cut text as a client would read it: a call cut
// inside its name is the one tool it begins or left out, a cut mark after whole calls is settled as a forced
// call is, markup is never content, and a JSON answer that is no call stays the JSON. Without a model.
#include <string>
#include <utility>
#include <vector>

#include "orbit/answer_calls.h"
#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "serve/run/tool_stream.h"
#include "tool_stream_feed.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::test::tool_stream;

TEST_CASE("tool stream: an answer max_tokens cuts anywhere streams the cut call it finishes with", "[serve]") {
  for (std::size_t end = 1; end <= kHermes.size(); ++end) {
    const std::string cut = kHermes.substr(0, end);
    INFO("cut after " << end << " bytes");
    for (const std::vector<std::size_t>& cuts : {every_byte(cut), std::vector<std::size_t>{end / 2}}) {
      const Fed f = feed(cut, cuts, Feed{ToolCallFormat::kHermes, false, true, "length"});
      CHECK(same_calls(assemble(f), f.r.tool_calls));
      const orbit::ToolCallParse read = orbit::parse_tool_calls(cut, ToolCallFormat::kHermes, CutToolCall::kCall);
      const std::vector<ChatToolCall> calls = answered(read, Feed{}.names);
      CHECK(same_calls(f.r.tool_calls, calls, false));
      CHECK(f.r.tool_call_cut == (read.cut && calls.size() == read.calls.size()));
      // Cut after a call's mark but before its name began (or inside the mark): that call is left out (its
      // name could be either tool's), and its markup is not content.
      // (The answer's content holds no '<': one in what parse_tool_calls left as content is such markup.)
      const bool markup = read.content.find('<') != std::string::npos;
      CHECK(f.r.text.find('<') == std::string::npos);
      CHECK((f.content + f.r.unstreamed).find('<') == std::string::npos);
      // A call left out leaves the answer cut ("length"), though the calls before it are whole.
      CHECK(f.r.finish_reason == (read.calls.empty() || read.cut || markup ? "length" : "tool_calls"));
    }
  }
}

TEST_CASE("tool stream: forced calls in the Llama 3 and Mistral formats, whole and cut anywhere", "[serve]") {
  const std::vector<std::pair<ToolCallFormat, std::string>> answers = {
      {ToolCallFormat::kLlama3,
       "{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}; {\"name\": \"open\", \"parameters\": {\"u\": 1}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"search\", \"arguments\": {\"q\": \"cat\"}}]"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cat\"}}</tool_call>"}};
  for (const auto& [format, text] : answers) {
    INFO(orbit::tool_call_format_name(format));
    const Fed whole = feed(text, every_byte(text), Feed{format, true, true, "stop"});
    CHECK(same_calls(assemble(whole), whole.r.tool_calls));
    CHECK(same_calls(whole.r.tool_calls, orbit::parse_tool_calls(text, format).calls, false));
    CHECK(whole.r.tool_calls.size() == (format == ToolCallFormat::kLlama3 ? 2u : 1u));
    CHECK(whole.r.unstreamed_calls.empty());
    for (std::size_t end = 1; end < text.size(); ++end) {
      const std::string cut = text.substr(0, end);
      const Fed f = feed(cut, every_byte(cut), Feed{format, true, true, "length"});
      INFO("cut after " << end << " bytes");
      CHECK(same_calls(assemble(f), f.r.tool_calls));
      CHECK(same_calls(f.r.tool_calls,
                       answered(orbit::parse_tool_calls(cut, format, CutToolCall::kForcedCall), Feed{}.names), false));
    }
  }
}

TEST_CASE("tool stream: a call cut inside its name is the one tool it begins, else left out", "[serve]") {
  const std::string head = "Look.\n<tool_call>{\"name\": \"";
  struct Case {
    std::string written;  // of the name
    std::vector<std::string> names;
    std::string answered;  // "": left out
  };
  const std::vector<Case> cases = {{"s", {"search", "open"}, "search"},
                                   {"sea", {"sea", "search"}, ""},
                                   {"o", {"search", "open"}, "open"},
                                   {"x", {"search", "open"}, ""},
                                   {"s", {}, ""}};
  for (const Case& c : cases) {
    INFO("written '" << c.written << "', " << c.names.size() << " names");
    const std::string text = head + c.written;
    for (const std::vector<std::size_t>& cuts : {every_byte(text), std::vector<std::size_t>{}}) {
      const Fed f = feed(text, cuts, Feed{ToolCallFormat::kHermes, false, true, "length", c.names});
      CHECK(f.pieces.empty());  // the name was never whole: nothing of the call went out while it streamed
      CHECK(f.r.finish_reason == "length");
      CHECK(f.r.text == "Look.");
      if (c.answered.empty()) {
        CHECK(f.r.tool_calls.empty());
        CHECK(f.r.unstreamed_calls.empty());
        CHECK_FALSE(f.r.tool_call_cut);
      } else {
        REQUIRE(f.r.tool_calls.size() == 1);
        CHECK(f.r.tool_calls[0].name == c.answered);
        CHECK(f.r.tool_calls[0].arguments.empty());
        CHECK(f.r.tool_call_cut);
        CHECK(same_calls(assemble(f), f.r.tool_calls));
      }
    }
  }
  // A forced call cut inside its opening mark or before its name's first letter: the one tool's, else left out.
  for (const std::string text : {"<tool_ca", "<tool_call>{\"name\": \""}) {
    INFO(text);
    const Fed one = feed(text, {4}, Feed{ToolCallFormat::kHermes, true, true, "length", {"search"}});
    REQUIRE(one.r.tool_calls.size() == 1);
    CHECK(one.r.tool_calls[0].name == "search");
    CHECK(one.r.text.empty());
    const Fed two = feed(text, {4}, Feed{ToolCallFormat::kHermes, true, true, "length", {"search", "open"}});
    CHECK(two.r.tool_calls.empty());
    CHECK(two.r.text.empty());
    CHECK(two.r.unstreamed.empty());
    CHECK(two.r.finish_reason == "length");
  }
}

TEST_CASE("tool stream: a call cut before its name outside a forced call is settled as a forced one", "[serve]") {
  // tool_choice auto: the markup of a call cut after its mark (before its name began) was left in the content.
  struct Case {
    ToolCallFormat format;
    std::string text;
    std::string content;  // what stays content
    bool call;            // a call begun (else only the start of a mark)
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes, "Look.\n<tool_call>", "Look.", true},
      {ToolCallFormat::kHermes, "Look.\n<tool_call>{\"na", "Look.", true},
      {ToolCallFormat::kHermes, "Look.\n<tool_call>{\"name\": \"", "Look.", true},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"open\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"", "", true},
      {ToolCallFormat::kHermes, "Look.\n<tool_ca", "Look.", false},
      {ToolCallFormat::kMistral, "Look. [TOOL_CALLS] [{\"name\": \"", "Look.", true},
      {ToolCallFormat::kMistral, "Look. [TOOL_CA", "Look.", false},
      {ToolCallFormat::kLlama3, "{\"name\": \"", "", true},
      {ToolCallFormat::kLlama3, "<|python_tag|>{\"", "", true}};
  for (const Case& c : cases) {
    INFO(c.text);
    const std::size_t before = c.text.find("\"open\"") != std::string::npos ? 1 : 0;  // whole calls before it
    for (const std::vector<std::string>& names :
         {std::vector<std::string>{"search"}, std::vector<std::string>{"search", "open"}}) {
      INFO(names.size() << " names");
      for (const std::vector<std::size_t>& cuts : {every_byte(c.text), std::vector<std::size_t>{}}) {
        const Fed f = feed(c.text, cuts, Feed{c.format, false, true, "length", names});
        CHECK(f.r.finish_reason == "length");
        CHECK(f.r.text == c.content);
        CHECK(trimmed(f.content + f.r.unstreamed) == c.content);
        CHECK(same_calls(assemble(f), f.r.tool_calls));
        if (c.call && names.size() == 1) {  // the one tool it can become, arguments ""
          REQUIRE(f.r.tool_calls.size() == before + 1);
          CHECK(f.r.tool_calls.back().name == "search");
          CHECK(f.r.tool_calls.back().arguments.empty());
          CHECK(f.r.tool_call_cut);
        } else {  // left out
          CHECK(f.r.tool_calls.size() == before);
          CHECK_FALSE(f.r.tool_call_cut);
        }
      }
    }
  }
  // Calls in free text (no names): a call begun before its name is left out too.
  const Fed free =
      feed("Look.\n<tool_call>{\"name\": \"", {}, Feed{ToolCallFormat::kHermes, false, false, "length", {}});
  CHECK(free.r.tool_calls.empty());
  CHECK(free.r.text == "Look.");
  CHECK(trimmed(free.content + free.r.unstreamed) == "Look.");
  // An answer that ended otherwise keeps its text: only a cut leaves markup out.
  const Fed stopped = feed("Look.\n<tool_call>{\"name\": \"", {}, Feed{ToolCallFormat::kHermes, false, true, "stop"});
  CHECK(stopped.r.tool_calls.empty());
  CHECK(stopped.r.finish_reason == "stop");
}

TEST_CASE("tool stream: a call-or-JSON answer cut inside its call's mark is settled as a forced call is", "[serve]") {
  // Tools under auto beside a JSON response_format: a call or the JSON from the first byte, so an answer begun
  // with a start of the call's mark ("<", as a forced one's) is a call cut before its name. It was left out
  // (no call) where the forced answer gives the one tool's call.
  struct Case {
    ToolCallFormat format;
    std::string text;
  };
  const std::vector<Case> calls = {{ToolCallFormat::kHermes, "<"},
                                   {ToolCallFormat::kHermes, "<tool_ca"},
                                   {ToolCallFormat::kHermes, " <tool_call"},
                                   {ToolCallFormat::kHermes, "<tool_call>"},
                                   {ToolCallFormat::kHermes, "<tool_call>{\"na"},
                                   {ToolCallFormat::kMistral, "[TOOL_CA"},
                                   {ToolCallFormat::kMistral, "[TOOL_CALLS] ["}};
  for (const Case& c : calls) {
    INFO(c.text);
    for (const std::vector<std::string>& names :
         {std::vector<std::string>{"search"}, std::vector<std::string>{"search", "open"}}) {
      INFO(names.size() << " names");
      for (const std::vector<std::size_t>& cuts : {every_byte(c.text), std::vector<std::size_t>{}}) {
        const Fed f = feed(c.text, cuts, Feed{c.format, false, true, "length", names, true});
        const Fed forced = feed(c.text, cuts, Feed{c.format, true, true, "length", names});
        CHECK(same_calls(f.r.tool_calls, forced.r.tool_calls, false));
        CHECK(f.r.tool_call_cut == forced.r.tool_call_cut);
        CHECK(f.r.finish_reason == "length");
        CHECK(f.r.text.empty());
        CHECK(trimmed(f.content + f.r.unstreamed).empty());
        CHECK(same_calls(assemble(f), f.r.tool_calls));
        if (names.size() == 1) {  // the one tool it can become, arguments ""
          REQUIRE(f.r.tool_calls.size() == 1);
          CHECK(f.r.tool_calls[0].name == "search");
          CHECK(f.r.tool_calls[0].arguments.empty());
          CHECK(f.r.tool_call_cut);
        } else {  // left out
          CHECK(f.r.tool_calls.empty());
          CHECK_FALSE(f.r.tool_call_cut);
        }
      }
    }
  }
  // An answer begun as the JSON is the JSON: nothing in it is call markup (a string cut inside "<tool_ca"
  // keeps it), and a lone "[" may begin a JSON array as well as Mistral's mark: no call.
  const std::vector<Case> json = {{ToolCallFormat::kHermes, "{\"title\": \"a <tool_ca"},
                                  {ToolCallFormat::kHermes, "{\"title\": \"<tool_call>{\\\"na"},
                                  {ToolCallFormat::kMistral, "["}};
  for (const Case& c : json) {
    INFO(c.text);
    const Fed f = feed(c.text, every_byte(c.text), Feed{c.format, false, true, "length", {"search"}, true});
    CHECK(f.r.tool_calls.empty());
    CHECK(f.r.text == c.text);
    CHECK(f.content + f.r.unstreamed == c.text);
    CHECK(f.r.finish_reason == "length");
  }
}

TEST_CASE("tool stream: a forced answer cut before a later call's name has no markup in its content", "[serve]") {
  // Several forced calls (parallel_tool_calls): one cut inside its mark or before its name after whole calls
  // is settled as the first one would be; its markup was the content, and the answer "tool_calls".
  const std::string hermes = "<tool_call>{\"name\": \"open\", \"arguments\": {}}</tool_call>\n";
  const std::string llama3 = "{\"name\": \"open\", \"parameters\": {}}; ";
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kHermes, hermes + "<tool_ca"},
      {ToolCallFormat::kHermes, hermes + "<tool_call>{\"na"},
      {ToolCallFormat::kHermes, hermes + "<tool_call>{\"name\": \""},
      {ToolCallFormat::kLlama3, llama3 + "{\"na"}};
  for (const auto& [format, text] : cases) {
    INFO(text);
    for (const std::vector<std::string>& names :
         {std::vector<std::string>{"search"}, std::vector<std::string>{"search", "open"}}) {
      INFO(names.size() << " names");
      for (const std::vector<std::size_t>& cuts : {every_byte(text), std::vector<std::size_t>{}}) {
        const Fed f = feed(text, cuts, Feed{format, true, true, "length", names});
        CHECK(f.r.text.empty());
        CHECK(trimmed(f.content + f.r.unstreamed).empty());
        check_settled_cut(f, names);
      }
    }
  }
}

TEST_CASE("tool stream: an auto answer cut inside a mark after whole calls is settled as a forced one", "[serve]") {
  // tool_choice auto: under the tools' grammar only a call follows a call, so a start of the mark after whole
  // calls is a call begun. It was taken out of the content with no call, where the forced path gives the one
  // tool's call (arguments "", cut) or, under two tools, leaves it out as ambiguous.
  const std::string hermes = "<tool_call>{\"name\": \"open\", \"arguments\": {}}</tool_call>";
  for (const std::string& text : {hermes + "\n<tool_ca", hermes + "<", "Look.\n" + hermes + "\n\n<tool_call"}) {
    INFO(text);
    const std::string content = text.rfind("Look.", 0) == 0 ? "Look." : "";
    for (const std::vector<std::string>& names :
         {std::vector<std::string>{"search"}, std::vector<std::string>{"search", "open"}}) {
      INFO(names.size() << " names");
      for (const std::vector<std::size_t>& cuts : {every_byte(text), std::vector<std::size_t>{}}) {
        const Fed f = feed(text, cuts, Feed{ToolCallFormat::kHermes, false, true, "length", names});
        CHECK(f.r.text == content);
        CHECK(trimmed(f.content + f.r.unstreamed) == content);
        check_settled_cut(f, names);
        if (content.empty()) {  // as the forced path settles it
          const Fed forced = feed(text, cuts, Feed{ToolCallFormat::kHermes, true, true, "length", names});
          CHECK(same_calls(f.r.tool_calls, forced.r.tool_calls, false));
          CHECK(f.r.tool_call_cut == forced.r.tool_call_cut);
        }
      }
    }
  }
  // After prose, a start of the mark may be anything: left out of the content, no call (as before).
  const Fed prose =
      feed(hermes + "\nand <tool_ca", {}, Feed{ToolCallFormat::kHermes, false, true, "length", {"search"}});
  REQUIRE(prose.r.tool_calls.size() == 1);
  CHECK(prose.r.text == "and");
  CHECK_FALSE(prose.r.tool_call_cut);
}

TEST_CASE("tool stream: a Llama 3 JSON answer max_tokens cuts stays the JSON; a cut call is still a call", "[serve]") {
  // Llama 3's calls have no mark: {"name": ..., "parameters": {...}}. A JSON answer whose first key is "name"
  // (a response_format's object, or JSON in free text) cut by max_tokens was read as a call of that name.
  // Now an object with a key no call has, a name that is no string, or a name no tool has (cut inside it: that
  // no tool's name begins) is the JSON it is, as written. Serve reads Llama 3's calls under auto as free text
  // (no grammar: `names` empty), with the request's tools as `tools`; under a grammar `names` rules.
  const std::vector<std::string> json = {"{\"name\": \"Ada\", \"age\": 3",
                                         "{\"name\": \"Ada\"",
                                         "{\"name\": \"Ad",
                                         "{\"name\": \"search\", \"age",
                                         "{\"name\": \"search\", \"age\": 3, \"parameters\": {",
                                         "{\"name\": 5, \"a",
                                         "{\"title\": \"x\", \"name\": \"search\""};
  const std::vector<std::string> tools = {"search", "open"};
  for (const std::string& text : json) {
    INFO(text);
    for (const std::vector<std::string>& names : {std::vector<std::string>{}, tools}) {
      INFO(names.size() << " names");
      const Fed f =
          feed(text, every_byte(text), Feed{ToolCallFormat::kLlama3, false, false, "length", names, false, tools});
      CHECK(f.r.tool_calls.empty());
      CHECK(f.r.text == text);
      CHECK(f.content + f.r.unstreamed == text);
      CHECK_FALSE(f.r.tool_call_cut);
      CHECK(f.r.finish_reason == "length");
    }
  }
  // Whole, it is the JSON too (it was a call named "Ada", finish_reason "tool_calls").
  const std::string whole = "{\"name\": \"Ada\", \"age\": 3}";
  for (const std::string finish : {"stop", "length"}) {
    const Fed f = feed(whole, {}, Feed{ToolCallFormat::kLlama3, false, false, finish, {}, false, tools});
    CHECK(f.r.tool_calls.empty());
    CHECK(f.r.text == whole);
    CHECK(f.r.finish_reason == finish);
  }
  // After a whole call, the JSON piece is the content and the call stays.
  const std::string after = "{\"name\": \"open\", \"parameters\": {}}; {\"name\": \"Ada\", \"a";
  const Fed mixed = feed(after, {}, Feed{ToolCallFormat::kLlama3, false, false, "length", {}, false, tools});
  REQUIRE(mixed.r.tool_calls.size() == 1);
  CHECK(mixed.r.tool_calls[0].name == "open");
  CHECK(mixed.r.text == "{\"name\": \"Ada\", \"a");
  // After a whole call and its "; ", an object cut before its first key was read whole may be a call begun (a
  // call's first key is "name"): no content, and under free text (no grammar) left out as a name cut short is.
  const std::string open_call = "{\"name\": \"open\", \"parameters\": {}}; ";
  for (const std::string rest : {"{", "{\"", "{\"na", "{\"name\"", "{\"name\": ", "{\"name\": \""}) {
    const std::string text = open_call + rest;
    INFO(text);
    for (const std::vector<std::size_t>& cuts : {every_byte(text), std::vector<std::size_t>{}}) {
      const Fed f = feed(text, cuts, Feed{ToolCallFormat::kLlama3, false, false, "length", {}, false, tools});
      REQUIRE(f.r.tool_calls.size() == 1);
      CHECK(f.r.tool_calls[0].name == "open");
      CHECK(f.r.text.empty());
      CHECK(trimmed(f.content + f.r.unstreamed).empty());
      CHECK_FALSE(f.r.tool_call_cut);
      CHECK(f.r.finish_reason == "length");
    }
  }
  // A genuine call cut short is still the call so far.
  struct Call {
    std::string text, name, arguments;
  };
  const std::vector<Call> calls = {{"{\"name\": \"search\", \"parameters\": {\"q\": \"c", "search", "{\"q\":\"c"},
                                   {"{\"name\": \"search\", \"pa", "search", ""},
                                   {"{\"name\": \"open\"", "open", ""},
                                   {"{\"name\": \"ope", "open", ""}};
  for (const Call& c : calls) {
    INFO(c.text);
    const Fed f =
        feed(c.text, every_byte(c.text), Feed{ToolCallFormat::kLlama3, false, false, "length", tools, false, tools});
    REQUIRE(f.r.tool_calls.size() == 1);
    CHECK(f.r.tool_calls[0].name == c.name);
    CHECK(f.r.tool_calls[0].arguments == c.arguments);
    CHECK(f.r.tool_call_cut);
    CHECK(f.r.text.empty());
    CHECK(f.r.finish_reason == "length");
  }
  // Free text (no grammar): a name cut short that a tool's begins may be either, and is left out, as before.
  const Fed free =
      feed("{\"name\": \"sea", {}, Feed{ToolCallFormat::kLlama3, false, false, "length", {}, false, tools});
  CHECK(free.r.tool_calls.empty());
  CHECK(free.r.text.empty());
}

TEST_CASE("tool stream: Mistral's array cut before its last call's name keeps the whole calls before it", "[serve]") {
  // Read as one call cut before its name, the array lost the whole calls before that one.
  const std::string whole = "Look. [TOOL_CALLS] [{\"name\": \"open\", \"arguments\": {\"u\": 1}}, ";
  for (const std::string& cut : {std::string("{"), std::string("{\"na"), std::string("{\"name\": \"")}) {
    const std::string text = whole + cut;
    INFO(text);
    // Free text (no grammar): the cut call is left out; under a grammar of one tool: that tool's, cut.
    for (const std::vector<std::string>& names : {std::vector<std::string>{}, std::vector<std::string>{"search"}}) {
      INFO(names.size() << " names");
      for (const bool progressive : {false, true}) {
        const Fed f = feed(text, every_byte(text), Feed{ToolCallFormat::kMistral, false, progressive, "length", names});
        CHECK(f.r.text == "Look.");
        CHECK(trimmed(f.content + f.r.unstreamed) == "Look.");
        CHECK(f.r.finish_reason == "length");
        CHECK(same_calls(assemble(f), f.r.tool_calls));
        REQUIRE(f.r.tool_calls.size() == 1 + names.size());
        CHECK(f.r.tool_calls[0].name == "open");
        CHECK(f.r.tool_calls[0].arguments == "{\"u\":1}");
        if (!names.empty()) CHECK(f.r.tool_calls[1].name == "search");
        CHECK(f.r.tool_call_cut == !names.empty());
      }
    }
  }
}

}  // namespace ORBIT_TEST_FILE
