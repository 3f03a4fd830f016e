// Step 1 of Window::sync's rendering (orbit/sync.h): a message list as the chat template reads it (which template,
// the messages converted, each chunk part a marker in its text) and the options the template renders with. Made in
// window_sync_chat.cpp, which also renders whole lists for Engine::render_chat and tokenize_chat; read by
// window_sync_render.cpp, which renders the list and cuts the rendering into units (steps 2-3).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "window/sync_render.h"

namespace orbit::detail {

class EngineCore;

// The template a list renders with: ChatOptions::chat_template, else the model's, else kPlainChatTemplate.
struct Chat {
  std::shared_ptr<const runtime::ChatTemplate> owned;  // options and plain: parsed once (detail::parsed_template)
  const runtime::ChatTemplate* tmpl = nullptr;
  std::string which;  // "options", "model", "plain"
};

Chat resolve_chat(const EngineCore& core, const ChatOptions& options);

// Runs f() for `caller`, the function the user called (sync, plan_sync, prepare_sync, render_chat,
// tokenize_chat): an orbit::Error it throws that does not begin with "<caller>: " (a chat template's own parse
// or render error, which names the template and its line) is thrown again, of the same type and source, with the
// caller before it, as the checks that name the caller themselves have it.
template <class F>
auto naming_caller(const char* caller, F&& f) -> decltype(f()) {
  const std::string prefix = std::string(caller) + ": ";
  const auto named = [&](const Error& e) { return std::string(e.what()).rfind(prefix, 0) == 0; };
  try {
    return f();
  } catch (const RefusedError& e) {
    if (named(e)) throw;
    throw RefusedError(prefix + e.what(), e.source());
  } catch (const Error& e) {
    if (named(e)) throw;
    throw Error(prefix + e.what(), e.source());
  }
}

// A chunk part's marker in the rendered text: bytes [begin, end), parts[part].
struct Marker {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t part = 0;
};

// `messages` as the template reads them. Each chunk part's content is a marker (U+E000, its index among the
// list's chunk parts, U+E001), the part collected into `parts`; with `parts` null, a chunk part is refused, naming
// `caller`. Throws orbit::Error for a message without a role, one with both content and parts, and an invalid or
// unregistered chunk.
std::vector<runtime::ChatMessage> to_runtime(const EngineCore& core, const std::vector<ChatMessage>& messages,
                                             std::vector<PartRef>* parts, const char* caller);

// The chunk parts' markers in `text`, in text order; each part exactly once. Errors name `caller`.
std::vector<Marker> find_markers(const std::string& text, const std::vector<PartRef>& parts, const char* caller);

// The runtime's options for `options`, its tools and extra variables named in errors as `caller`'s.
runtime::ChatRenderOptions render_options(const ChatOptions& options, const char* caller);

// Engine::render_chat and tokenize_chat (`caller`): the whole list rendered, chunk parts refused.
std::string render_text(const EngineCore& core, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const ChatOptions& options, const char* caller);

}  // namespace orbit::detail
