// What a chat message's `content` is to a chat template: text, None, or left out. Hugging Face's
// apply_chat_template hands a template the message dicts as given, and templates tell the three apart: an
// assistant turn of tool calls alone comes with content None from OpenAI's clients, and templates written for
// it test `message.content is none` (DeepSeek-V3's, Mistral's) or `message.content is string` (Qwen3's), where
// "" takes the other branch. Python's Jinja prints None as "None" and a missing key as "".
#pragma once

#include <cstdint>

namespace orbit {

enum class ContentForm : std::uint8_t {
  kText,    // message.content is the text (possibly ""): the default
  kNull,    // message.content is None (JSON null, Python None); the text must be empty
  kAbsent,  // the message has no content key (message.content is undefined); the text must be empty
};

// "text", "null" or "absent", for errors and reports.
inline const char* content_form_name(ContentForm form) {
  switch (form) {
    case ContentForm::kNull: return "null";
    case ContentForm::kAbsent: return "absent";
    case ContentForm::kText: break;
  }
  return "text";
}

}  // namespace orbit
