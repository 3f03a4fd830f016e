// Helpers the tool-stream tests share (test_serve_tool_stream.cpp, test_serve_tool_stream_cut.cpp): a known
// answer pushed to a ToolCallStream in given pieces and finished, the calls a client assembles from what it
// let out, and what a client reads of a parse_tool_calls result.
#pragma once

#include <string>
#include <vector>

#include "orbit/answer_calls.h"
#include "orbit/tool_calls.h"
#include "orbit_catch.h"
#include "serve/run/tool_stream.h"

namespace orbit::test::tool_stream {

namespace sv = orbit::serve;
using orbit::ChatToolCall;
using orbit::CutToolCall;
using orbit::ToolCallFormat;

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
inline Fed feed(const std::string& text, const std::vector<std::size_t>& cuts, const Feed& how) {
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
inline std::vector<ChatToolCall> assemble(const Fed& f) {
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

inline bool same_calls(const std::vector<ChatToolCall>& a, const std::vector<ChatToolCall>& b, bool ids = true) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].arguments != b[i].arguments || (ids && a[i].id != b[i].id)) return false;
  }
  return true;
}

// What a client reads of `read`'s calls (parse_tool_calls of a cut answer): a last call cut inside its name
// takes the one of `names` it begins (arguments ""), or is left out.
inline std::vector<ChatToolCall> answered(orbit::ToolCallParse read, const std::vector<std::string>& names) {
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

inline std::string trimmed(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \n");
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(" \n") - first + 1);
}

inline std::vector<std::size_t> every_byte(const std::string& text) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  return cuts;
}

// Two calls, with what a reader must not cut short: a '<' and a space ending a string (where a cut answer
// ends there, parse_tool_calls drops both), a number, a ';'.
inline const std::string kHermes =
    "Let me look.\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cat <3 \", \"n\": 12}}</tool_call>\n"
    "<tool_call>{\"name\": \"open\", \"arguments\": {\"url\": \"a;b\", \"tabs\": [1, 2]}}</tool_call>";

// A cut answer's calls where the cut after whole calls (the first one "open") begun a later one: under one tool
// that call (arguments "", cut), under two it is left out as ambiguous.
inline void check_settled_cut(const Fed& f, const std::vector<std::string>& names) {
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

}  // namespace orbit::test::tool_stream
