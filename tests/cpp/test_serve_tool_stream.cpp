// Tool calls streamed as they are written (cli/serve/run/tool_stream.h): known answers fed to a ToolCallStream
// piece by piece (split at every byte position, and byte by byte), then finished as the run would finish them.
// The pieces it lets out, and then the ones its finish leaves in RunResult::unstreamed_calls, must spell the
// answer's calls exactly (ids, names, arguments), and those must be what parse_tool_calls reads of the whole
// text (the non-streamed answer); a call's name goes out before the call ends, its arguments in more than
// one piece; an answer that does not hold a call as it was streamed is a mismatch, and a chat answer with one
// is not stored. Without a model.
#include <string>
#include <vector>

#include "orbit/answer_calls.h"
#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "serve/run/streamed_calls.h"
#include "serve/run/tool_stream.h"
#include "serve/stored/chat_store_wire.h"

namespace sv = orbit::serve;
using orbit::ChatToolCall;
using orbit::CutToolCall;
using orbit::ToolCallFormat;

namespace {

struct Fed {
  std::string content;                    // the content push() let out
  std::vector<sv::ToolCallDelta> pieces;  // the calls' pieces push() let out ...
  std::vector<std::size_t> at;            // ... each after this many bytes of the answer were pushed
  sv::RunResult r;                        // finished
};

struct Feed {
  ToolCallFormat format = ToolCallFormat::kHermes;
  bool forced = false;
  bool progressive = true;
  std::string finish_reason = "stop";
  // The names the tools' grammar allows (ToolCallStream's `names`): the tools of the answers below.
  std::vector<std::string> names = {"search", "open"};
  bool calls_or_json = false;      // a call or a JSON answer from the first byte (AnswerCallsOptions::calls_or_json)
  std::vector<std::string> tools;  // the names a call may have, free or not (AnswerCallsOptions::tools)
};

// `text` pushed in the pieces `cuts` (increasing byte offsets) makes, then finished.
Fed feed(const std::string& text, const std::vector<std::size_t>& cuts, const Feed& how) {
  sv::ToolCallStream stream(
      orbit::AnswerCallsOptions{how.format, how.forced, how.calls_or_json, how.names, false, how.tools},
      how.progressive);
  Fed f;
  std::size_t from = 0;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(text.size());
  for (std::size_t end : ends) {
    sv::ToolStreamOut out = stream.push(text.substr(from, end - from));
    from = end;
    f.content += out.content;
    for (sv::ToolCallDelta& d : out.calls) {
      f.pieces.push_back(std::move(d));
      f.at.push_back(end);
    }
  }
  f.r.text = text;
  f.r.finish_reason = how.finish_reason;
  stream.finish(f.r);
  return f;
}

// The calls a client assembles from the pieces: streamed, then the result's unstreamed ones. Each call opens
// once, in order, and no piece of a call comes after the next call opened.
std::vector<ChatToolCall> assemble(const Fed& f) {
  std::vector<ChatToolCall> calls;
  std::vector<sv::ToolCallDelta> all = f.pieces;
  all.insert(all.end(), f.r.unstreamed_calls.begin(), f.r.unstreamed_calls.end());
  for (const sv::ToolCallDelta& d : all) {
    if (d.opens) {
      REQUIRE(d.index == calls.size());
      calls.push_back(ChatToolCall{d.id, d.name, ""});
    } else {
      REQUIRE(d.index + 1 == calls.size());
    }
    calls.back().arguments += d.arguments;
  }
  return calls;
}

bool same_calls(const std::vector<ChatToolCall>& a, const std::vector<ChatToolCall>& b, bool ids = true) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].arguments != b[i].arguments || (ids && a[i].id != b[i].id)) return false;
  }
  return true;
}

// What a client reads of `read`'s calls (parse_tool_calls of a cut answer): a last call cut inside its name
// takes the one of `names` it begins (arguments ""), or is left out.
std::vector<ChatToolCall> answered(orbit::ToolCallParse read, const std::vector<std::string>& names) {
  if (!read.cut || read.cut_name_whole) return read.calls;
  std::vector<std::string> begun;
  for (const std::string& n : names) {
    if (n.rfind(read.calls.back().name, 0) == 0) begun.push_back(n);
  }
  if (begun.size() == 1) {
    read.calls.back().name = begun[0];
    read.calls.back().arguments.clear();
  } else {
    read.calls.pop_back();
  }
  return read.calls;
}

std::string trimmed(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \n");
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(" \n") - first + 1);
}

std::vector<std::size_t> every_byte(const std::string& text) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  return cuts;
}

// Two calls, with what a reader must not cut short: a '<' and a space ending a string (where a cut answer
// ends there, parse_tool_calls drops both), a number, a ';'.
const std::string kHermes =
    "Let me look.\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cat <3 \", \"n\": 12}}</tool_call>\n"
    "<tool_call>{\"name\": \"open\", \"arguments\": {\"url\": \"a;b\", \"tabs\": [1, 2]}}</tool_call>";

}  // namespace

