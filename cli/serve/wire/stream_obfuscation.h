// Stream obfuscation (stream_options.include_obfuscation, on by default as in OpenAI's API): each streamed
// delta event (a chat or text completion chunk; a Responses API event whose type ends in ".delta") carries an
// "obfuscation" field of random characters, so that the sizes of the events on the wire (and of the TLS
// records that carry them) do not reveal the lengths of the tokens they carry, a side channel that lets an
// observer of encrypted traffic guess an answer's words.
//
// The field pads its event to the next multiple of kBlock bytes (the whole event as framed, "data: " and the
// closing blank line included; at least one character), so every event whose text without the field falls
// in the same kBlock bytes is the same size: a token's event tells at most its size in blocks, and most
// tokens' events are one size. Its characters are drawn from [A-Za-z0-9] (nothing to escape) by a generator
// seeded once per stream from std::random_device; they carry nothing and clients ignore the field.
//
// Thread-safety: none; one per stream, owned by its request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace orbit::serve {

class StreamObfuscation {
 public:
  static constexpr std::size_t kBlock = 32;

  StreamObfuscation() = default;  // off
  // `on`: the request's stream_options.include_obfuscation (and stream true).
  explicit StreamObfuscation(bool on);

  bool on() const { return on_; }
  // `event`: one SSE event whose data line is a JSON object and ends the event ("data: {...}\n\n" or
  // "event: T\ndata: {...}\n\n"). Off: returned as it is. On: with ,"obfuscation":"..." added as the
  // object's last member, its size then a multiple of kBlock.
  std::string pad(std::string event);

 private:
  bool on_ = false;
  std::mt19937_64 random_;
};

}  // namespace orbit::serve
