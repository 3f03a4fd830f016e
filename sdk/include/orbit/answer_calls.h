// The tool calls of a finished answer as a client is given them: parse_tool_calls (orbit/tool_calls.h), then,
// for an answer max_tokens (or the position limit) cut, the call it was cut in settled, so that no half call
// markup stays in the content and no client reads a name no tool has. orbit serve (chat and Responses, whole
// and streamed) and Python's Window.generate read answers with it.
//
//   AnswerCallsOptions o;
//   o.format = ToolCallFormat::kHermes;
//   o.names = {"search", "open"};  // the calls were decoded under the tools' grammar
//   AnswerCalls a = read_answer_calls("Look. <tool_call>{\"name\": \"se", true, o);
//   // a.read.calls: [{name "search", arguments ""}], a.read.cut; a.read.content "Look."
//
// How a cut answer is settled:
//
//   cut inside a call's name        ("se", or "" before it began): the one of `names` its written part begins,
//                                   arguments "" (read.cut); where no or several do (always for free text, no
//                                   `names`), the call is left out (left_out)
//   cut after a call's mark, before  Hermes' <tool_call> with no closing mark after it, Mistral's [TOOL_CALLS]
//   its name began                  before an array not yet whole, Llama 3's <|python_tag|> or an object whose
//                                   first key is "name" (after whole calls and their "; ", where only a call
//                                   follows, one cut before that key is whole too): read as
//                                   CutToolCall::kForcedCall reads a call cut there (name ""), after the
//                                   whole calls before it (Mistral's whole items too), then settled as
//                                   above; its markup is never content (markup_cut)
//   cut inside a mark ("<tool_ca")  where the answer is calls from its first byte (`forced`, or `calls_or_json`
//                                   and it began as a call, "<" included), or right after whole calls (Hermes;
//                                   under the tools' grammar only a call follows a call), a call begun as above;
//                                   elsewhere (free text, where "<tool_ca" may be anything) left out of the
//                                   content, no call
//
// An answer that ended otherwise is parse_tool_calls(text, format) (CutToolCall::kContent). Either way, Llama
// 3's calls having no mark, an object a Llama 3 answer ends in (not `forced`; no <|python_tag|>) is read as a
// call only where it is one's start, {"name": a tool's name, "parameters" | "arguments": {...}}: one with
// another key, a name that is no string, or a name none of `tools` has (cut inside it: none begins) is the
// JSON it is, content as written, no call (a response_format's {"name": "Ada", "age": 3}, whole or cut).
// Torch-free; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/tool_calls.h"

namespace orbit {

// How an answer's calls were decoded.
struct AnswerCallsOptions {
  ToolCallFormat format = ToolCallFormat::kHermes;
  // The answer is calls from its first byte: Constraint::tool_calls with no constraint_trigger (tool_choice
  // "required" or a tool's name).
  bool forced = false;
  // The answer is a call or a JSON answer from its first byte (Constraint::choice of the tools' calls and the
  // JSON's constraint: tools under tool_choice "auto" beside a JSON response_format), in a format whose calls
  // begin with a mark (Hermes, Mistral). One that began as a call (after whitespace: the mark, or a start of
  // it no JSON text begins with, so not Mistral's lone "[") is read as a forced one; one that began as the JSON
  // is the JSON: nothing in it is taken for call markup.
  bool calls_or_json = false;
  // The names the tools' grammar lets a call have (tool_choice's function, else its allowed tools, else every
  // tool's); empty where the calls are free text (no grammar could be had): a call cut in its name is left out.
  std::vector<std::string> names;
  // parallel_tool_calls false: a free answer holding several calls keeps its first only (dropped counts the
  // others); where the one cut was among them, the answer is the first call, whole.
  bool one_call = false;
  // The names of the tools a call may name (the allowed tools where some are, else every tool's), whether or not
  // a grammar holds the calls; `names` where that is given. Llama 3's calls have no mark, so an object a cut
  // answer ends in is read as a call only where it can still be one: its name one of these (cut inside it:
  // the start of one). Empty: any name may be a call's.
  std::vector<std::string> tools;
};

struct AnswerCalls {
  ToolCallParse read;       // the content and calls, the cut one settled (read.cut: the last call is cut)
  bool markup_cut = false;  // call markup the cut left at the content's end was taken out of the content
  bool left_out = false;    // a call cut inside its name (or before it began) was left out
  std::size_t dropped = 0;  // AnswerCallsOptions::one_call: the calls after the first, left out
  // The answer is calls, none cut or left out and no markup taken out: OpenAI's finish_reason "tool_calls".
  bool whole() const { return !read.calls.empty() && !read.cut && !left_out && !markup_cut; }
};

// The calls of the answer `text` written in `options.format`; `ran_out`: max_tokens or the position limit
// ended it (else it ended at a stop, or was cancelled: read as written, CutToolCall::kContent).
AnswerCalls read_answer_calls(std::string_view text, bool ran_out, const AnswerCallsOptions& options);

}  // namespace orbit
