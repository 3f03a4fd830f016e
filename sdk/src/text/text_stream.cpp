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

namespace {

constexpr std::size_t kContext = 2;  // tokens before the anchor decoded with the window, then taken off
constexpr std::size_t kWindow = 6;   // tokens after the anchor before it moves on
constexpr std::size_t kBehind = 2;   // ... to this many tokens before the last (their text may still change)
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD, which a lossy decoder writes for unfinished bytes

}  // namespace

TextStream::TextStream(std::function<std::string(const std::vector<int64_t>&)> decode, std::vector<std::string> stops,
                       std::function<bool(const std::string&)> may_stop_before)
    : decode_(std::move(decode)), stops_(std::move(stops)), may_stop_before_(std::move(may_stop_before)) {
  keep_ = 4;  // complete_utf8_prefix's look-back
  for (const std::string& stop : stops_) {
    keep_ += stop.size();
    longest_stop_ = std::max(longest_stop_, stop.size());
  }
}

std::string TextStream::decode_range(std::size_t begin, std::size_t end) {
  slice_.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(begin),
                tokens_.begin() + static_cast<std::ptrdiff_t>(end));
  return decode_(slice_);
}

std::string TextStream::text_after(std::size_t n, std::size_t* base) {
  *base = 0;
  if (anchor_ == 0) return decode_range(0, n);
  const std::size_t from = anchor_ - std::min(kContext, anchor_);
  std::string window = decode_range(from, n);
  if (window.compare(0, head_.size(), head_) != 0) return decode_range(0, n);  // rewritten across the anchor
  *base = anchor_size_;
  window.erase(0, head_.size());
  return window;
}

void TextStream::move_anchor(bool extends) {
  const std::size_t n = tokens_.size();
  if (!extends || n < anchor_ + kWindow || n < retry_at_) return;
  retry_at_ = n + kBehind;  // where this move fails, the next try waits a few tokens
  const std::size_t to = n - kBehind;
  const std::size_t from = to - std::min(kContext, to);
  std::string head = decode_range(from, to);
  const std::string window = decode_range(from, n);
  // The new anchor must give the text of every token as the old one did (so a byte run or a token whose text
  // depends on tokens before the new context is seen here), its text must be released already (final, a
  // prefix of every later text) and end between characters.
  const std::size_t size = look_at_ + look_.size();
  if (window.compare(0, head.size(), head) != 0 || window.size() - head.size() > size - look_at_) return;
  const std::size_t end = size - (window.size() - head.size());
  if (end > released_.size() || look_.compare(end - look_at_, std::string::npos, window, head.size()) != 0) return;
  if (end < released_.size() && (static_cast<unsigned char>(released_[end]) & 0xC0) == 0x80) return;
  anchor_ = to;
  anchor_size_ = end;
  head_ = std::move(head);
}

bool TextStream::text_now() {
  std::size_t base = 0;
  const std::string rest = text_after(tokens_.size(), &base);
  // look_: the text from look_at_ on, enough of the released text before the window for what reads back.
  look_at_ = base - std::min(keep_, base);
  look_.assign(released_, look_at_, base - look_at_);
  look_ += rest;
  const std::size_t size = look_at_ + look_.size();
  const std::size_t r = released_.size();
  const bool extends = size >= r && look_.compare(0, r - look_at_, released_, look_at_, r - look_at_) == 0;
  // Stop strings ending inside the released text were looked at when it was released; one may start up to
  // its length minus one before the released end (the held tail is only the longest start of one).
  const std::size_t judged = extends ? r : base;
  const std::size_t start = judged - std::min(judged, longest_stop_ > 0 ? longest_stop_ - 1 : 0);
  std::size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    std::size_t at = look_.find(stop, start - look_at_);
    while (at != std::string::npos && look_at_ + at < cut &&
           (look_at_ + at + stop.size() <= judged || !may_stop_at(look_at_ + at))) {
      at = look_.find(stop, at + 1);
    }
    if (at != std::string::npos) cut = std::min(cut, look_at_ + at);
  }
  if (cut != std::string::npos) {
    look_.resize(cut - look_at_);
    stopped_ = true;
  }
  return extends && (cut == std::string::npos || cut >= r);
}

bool TextStream::may_stop_at(std::size_t at) const {
  if (!may_stop_before_) return true;
  std::string before = released_.substr(0, std::min(at, look_at_));
  if (at > look_at_) before.append(look_, 0, at - look_at_);
  return may_stop_before_(before);
}

std::size_t TextStream::safe_end() const {
  std::size_t safe = complete_utf8_prefix(look_);
  // A lossy decoder's U+FFFD at the end may become a character with the next byte token.
  const std::size_t floor = released_.size() - look_at_;
  while (safe >= floor + 3 && look_.compare(safe - 3, 3, kReplacement) == 0) safe -= 3;
  if (safe <= floor) return look_at_ + safe;
  // Hold back a tail that could be the start of a stop string.
  for (const std::string& stop : stops_) {
    for (std::size_t k = std::min(stop.size() - 1, safe); k > 0; --k) {
      if (look_.compare(safe - k, k, stop, 0, k) == 0) {
        safe -= k;
        break;
      }
    }
  }
  return look_at_ + safe;
}

std::string TextStream::push(int64_t token) {
  if (stopped_) return "";
  tokens_.push_back(token);
  const bool extends = text_now();
  const std::size_t safe = stopped_ ? look_at_ + look_.size() : safe_end();
  // Release only what extends the text released so far (a decoder may rewrite its last piece).
  std::string delta;
  if (extends && safe > released_.size()) {
    delta = look_.substr(released_.size() - look_at_, safe - released_.size());
    released_ += delta;
  }
  if (!stopped_) move_anchor(extends);
  return delta;
}

std::string TextStream::finish() {
  if (!text_now() || look_at_ + look_.size() <= released_.size()) return "";
  std::string rest = look_.substr(released_.size() - look_at_);
  released_ += rest;
  return rest;
}

}  // namespace orbit
