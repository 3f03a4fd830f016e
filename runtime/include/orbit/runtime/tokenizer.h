// Tokenizers: text <-> token ids behind one small interface (no torch).
//
// One format is read: llama2.c's tokenizer file (`tok512.bin` beside stories260K, the 32000-piece
// `tokenizer.bin` of the Llama 2 vocabulary), little-endian:
//
//   int32 max_token_length
//   per id, in id order:  float32 score, int32 length, `length` bytes of the piece
//
// Encoding is llama2.c's (its run.c), exactly: BOS (id 1) first when asked; a dummy-prefix piece " " when
// the text is not empty; the text split into UTF-8 code points (a lead byte and up to three continuation
// bytes), each looked up as a piece or else emitted as byte pieces "<0xNN>" (byte fallback); then, while
// any adjacent pair concatenates to a piece, the pair whose piece has the highest score is merged (the
// leftmost among equal scores). Decoding is llama2.c's too: each id's piece, a leading space dropped right
// after BOS, "<0xNN>" pieces as the raw byte; BOS and EOS produce no text. Text is raw bytes (UTF-8 when
// the ids came from text; arbitrary ids can decode to invalid UTF-8).
//
// The other format, Hugging Face's tokenizer.json, is read by orbit/runtime/hf_tokenizer.h;
// load_tokenizer() below picks the reader by the file.
//
// Thread-safety: a loaded Tokenizer is immutable; every member is safe to call from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orbit::runtime {

