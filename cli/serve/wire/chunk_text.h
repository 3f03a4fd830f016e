// The SSE events of one streamed chat or text completion's text chunks, written as text: a streamed answer
// sends one event per decoded piece, and building a JSON document for each (serve_wire.h's chat_chunk or
// text_completion, then sse()) cost its request thread more than the piece's TCP send. The fields every
// chunk of one response shares (created, id, model, object) are rendered once; a plain text chunk splices
// its escaped piece between constant text. Every event is byte for byte what sse(chat_chunk(...)) or
// sse(text_completion(...)) writes for the same arguments: a chunk that carries more than text (the role, a
// finish reason, reasoning, log probabilities) or whose piece is not valid UTF-8 is built by those.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "serve/wire/serve_wire.h"

namespace orbit::serve {

// One streamed response's chunk events. Not thread-safe; owned by the response's request.
class ChunkText {
 public:
  ChunkText() = default;
  // `object`: "chat.completion.chunk" or "text_completion".
  ChunkText(const ResponseIds& ids, const std::string& object);

  // sse(chat_chunk(ids, content, false, "", index, extras)): a chunk after the choice's opening one.
  std::string chat_text(const std::string& content, int64_t index, ChunkExtras extras) const;
  // sse(text_completion(ids, text, "", nullptr)).
  std::string completion_text(const std::string& text) const;

 private:
  ResponseIds ids_;
  std::string tail_;  // `,"created":...,"object":...}` then "\n\n": what follows the choices
};

}  // namespace orbit::serve
