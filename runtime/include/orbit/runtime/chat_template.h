// Chat templates: a model's `chat_template` (tokenizer_config.json) rendered over a message list, as
// Hugging Face's apply_chat_template(messages, tools=..., add_generation_prompt=...) renders it.
//
// The engine is a small interpreter of the Jinja subset real chat templates use (if/elif/else, for with
// loop.*, set, namespace(), filters such as trim, tojson, length, selectattr, map, string methods such as
// strip and split, slicing, dict and list literals, whitespace control, raise_exception, strftime_now).
// Its output is byte-identical to @huggingface/jinja, the JavaScript engine HF uses for the same job
// (checked by test_chat_template_oracle), but where that engine and Python's Jinja2 (transformers'
// apply_chat_template, which models were trained with) disagree, where orbit follows Python: JSON integers too
// long for int64 (in the messages, a tool call's arguments, the tools) print and tojson as written, where
// JavaScript rounds them to doubles; floats print as Python's repr (1e-06, not 0.000001), None and booleans as
// Python prints them ("None", "True", where JavaScript's writes "" and "true"); strip('x')
// removes only the characters given and capitalize lowers the rest; strings are code points (an emoji is one,
// where JavaScript counts two UTF-16 units), whitespace is str.isspace()'s, and case mapping, title() and
// replace('') are Python's (test_chat_template_text). Unsupported syntax (macros, call blocks, unknown filters or
// tests) is refused with an error naming the template, the line and the construct.
//
// Templates and their variables come from outside the process, so both are bounded (limits far above what
// real templates use; runtime/src/jinja/limits.h): blocks and expressions nest at most 256 levels; the
// messages, tools and extra variables at most 128 (orbit/common/json_input.h); one rendering runs at most
// 1,000,000 loop iterations (range() makes at most as many items) and 10,000,000 steps (statements and
// expressions evaluated), builds strings and output of at most 64 MiB each, and builds, copies or scans at
// most 512 MiB of strings and lists in all. Past a limit is an orbit::Error naming what was exceeded and
// the limit, never a crash or an unbounded allocation.
//
// Thread-safety: a ChatTemplate is immutable after construction; render() may run concurrently.
#pragma once

#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/chat_content.h"

namespace orbit::runtime {

// One call in an assistant message: rendered to templates as
// {"id": id, "type": "function", "function": {"name": name, "arguments": <arguments parsed as JSON>}}; where
// `arguments` is not JSON (a call cut short by max_tokens, as OpenAI returns one), "arguments" is that text
// as a string, which templates written for Hugging Face print as given or through tojson.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments = "{}";  // a JSON object, as text (or any text: see above)
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool" ... (required, non-empty)
  std::string content;
  std::optional<std::string> name;          // passed as message.name when set
  std::optional<std::string> tool_call_id;  // passed as message.tool_call_id when set (tool results)
  std::vector<ChatToolCall> tool_calls;     // passed as message.tool_calls when non-empty
  // An earlier assistant turn's reasoning (its thinking before the answer), passed as message.reasoning_content
  // when set, as reasoning models' templates (Qwen3, QwQ, DeepSeek-R1 distills) read it; set but empty is
  // passed as "" (such templates then take no reasoning from the content either).
  std::optional<std::string> reasoning_content;
  // What message.content is: `content` (kText), None (kNull) or undefined, the key left out (kAbsent), as
  // Hugging Face passes a dict's content of None or none (orbit/common/chat_content.h). Not kText: content
  // must be "" (render refuses other text, naming the message).
  ContentForm content_form = ContentForm::kText;
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;  // end with the header of the assistant's next turn
  std::string tools_json;             // a JSON array of tool schemas; empty: no `tools` variable
  std::string extra_json;             // a JSON object of further variables (e.g. {"date_string": ...})
  // How errors name tools_json and extra_json, e.g. "sync: ChatOptions::tools_json" for a caller that took
  // them as arguments; empty: the template's origin and the field ("<origin>: tools_json").
  std::string tools_name;
  std::string extra_name;
  // The time strftime_now formats in render and in prepare's renderings; nullopt: template_clock() then.
  std::optional<std::time_t> now;
};

class ChatTemplate;