// Bytes [begin, end) of the text a token was made from.
struct TokenBytes {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// encode(text, false) with each token's bytes (Tokenizer::encode_with_bytes).
struct Encoding {
  std::vector<int64_t> ids;
  std::vector<TokenBytes> bytes;  // bytes[i]: where ids[i] came from
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text` (BOS first when `bos`). Throws orbit::Error when a byte has no piece and the
  // vocabulary has no byte-fallback piece for it.
  virtual std::vector<int64_t> encode(std::string_view text, bool bos) const = 0;
  // The text of `ids` as if they followed the token `previous` (-1: nothing before them; BOS: the first
  // piece's leading space is dropped). Throws orbit::Error naming an id outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t>& ids, int64_t previous = -1) const = 0;
  // The piece of one id as stored (e.g. " the", "<0x0A>", "\n<s>\n"). Throws for an id outside the vocabulary.
  virtual std::string piece(int64_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;      // -1 when the vocabulary has none
  virtual int64_t eos_id() const = 0;      // -1 when the vocabulary has none
  virtual std::string kind() const = 0;    // "llama2c" or "huggingface"
  virtual std::string source() const = 0;  // the file it was read from

  // Whether encode(·, false) is prefix-stable: for every text and every character boundary c of it that no
  // token straddles (no bytes[i] of encode_with_bytes(text) has begin < c < end), encode(text[0, c), false)
  // is exactly the ids of the tokens that end at or before c. So the token boundaries of one encode tell
  // where a prefix's tokens are a prefix of the text's, with no prefix encoded (Window::sync's cuts).
  // True for llama2.c's tokenizer and for a Hugging Face BPE without a pre-tokenizer under the conditions
  // of orbit/runtime/hf_tokenizer.h; false for the others (a pre-tokenizer's split regex may look ahead, as
  // GPT-2's \s+(?!\S) does, so that a prefix's last words split otherwise than the text's).
  virtual bool prefix_stable() const { return false; }
  // What the tokenizer keeps in memory of its past work (a BPE model's split words), and its bounds; all zero for
  // one that keeps nothing. Thread-safe.
  struct CacheUsage {
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t max_entries = 0;
    int64_t max_bytes = 0;
  };
  virtual CacheUsage cache_usage() const { return {}; }
  // encode(text, false) and each token's bytes: from the first byte of the first character it was made from
  // to the last byte of the last (a character normalized into several pieces counts in every token that
  // holds one; "<0xNN>" tokens each cover their whole character). Ranges are never empty, and their begins
  // and ends never decrease from one token to the next. Throws orbit::Error, naming the tokenizer, when it is
  // not prefix_stable() (only those report bytes) or as encode does.
  virtual Encoding encode_with_bytes(std::string_view text) const = 0;
  // Incremental encoding: the tokens of encode(text, false) from byte `at` on, with their bytes in `text`, when
  // the safe-cut rule below proves that no token of encode(text, false) straddles `at`; then encode(text,
  // false) is exactly encode(text[0, at), false) followed by them (ids and bytes), so a caller that holds the
  // tokens of text[0, at) (a prefix_stable() tokenizer's tokens of an earlier text before a cut no token
  // straddled) encodes only the rest. nullopt where the rule cannot prove it, or `at` is 0, text.size() or not
  // a character boundary: the caller encodes the whole text. Throws as encode does where it takes the cut
  // (a byte without a piece; tokenizer.json: text that is not valid UTF-8).
  //
  // The safe-cut rule, for a BPE whose merges join two adjacent symbols, the best pair of the moment first
  // (HF: lowest rank; llama2.c: highest score; the leftmost among equals): if no merge ever joins a symbol
  // left of `at` to one right of it, the merges left of it happen as they do in text[0, at) alone and those
  // right of it as in the rest alone (the argument of BpeModel::prefix_stable, runtime/src/hf/bpe.h, on both
  // sides). A merge across `at` makes a token that holds the last character before `at` (its symbol: itself,
  // or a "<0xNN>" byte piece, or unk) right next to the first character after it. So the rule takes the cut
  // exactly when no merge of the vocabulary joins a left part ending in that last character to a right part
  // starting with that first one (pairs collected once per tokenizer, on first use). That depends on the two
  // characters alone, not on what the texts hold further away. Where the pair can merge, the cut is refused
  // even if this text's merges happen not to cross it: whether they do depends on the text around it, which
  // an earlier encode of other text after the cut does not tell. Per tokenizer:
  //   - llama2.c: pairs are the splits of each piece into two pieces; symbols per UTF-8 character (a piece,
  //     else its byte pieces); the rest gets no dummy prefix (that one stands before byte 0). In SentencePiece
  //     vocabularies, whose pieces hold no space after a non-space, a cut between a non-space and a space is
  //     always taken.
  //   - tokenizer.json (prefix-stable ones only, orbit/runtime/hf_tokenizer.h): the pair of raw characters
  //     must not sit side by side in any added token that matches raw text, the pair as the per-character
  //     normalizer maps it in no added token that matches normalized text, and the normalized pair's
  //     symbols in no merge; an unknown character next to another under fuse_unk (one unk for both), and a
  //     character the model drops (no piece, no byte fallback, no unk), refuse. The rest is normalized with
  //     the prepended text only where a piece of raw text starts at `at` (after an added token), as encode
  //     normalizes each piece.
  // Other tokenizers (the default) always answer nullopt.
  virtual std::optional<Encoding> encode_rest(std::string_view text, std::size_t at) const {
    (void)text;
    (void)at;
    return std::nullopt;
  }
  // The safe-cut rule's verdict at `at` without the encode, and what the rest's tokens depend on besides the
  // rest's text: nullopt where encode_rest(text, at) answers nullopt; else a context such that for texts x, y
  // and cuts a, b with x[a, end) == y[b, end) and cut_context(x, a) == cut_context(y, b) (both present),
  // encode_rest(x, a) and encode_rest(y, b) give the same ids, bytes b - a apart. Verdict and context read
  // text[0, e) alone for any character boundary e > at, so they hold for every such prefix of the text too.
  // (Window::sync uses this to reuse an earlier text's tokens for a run the two texts share away from their
  // starts: sdk/src/window/sync_encode.h.) llama2.c: 0 (the rest is its symbols merged alone). tokenizer.json:
  // 1 where an added token ends at `at` and the normalizer prepends text (a raw piece starting there is
  // normalized with it; added tokens are found leftmost-longest, and the rule keeps any from running across
  // `at`, so the pieces from `at` on are those of the rest alone), else 0.
  virtual std::optional<int> cut_context(std::string_view text, std::size_t at) const {
    (void)text;
    (void)at;
    return std::nullopt;
  }

  // A number no other Tokenizer object of this process has had: what a memo of a tokenizer's encodings keys
  // by (an address is reused once its tokenizer is gone).
  uint64_t serial() const { return serial_; }

  // The most bytes one token's piece spells, at least 1: a bound on the bytes any token covers, so a text of
  // more than positions × this many bytes cannot fit `positions` tokens (pieces spell out what they cover;
  // byte-fallback pieces such as "<0x0A>" are longer than their byte). One pass over the vocabulary, on the
  // first call; thread-safe.
  int64_t longest_piece_bytes() const {
    std::call_once(longest_once_, [this] {
      for (int64_t id = 0; id < vocab_size(); ++id)
        longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(piece(id).size()));
    });
    return longest_;
  }

 private:
  static uint64_t next_serial() {
    static std::atomic<uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  mutable std::once_flag longest_once_;
  mutable int64_t longest_ = 1;
  const uint64_t serial_ = next_serial();
};

// Reads a llama2.c tokenizer file. `expected_vocab` > 0: the file must hold exactly that many pieces
// (the model's vocabulary). Throws orbit::Error naming the file and what is wrong (missing, truncated,
// a negative length, a piece count that is not the model's vocabulary).
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t expected_vocab = 0);

// The tokenizer file that belongs to a model, or "" when there is none: for a llama2.c `.bin`, the file
// `tok<vocab>.bin`, else `tokenizer.bin`, in the model's directory; for a Hugging Face model directory (or
// its config.json, which load_model takes for the directory), its `tokenizer.json`.
std::string find_tokenizer(const std::string& model_path, int64_t vocab_size);

// Reads a tokenizer of either format: a `.json` file or a directory holding tokenizer.json as Hugging
// Face's (load_hf_tokenizer: every id below `expected_vocab`), anything else as llama2.c's
// (load_llama2c_tokenizer: exactly `expected_vocab` pieces). Throws orbit::Error as those do.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, int64_t expected_vocab = 0);

}  // namespace orbit::runtime
