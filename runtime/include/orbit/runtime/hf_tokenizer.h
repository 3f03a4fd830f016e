// Hugging Face tokenizer.json, read and applied as the Rust `tokenizers` library (0.22) does, so that ids
// and decoded text are identical to Hugging Face's (tests/cpp/test_hf_tokenizer_oracle.cpp checks this
// against the library itself).
//
// Pipeline of encode(text, add_special):
//   1. added tokens with normalized=false are cut out of the raw text (added_tokens, with their special,
//      lstrip, rstrip and single_word flags);
//   2. each remaining piece is normalized, and added tokens with normalized=true are cut out of it;
//   3. each remaining piece is pre-tokenized into words and each word is tokenized by the BPE model;
//   4. when add_special: the special tokens around the sequence. Where tokenizer_config.json beside the
//      file sets add_bos_token or add_eos_token, those decide (BOS first when add_bos_token, EOS last when
//      add_eos_token; a key that is absent counts as false), as transformers does for Llama-style
//      tokenizers; otherwise the file's post_processor does (TemplateProcessing's single-sequence
//      template, RobertaProcessing/BertProcessing, ByteLevel adds nothing).
// Components read: see runtime/src/hf/pipeline.h (normalizers, pre-tokenizers, decoders) and hf/bpe.h
// (the BPE model). Any other component throws orbit::Error naming it and the file. The file's truncation
// and padding settings are ignored: orbit never truncates or pads. Text must be valid UTF-8.
//
// Prefix-stable (Tokenizer::prefix_stable, encode_with_bytes) when: no pre-tokenizer; no normalizer, or a
// per-character one (Prepend; Replace of a String of one character by non-empty content; Sequences of
// these); a BPE model without ignore_merges, continuing_subword_prefix or end_of_word_suffix, and not byte
// fallback with an unk_token and some "<0xNN>" pieces but not all; no added token with lstrip, rstrip or
// single_word. SentencePiece-style files such as TinyStories-656K's are; byte-level ones (GPT-2, Qwen,
// Llama 3) are not. Prefix-stable ones also resume an encode at a cut (Tokenizer::encode_rest, whose header
// states the safe-cut rule for tokenizer.json: added tokens' characters, the normalizer's mapping, the merges).
//
// Decoding: ids -> tokens (an added token's content, else the model's token) -> the decoder chain -> text.
// The text is always valid UTF-8: bytes that do not form UTF-8 (a partial character) become U+FFFD, as
// in the Rust library. For streaming, runtime::DecodeStream (decode_stream.h) emits text only once its
// characters are complete.
//
// Thread-safety: every member is safe to call from any thread (a loaded tokenizer changes only its BPE
// model's cache of split words, behind a lock; ORBIT_BPE_CACHE_WORDS sets its size, runtime/src/hf/bpe.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/runtime/tokenizer.h"

namespace orbit::runtime {

class HfTokenizer : public Tokenizer {
 public:
  // encode(text, bos) of Tokenizer adds the special tokens of step 4 when `bos`. decode(ids, previous)
  // leaves special tokens out (like the llama2.c tokenizer's BOS and EOS) and decodes `ids` as if they
  // followed `previous`: the text decode(previous + ids) adds to decode(previous). previous = -1 or a
  // special token: `ids` start the text (a decoder's start-of-text rule, such as stripping one leading
  // space, applies to them).

  // The decoded text of `ids` alone; special tokens produce their content unless skip_special_tokens.
  // Throws orbit::Error naming an id that no token has.
  virtual std::string decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;
  // Whether `id` is an added token marked special.
  virtual bool is_special(int64_t id) const = 0;
};

// Reads `path`: a tokenizer.json file, or a directory holding one (a Hugging Face model directory);
// tokenizer_config.json beside it, when present, gives add_bos_token, add_eos_token, bos_token and
// eos_token. `expected_vocab` > 0: every id must be below it (the model's vocabulary; a model may have
// more rows than the tokenizer has tokens). Throws orbit::Error naming the file and what is wrong.
std::unique_ptr<HfTokenizer> load_hf_tokenizer(const std::string& path, int64_t expected_vocab = 0);

// The same from memory: `tokenizer_json` is a tokenizer.json's text, `config_json` that of its
// tokenizer_config.json ("": none), `origin` names them in messages. Both are parsed with bounded
// nesting (orbit/common/json_input.h). Throws orbit::Error as load_hf_tokenizer does.
std::unique_ptr<HfTokenizer> parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                                const std::string& origin, int64_t expected_vocab = 0);

}  // namespace orbit::runtime