TEST_CASE("tool stream: two calls split at every byte spell the calls the whole answer reads", "[serve]") {
  const orbit::ToolCallParse whole = orbit::parse_tool_calls(kHermes, ToolCallFormat::kHermes);
  REQUIRE(whole.calls.size() == 2);
  for (std::size_t cut = 0; cut <= kHermes.size(); ++cut) {
    const Fed f = feed(kHermes, {cut}, Feed{});
    INFO("split at " << cut);
    CHECK(same_calls(assemble(f), f.r.tool_calls));
    CHECK(same_calls(f.r.tool_calls, whole.calls, false));
    CHECK(f.content + f.r.unstreamed == "Let me look.\n");
    CHECK(f.r.text == "Let me look.");
    CHECK(f.r.finish_reason == "tool_calls");
  }
}

TEST_CASE("tool stream: fed byte by byte, a call opens as its name closes and its arguments follow", "[serve]") {
  const Fed f = feed(kHermes, every_byte(kHermes), Feed{});
  REQUIRE(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.r.unstreamed_calls.empty());  // every piece went out as it was written: the last with the last byte
  const std::vector<std::string> names = {"\"search\"", "\"open\""};
  std::size_t call = 0;
  std::vector<int> pieces(2, 0);
  for (std::size_t i = 0; i < f.pieces.size(); ++i) {
    const sv::ToolCallDelta& d = f.pieces[i];
    if (d.opens) {
      // The byte that closes the name's string lets the call out, with no arguments yet.
      const std::size_t name_end = kHermes.find(names[call]) + names[call].size();
      CHECK(f.at[i] == name_end);
      CHECK(d.arguments.empty());
      CHECK(f.at[i] < kHermes.find("}}</tool_call>", name_end));  // before the call's end
      ++call;
    } else {
      ++pieces[d.index];
    }
  }
  CHECK(call == 2);
  CHECK(pieces[0] > 1);
  CHECK(pieces[1] > 1);
}

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
        CHECK(f.r.finish_reason == "length");
        CHECK(same_calls(assemble(f), f.r.tool_calls));
        REQUIRE(f.r.tool_calls.size() == (names.size() == 1 ? 2u : 1u));
        CHECK(f.r.tool_calls[0].name == "open");
        if (names.size() == 1) {
          CHECK(f.r.tool_calls[1].name == "search");
          CHECK(f.r.tool_calls[1].arguments.empty());
        }
        CHECK(f.r.tool_call_cut == (names.size() == 1));
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
        CHECK(f.r.finish_reason == "length");
        CHECK(same_calls(assemble(f), f.r.tool_calls));
        REQUIRE(f.r.tool_calls.size() == (names.size() == 1 ? 2u : 1u));
        CHECK(f.r.tool_calls[0].name == "open");
        if (names.size() == 1) {
          CHECK(f.r.tool_calls[1].name == "search");
          CHECK(f.r.tool_calls[1].arguments.empty());
        }
        CHECK(f.r.tool_call_cut == (names.size() == 1));
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

TEST_CASE("tool stream: calls in free text are read whole when the answer ends", "[serve]") {
  const Fed f = feed(kHermes, every_byte(kHermes), Feed{ToolCallFormat::kHermes, false, false, "stop"});
  CHECK(f.pieces.empty());
  REQUIRE(f.r.unstreamed_calls.size() == 2);
  for (const sv::ToolCallDelta& d : f.r.unstreamed_calls) CHECK(d.opens);
  CHECK(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.content == "Let me look.\n");
}

TEST_CASE("tool stream: arguments given as JSON text stream as the answer's call holds them", "[serve]") {
  // The cut readings of JSON text arguments are decoded and compacted as the whole call's are, so the pieces
  // spell the call; each cut reading was the text as written before, which the whole call is not.
  const std::string text =
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1, 2], \\\"b\\\": \\\"x y\\\"}\"}</tool_call>";
  const Fed f = feed(text, every_byte(text), Feed{});
  REQUIRE(f.r.tool_calls.size() == 1);
  CHECK(f.r.tool_calls[0].arguments == "{\"a\":[1,2],\"b\":\"x y\"}");
  CHECK_FALSE(f.r.tool_stream_mismatch);
  CHECK(same_calls(assemble(f), f.r.tool_calls));
  CHECK(f.pieces.size() > 2);
}

