// Generated tokens to streamed text (GenerateOptions::stop and on_text, orbit/window.h): after each token the
// text is decoded again and what is new is released, except a tail that may still change: an incomplete
// UTF-8 sequence (a character split over byte tokens), U+FFFD at the end (a lossy decoder's stand-in for
// bytes a later byte token may complete), or the start of a stop string. A stop string found ends the text
// before it. What push() and finish() return, concatenated, is the decode of every token at once, cut at
// the stop string, for a decoder whose text of more tokens extends that of fewer but for a tail that a run of
// byte tokens rewrites (every tokenizer orbit reads: tests/cpp/test_text_stream.cpp).
//
//   orbit::TextStream s([&](const std::vector<int64_t>& t) { return engine.detokenize(t, previous); }, {"\n\n"});
//   for each generated token:  send(s.push(token)); if (s.stopped()) break;
//   at the end:                send(s.finish());   // s.released() is now the whole answer, cut at a stop
//
// "Decoded again" costs a bounded window, not the whole answer. An anchor follows the answer a few tokens
// behind its last: the text of the tokens before it is a prefix of what was released, and the tokens after
// it are decoded with the 2 tokens before it as context (their own text, decoded alone, taken off again).
// The anchor moves on once 6 tokens follow it, to 2 before the last, where the new context and window give
// the same text as the old (a decoder whose text of a token depends on tokens before the new context, such as
// a run of byte tokens that began before it, fails this) and the text before it is released and ends between
// characters. Where the window's text does not extend its context's (a decoder that rewrites across the
// anchor), the whole is decoded. Stop strings are looked for from the released end (less the longest's
// length) on, and each one ending inside the released text was judged when it was released (may_stop_before
// is called once for it). So a token costs the same at the end of a long answer as at its start: one decode
// of 5 to 8 tokens, and per 4 tokens two more of 2 and 4.
//
// Thread-safety: a TextStream is a value for one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace orbit {

class TextStream {
 public:
  // decode(tokens): the text of `tokens`, every token generated so far or a window of the latest ones (as
  // if they began the answer). may_stop_before(text) (null: always): whether
  // a stop string found after `text` ends the answer; one that may not is part of the text, and the next
  // occurrence is looked at (an answer under a constraint ends at a stop string only where it is whole).
  // Stop strings are non-empty.
  TextStream(std::function<std::string(const std::vector<int64_t>&)> decode, std::vector<std::string> stops,
             std::function<bool(const std::string&)> may_stop_before = nullptr);

  // Adds a token; returns the text now safe to release (possibly empty): whole UTF-8 characters that no stop
  // string can still take back. Tokens pushed after a stop string was found are ignored.
  std::string push(int64_t token);
  // The text held back, released at the end of the run (nothing after a stop string). It may end inside a
  // UTF-8 character when the run did (max_tokens in the middle of byte tokens).
  std::string finish();

  bool stopped() const { return stopped_; }  // a stop string was found
  const std::vector<int64_t>& tokens() const { return tokens_; }
  const std::string& released() const { return released_; }

 private:
  std::string decode_range(std::size_t begin, std::size_t end);  // the text of tokens [begin, end) alone
  // The text of tokens [0, n) as released_[0, *base) + the result: *base is the anchor's text's size where
  // the window decodes as an extension of its context, else 0 (the result is the whole decoded).
  std::string text_after(std::size_t n, std::size_t* base);
  // Decodes every token into look_ (cut at the first stop string that ends the answer, setting stopped_);
  // returns whether that text extends released_.
  bool text_now();
  bool may_stop_at(std::size_t at) const;  // may_stop_before(the text before byte `at`)
  std::size_t safe_end() const;            // where the text in look_ may be released up to
  // After a push whose text (look_, not cut) `extends` released_: the anchor on to kBehind tokens before the
  // last, where that gives the same text.
  void move_anchor(bool extends);

  std::function<std::string(const std::vector<int64_t>&)> decode_;
  std::vector<std::string> stops_;
  std::function<bool(const std::string&)> may_stop_before_;
  std::size_t longest_stop_ = 0;  // the longest stop string's size
  std::size_t keep_ = 0;          // released bytes kept before the window in look_: 4 + every stop string's size
  std::vector<int64_t> tokens_;
  std::vector<int64_t> slice_;  // decode_range's tokens (its capacity kept)
  std::string released_;
  bool stopped_ = false;
  std::size_t anchor_ = 0;       // tokens before it have their text in released_[0, anchor_size_)
  std::size_t anchor_size_ = 0;  // complete UTF-8, a prefix of every later text
  std::size_t retry_at_ = 0;     // the token count at which a failed move of the anchor is tried again
  std::string head_;             // the text of the kContext tokens before the anchor, decoded alone
  std::size_t look_at_ = 0;      // look_ holds the decoded text from this byte on
  std::string look_;
};

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence.
std::size_t complete_utf8_prefix(const std::string& text);

}  // namespace orbit
