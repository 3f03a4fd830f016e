// The OpenAI response bodies `orbit serve` writes: chat completions (whole and as stream chunks) and text
// completions, each with `usage` (RunUsage::to_json: prompt, completion and total tokens, and orbit's).
#pragma once

#include <cstdint>
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
};

// {"object": "chat.completion", "choices": [{"index", "message": {"role": "assistant", "content", "tool_calls"?,
// "reasoning_content"?}, "logprobs", "finish_reason"}], "usage"}: content null when the answer is only tool
// calls; under a reasoning parser (RunResult::reasoning set) reasoning_content is the reasoning (null when it
// wrote none) and content null when empty; with n > 1 one choice per RunResult (the result itself, then its
// extra_choices), indexed 0..n-1
nlohmann::json chat_completion(const ResponseIds& ids, const RunResult& result);
// One chunk of a streamed chat completion: "object": "chat.completion.chunk", one choice, choices[0].index
// `index` (with n > 1 each choice streams its own chunks). `first` (the choice's first chunk) adds the role;
// a non-empty finish_reason ends the choice. The reasoning queued for the choice (queue_stream_reasoning)
// goes in delta.reasoning_content, and then delta.content only when `content` is not empty.
nlohmann::json chat_chunk(const ResponseIds& ids, const std::string& content, bool first,
                          const std::string& finish_reason, int64_t index = 0);
// A chunk that carries one piece of a call of choice `index`'s answer, as OpenAI streams calls: delta.tool_calls
// [{"index", "id", "type": "function", "function": {"name", "arguments"}}] for the piece that opens the call,
// [{"index", "function": {"arguments"}}] for each later one; `first` adds the role. The reasoning queued for
// the choice goes in delta.reasoning_content.
nlohmann::json tool_call_chunk(const ResponseIds& ids, const ToolCallDelta& piece, bool first, int64_t index = 0);
// The stream_options.include_usage chunk: empty choices and usage.
nlohmann::json usage_chunk(const ResponseIds& ids, const std::string& object, const nlohmann::json& usage);
// {"object": "text_completion", "choices": [{"text", "index", "finish_reason"}], "usage" when given}: the
// whole answer, or one streamed chunk (OpenAI streams completions under the same object name).
nlohmann::json text_completion(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                               const nlohmann::json& usage);

// Log probabilities in OpenAI's chat form, one entry per step: {"token" (the token's bytes as text),
// "logprob", "bytes" (the UTF-8 bytes as integers), "top_logprobs": [{"token", "logprob", "bytes"}]}.
nlohmann::json logprobs_content(const std::vector<StepLogprobs>& steps);

// A streamed answer's log probabilities travel beside its text: decode() queues each token's here as it is
// generated (GenerateOptions::on_logprobs), under its choice's index, and the next chunk of that choice
// chat_chunk() or tool_call_chunk() builds on the same thread takes every entry queued for it so far as its
// choices[].logprobs {"content": [...]} (null when none). A stream's chunks are written from the thread that
// runs its decode (its sink is called there), so each token's entry goes out exactly once, with its text or,
// where the text was held back (a possible tool call, a split character), with a later chunk (at the latest
// the finishing one). decode() clears the queues when it starts.
void queue_stream_logprobs(const StepLogprobs& step, int64_t choice = 0);
void clear_stream_logprobs();  // every choice's
// What is queued for `choice`, as logprobs_content() writes it (an empty array when nothing is), and that
// queue emptied: the Responses API's stream events take it so.
nlohmann::json take_stream_logprobs_content(int64_t choice = 0);

// A streamed chat answer's reasoning (run/reasoning_sink.h) travels as its log probabilities do: queued under
// its choice's index on the thread that decodes it, and taken by that choice's next chunk chat_chunk() or
// tool_call_chunk() builds there, as delta.reasoning_content. clear_stream_logprobs() clears it too.
void queue_stream_reasoning(const std::string& text, int64_t choice = 0);

// "data: <json>\n\n"
std::string sse(const nlohmann::json& body);
// JSON text with invalid UTF-8 replaced (generated text may split a character at max_tokens).
std::string dump(const nlohmann::json& body);

}  // namespace orbit::serve
