// The constraint a chat answer is decoded under (orbit/constraint.h), from what the request asks:
//   tool_choice "required"       a call to one of the request's tools, written in the server's tool call
//                                format (up to 4 calls when parallel_tool_calls is true, one otherwise)
//   tool_choice {function: F}    a call to F
//   tool_choice allowed_tools    as "required" or "auto" (its mode), the calls decoded under the allowed tools'
//                                grammar alone (ChatRequest::calls_json); the prompt lists every tool. Under auto
//                                where that grammar cannot be had the request is refused (400 naming
//                                tool_choice.allowed_tools): a free answer could call any tool
//   response_format json_object  any JSON object
//   response_format json_schema  a JSON value of the schema (the supported subset: constraint.h)
//   tool_choice "auto" (tools)   free text until the model writes the format's call mark (tool_call_trigger:
//                                "<tool_call>"), then calls valid under the tools' grammar: a call the model
//                                starts is written whole (none when the format has no mark, the tools' schemas
//                                are outside the subset, or the vocabulary cannot write them: then free,
//                                unless a tool asks for strict arguments (function.strict true): then the
//                                request is refused, 400 code unsupported_value naming tools[i].function.strict)
//   tool_choice "auto" (tools)   calls (as under "required") or the JSON answer, from the first byte: an agent
//   and a JSON response_format   with tools and a structured final answer (the Agents SDK's outputType) can
//                                still call; the JSON answer alone where the tools' grammar cannot be had
//   otherwise                    none
// Under a reasoning parser, where the answer begins inside the model's reasoning (run/reasoning.h), a
// constraint that applies from the first byte applies after the reasoning's close tag instead (for_request's
// `after`): the model thinks in free text, then answers under it. Where the model may open its reasoning
// itself (qwen3, no tag in the prompt), it applies from the first byte or right after the reasoning the
// model opened (`after` "", the Sampler's GenerateOptions::constraint_trigger_block).
// A forced call is not a message, so response_format does not apply to it (as OpenAI's API reads them); its
// schema is still checked, and refused as it would be without the tools (400 naming response_format).
// Whatever tool_choice says, every tool's parameters must be an arguments schema (an object schema: type
// "object" if given, properties an object, required a list of names): one that is not is refused when the
// request arrives (400, code invalid_function_parameters, naming tools[i].function.parameters). Keywords
// outside the subset (not, if, uniqueItems over free strings, ...; pattern, format and number bounds are in it) are
// accepted under tool_choice auto, which constrains nothing, and refused naming the keyword when a call to
// that tool is forced (its arguments would be decoded under the schema).
// A constraint the model's vocabulary cannot write is refused before the run (400 naming the field and the
// first byte no token writes): its shortest whole match is spelled with the vocabulary's tokens, longest
// first (a tokenizer without a token for '{', as TinyStories-656K's, can write no JSON object). One whose
// shortest answer is longer than the context holds is refused naming where its schema sits: for a forced
// call the tool's tools[i].function.parameters (or tools, where several tools may be called), not tool_choice.
// Built constraints, and the tools' checks, are kept (by what they were built from: the request's tools,
// tool_choice, parallel_tool_calls and response_format) in the SDK's keyed LRU (orbit/constraint_cache.h):
// their token masks are cached inside them, so an agent that sends the same tools every turn pays for the
// masks and the check once. The LRU is bounded by entries (64) and by bytes (max_bytes, 256 MiB by default),
// counting all it holds: each entry's key (twice: the map's and the order's), its refusal and trigger text,
// the nodes, and its constraint's grammar and masks (Constraint::memory_bytes). Masks grow while answers
// decode, so the bytes are recounted at every request and by usage() (/metrics: orbit_constraint_cache_bytes),
// dropping least recently used entries until they fit; between two counts running answers may add masks (at
// most 64 MiB per constraint, token_masks.h). The entry a request just used is never dropped (a dropped
// constraint lives on in the requests that hold it).
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orbit/constraint.h"
#include "orbit/constraint_cache.h"
#include "orbit/tool_calls.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