namespace {

// kHermes streamed byte by byte, then finished with `final_text` as the answer's text.
sv::RunResult finished_as(const std::string& final_text, const std::string& finish_reason = "stop") {
  sv::ToolCallStream stream(ToolCallFormat::kHermes, false, true);
  std::size_t pieces = 0;
  for (char c : kHermes) pieces += stream.push(std::string(1, c)).calls.size();
  REQUIRE(pieces > 4);  // both calls went out, in pieces
  sv::RunResult r;
  r.text = final_text;
  r.finish_reason = finish_reason;
  stream.finish(r);
  return r;
}

}  // namespace

TEST_CASE("tool stream: an answer that does not hold a call as it was streamed is a mismatch", "[serve]") {
  // The text the answer finishes with is not the one streamed: what a client assembled is not the call.
  std::string other_arguments = kHermes;
  other_arguments.replace(other_arguments.find("\"url\": \"a;b\""), 12, "\"url\": \"c\"");
  const sv::RunResult args = finished_as(other_arguments);
  REQUIRE(args.tool_stream_mismatch);
  const sv::ToolStreamMismatch& m = *args.tool_stream_mismatch;
  CHECK(m.index == 1);
  CHECK(m.what == "arguments");
  CHECK(m.name == "open");
  CHECK(m.streamed == "{\"url\":\"a;b\",\"tabs\":[1,2]}");
  CHECK(m.answered == "{\"url\":\"c\",\"tabs\":[1,2]}");
  CHECK(args.unstreamed_calls.empty());  // nothing more of the calls goes out
  REQUIRE(args.tool_calls.size() == 2);  // the answer's calls as parsed whole, the first with its streamed id
  CHECK(args.tool_calls[1].arguments == m.answered);
  CHECK(m.id.rfind("call_", 0) == 0);
  CHECK(args.tool_calls[0].id != m.id);

  const sv::ApiError e = sv::tool_stream_error(m, 2);
  CHECK(e.status == 500);
  CHECK(e.type == "server_error");
  CHECK(e.code == "tool_call_stream_mismatch");
  CHECK(e.param == "tool_calls");
  for (const std::string& said : {std::string("choice 2"), std::string("tool call 1"), m.id, std::string("'open'"),
                                  std::string("differ at byte 8")}) {
    CHECK_THAT(e.message, Catch::Matchers::Contains(said));
  }

  std::string renamed = kHermes;
  renamed.replace(renamed.find("\"search\""), 8, "\"find\"");
  const sv::RunResult name = finished_as(renamed);
  REQUIRE(name.tool_stream_mismatch);
  CHECK(name.tool_stream_mismatch->index == 0);
  CHECK(name.tool_stream_mismatch->what == "name");
  CHECK(name.tool_stream_mismatch->answered_name == "find");
  CHECK_THAT(sv::tool_stream_error(*name.tool_stream_mismatch, 0).message, Catch::Matchers::Contains("named 'find'"));

  // An answer that holds no call (its text ended inside one, read as content) after calls went out.
  const sv::RunResult missing = finished_as(kHermes.substr(0, kHermes.size() - 5));
  REQUIRE(missing.tool_stream_mismatch);
  CHECK(missing.tool_stream_mismatch->what == "missing");
  CHECK(missing.tool_stream_mismatch->index == 1);

  // A client that left reads nothing more: not checked.
  CHECK_FALSE(finished_as(other_arguments, "cancelled").tool_stream_mismatch);
  // The answer streamed: no mismatch.
  CHECK_FALSE(finished_as(kHermes).tool_stream_mismatch);
}

TEST_CASE("tool stream: a chat answer with a mismatched streamed call is not stored", "[serve]") {
  // The client was told the choice failed (tool_stream_error): a stored completion would answer a later GET
  // with calls it never assembled. A Responses response so failed is not stored either (responses_run.h).
  std::string other_arguments = kHermes;
  other_arguments.replace(other_arguments.find("\"url\": \"a;b\""), 12, "\"url\": \"c\"");
  sv::RunResult mismatched = finished_as(other_arguments);
  REQUIRE(mismatched.tool_stream_mismatch);
  CHECK_FALSE(sv::storable(mismatched));

  // n > 1: one choice that ended so keeps the whole completion out of the store.
  sv::RunResult first = finished_as(kHermes);
  REQUIRE_FALSE(first.tool_stream_mismatch);
  CHECK(sv::storable(first));
  first.extra_choices.push_back(finished_as(kHermes));
  CHECK(sv::storable(first));
  first.extra_choices.push_back(std::move(mismatched));
  CHECK_FALSE(sv::storable(first));
}

namespace {

// A reading of `calls` from index `first` on, the first `complete` of all complete; the last one's name may
// still grow when `name_open`.
orbit::ToolCallReading reading(std::vector<ChatToolCall> calls, bool name_open = false, std::size_t first = 0,
                               std::size_t complete = 0) {
  orbit::ToolCallReading r;
  r.calls = std::move(calls);
  r.cut = name_open;
  r.first = first;
  r.complete = complete;
  return r;
}

}  // namespace

