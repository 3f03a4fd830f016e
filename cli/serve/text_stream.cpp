#include "serve/text_stream.h"

#include <algorithm>

namespace orbit::serve {

std::size_t complete_utf8_prefix(const std::string& text) {
  const std::size_t n = text.size();
  // Look back at most 3 bytes for the lead byte of the last sequence.
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    std::size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    if ((c & 0xF0) == 0xE0) need = 3;
    if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

TextStream::TextStream(std::function<std::string(const std::vector<int64_t>&)> decode, std::vector<std::string> stops)
    : decode_(std::move(decode)), stops_(std::move(stops)) {}

std::string TextStream::text_now() {
  std::string text = decode_(tokens_);
  std::size_t cut = std::string::npos;
  for (const std::string& stop : stops_) cut = std::min(cut, text.find(stop));
  if (cut != std::string::npos) {
    text.resize(cut);
    stopped_ = true;
  }
  return text;
}

std::string TextStream::push(int64_t token) {
  if (stopped_) return "";
  tokens_.push_back(token);
  const std::string text = text_now();
  std::size_t safe = text.size();
  if (!stopped_) {
    safe = complete_utf8_prefix(text);
    // Hold back a tail that could be the start of a stop string.
    for (const std::string& stop : stops_) {
      for (std::size_t k = std::min(stop.size() - 1, safe); k > 0; --k) {
        if (text.compare(safe - k, k, stop, 0, k) == 0) {
          safe -= k;
          break;
        }
      }
    }
  }
  // Release only what extends the text released so far (a decoder may rewrite its last piece).
  if (safe <= released_.size() || text.compare(0, released_.size(), released_) != 0) return "";
  std::string delta = text.substr(released_.size(), safe - released_.size());
  released_ += delta;
  return delta;
}

std::string TextStream::finish() {
  const std::string text = text_now();
  if (text.size() <= released_.size() || text.compare(0, released_.size(), released_) != 0) return "";
  std::string rest = text.substr(released_.size());
  released_ = text;
  return rest;
}

}  // namespace orbit::serve
