#include "serve/wire/chunk_text.h"

#include <cstdio>

namespace orbit::serve {

namespace {

// The length of the valid UTF-8 sequence starting at text[at], 0 when it is not one (overlong forms,
// surrogates and code points past U+10FFFF are not, as nlohmann's decoder rejects them).
std::size_t utf8_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[at + i]); };
  const auto tail = [&](std::size_t i) { return at + i < text.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return tail(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!tail(1) || !tail(2)) return 0;
    if (c == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && byte(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!tail(1) || !tail(2) || !tail(3)) return 0;
    if (c == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && byte(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

bool valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = utf8_length(text, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

}  // namespace

bool append_json_string(std::string& out, std::string_view text) {
  if (!valid_utf8(text)) return false;
  out.reserve(out.size() + text.size() + 2);
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return true;
}

ChunkText::ChunkText(const ResponseIds& ids, const std::string& object) : ids_(ids) {
  // The body's keys come out sorted (nlohmann::json's objects are std::maps): "choices" first, then these.
  const std::string fields =
      dump(nlohmann::json{{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}});
  tail_ = "," + fields.substr(1) + "\n\n";
}

std::string ChunkText::chat_text(const std::string& content, bool first, int64_t index, ChunkExtras extras) const {
  if (!first && !content.empty() && extras.reasoning.empty() && extras.logprobs.empty()) {
    std::string event;
    event.reserve(content.size() + tail_.size() + 96);
    event += "data: {\"choices\":[{\"delta\":{\"content\":";
    if (append_json_string(event, content)) {
      event += "},\"finish_reason\":null,\"index\":";
      event += std::to_string(index);
      event += ",\"logprobs\":null}]";
      event += tail_;
      return event;
    }
  }
  return sse(chat_chunk(ids_, content, first, "", index, std::move(extras)));
}

std::string ChunkText::completion_text(const std::string& text) const {
  std::string event;
  event.reserve(text.size() + tail_.size() + 96);
  event += "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":";
  if (!append_json_string(event, text)) return sse(text_completion(ids_, text, "", nullptr));
  event += "}]";
  event += tail_;
  return event;
}

}  // namespace orbit::serve
