// Tool calls in a model's text: the formats chat templates teach models to call tools in, and a parser that
// reads them back as OpenAI-style calls (orbit/sync.h's ChatToolCall: an id, a function name, the
// arguments as JSON text).
//
//   hermes    <tool_call>{"name": "f", "arguments": {...}}</tool_call>, one block per call, text around
//             them is content (Hermes, Qwen2.5, ChatML-with-tools templates, and kPlainChatTemplate)
//   llama3    the whole answer a JSON object {"name": "f", "parameters": {...}} (or "arguments"), optionally
//             after <|python_tag|>; several separated by ";" (Llama 3.1 / 3.2 JSON tool calling)
//   mistral   [TOOL_CALLS] followed by a JSON array of {"name", "arguments", "id"?}; text before it is
//             content (Mistral's v3 tokenizer templates)
//
// Engine::tool_call_format(options) says which one a template uses: it renders an assistant message holding a
// tool call with the template and looks at how the call was written.
//
//   orbit::ToolCallParse r = orbit::parse_tool_calls(generation.text, orbit::ToolCallFormat::kHermes);
//   if (!r.calls.empty()) { ... run r.calls[i].name with r.calls[i].arguments, send the results back ... }
//
// A call is read only when it is complete and well formed: a block cut by max_tokens, JSON that does not
// parse, a name that is not a non-empty string, or arguments that are not a JSON object leave the text as
// content (ToolCallParse::malformed says so). An answer that max_tokens ended inside a call can instead give
// that call as far as it was written (CutToolCall::kCall), as OpenAI returns one. A call's arguments are the model's
// text less the whitespace between tokens: numbers of any length and string escapes come back as written. Torch-free;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/constraint.h"
#include "orbit/sync.h"

