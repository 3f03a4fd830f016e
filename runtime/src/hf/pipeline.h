// The stages of a Hugging Face tokenizer.json around its model: normalizers, pre-tokenizers and decoders,
// each built from its JSON object and doing what the Rust `tokenizers` library (0.22) does with it.
//
// Supported components (anything else throws orbit::Error naming the component and the file):
//   normalizer:    Sequence, Prepend, Replace (String or Regex pattern), NFC, NFD, NFKC, NFKD
//   pre_tokenizer: Sequence, ByteLevel (GPT-2 split and byte-to-character map), Split (String or Regex;
//                  behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert),
//                  Digits, Metaspace (prepend_scheme always/first/never, split)
//   decoder:       Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
//
// Every stage is immutable once built and safe to call from several threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace orbit::runtime::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;

  // Per-character normalizers (Prepend; Replace of a String pattern of one character by non-empty content;
  // a Sequence of these) are, exactly: empty text stays empty, and non-empty text becomes prepended()
  // followed by map_chars(text), where map_chars maps each character on its own to a non-empty string. So
  // the normalized text of any non-empty prefix of a text is a prefix of the text's, ending where the
  // prefix's last character's mapping ends (Tokenizer::prefix_stable rests on this). Every other normalizer
  // (NFC and the other forms, Replace of a Regex or of several characters) is not per-character.
  virtual bool per_character() const { return false; }
  // Per-character normalizers only: what non-empty text gets in front, and `text` with every character
  // mapped.
  virtual std::string prepended() const { return ""; }
  virtual std::string map_chars(std::string text) const { return text; }
};

// One piece of text between pre-tokenization steps. `at_start`: the piece begins at offset 0 of the text
// that was encoded (Metaspace's prepend_scheme "first" prepends only to such a piece).
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits and rewrites `pieces` in place; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Hugging Face's decode_chain: token strings in, strings out; the decoded text is their concatenation.
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Each returns nullptr for a JSON null (no such stage). `file` names the tokenizer.json in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& file);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& file);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& file);

// The byte-level alphabet of GPT-2: the printable character that stands for each byte, as UTF-8.
const std::vector<std::string>& byte_to_unicode();

}  // namespace orbit::runtime::hf
