// A tokenizer's vocabulary as the bytes each token writes (orbit/constraint.h: TokenBytes), read through the
// tokenizer's own decoding and cached per tokenizer content.
//
// Each id's bytes are its text decoded after an ordinary token (so a decoder's start-of-text rules do not
// apply). Where that text holds U+FFFD because the token is part of a character (a byte piece "<0xNN>", a
// byte-level BPE piece), the piece gives the bytes instead. Ids that decode to nothing (BOS, EOS, special
// tokens) and ids the tokenizer does not have get none. Tokens whose text starts with a space are decoded
// once more after BOS: where the decoder drops that space at the start of a text, TokenBytes::at_start
// holds what they write there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/constraint.h"

namespace orbit::runtime {
class Tokenizer;
}

namespace orbit::constrain {

// What the vocabulary is read through (a runtime tokenizer, or an Engine's public calls).
struct TokenizerCalls {
  int64_t model_vocab = 0;  // ids [0, model_vocab) are the logits' rows
  int64_t bos = -1;
  std::function<std::string(int64_t)> piece;  // throws for an id the tokenizer does not have
  std::function<std::string(const std::vector<int64_t>&, int64_t)> decode;
  std::function<std::vector<int64_t>(std::string_view)> encode;  // without special tokens
};

std::shared_ptr<const TokenVocabulary> tokenizer_vocabulary(const TokenizerCalls& calls);
std::shared_ptr<const TokenVocabulary> tokenizer_vocabulary(const runtime::Tokenizer& tokenizer, int64_t model_vocab);

// Whether the text decoded after `previous` starts a text (its first token writes TokenBytes::at_start's
// bytes): true when the vocabulary has such tokens and decoding one after `previous` gives them.
bool starts_text(const TokenVocabulary& vocabulary, const runtime::Tokenizer& tokenizer, int64_t previous);

}  // namespace orbit::constrain