namespace orbit {

enum class ToolCallFormat { kHermes, kLlama3, kMistral };

const char* tool_call_format_name(ToolCallFormat format) noexcept;  // "hermes", "llama3", "mistral"
// The format named `name` (as tool_call_format_name writes it); throws orbit::Error naming `what` and the
// known names otherwise.
ToolCallFormat parse_tool_call_format(std::string_view name, std::string_view what = "tool call format");

struct ToolCallParse {
  std::string content;              // the text that is not a call (trimmed); "" when it is all calls
  std::vector<ChatToolCall> calls;  // in order; ids "call_" + 24 random letters and digits unless given
  bool malformed = false;           // something started like a call but was not one (left in content)
  bool cut = false;                 // the last of `calls` is cut short (CutToolCall::kCall): not a whole call
  // With `cut`: the last call's name string was closed before the cut (its name is the one meant, only its
  // arguments were cut, maybe before they began). A server that streams calls sends a call's name once this
  // holds of the text so far, then the arguments as they grow (each cut reading's a prefix of the next one's).
  bool cut_name_whole = false;
};

// What parse_tool_calls makes of a text that ends inside a call, as an answer ended by max_tokens may.
enum class CutToolCall {
  kContent,  // the call stays content, flagged malformed: no call is read that was not finished
  // The call is the last of ToolCallParse::calls, flagged `cut`: its name as far as it was written (a cut
  // name is a prefix of the name meant), its arguments the JSON text written so far, less the whitespace
  // between tokens (not valid JSON: "" before they begin, `{"city": "Par` within), an id; what OpenAI returns
  // for a call cut by max_tokens. Only a call whose "name" had begun; before that the text stays content.
  // A whole call whose closing mark was cut is an ordinary call.
  kCall,
  // As kCall, for a text that is calls from its first byte (decoded under Constraint::tool_calls with no
  // constraint_trigger: tool_choice "required" or a tool's name), so that wherever max_tokens cut it the
  // answer is a cut call: one cut before its name began (inside the opening mark, e.g. "<tool_cal", or
  // before the name's first character) is a call flagged `cut` with name "" and arguments "", the content
  // "". An empty text (nothing decoded) has no call. Meant only for such a text: any other that reads no
  // call is taken for one cut before its name too.
  kForcedCall,
};

// The calls in `text` written in `format`.
//
//   const bool ran_out = g.stop_reason == "max_tokens" || g.stop_reason == "position_limit";
//   ToolCallParse r = parse_tool_calls(g.text, format, ran_out ? CutToolCall::kCall : CutToolCall::kContent);
//   // (CutToolCall::kForcedCall instead of kCall where the answer was decoded as a forced call)
//   if (r.cut) { ... r.calls.back() was cut by max_tokens: ask again with more room, do not run it ... }
ToolCallParse parse_tool_calls(std::string_view text, ToolCallFormat format, CutToolCall cut = CutToolCall::kContent);

// The calls of a text that grows, as a streamed answer does, read after each piece: read() gives what
// parse_tool_calls(text(), format, CutToolCall::kCall) gives of the calls at every length, at the cost of the
// piece appended rather than of the text. A call complete and followed by what cannot change it (Hermes: its
// closing mark; Llama 3: the ";" after it) is read once and kept, and so is the end of the calls (Llama 3: an
// object that is not a call). A Hermes block ends at the first closing mark before which it is a call: a mark
// inside its strings (an argument holding "</tool_call>") does not end it. The call being written is read as it grows:
// append() reads only the new bytes of it, and read() copies what they made (a call's arguments) without reading its
// text again, but for the few tokens between the end of its object and its closing mark or ';', where it is parsed
// whole. Mistral's one array is read whole each time (Constraint::tool_calls writes one call in it), and so is a Llama
// 3 text with a NUL byte before its first ';' (nlohmann's parser ends a text there).
//
//   ToolCallReader reader(ToolCallFormat::kHermes);
//   for (const std::string& delta : deltas) {
//     reader.append(delta);
//     const ToolCallReading now = reader.read();  // now.calls: those written so far, the last maybe cut
//   }
//
// A reader of many calls that has handled the complete ones asks for the rest alone, so that a token costs
// nothing per call already complete (neither appending nor reading scans or copies them again):
//
//   const ToolCallReading now = reader.read(done);  // now.calls: calls [done, ...), now.first == done
//   done = std::max(done, now.complete);             // those calls never change while a reading holds them
//
// The call being written grows by a token's bytes; a caller that keeps its arguments hands back how many
// bytes it holds, so that neither the reader nor the caller copies or compares those again:
//
//   const ToolCallReading now = reader.read(done, {grown, held.size()});  // grown: an earlier reading's
//   held.resize(now.arguments_from);       // the bytes it held that are still the call's (all, as it grows)
//   held += now.calls.back().arguments;    // held: the last call's arguments (when now.calls is not empty)
//   grown = now.growing;
//
// Ids: a kept call keeps the id it was read with; one read again gets a fresh one each time (unless the text
// gives it), as parse_tool_calls' calls do. Not thread-safe; copyable.
struct ToolCallReading {
  std::vector<ChatToolCall> calls;  // ToolCallParse::calls from index `first` on
  bool cut = false;                 // ToolCallParse::cut
  bool cut_name_whole = false;      // ToolCallParse::cut_name_whole
  std::size_t first = 0;            // the index of calls[0] among all the reading's calls
  // The reading's first `complete` calls are complete and kept: every later reading holds them as they are
  // now, or (Llama 3, after a ';'-separated piece that is not a call) holds no calls at all.
  std::size_t complete = 0;
  // Nonzero where the last call is the one being written and its arguments are read as they grow: every
  // reading of this reader that gives the same number reads them from one growing text, so of two such
  // readings' arguments the shorter is a prefix of the longer. Numbers are never reused (not by another call,
  // nor by another reader, a copy included). 0: no such promise.
  uint64_t growing = 0;
  // How many of the last call's first argument bytes calls.back().arguments leaves out (ToolCallHeld).
  std::size_t arguments_from = 0;
};

// What a caller of ToolCallReader::read holds of the arguments of the call being written: the first `bytes`
// bytes of those an earlier reading read under ToolCallReading::growing == `growing` (0: nothing held).
struct ToolCallHeld {
  uint64_t growing = 0;
  std::size_t bytes = 0;
};

class ToolCallReader {
 public:
  explicit ToolCallReader(ToolCallFormat format);
  ~ToolCallReader();
  ToolCallReader(const ToolCallReader& other);
  ToolCallReader& operator=(const ToolCallReader& other);
  ToolCallReader(ToolCallReader&& other) noexcept;
  ToolCallReader& operator=(ToolCallReader&& other) noexcept;

