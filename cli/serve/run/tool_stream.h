// Tool calls read out of an answer while it streams (orbit/tool_calls.h): content goes out as it comes, up
// to anything that is or may still become the start of a call in the server's format; the rest is held
// back and, when the run ends, split into the calls and what content is left to send.
#pragma once

#include <cstddef>
#include <string>

#include "orbit/tool_calls.h"
#include "serve/serve_types.h"

namespace orbit::serve {

class ToolCallStream {
 public:
  // `forced`: the answer is calls from its first byte (tool_choice "required" or a tool's name).
  ToolCallStream(ToolCallFormat format, bool forced) : format_(format), forced_(forced) {}

  // Appends `delta` to the answer; returns the part of the answer that can be sent now (possibly "").
  std::string push(const std::string& delta);
  // Reads the finished answer `r.text`: its calls into r.tool_calls (finish_reason "tool_calls" unless the
  // client left), the content without them into r.text, and what push() held back, calls taken out, into
  // r.unstreamed. An answer that "length" ended inside a call gives the call as far as it was written,
  // flagged r.tool_call_cut, rather than its markup as content, and keeps that finish_reason; a forced answer
  // cut before its call's name began (inside the opening mark) is such a call too, with name and arguments
  // "" (CutToolCall::kForcedCall).
  void finish(RunResult& r) const;

 private:
  ToolCallFormat format_;
  bool forced_;
  std::string text_;
  std::size_t sent_ = 0;
};

}  // namespace orbit::serve
