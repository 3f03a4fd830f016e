// libFuzzer target for the Hugging Face tokenizer.json reader (parse_hf_tokenizer, what load_hf_tokenizer
// runs on the files' text). The input is a tokenizer.json, optionally followed by a NUL byte and a
// tokenizer_config.json (JSON text never holds a raw NUL). Reading must accept the bytes or throw
// orbit::Error; an accepted tokenizer then encodes and decodes a fixed text, where it may refuse an id
// with orbit::Error but must not crash.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/hf_tokenizer.h"

namespace rt = orbit::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, nul);
  const std::string_view config_json = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  std::unique_ptr<rt::HfTokenizer> tokenizer;
  try {
    tokenizer = rt::parse_hf_tokenizer(tokenizer_json, config_json, "tokenizer.json");
  } catch (const orbit::Error&) {
    return 0;  // refused with a message
  }
  try {
    const std::vector<int64_t> ids = tokenizer->encode("Once upon a time, <|endoftext|> a café ☕ 42!\n", true);
    (void)tokenizer->decode_ids(ids, false);
    (void)tokenizer->decode(ids, -1);
  } catch (const orbit::Error&) {
    // A tokenizer can be consistent enough to load and still lack what a text needs (an unknown byte
    // with no unk token): refusing with a message is fine.
  }
  return 0;
}
