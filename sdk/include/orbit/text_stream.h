// Generated tokens to streamed text (GenerateOptions::stop and on_text, orbit/window.h): the text so far is
// decoded again after each token and what is new is released, except a tail that may still change: an
// incomplete UTF-8 sequence (a character split over byte tokens) or the start of a stop string. A stop
// string found ends the text before it.
//
//   orbit::TextStream s([&](const std::vector<int64_t>& t) { return engine.detokenize(t, previous); }, {"\n\n"});
//   for each generated token:  send(s.push(token)); if (s.stopped()) break;
//   at the end:                send(s.finish());   // s.released() is now the whole answer, cut at a stop
//
// "Decoded again" costs a bounded window, not the whole answer: the text of the tokens before an anchor is
// kept, and the tokens after it are decoded with a few tokens before the anchor as context (their own text
// taken off again), so a token costs the same at the end of a long answer as at its start. Where the window's
// text does not extend its context's (a decoder that rewrites across the anchor), the whole is decoded.
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
  // decode(tokens): the text of every token generated so far. may_stop_before(text) (null: always): whether
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
  std::string text_now();                     // the decoded text, cut at the first stop string
  std::string decoded_prefix(std::size_t n);  // the text of tokens [0, n), n ≥ anchor_
  void move_anchor(const std::string& text);  // text: decoded_prefix(every token)

  std::function<std::string(const std::vector<int64_t>&)> decode_;
  std::vector<std::string> stops_;
  std::function<bool(const std::string&)> may_stop_before_;
  std::vector<int64_t> tokens_;
  std::string released_;
  bool stopped_ = false;
  std::size_t anchor_ = 0;       // tokens before it have their text in anchor_text_
  std::string anchor_text_;      // the text of tokens [0, anchor_): complete UTF-8, a prefix of every later text
  std::size_t head_anchor_ = 0;  // the anchor head_ was decoded for (0: none yet)
  std::string head_;             // the text of the kContext tokens before that anchor, decoded alone
};

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence.
std::size_t complete_utf8_prefix(const std::string& text);

}  // namespace orbit
