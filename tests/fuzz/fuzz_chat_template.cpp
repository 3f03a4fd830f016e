// libFuzzer target for chat templates (orbit/runtime/chat_template.h: the lexer, parser and interpreter of
// runtime/src/jinja, and the variables ChatTemplate builds): the template source, optionally followed by a
// NUL byte and the messages as JSON, optionally followed by another NUL byte and the tools as JSON
// (template text and JSON text never hold a raw NUL). Without messages, a fixed conversation with a tool
// call and its result goes through ChatTemplate::render(ChatMessage...). Parsing and rendering must
// succeed or throw orbit::Error, within the limits of runtime/src/jinja/limits.h: no crash, no sanitizer
// report, no other exception, no output past kMaxStringBytes, and (libFuzzer's -rss_limit_mb and
// -timeout) no unbounded memory or time.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"
#include "src/jinja/limits.h"

namespace rt = orbit::runtime;

namespace {

std::vector<rt::ChatMessage> conversation() {
  rt::ChatMessage system{"system", "You are a careful assistant.", {}, {}, {}};
  rt::ChatMessage user{"user", "  Weather in Paris? caf\xc3\xa9 \xf0\x9f\x99\x82\n", "ann", {}, {}};
  rt::ChatMessage call{
      "assistant", "", {}, {}, {rt::ChatToolCall{"call1", "get_weather", R"({"city": "Paris", "n": 1.5})"}}};
  rt::ChatMessage result{"tool", "{\"temperature\": 21.5}", "get_weather", "call1", {}};
  return {system, user, call, result};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string source(input.substr(0, nul));
  const bool with_messages = nul != std::string_view::npos;
  std::string messages, tools;
  if (with_messages) {
    const std::string_view rest = input.substr(nul + 1);
    const std::size_t second = rest.find('\0');
    messages = std::string(rest.substr(0, second));
    if (second != std::string_view::npos) tools = std::string(rest.substr(second + 1));
  }
  try {
    const rt::ChatTemplate t(source, "fuzz.jinja", "<s>", "</s>");
    rt::ChatRenderOptions options;
    options.add_generation_prompt = size % 2 == 0;
    options.tools_json = tools;
    const std::string out = with_messages ? t.render_json(messages, options) : t.render(conversation(), options);
    if (out.size() > rt::jinja::kMaxStringBytes) std::abort();
  } catch (const orbit::Error&) {
    // refused with a message
  }
  return 0;
}
