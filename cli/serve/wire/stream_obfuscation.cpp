#include "serve/wire/stream_obfuscation.h"

#include <string_view>

namespace orbit::serve {

namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kOpen = ",\"obfuscation\":\"";  // then the characters and a closing quote

}  // namespace

StreamObfuscation::StreamObfuscation(bool on) : on_(on) {
  if (!on_) return;
  std::random_device entropy;
  random_.seed((uint64_t{entropy()} << 32) | entropy());
}

std::string StreamObfuscation::pad(std::string event) {
  if (!on_) return event;
  const std::size_t close = event.rfind('}');
  if (close == std::string::npos) return event;  // no JSON object: nothing to pad ([DONE] is never passed)
  // The event with an empty field, then as many characters as bring it to the next multiple of kBlock past
  // it (kBlock when it is one already: the field is never empty).
  const std::size_t bare = event.size() + kOpen.size() + 1;
  const std::size_t count = kBlock - bare % kBlock;
  std::string field(kOpen);
  field.reserve(kOpen.size() + count + 1);
  std::uniform_int_distribution<std::size_t> pick(0, kAlphabet.size() - 1);
  for (std::size_t i = 0; i < count; ++i) field += kAlphabet[pick(random_)];
  field += '"';
  event.insert(close, field);
  return event;
}

}  // namespace orbit::serve
