// The tool calls a stream sent piece by piece (tool_stream.h), and the guarantee that a client holds the
// answer's calls: a client concatenates a call's pieces, so what went out of a call must stay a prefix of
// the call the finished answer holds, under the same name.
//
//   reading 1   {name "f", arguments "{\"a\":"}     -> opens call 0 ("f"), then the piece "{\"a\":"
//   reading 2   {name "f", arguments "{\"a\":1"}    -> the piece "1"
//   answer      {name "f", arguments "{\"a\":1}"}   -> settle: the piece "}" is what did not go out
//   answer      {name "f", arguments "{\"b\":2}"}   -> settle: a mismatch ("arguments"), nothing more to send
//
// A reading that does not extend what went out of a call (it reads the call shorter, as a cut reading may, or
// otherwise) sends nothing of it; only the finished answer decides. Not thread-safe: one choice owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "orbit/tool_calls.h"
#include "serve/serve_types.h"

namespace orbit::serve {

// What settle() leaves to send at the choice's end.
struct SettledCalls {
  // The pieces of the answer's calls that did not go out (a call not opened comes whole in its opening
  // piece); empty with a mismatch.
  std::vector<ToolCallDelta> unsent;
  // The first call streamed that the answer does not hold as it went out (lowest index), if any.
  std::optional<ToolStreamMismatch> mismatch;
};

class StreamedCalls {
 public:
  // Appends to `out` the pieces `reading` (the calls read from the text so far, in order, from index
  // reading.first on, which is at most done(); the last call's first reading.arguments_from argument bytes
  // left out, as held() asks) adds to what went out: a call it holds past those opened opens
  // (its id, name, arguments ""), and each opened call whose arguments extend what went out sends the
  // extension. The last call's name may still grow while its string is not closed (reading.cut and not
  // reading.cut_name_whole), so it does not open yet. Costs the calls from done() on, not those before.
  void offer(const ToolCallReading& reading, std::vector<ToolCallDelta>& out);
  // The calls before this index are complete (ToolCallReading::complete) and offer() has seen them so: no
  // reading adds to them any more, and offer() needs a reading of the calls from here on only.
  std::size_t done() const { return done_; }
  // What went out of the last call opened, to hand ToolCallReader::read: a reading whose arguments grow
  // under its number then leaves those bytes out, and offer() takes the rest without comparing them.
  ToolCallHeld held() const {
    return sent_.empty() ? ToolCallHeld{} : ToolCallHeld{sent_.back().growing, sent_.back().arguments.size()};
  }

  // Checks the finished answer's `calls` against what went out: each opened call must be there with the
  // name it opened with and arguments that what went out is a prefix of. Gives the opened calls their ids.
  SettledCalls settle(std::vector<ChatToolCall>& calls) const;

  std::size_t opened() const { return sent_.size(); }

 private:
  struct Sent {
    std::string id;
    std::string name;
    std::string arguments;  // the arguments' text sent so far
    uint64_t growing = 0;   // ToolCallReading::growing of the reading that last extended them (0: none)
  };
  std::vector<Sent> sent_;  // the calls opened, in order
  std::size_t done_ = 0;    // see done(); at most sent_.size()
};

}  // namespace orbit::serve
