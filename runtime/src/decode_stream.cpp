// Incremental decoding (orbit/runtime/decode_stream.h).
#include "orbit/runtime/decode_stream.h"

namespace orbit::runtime {

namespace {

bool ends_incomplete(const std::string& text) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (text.size() >= kReplacement.size() &&
      text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
    return true;
  }
  // A tokenizer that returns raw bytes (llama2.c's) can end in a partial character instead.
  size_t i = text.size();
  size_t continuation = 0;
  while (i > 0 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80 && continuation < 4) --i, ++continuation;
  if (i == 0) return continuation > 0;
  const auto lead = static_cast<unsigned char>(text[i - 1]);
  const size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return need > continuation;
}

}  // namespace

DecodeStream::DecodeStream(const Tokenizer& tokenizer, int64_t previous) : tokenizer_(tokenizer), context_(previous) {}

std::string DecodeStream::step(int64_t id) {
  pending_.push_back(id);
  std::string text;
  try {
    text = tokenizer_.decode(pending_, context_);
  } catch (...) {
    pending_.pop_back();
    throw;
  }
  // Held back: an incomplete character, or no text yet (a special token, or a piece whose text depends on
  // what follows, such as a leading space that is stripped at the start).
  if (text.empty() || ends_incomplete(text)) return "";
  // Everything up to `id` is out: `id` becomes the context of what follows.
  context_ = id;
  pending_.clear();
  return text;
}

std::string DecodeStream::finish() {
  if (pending_.empty()) return "";
  std::string text = tokenizer_.decode(pending_, context_);
  context_ = pending_.back();
  pending_.clear();
  return text;
}

}  // namespace orbit::runtime
