// Tool calls read out of an answer while it streams (orbit/tool_calls.h): content goes out as it comes, up
// to anything that is or may still become the start of a call in the server's format; from there on the text
// is calls. Where those are decoded under the tools' grammar (a call begun is written whole, unless max_tokens
// cuts it), each call goes out as it is written, as OpenAI streams calls:
//
//   <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
//              ^ name's string closed:  {index 0, opens, id, name "get_weather", arguments ""}
//                                        then {index 0, arguments "{"}, {... "\"city\":"}, {... "\"Paris\"}"}
//   (the closing brace of the call's object and the closing mark are never arguments)
//
// The pieces of a call are what parse_tool_calls (CutToolCall::kCall) reads of its arguments in the text so
// far, less what went out before; a cut reading of a call's arguments is a prefix of every later reading's.
// Elsewhere (free text: a call there is one only once it is whole, so its name cannot go out early) the calls
// are read when the answer ends, as a call its answer's end reads whole.
//
// Not thread-safe: one choice of one request owns it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "orbit/tool_calls.h"
#include "serve/serve_types.h"

namespace orbit::serve {

// What push() lets out: content, then the calls' pieces (in order: a call's pieces before the next call's).
struct ToolStreamOut {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

class ToolCallStream {
 public:
  // `forced`: the answer is calls from its first byte (tool_choice "required" or a tool's name).
  // `progressive`: the calls are decoded under the tools' grammar (AnswerConstraint::calls_whole) and the
  // caller streams them (RunSink::on_tool_call): push() lets each call out as it is written.
  ToolCallStream(ToolCallFormat format, bool forced, bool progressive = false)
      : format_(format), forced_(forced), progressive_(progressive) {}

  // Appends `delta` to the answer; returns what of it can be sent now (possibly nothing).
  ToolStreamOut push(const std::string& delta);
  // Reads the finished answer `r.text`: its calls into r.tool_calls (finish_reason "tool_calls" unless the
  // client left), the content without them into r.text, what push() held back of the content, calls taken
  // out, into r.unstreamed, and the calls' pieces push() did not let out into r.unstreamed_calls (a call not
  // opened yet comes whole in its opening piece). The calls push() opened keep the ids it gave them. An answer
  // that "length" ended inside a call gives the call as far as it was written, flagged r.tool_call_cut, rather
  // than its markup as content, and keeps that finish_reason; a forced answer cut before its call's name began
  // (inside the opening mark) is such a call too, with name and arguments "" (CutToolCall::kForcedCall).
  void finish(RunResult& r) const;

 private:
  // The calls in the text after the content, read as far as they are written: the pieces not yet let out.
  void read_calls(std::vector<ToolCallDelta>& out);

  struct Opened {
    std::string id;
    std::string arguments;  // the arguments' text let out so far
  };

  ToolCallFormat format_;
  bool forced_;
  bool progressive_;
  std::string text_;
  std::size_t sent_ = 0;        // the content let out: text_[0, sent_)
  std::vector<Opened> opened_;  // the calls push() opened, in order
};

}  // namespace orbit::serve