  // Appends `more` to the text; keeps the calls it completes. Costs `more` and the call it is in: the search
  // for a closing mark or ';' resumes where the last one stopped.
  void append(std::string_view more);
  // The calls in text() as parse_tool_calls(text(), format, CutToolCall::kCall) reads them, from index
  // `first` on (ToolCallReading::first; none when there are no more): the calls before it are not copied.
  // Where the last call's arguments still grow under `held.growing`, their first min(held.bytes, size) bytes
  // are left out of calls.back().arguments (ToolCallReading::arguments_from says how many): a token then
  // costs the bytes it adds, not the call's arguments. Otherwise they are whole (arguments_from 0).
  ToolCallReading read(std::size_t first = 0, ToolCallHeld held = {}) const;
  const std::string& text() const { return text_; }

 private:
  struct Open;  // the call being written (text/tool_call_open.h)
  struct Scan;  // how far keep_hermes() or keep_llama3() searched the text after kept_

  void keep_hermes();  // keeps the blocks closed since kept_at_
  void keep_llama3();  // keeps the objects a ";" ends since kept_at_
  void extend_open();  // reads what append() added to the call being written

  ToolCallFormat format_;
  std::string text_;
  std::size_t kept_at_ = 0;         // text_[0, kept_at_) is read: its calls are kept_
  std::vector<ChatToolCall> kept_;  // the complete calls in text_[0, kept_at_)
  bool broken_ = false;             // Llama 3: the piece before text_[kept_at_] is not a call
  bool whole_ = false;              // Llama 3: a NUL byte before the first ';': read the text whole each time
  std::unique_ptr<Open> open_;      // Hermes, Llama 3: the call after kept_, as far as it is read
  std::unique_ptr<Scan> scan_;      // Hermes, Llama 3: the search for the end of the call after kept_
};

// How much of `text` can be streamed as content before the answer is over: the bytes before anything that
// is, or may still become, the start of a call in `format` (the whole text when nothing is). A server that
// streams deltas holds back the rest until the run ends, then parses it.
std::size_t tool_call_free_prefix(std::string_view text, ToolCallFormat format);

// A fresh OpenAI-style call id: "call_" and 24 random letters and digits.
std::string new_tool_call_id();

// How Constraint::tool_calls writes calls in `format` (orbit/constraint.h), so that parse_tool_calls reads
// them back: Hermes' <tool_call>{"name", "arguments"}</tool_call>; Llama 3's bare {"name", "parameters"}
// objects separated by "; "; Mistral's [TOOL_CALLS] [{"name", "arguments"}] (one call). `only` names the one
// tool to call ("" = any of them); `max_calls` > 1 allows parallel calls (not in the Mistral format).
//
//   GenerateOptions o;
//   o.constraint = Constraint::tool_calls(tools_json, tool_call_options(ToolCallFormat::kHermes));
//   ToolCallParse calls = parse_tool_calls(window.generate(query, o).text, ToolCallFormat::kHermes);
ToolCallOptions tool_call_options(ToolCallFormat format, std::string only = "", int32_t max_calls = 1);

// The text that starts a call in `format` ("<tool_call>", "[TOOL_CALLS]"), or "" where calls have no mark
// (Llama 3's bare objects). Under tool_choice "auto" it is GenerateOptions::constraint_trigger: the answer
// is free text until the model writes it, then calls valid under tool_calls()'s constraint.
//
//   o.constraint = Constraint::tool_calls(tools_json, tool_call_options(format));
//   o.constraint_trigger = tool_call_trigger(format);
std::string tool_call_trigger(ToolCallFormat format);

}  // namespace orbit
