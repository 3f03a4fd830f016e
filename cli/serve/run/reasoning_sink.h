// A run's answers split into reasoning and content as they stream, under a reasoning parser (`--reasoning-parser`,
// run/reasoning.h): one ReasoningSplitter per choice sits before the tool-call reading (tool_stream.h), so calls
// and content are read from the text after the reasoning only:
//
//   decode ── text ──> ReasoningRun ── content ──> ToolCallStream (with tools) ──> the request's sink
//                            └──── reasoning ───> sink.on_reasoning (a streamed answer: the Responses
//                                                 events, or a chat chunk of its own), else the result
//
// At a choice's end (DecodeRequest::read_choice, before its calls are read) the whole answer is split again
// (split_reasoning, which the streamed pieces equal), so a non-streamed answer and a streamed one hold the same
// reasoning and content.
//
// Not thread-safe: one run owns it, on the thread that decodes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "serve/run/reasoning.h"
#include "serve/serve_types.h"

namespace orbit::serve {

class ReasoningRun {
 public:
  // How many of `tokens` write the answer's first `bytes` bytes (the fewest whose text reaches that far).
  using TokenCount = std::function<int64_t(const std::vector<int64_t>& tokens, std::size_t bytes)>;

  // `in_reasoning`: the answers begin inside the reasoning (starts_in_reasoning); `choices`: the run's n.
  ReasoningRun(bool in_reasoning, int64_t choices, TokenCount count);

  // `sink` (the request's) with each choice's text split on its way: the content goes on to `content`'s
  // on_text / on_choice_text (the tool-call sink's, or `sink` itself), the reasoning to sink.on_reasoning
  // (unset: only the result holds it). This object must outlive the returned sink.
  RunSink wrap(const RunSink& sink, const RunSink& content);

  // Choice `choice` ended: what its splitter held back goes out (the reasoning as above; the content in
  // r.unstreamed, which a tool-call reading after this replaces), r.reasoning is the whole answer's
  // reasoning, r.text its content, and r.usage.reasoning_tokens the tokens up to the reasoning's end (all of
  // them where it did not end). Returns whether the answer got past its reasoning (false: max_tokens or the
  // client ended it inside, and it has no content nor calls to read: a forced call was not begun).
  bool finish(int64_t choice, RunResult& r);

 private:
  bool push(int64_t choice, const std::string& delta);
  bool send_reasoning(int64_t choice, const std::string& text);

  bool in_reasoning_;
  std::vector<ReasoningSplitter> splitters_;
  TokenCount count_;
  RunSink sink_;     // the request's
  RunSink content_;  // where the content goes on
};

}  // namespace orbit::serve