TEST_CASE("streamed calls: a reading that does not extend what went out sends nothing of it", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  calls.offer(reading({ChatToolCall{"call_1", "f", "{\"a\":"}}), out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].opens);
  CHECK(out[0].name == "f");
  CHECK(out[1].arguments == "{\"a\":");
  out.clear();
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"a\""}}), out);    // shorter: a cut reading may be
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"b\":1"}}), out);  // not an extension
  calls.offer(reading({ChatToolCall{"call_9", "g", "{\"a\":1"}}), out);  // another name
  CHECK(out.empty());
  calls.offer(reading({ChatToolCall{"call_9", "f", "{\"a\":1"}, ChatToolCall{"call_2", "gh", ""}}, true), out);
  REQUIRE(out.size() == 1);  // the second call's name may still grow: not opened
  CHECK(out[0].arguments == "1");
  CHECK(calls.opened() == 1);

  std::vector<ChatToolCall> answer = {ChatToolCall{"call_x", "f", "{\"a\":12}"}, ChatToolCall{"call_y", "g", "{}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(answer[0].id == "call_1");
  REQUIRE(settled.unsent.size() == 2);
  CHECK(settled.unsent[0].arguments == "2}");
  CHECK(settled.unsent[1].opens);
  CHECK(settled.unsent[1].arguments == "{}");

  std::vector<ChatToolCall> other = {ChatToolCall{"call_x", "f", "{\"a\":2}"}};
  const sv::SettledCalls bad = calls.settle(other);
  REQUIRE(bad.mismatch);
  CHECK(bad.mismatch->what == "arguments");
  CHECK(bad.mismatch->streamed == "{\"a\":1");
  CHECK(bad.unsent.empty());
}

TEST_CASE("streamed calls: a call complete and sent is done, and later readings start after it", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  // Call 0 complete in the reading, call 1 being written: call 0 goes out whole and is done.
  calls.offer(reading({ChatToolCall{"call_1", "f", "{}"}, ChatToolCall{"call_2", "g", "{\"a\""}}, false, 0, 1), out);
  REQUIRE(out.size() == 4);
  CHECK(calls.done() == 1);
  CHECK(calls.opened() == 2);
  out.clear();
  // A reading from call 1 on extends call 1 alone; the complete call 1 then is done too.
  calls.offer(reading({ChatToolCall{"call_2", "g", "{\"a\":1}"}}, false, 1, 2), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].index == 1);
  CHECK(out[0].arguments == ":1}");
  CHECK(calls.done() == 2);
  // A call not complete is not done however far it went out.
  calls.offer(reading({ChatToolCall{"call_3", "h", "{\"b\":2}"}}, false, 2, 2), out);
  CHECK(calls.opened() == 3);
  CHECK(calls.done() == 2);
  std::vector<ChatToolCall> answer = {ChatToolCall{"x", "f", "{}"}, ChatToolCall{"y", "g", "{\"a\":1}"},
                                      ChatToolCall{"z", "h", "{\"b\":2}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(settled.unsent.empty());
  CHECK(answer[2].id == "call_3");
}

TEST_CASE("streamed calls: arguments growing under the number held come without the bytes that went out", "[serve]") {
  sv::StreamedCalls calls;
  std::vector<sv::ToolCallDelta> out;
  CHECK(calls.held().growing == 0);
  orbit::ToolCallReading r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"ab"}});
  r.growing = 7;
  calls.offer(r, out);
  REQUIRE(out.size() == 2);
  CHECK(calls.held().growing == 7);
  CHECK(calls.held().bytes == 8);
  out.clear();
  // The reader left out the 8 bytes held: the piece is what it gives, taken without comparing.
  r = reading({ChatToolCall{"call_1", "f", "cd"}});
  r.growing = 7;
  r.arguments_from = 8;
  calls.offer(r, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].arguments == "cd");
  out.clear();
  // Shorter under the same number (a cut character left out): nothing goes out, nothing is lost.
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abc"}});
  r.growing = 7;
  calls.offer(r, out);
  CHECK(out.empty());
  // Under another number the arguments come whole and are compared: "{\"q\":\"abcd" is not their prefix.
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abXde"}});
  r.growing = 8;
  calls.offer(r, out);
  CHECK(out.empty());
  CHECK(calls.held().growing == 7);
  r = reading({ChatToolCall{"call_1", "f", "{\"q\":\"abcde\"}"}});
  r.growing = 8;
  calls.offer(r, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].arguments == "e\"}");
  CHECK(calls.held().growing == 8);
  std::vector<ChatToolCall> answer = {ChatToolCall{"x", "f", "{\"q\":\"abcde\"}"}};
  const sv::SettledCalls settled = calls.settle(answer);
  CHECK_FALSE(settled.mismatch);
  CHECK(settled.unsent.empty());
}
