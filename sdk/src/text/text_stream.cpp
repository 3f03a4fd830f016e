// Generated tokens to streamed text (orbit/text_stream.h).
#include "orbit/text_stream.h"

#include <algorithm>

namespace orbit {

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

TextStream::TextStream(std::function<std::string(const std::vector<int64_t>&)> decode, std::vector<std::string> stops,
                       std::function<bool(const std::string&)> may_stop_before)
    : decode_(std::move(decode)), stops_(std::move(stops)), may_stop_before_(std::move(may_stop_before)) {}

namespace {

constexpr std::size_t kContext = 4;  // tokens before the anchor decoded with the window, then taken off
constexpr std::size_t kWindow = 32;  // tokens after the anchor before it moves on
constexpr std::size_t kBehind = 8;   // ... to this many tokens before the last (their text may still change)

}  // namespace

std::string TextStream::decoded_prefix(std::size_t n) {
  const std::vector<int64_t> whole(tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(n));
  if (anchor_ == 0) return decode_(whole);
  const auto from = tokens_.begin() + static_cast<std::ptrdiff_t>(anchor_ - std::min(kContext, anchor_));
  if (head_anchor_ != anchor_) {  // the context's own text, decoded once per anchor
    head_ = decode_(std::vector<int64_t>(from, tokens_.begin() + static_cast<std::ptrdiff_t>(anchor_)));
    head_anchor_ = anchor_;
  }
  const std::string& head = head_;
  const std::string window = decode_(std::vector<int64_t>(from, tokens_.begin() + static_cast<std::ptrdiff_t>(n)));
  if (window.compare(0, head.size(), head) != 0) return decode_(whole);
  return anchor_text_ + window.substr(head.size());
}

void TextStream::move_anchor(const std::string& text) {
  if (tokens_.size() < anchor_ + kWindow) return;
  const std::size_t n = tokens_.size() - kBehind;
  std::string prefix = decoded_prefix(n);
  if (complete_utf8_prefix(prefix) != prefix.size() || text.compare(0, prefix.size(), prefix) != 0) return;
  anchor_ = n;
  anchor_text_ = std::move(prefix);
}

std::string TextStream::text_now() {
  std::string text = decoded_prefix(tokens_.size());
  move_anchor(text);
  std::size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    std::size_t at = text.find(stop);
    while (at != std::string::npos && at < cut && may_stop_before_ && !may_stop_before_(text.substr(0, at))) {
      at = text.find(stop, at + 1);
    }
    cut = std::min(cut, at);
  }
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

}  // namespace orbit
