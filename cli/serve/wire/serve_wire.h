// The OpenAI response bodies `orbit serve` writes: chat completions (whole and as stream chunks) and text
// completions, each with `usage` (RunUsage::to_json: prompt, completion and total tokens, and orbit's).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/serve_types.h"

namespace orbit::serve {

// What every body of one response shares.
struct ResponseIds {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  // stream_options.include_usage: every chunk carries "usage", null but in the usage chunk (usage_chunk), as
  // OpenAI streams it ("All other chunks will also include a usage field, but with a null value").
  bool usage_null = false;
};

// {"object": "chat.completion", "choices": [{"index", "message": {"role": "assistant", "content", "refusal": null,
// "tool_calls"?, "reasoning_content"?}, "logprobs", "finish_reason"}], "usage"}: content null when the answer is only
// tool calls; under a reasoning parser (RunResult::reasoning set) reasoning_content is the reasoning (null when it
// wrote none) and content null when empty; with n > 1 one choice per RunResult (the result itself, then its
// extra_choices), indexed 0..n-1
nlohmann::json chat_completion(const ResponseIds& ids, const RunResult& result);
// dump(chat_completion(ids, result)), the same text, with each choice's log probabilities written entry by entry
// instead of as one JSON tree (an answer's can hold millions of numbers: n 64, 480 tokens and top_logprobs 20 made
// a 21 MB body whose tree held about 400 MiB at once).
std::string chat_completion_text(const ResponseIds& ids, const RunResult& result);
// What one chunk of a streamed chat completion carries besides its text or call piece: the reasoning read and
// the log probabilities released since its choice's last chunk (StreamExtras::take).
struct ChunkExtras {
  std::string reasoning;               // "": none (delta.reasoning_content left out)
  std::vector<StepLogprobs> logprobs;  // empty: choices[].logprobs null
};

// One chunk of a streamed chat completion: "object": "chat.completion.chunk", one choice, choices[0].index
// `index` (with n > 1 each choice streams its own chunks). `first` adds the role and "refusal": null: the server opens
// each choice with chat_chunk(ids, "", true, "", index), no text and no log probabilities in it, as OpenAI does; a
// non-empty finish_reason ends the choice. extras.reasoning goes in delta.reasoning_content, and then delta.content
// only when `content` is not empty; extras.logprobs in choices[0].logprobs {"content": [...]}.
nlohmann::json chat_chunk(const ResponseIds& ids, const std::string& content, bool first,
                          const std::string& finish_reason, int64_t index = 0, ChunkExtras extras = {});
// A chunk that carries one piece of a call of choice `index`'s answer, as OpenAI streams calls: delta.tool_calls
// [{"index", "id", "type": "function", "function": {"name", "arguments"}}] for the piece that opens the call,
// [{"index", "function": {"arguments"}}] for each later one (the role went in the choice's opening chunk,
// chat_chunk's `first`). `extras` as chat_chunk's.
nlohmann::json tool_call_chunk(const ResponseIds& ids, const ToolCallDelta& piece, int64_t index = 0,
                               ChunkExtras extras = {});
// The stream_options.include_usage chunk: empty choices and usage.
nlohmann::json usage_chunk(const ResponseIds& ids, const std::string& object, const nlohmann::json& usage);
// {"object": "text_completion", "choices": [{"text", "index", "finish_reason"}], "usage" when given}: the
// whole answer, or one streamed chunk (OpenAI streams completions under the same object name).
nlohmann::json text_completion(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                               const nlohmann::json& usage);
// /v1/completions' usage: RunUsage::to_json() without completion_tokens_details. That endpoint never reads a
// reasoning model's thinking out of its text (no --reasoning-parser applies to a raw prompt, as in vLLM), so
// a reasoning_tokens of 0 there would say the model wrote none where it may have written some.
nlohmann::json text_completion_usage(const RunUsage& usage);

// Log probabilities in OpenAI's chat form, one entry per step: {"token" (the token's bytes as text),
// "logprob", "bytes" (the UTF-8 bytes as integers), "top_logprobs": [{"token", "logprob", "bytes"}]}. A
// logprob of -inf (a masked token in StepLogprobs::top) is written -9999.0, as OpenAI writes it.
nlohmann::json logprobs_content(const std::vector<StepLogprobs>& steps);

// What the next chunk of each choice of one streamed chat answer carries (ChunkExtras), gathered as the run
// goes: the stream's RunSink::on_logprobs adds each token's log probabilities as decode releases them (with
// their text or, where the text was held back (a possible tool call, a split character), before a later
// piece, at the latest the choice's last), its RunSink::on_reasoning the reasoning read; the chunk writer
// takes a choice's with each chunk it builds for it, so each entry goes out exactly once. One per streamed
// request, owned by it: nothing is shared between streams. Not thread-safe (a stream's sink is called on one
// thread).
class StreamExtras {
 public:
  void add_logprobs(int64_t choice, const StepLogprobs& step);
  void add_reasoning(int64_t choice, const std::string& text);
  // What was gathered for `choice` since its last take, and that emptied.
  ChunkExtras take(int64_t choice);

 private:
  std::map<int64_t, ChunkExtras> pending_;
};

// "data: <json>\n\n"
std::string sse(const nlohmann::json& body);
// JSON text with invalid UTF-8 replaced (generated text may split a character at max_tokens).
std::string dump(const nlohmann::json& body);
// `text` as dump() writes it in a body: itself when it is valid UTF-8, else with each invalid sequence
// replaced by U+FFFD exactly as dump() replaces it. What the server keeps of an answer (a stored response's
// conversation) is this, so it is what the client read and sends back, and it can be written as JSON.
std::string as_written(const std::string& text);

}  // namespace orbit::serve
