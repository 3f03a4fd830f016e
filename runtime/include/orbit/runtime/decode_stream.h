// Incremental decoding for streaming generated text: feed ids one at a time, get back the text each one
// completes. Works with any Tokenizer; needed where one character spans several tokens (byte-level BPE,
// "<0xNN>" byte fallback), where decoding a token alone would cut a character in half.
//
// Guarantee: every string returned is valid UTF-8 (for a tokenizer whose decode returns UTF-8, as
// HfTokenizer's always does, or raw bytes that form it). The concatenation of all step() results and finish()
// equals tokenizer.decode(all ids, previous) wherever an id's text depends on at most the id before it
// (true of llama2.c's and of the tokenizer.json pipelines orbit reads). A step whose text ends in an incomplete
// character (seen as a trailing U+FFFD) returns "" and holds that text back until a later id completes it, or finish()
// releases it (with U+FFFD where the bytes never formed a character).
//
// Cost: each step decodes the ids since the last text it returned, plus one id of context.
// Thread-safety: not thread-safe (one stream per generation); the tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/runtime/tokenizer.h"

namespace orbit::runtime {

class DecodeStream {
 public:
  // `previous`: the id before the first one fed (-1: none), as in Tokenizer::decode.
  explicit DecodeStream(const Tokenizer& tokenizer, int64_t previous = -1);

  // The text that `id` completes; "" while a character is still incomplete or nothing has text yet. Throws orbit::Error
  // for an id outside the vocabulary (the stream is then unchanged).
  std::string step(int64_t id);
  // Whatever is held back; the stream is then empty again (its context is the last id fed).
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  int64_t context_;               // the id before pending_ (-1: none)
  std::vector<int64_t> pending_;  // ids whose text has not been returned yet
};

}  // namespace orbit::runtime