// What strftime_now gave a rendering: each format string it was called with, once, and the text it returned.
// A rendering is a function of the template, its messages and variables, and these texts: it calls
// strftime_now with a format only after what it computed before the call, from those, chose that format, so two
// renderings whose calls return the same texts make the same calls and the same output.
// A rendering that calls it with more than 32 formats, or one longer than 256 bytes, records instead a last
// read that holds at no time (the empty format and a text other than ""), so what rests on it is never reused.
using ClockReads = std::vector<std::pair<std::string, std::string>>;  // (format, text), in call order

// The text strftime_now(format) gives at `now`: strftime's, in local time (TZ), at most 255 bytes (longer: "").
std::string format_time(const std::string& format, std::time_t now);
// Whether every format in `reads` gives its text at `now` (format_time): then a rendering that made those calls
// makes them again at `now` and renders the same text.
bool clock_reads_hold(const ClockReads& reads, std::time_t now);

// The time a rendering's strftime_now formats: the system clock (std::time), or the time set_template_clock set.
std::time_t template_clock();
// For tests: every rendering reads `now` as the time (nullopt: the system clock again). Process-wide; thread-safe.
void set_template_clock(std::optional<std::time_t> now);

// A message list and the options' variables (tools, extra) converted once into the template's values, so that
// rendering several prefixes of one list (Window::sync renders every prefix: orbit/sync.h, step 2) converts the
// messages and parses the tools and extra JSON once instead of once per render. It holds the time its renderings
// read (ChatRenderOptions::now, else template_clock when it was made), so every prefix of one list renders at one time.
// Made by ChatTemplate::prepare; immutable and cheap to copy (it shares what it holds): render_prefix may run
// concurrently on one.
class PreparedChat {
 public:
  PreparedChat() = default;
  std::size_t size() const;  // the number of messages
  std::time_t now() const;   // the time strftime_now formats in its renderings

 private:
  friend class ChatTemplate;
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

class ChatTemplate {
 public:
  // `source` is the template text; `origin` names it in errors; bos/eos fill bos_token and eos_token.
  // Throws orbit::Error on a template the interpreter does not support, naming origin and line.
  ChatTemplate(const std::string& source, std::string origin, std::string bos_token = "", std::string eos_token = "");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders `messages`. Throws orbit::Error on a message without a role, malformed or too deeply nested
  // tools/arguments/extra JSON, what the template itself refuses (raise_exception), or a rendering past
  // the limits above, naming the template.
  std::string render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {}) const;
  // The same with the messages as a JSON array of objects (any fields: they reach the template as-is).
  std::string render_json(const std::string& messages_json, const ChatRenderOptions& options = {}) const;

  // `messages` and `options` (but for add_generation_prompt, given to each render) converted for
  // render_prefix. Throws what render(messages, options) throws converting them, in the same order: a message
  // without a role, a tool call's arguments nested too deeply, tools or extra JSON that is malformed or of the
  // wrong type. What the template itself refuses is thrown by render_prefix.
  PreparedChat prepare(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {}) const;
  // The first `count` (<= chat.size()) messages rendered: byte for byte render(messages[0, count), options
  // with add_generation_prompt) at chat.now(), and the same errors but for those prepare threw. `reads`, when
  // given, gets the strftime_now calls the rendering made that it does not hold yet (one per format).
  std::string render_prefix(const PreparedChat& chat, std::size_t count, bool add_generation_prompt,
                            ClockReads* reads = nullptr) const;

  // The template's content key: SHA-256 (hex) of its source, bos_token and eos_token, which is all a
  // rendering depends on besides its messages and variables (the origin only names errors).
  const std::string& key() const { return key_; }
  // Whether a rendering is a function of the template, messages and variables alone: false when the
  // template can read the clock (it names strftime_now), whose renderings are a function of those and what
  // strftime_now returned (ClockReads).
  bool deterministic() const { return deterministic_; }

  const std::string& origin() const { return origin_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string origin_;
  std::string key_;
  bool deterministic_ = true;
};

// The chat template of a Hugging Face directory (or of a tokenizer_config.json path): its
// "chat_template" (a string, or a list of {name, template} whose "default" is taken), with bos_token and
// eos_token from the same file. std::nullopt when the file has no chat template; throws orbit::Error
// when the file is missing or malformed.
std::optional<ChatTemplate> load_chat_template(const std::string& path);

}  // namespace orbit::runtime