// A request's constraint, or the error its tools or schema earn (400 naming the field).
struct AnswerConstraint {
  std::shared_ptr<const Constraint> constraint;  // null: the answer is free text
  std::string trigger;  // non-empty: the constraint applies from this text on (GenerateOptions::constraint_trigger)
  // A call the answer begins is written under the tools' grammar (tool_choice "required" or a tool's name; or
  // "auto" with the grammar from the format's call mark on, a JSON answer beside it included): whole, unless
  // max_tokens cuts it. Its name is then the call's once its string closes, so calls may stream as they are
  // written (run/tool_stream.h). False where the calls are free text (no mark, schemas outside the subset).
  bool calls_whole = false;
  std::optional<ApiError> error;
};

class ConstraintCache {
 public:
  // `vocabulary`: the engine's tokenizer as token bytes (token_vocabulary); `context_tokens`: the model's
  // positions, which bound the bytes an answer can have (context_tokens x the longest token's bytes).
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{256} << 20;
  ConstraintCache(ToolCallFormat format, std::shared_ptr<const TokenVocabulary> vocabulary, int64_t context_tokens,
                  std::size_t max_bytes = kDefaultMaxBytes, std::size_t capacity = 64)
      : format_(format),
        vocabulary_(std::move(vocabulary)),
        max_answer_bytes_(context_tokens * std::max<int64_t>(1, vocabulary_->max_token_bytes())),
        kept_(ConstraintCacheOptions{max_bytes, capacity}) {}

  // `after` set (a reasoning parser's close tag, where the answer begins inside the reasoning): a constraint
  // that would apply from the answer's first byte applies from `after` on instead (the text up to it free),
  // as `after`, at most one space or two newlines, then the answer (trigger `after`); one with a trigger
  // already (tool_choice "auto") is as without it. Kept under its own key. `after` "": at most one space or
  // two newlines, then the answer, with no trigger (where the model may open its reasoning first: the answer
  // from the first byte, or from the reasoning's end on, GenerateOptions::constraint_trigger_block).
  AnswerConstraint for_request(const ChatRequest& request, const std::optional<std::string>& after = std::nullopt);
  // What it holds now, recounted (least recently used entries past max_bytes dropped first).
  struct Usage {
    std::size_t entries = 0;
    std::size_t bytes = 0;
    int64_t hits = 0;    // lookups that found their key (a request's tools' check and its constraint: one each)
    int64_t misses = 0;  // lookups that built (a refusal too)
  };
  Usage usage();
  std::size_t max_bytes() const { return kept_.options().max_bytes; }

 private:
  AnswerConstraint build(const ChatRequest& request) const;
  // `answer` (a constraint, no trigger) preceded by `after`: ways of writing it after the free text.
  static AnswerConstraint after_text(AnswerConstraint answer, const std::string& after);
  AnswerConstraint build_auto(const ChatRequest& request) const;
  // The JSON answer the request asks for, as a request without tools would have it (its refusal, if any).
  AnswerConstraint build_answer_alone(const ChatRequest& request) const;
  // Under tool_choice "auto" with a JSON answer asked for: a call or `answer` (the JSON's constraint, or its
  // refusal, returned as it is), from the first byte.
  AnswerConstraint build_calls_or_answer(const ChatRequest& request, AnswerConstraint answer) const;
  // The answer kept under `key`, else make()'s, kept (the least recently used dropped past the cache's
  // entries or bytes). A refusal is kept too: the same tools fail the same way.
  AnswerConstraint remembered(const std::string& key, const std::function<AnswerConstraint()>& make);

  ToolCallFormat format_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  int64_t max_answer_bytes_;
  orbit::ConstraintCache kept_;
};

}  // namespace orbit::serve
