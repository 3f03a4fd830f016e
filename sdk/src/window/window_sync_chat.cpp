// Step 1 of Window::sync's rendering (sync_chat.h): which chat template a list renders with, the list as that
// template reads it (chunk parts as markers), and the options it renders with; and Engine's whole-list renders
// (render_chat, tool_call_format, has_chat_template; tokenize_chat is in window_sync_render.cpp, with the tokens).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_core.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "orbit/tool_calls.h"
#include "window/sync_chat.h"
#include "window/sync_render.h"
#include "window/window_state.h"

namespace orbit {

namespace detail {

namespace {

// The text of a special token when the tokenizer reads that text back as exactly that token (Hugging
// Face tokenizers do for their added tokens; llama2.c's reads "<s>" as characters): "" otherwise.
std::string special_text(const runtime::Tokenizer& t, int64_t id) {
  if (id < 0) return "";
  try {
    std::string text = t.piece(id);
    if (!text.empty() && t.encode(text, false) == std::vector<int64_t>{id}) return text;
  } catch (const Error&) {
  }
  return "";
}

// Where a chunk part stands in the rendered text: U+E000, its index among the list's chunk parts, U+E001.
constexpr std::string_view kMarkOpen = "\xEE\x80\x80";
constexpr std::string_view kMarkClose = "\xEE\x80\x81";

// A message's content as the template sees it: the text parts, and a marker for each chunk part (collected
// into `parts`; null: chunk parts are refused, naming `caller`).
std::string content_text(const EngineCore& core, const ChatMessage& m, std::size_t i, std::vector<PartRef>* parts,
                         const char* caller) {
  if (m.parts.empty()) return m.content;
  ORBIT_CHECK(m.content.empty(),
              caller << ": messages[" << i << "]: content and parts are both set (give the text as a part)");
  std::string text;
  for (std::size_t j = 0; j < m.parts.size(); ++j) {
    const ContentPart& p = m.parts[j];
    if (!p.chunk) {
      text += p.text;
      continue;
    }
    ORBIT_CHECK(parts != nullptr,
                caller << ": " << part_field(i, j)
                       << " is a chunk part, which has no text (Window::sync and plan_sync place it)");
    ORBIT_CHECK(p.chunk->valid(),
                caller << ": " << part_field(i, j) << ".chunk is an invalid ChunkRef (default-constructed)");
    // An engine that forgets idle chunks (EngineOptions::max_idle_chunks) may have let go of one of its own: say
    // so, rather than only suggest another engine's, since the ChunkRef does not keep its chunk registered.
    const int64_t idle = core.options().max_idle_chunks;
    ORBIT_CHECK(core.registry().knows(p.chunk->key),
                caller << ": " << part_field(i, j) << ".chunk " << p.chunk->key.substr(0, 16)
                       << (p.chunk->label.empty() ? "" : " ('" + p.chunk->label + "')")
                       << " is not registered with this engine ("
                       << (idle > 0 ? "forgotten past EngineOptions::max_idle_chunks = " + std::to_string(idle) +
                                          " once no window held it, or a chunk of another engine? "
                                    : "a chunk of another engine? ")
                       << "register it here with add_tokens or add_embeddings)");
    text += std::string(kMarkOpen) + std::to_string(parts->size()) + std::string(kMarkClose);
    parts->push_back({static_cast<int64_t>(i), static_cast<int64_t>(j), *p.chunk});
  }
  return text;
}

// Where text of message `m` holds U+E000, the first character of a chunk part's marker ("content",
// "content[2].text", "tool_calls[0].function.arguments", ...); "" where none does.
std::string marker_text_field(const ChatMessage& m) {
  const auto holds = [](const std::string& s) { return s.find(kMarkOpen) != std::string::npos; };
  const auto holds_given = [&holds](const std::optional<std::string>& s) { return s && holds(*s); };
  if (holds(m.content)) return "content";
  for (std::size_t j = 0; j < m.parts.size(); ++j) {
    if (!m.parts[j].chunk && holds(m.parts[j].text)) return "content[" + std::to_string(j) + "].text";
  }
  if (holds_given(m.name)) return "name";
  if (holds_given(m.reasoning_content)) return "reasoning_content";
  if (holds_given(m.tool_call_id)) return "tool_call_id";
  for (std::size_t k = 0; k < m.tool_calls.size(); ++k) {
    const std::string call = "tool_calls[" + std::to_string(k) + "]";
    if (holds(m.tool_calls[k].id)) return call + ".id";
    if (holds(m.tool_calls[k].name)) return call + ".function.name";
    if (holds(m.tool_calls[k].arguments)) return call + ".function.arguments";
  }
  return "";
}

}  // namespace

Chat resolve_chat(const EngineCore& core, const ChatOptions& options) {
  Chat c;
  const runtime::ChatTemplate* model = options.chat_template.empty() ? core.chat_template() : nullptr;
  if (model != nullptr) {
    c.tmpl = model;
    c.which = "model";
    return c;
  }
  std::string bos;
  std::string eos;
  if (core.has_tokenizer()) {
    bos = special_text(core.tokenizer(), core.tokenizer().bos_id());
    eos = special_text(core.tokenizer(), core.tokenizer().eos_id());
  }
  const bool given = !options.chat_template.empty();
  c.owned = parsed_template(given ? options.chat_template : std::string(kPlainChatTemplate),
                            given ? "ChatOptions::chat_template" : "kPlainChatTemplate", bos, eos);
  c.tmpl = c.owned.get();
  c.which = given ? "options" : "plain";
  return c;
}

std::vector<runtime::ChatMessage> to_runtime(const EngineCore& core, const std::vector<ChatMessage>& messages,
                                             std::vector<PartRef>* parts, const char* caller) {
  std::vector<runtime::ChatMessage> out;
  out.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    ORBIT_CHECK(!m.role.empty(), caller << ": messages[" << i << "] has no role");
    ORBIT_CHECK(m.content_form == ContentForm::kText || (m.content.empty() && m.parts.empty()),
                caller << ": messages[" << i << "] has content and content_form " << content_form_name(m.content_form)
                       << " (None or a left-out content holds no text and no parts: use kText)");
    runtime::ChatMessage r;
    r.role = m.role;
    r.content = content_text(core, m, i, parts, caller);
    r.content_form = m.content_form;
    r.name = m.name;
    r.tool_call_id = m.tool_call_id;
    r.reasoning_content = m.reasoning_content;
    for (const ChatToolCall& call : m.tool_calls) r.tool_calls.push_back({call.id, call.name, call.arguments});
    out.push_back(std::move(r));
  }
  // The rendering is cut at the chunk parts' markers; with none, text may hold their character freely.
  for (std::size_t i = 0; parts != nullptr && !parts->empty() && i < messages.size(); ++i) {
    const std::string field = marker_text_field(messages[i]);
    ORBIT_CHECK(field.empty(), caller << ": messages[" << i << "]." << field
                                      << " holds U+E000, the character that marks chunk parts in the rendering "
                                         "(text must not contain it in a list with chunk parts)");
  }
  return out;
}

// The chunk parts' markers in `text`, in text order; each part exactly once. Errors name `caller`.
std::vector<Marker> find_markers(const std::string& text, const std::vector<PartRef>& parts, const char* caller) {
  std::vector<Marker> marks;
  if (parts.empty()) return marks;  // no marker was written: U+E000 in the text is the text's own
  std::vector<int64_t> seen(parts.size(), 0);
  for (std::size_t at = text.find(kMarkOpen); at != std::string::npos; at = text.find(kMarkOpen, at + 1)) {
    const std::size_t digits = at + kMarkOpen.size();
    const std::size_t close = text.find(kMarkClose, digits);
    std::size_t part = parts.size();
    const bool number = close != std::string::npos && close > digits && close - digits < 10 &&
                        text.find_first_not_of("0123456789", digits) == close;
    if (number) part = std::stoul(text.substr(digits, close - digits));
    ORBIT_CHECK(part < parts.size(),
                caller << ": the rendered messages hold U+E000, the character that marks chunk parts, "
                          "outside a chunk part (from the tools, the template or its variables: text must not "
                          "contain it in a list with chunk parts)");
    ++seen[part];
    marks.push_back({at, close + kMarkClose.size(), part});
  }
  for (std::size_t p = 0; p < parts.size(); ++p) {
    ORBIT_CHECK(seen[p] == 1, caller << ": the chat template rendered " << part_field(parts[p].message, parts[p].index)
                                     << " (a chunk part) " << seen[p]
                                     << " times; a chunk part must appear exactly once in the rendering");
  }
  return marks;
}

// The runtime's options for `options`, its tools and extra variables named in errors as `caller`'s.
runtime::ChatRenderOptions render_options(const ChatOptions& options, const char* caller) {
  runtime::ChatRenderOptions ro;
  ro.tools_json = options.tools_json;
  ro.extra_json = options.extra_json;
  ro.tools_name = std::string(caller) + ": ChatOptions::tools_json";
  ro.extra_name = std::string(caller) + ": ChatOptions::extra_json";
  ro.now = options.now;
  return ro;
}

// Engine::render_chat and tokenize_chat (`caller`): the whole list rendered, chunk parts refused.
std::string render_text(const EngineCore& core, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const ChatOptions& options, const char* caller) {
  return naming_caller(caller, [&] {
    const Chat chat = resolve_chat(core, options);
    runtime::ChatRenderOptions ro = render_options(options, caller);
    ro.add_generation_prompt = add_generation_prompt;
    return chat.tmpl->render(to_runtime(core, messages, nullptr, caller), ro);
  });
}

}  // namespace detail

