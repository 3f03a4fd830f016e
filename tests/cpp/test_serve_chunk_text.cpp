// A streamed answer's text chunk events written as text (cli/serve/wire/chunk_text.h), without a model: the
// exact bytes of a chunk, and every event equal to the JSON-built one (serve_wire.h's chat_chunk and
// text_completion through sse()) for pieces with every control character, quotes, backslashes, non-ASCII
// text, invalid UTF-8 (a character split at max_tokens) and random bytes.
#include <random>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/wire/chunk_text.h"
#include "serve/wire/serve_wire.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

// Ids whose model name itself needs escaping.
sv::ResponseIds ids() { return {"chatcmpl-abc-7", 1764460000, "tiny \"story\" \xC3\xA9"}; }

// Pieces a tokenizer can hand a stream, and ones it should not.
std::vector<std::string> pieces() {
  std::vector<std::string> out = {
      " Once", "\"",           "\\",       "a\"b\\c",      "\xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
      "\x7F",  "\xEF\xBF\xBD", "\xE4\xB8",  // split character
      "\x80",  "\xFF",         "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",  "a\xC3"};
  for (int c = 0; c < 0x20; ++c) out.push_back("x" + std::string(1, static_cast<char>(c)) + "y");
  std::mt19937 random(7);
  for (int i = 0; i < 400; ++i) {
    std::string s(1 + random() % 12, ' ');
    for (char& c : s) c = static_cast<char>(i % 2 == 0 ? random() % 256 : 0x20 + random() % 0x60);
    out.push_back(s);
  }
  return out;
}

sv::ChunkExtras with_logprobs() {
  sv::ChunkExtras extras;
  orbit::StepLogprobs step;
  step.chosen = {5, -0.5, "a"};
  step.top = {{5, -0.5, "a"}, {6, -1.25, "\xE4\xB8"}};
  extras.logprobs.push_back(step);
  return extras;
}

}  // namespace

TEST_CASE("chunk text: the exact bytes of a text chunk", "[serve][stream]") {
  const sv::ChunkText chat(ids(), "chat.completion.chunk");
  CHECK(chat.chat_text("a\"b\\c\n\t\x01\x1f\xC3\xA9/", 2, {}) ==
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\\\"b\\\\c\\n\\t\\u0001\\u001f\xC3\xA9/\"},"
        "\"finish_reason\":null,\"index\":2,\"logprobs\":null}],\"created\":1764460000,\"id\":\"chatcmpl-abc-7\","
        "\"model\":\"tiny \\\"story\\\" \xC3\xA9\",\"object\":\"chat.completion.chunk\"}\n\n");
  const sv::ChunkText completion(ids(), "text_completion");
  CHECK(completion.completion_text("\b\f\r\x7F") ==
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":\"\\b\\f\\r\x7F\"}],"
        "\"created\":1764460000,\"id\":\"chatcmpl-abc-7\",\"model\":\"tiny \\\"story\\\" \xC3\xA9\","
        "\"object\":\"text_completion\"}\n\n");
}

TEST_CASE("chunk text: every event as the JSON-built one", "[serve][stream]") {
  const sv::ChunkText chat(ids(), "chat.completion.chunk");
  const sv::ChunkText completion(ids(), "text_completion");
  for (const std::string& piece : pieces()) {
    INFO("piece bytes: " << piece.size());
    CHECK(completion.completion_text(piece) == sv::sse(sv::text_completion(ids(), piece, "", nullptr)));
    for (const int64_t index : {0, 1, 12}) {
      CHECK(chat.chat_text(piece, index, {}) == sv::sse(sv::chat_chunk(ids(), piece, false, "", index)));
      CHECK(chat.chat_text(piece, index, with_logprobs()) ==
            sv::sse(sv::chat_chunk(ids(), piece, false, "", index, with_logprobs())));
      sv::ChunkExtras reasoning;
      reasoning.reasoning = piece;
      CHECK(chat.chat_text("", index, reasoning) == sv::sse(sv::chat_chunk(ids(), "", false, "", index, reasoning)));
    }
  }
  CHECK(chat.chat_text("", 0, {}) == sv::sse(sv::chat_chunk(ids(), "", false, "", 0)));
}

TEST_CASE("chunk text: under include_usage every chunk carries usage null, as the JSON-built ones", "[serve][stream]") {
  sv::ResponseIds with_usage = ids();
  with_usage.usage_null = true;
  const sv::ChunkText chat(with_usage, "chat.completion.chunk");
  const sv::ChunkText completion(with_usage, "text_completion");
  const std::string fast = chat.chat_text(" Once", 0, {});
  CHECK(fast.find(",\"usage\":null}\n\n") != std::string::npos);
  for (const std::string& piece : pieces()) {
    INFO("piece bytes: " << piece.size());
    CHECK(chat.chat_text(piece, 1, {}) == sv::sse(sv::chat_chunk(with_usage, piece, false, "", 1)));
    CHECK(completion.completion_text(piece) == sv::sse(sv::text_completion(with_usage, piece, "", nullptr)));
  }
  CHECK(sv::chat_chunk(with_usage, "", false, "stop", 0)["usage"].is_null());
  sv::ToolCallDelta call;
  call.opens = true;
  call.id = "call_1";
  call.name = "f";
  CHECK(sv::tool_call_chunk(with_usage, call, 0, {}).contains("usage"));
  // The usage chunk has the usage; without include_usage no chunk has the field.
  CHECK(sv::usage_chunk(with_usage, "chat.completion.chunk", {{"total_tokens", 3}})["usage"]["total_tokens"] == 3);
  CHECK_FALSE(sv::chat_chunk(ids(), " Once", false, "", 0).contains("usage"));
  CHECK(sv::ChunkText(ids(), "chat.completion.chunk").chat_text(" Once", 0, {}).find("usage") == std::string::npos);
}

}  // namespace ORBIT_TEST_FILE
