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
// The text so far is read by a ToolCallReader (orbit/tool_calls.h), which keeps the calls that are complete
// and reads again only the text after them, and is asked only for the calls from StreamedCalls::done() on
// (those before are complete and went out), so a token costs the call it is in, not the whole answer nor the
// calls before it. At the
// end the answer is parsed whole, and StreamedCalls (streamed_calls.h) checks that it holds every call as it
// went out; where it does not, the choice's closing pieces give way to RunResult::tool_stream_mismatch, which
// the stream ends with as an error (tool_stream_error). Elsewhere (free text: a call there is one only once
// it is whole, so its name cannot go out early) the calls are read when the answer ends, as a call its
// answer's end reads whole.
//
// Not thread-safe: one choice of one request owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orbit/answer_calls.h"
#include "orbit/tool_calls.h"
#include "serve/run/streamed_calls.h"
#include "serve/serve_types.h"

namespace orbit::serve {

// What push() lets out: content, then the calls' pieces (in order: a call's pieces before the next call's).
struct ToolStreamOut {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

class ToolCallStream {
 public:
  // `calls`: how the answer's calls were decoded, as read_answer_calls (orbit/answer_calls.h) reads them at the
  // end: `forced`, the answer is calls from its first byte (tool_choice "required" or a tool's name);
  // `calls_or_json`, a call or the JSON response_format asks for, from the first byte; `one_call`,
  // parallel_tool_calls false (under the tools' grammar the answer holds one call at most; a free answer, where
  // no grammar could be had, may hold more, and finish() keeps its first call only, so the answer the client
  // reads holds one call, as OpenAI's does); `names`, where the calls are decoded under the tools' grammar
  // (AnswerConstraint::calls_whole), the names it lets a call have (grammar_tool_names), empty where the calls
  // are free text.
  // `progressive`: the calls are decoded under the tools' grammar (AnswerConstraint::calls_whole) and the
  // caller streams them (RunSink::on_tool_call): push() lets each call out as it is written.
  explicit ToolCallStream(AnswerCallsOptions calls, bool progressive = false)
      : calls_(std::move(calls)), progressive_(progressive) {}
  // The same, of an answer that is not a call-or-JSON answer.
  ToolCallStream(ToolCallFormat format, bool forced, bool progressive = false, bool one_call = false,
                 std::vector<std::string> names = {})
      : ToolCallStream(AnswerCallsOptions{format, forced, false, std::move(names), one_call}, progressive) {}

  // Appends `delta` to the answer; returns what of it can be sent now (possibly nothing).
  ToolStreamOut push(const std::string& delta);
  // Reads the finished answer `r.text` with read_answer_calls (orbit/answer_calls.h): its calls into
  // r.tool_calls (finish_reason "tool_calls" where they are whole, AnswerCalls::whole, unless the client left),
  // the content without them into r.text, what push() held back of the content, calls taken out, into
  // r.unstreamed, and the calls' pieces push() did not let out into r.unstreamed_calls (a call not opened yet
  // comes whole in its opening piece). The calls push() opened keep the ids it gave them. An answer that
  // "length" ended inside a call gives the call as far as it was written, flagged r.tool_call_cut, rather than
  // its markup as content, and keeps that finish_reason; one cut before its call's name began, or inside its
  // mark where the answer is calls from its first byte, is such a call too, and the start of a mark a free
  // answer ends with is left out of the content.
  // Where the answer does not hold a call push() let out as it went out (StreamedCalls::settle), that is
  // r.tool_stream_mismatch and r.unstreamed_calls is empty (not checked for a run the client left). With
  // `one_call`, the calls after the first are left out (r.tool_calls_dropped counts them); where the one cut
  // was among them, the answer is the first call whole (not cut; finish_reason "tool_calls").
  // A client never reads a name no tool has: a call cut inside its name (its string not closed, "" included)
  // is given the one name of `names` that its written part begins (arguments ""), or, where no or several
  // names do (always for free text), is left out; the finish_reason stays "length" either way, as OpenAI's
  // for an answer max_tokens cut. push() never opens such a call (StreamedCalls::offer), so none went out.
  void finish(RunResult& r) const;

 private:
  // The calls in the text after the content, read as far as they are written: the pieces not yet let out.
  void read_calls(const std::string& delta, std::vector<ToolCallDelta>& out);

  AnswerCallsOptions calls_;
  bool progressive_;
  std::string text_;
  std::size_t sent_ = 0;  // the content let out: text_[0, sent_)
  // The text after the content, text_[reader_at_, end), read for calls (progressive only): started again
  // when the content grows, which it may only while no call has begun.
  std::optional<ToolCallReader> reader_;
  std::size_t reader_at_ = 0;
  StreamedCalls streamed_;  // the calls push() let out
};

// The names the tools' grammar lets `request`'s calls have: tool_choice's function, else its allowed_tools,
// else every tool's.
std::vector<std::string> grammar_tool_names(const ChatRequest& request);

// The error a stream ends with, in place of choice `choice`'s closing chunks, when its answer does not hold a
// call as it was streamed: 500, type "server_error", code "tool_call_stream_mismatch", param "tool_calls",
// the message naming the choice, the call (index, id, function) and how they differ.
ApiError tool_stream_error(const ToolStreamMismatch& m, int64_t choice);

}  // namespace orbit::serve