std::time_t chat_clock() { return runtime::template_clock(); }

// ---- Engine ----

bool Engine::has_chat_template() const {
  const detail::OpHold hold(*core_);
  return core_->chat_template() != nullptr;
}

std::string Engine::render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const ChatOptions& options) const {
  const detail::OpHold hold(*core_);
  return detail::render_text(*core_, messages, add_generation_prompt, options, "render_chat");
}

ToolCallFormat Engine::tool_call_format(const ChatOptions& options) const {
  const detail::OpHold hold(*core_);  // "engine is closed" here, not read as a template refusing the probe below
  // An assistant message with one call, rendered as the template writes history: the way it writes the call
  // is the way it taught the model to write one. Its content is "", as orbit serve reads OpenAI's null; a template
  // that refuses it (one written for None beside calls) is given None.
  ChatMessage user;
  user.role = "user";
  user.content = "Call the tool.";
  ChatMessage assistant;
  assistant.role = "assistant";
  assistant.tool_calls.push_back({"call_orbitprobe", "orbit_probe", "{\"probe\": 1}"});
  ChatOptions probe = options;
  probe.tools_json =
      R"([{"type": "function", "function": {"name": "orbit_probe", "description": "A probe.", "parameters": )"
      R"({"type": "object", "properties": {"probe": {"type": "integer"}}}}}])";
  std::string text;
  for (const ContentForm form : {ContentForm::kText, ContentForm::kNull}) {
    assistant.content_form = form;
    try {
      text = render_chat({user, assistant}, false, probe);
      break;
    } catch (const Error&) {
      // a template that refuses tool calls in history writes none: kHermes below
    }
  }
  if (text.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::kMistral;
  if (text.find("<tool_call>") != std::string::npos) return ToolCallFormat::kHermes;
  if (text.find("<|python_tag|>") != std::string::npos || text.find("\"parameters\"") != std::string::npos)
    return ToolCallFormat::kLlama3;
  return ToolCallFormat::kHermes;
}

}  // namespace orbit
