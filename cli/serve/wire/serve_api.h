// The OpenAI wire format of `orbit serve`, apart from the server: request bodies parsed and checked into
// types, and the error and response bodies written back. No model, no sockets: the libFuzzer target
// fuzz_serve_request runs exactly this parser on arbitrary bytes.
//
// What a request may hold; any other top-level field, null or not, is refused as OpenAI refuses it ("Unrecognized
// request argument supplied"): a 400 with code unknown_parameter naming it, and the field it most likely meant
// when the name is a near miss ("temprature: ... did you mean 'temperature'?"), so nothing sent is ignored:
//   chat:        model (string, required), messages (non-empty array, required), max_tokens or
//                max_completion_tokens (integer >= 1), temperature [0, 2], top_p [0, 1], seed (integer),
//                stop (string or array of at most 4 strings), n (1..ServeLimits::max_choices; streamed, each
//                choice's chunks carry its index), stream (bool),
//                stream_options.include_usage (bool), stream_options.include_obfuscation (bool, default true:
//                every chunk padded by an "obfuscation" field), user (any string), tools (array of
//                {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"? (true: calls
//                always decoded under the tools' grammar; refused where tool_choice auto cannot have it,
//                answer_constraint.h)}}, names unique and
//                1 to 64 letters, digits, _ and - (OpenAI's rule; other bytes reach the template and the call parser),
//                other keys refused, handed to the template; the server refuses parameters outside the schema subset of
//                answer_constraint.h), tool_choice ("none", "auto", "required" or {"type": "function", "function":
//                {"name"}} naming one of the tools, or {"type": "allowed_tools", "allowed_tools": {"mode": "auto" |
//                "required", "tools": [{"type": "function", "function": {"name"}}, ...]}}: calls to those tools
//                only, the prompt listing all), parallel_tool_calls (bool; only beside a non-empty tools, as
//                OpenAI has it, else a 400 naming it; false: one call at most, decoded under the tools' grammar, or
//                where none could be had the first call of the free answer, run/tool_stream.h), response_format
//                ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"?}};
//                name is required, 1 to 64 letters, digits, _ and - as OpenAI has it (else a 400 naming
//                response_format.json_schema.name); the answer is decoded under the schema whatever strict says;
//                any other key, or json_schema beside another type, is refused: it would leave a schema
//                unenforced; a description (a string) is taken and changes nothing: the schema is not shown to
//                the model either, the answer is held to it) presence_penalty, frequency_penalty
//                [-2, 2]; logit_bias ({"<token id>": bias in
//                [-100, 100]}, ids below ServeLimits::vocab_size); logprobs (bool), top_logprobs (integer 0..20, with
//                logprobs true): honoured as OpenAI defines them (GenerateOptions in orbit/window.h); store (bool: keep
//                the completion for GET /v1/chat/completions/{id}, chat_store.h), metadata (at most 16 string pairs,
//                keys up to 64 bytes, values up to 512; kept with a stored completion); verbosity "medium" (OpenAI's
//                default; another value is refused); prompt_cache_key, safety_identifier (strings),
//                prompt_cache_retention ("in_memory" or "24h") and prompt_cache_options ({mode?: "implicit" |
//                "explicit", ttl?: "30m"}): hints to OpenAI's own caches and checks, checked as OpenAI types them
//                (check_prompt_cache_options, request_invalid.h) and unused
// (tool_choice and response_format are honoured by the server: answer_constraint.h.)
//   refused, naming the field (code unsupported_parameter), when given a value other than their no-op: top_k,
//                min_p, top_a, typical_p, repetition_penalty, mirostat; chat: functions / function_call (give
//                tools), audio, prediction, web_search_options, modalities other than ["text"],
//                reasoning_effort other than "none"; completions: echo true, best_of other than 1, suffix, a
//                prompt of token ids; service_tier other than auto / default
//   completions: model, prompt (string, or an array of one string), and the same sampling fields but n
//                (1 only, else a 400 naming `n`) and logprobs: its legacy form (an integer of top tokens) is refused
//                with a 400 naming `logprobs`, and top_logprobs, which that endpoint does not have, likewise;
//                chat's own fields (messages, tools, tool_choice, parallel_tool_calls, response_format, store,
//                metadata, ...) are refused there naming /v1/chat/completions, which serves them
//   a message:   role in {system, developer, user, assistant, tool}; content a string, null (an assistant
//                message with tool_calls), or an array of {"type": "text", "text": ...} parts (an assistant's
//                also {"type": "refusal", "refusal": ...}, read as its text, as OpenAI takes them); an
//                assistant's null or left-out content is "" to the template, not None (Qwen3's template, among
//                others, adds the content to a string; llama.cpp's server likewise gives "");
//                name (1 to 64 letters, digits, _ and -, OpenAI's rule; else a 400 naming messages[i].name);
//                tool_calls (array of {id (a non-empty string), type "function", function {name (a tool name,
//                held to the tools' rule, or "": a forced call max_tokens cut before its name is answered
//                so), arguments (string; JSON giving a key twice in one object is refused, call_arguments.h)}});
//                a tool message's tool_call_id is required,
//                a non-empty string (else a 400 naming messages[i].tool_call_id, as OpenAI has it), but the
//                message is taken wherever it stands and whatever call its id names, unlike OpenAI's API
//                (which refuses one that answers no call of the assistant message before it): an agent that
//                trims its context drops old calls and keeps their results, and the template renders such a
//                message as any other. Other keys, per role:
//                OpenAI's and those the node clients in tests/node send are taken (any role's name, which
//                @langchain/openai also sends on tool messages; an assistant's refusal string, read as its
//                text after content); an assistant's reasoning_content (@ai-sdk/openai-compatible and
//                OpenAI-compatible clients) or reasoning (@openai/agents), a string or null, is that turn's
//                reasoning, given to the template as message.reasoning_content (both given, they must agree,
//                else a 400 naming reasoning); audio and function_call are accepted only null, else a 400
//                naming messages[i].<key>, since the chat template is given role, content,
//                reasoning_content, name, tool_call_id and tool_calls only and would not see them;
//                an assistant's parsed (the openai SDK's parse of an answer, sent back by runTools) is taken
//                and unused; any other key, null or not, is refused as a top-level one is (unknown_parameter,
//                e.g. "messages[3].contnet: ... (not a field of a user message; did you mean 'content'?)"). So
//                is a key inside a part or a call beyond OpenAI's and those taken and unused: a text part's
//                prompt_cache_breakpoint (an object; @openai/agents' cache hint), a tool call's index (an
//                integer; @langchain/openai's streamed calls) and function.parsed_arguments (the openai SDK's),
//                and in an assistant's part the answer's message fields @openai/agents copies into it on Chat
//                Completions (role "assistant", refusal or content null, annotations and tool_calls arrays,
//                audio and function_call null; reasoning_content, a string or null, read as the message's
//                reasoning, which must agree with its own), e.g. "messages[0].content[1].txt",
//                "messages[2].tool_calls[0].function.argumnts"
// Every violation is an ApiError with status 400 (413 for a body over ServeLimits::max_body_bytes) naming
// the field, e.g. "messages[2].role: unknown role 'robot' (expected system, developer, user, assistant
// or tool)". Checks that need the model (prompt longer than the context, max_tokens past it, the model
// name) are the server's (serve_core.h), with the same error body.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/sync.h"

namespace orbit::serve {

// An OpenAI-style error: HTTP status and the body's {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "not_found_error", "server_error", ...
  std::string param;                           // the field at fault; "" = null
  std::string code;                            // e.g. "context_length_exceeded"; "" = null
};

// The one builder of the errors `orbit serve` answers with: the parser's, the server's checks, the routes'
// and the engine's failures all come from here, and error_body writes them. `type` is OpenAI's
// ("invalid_request_error", "not_found_error", "server_error"); `code` and `param` "" mean null.
ApiError api_error(int status, std::string message, std::string type = "invalid_request_error", std::string code = "",
                   std::string param = "");

// The JSON body of an error: {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}.
std::string error_body(const ApiError& error);

// The error of a request that failed with an exception nothing foresaw (not a refusal, not the engine's
// orbit::Error a run answers as engine_error): 500, type server_error, code internal_error, the message naming
// the request (`what_failed`, e.g. "POST /v1/chat/completions") and the exception's what().
ApiError internal_error(const std::string& what_failed, const std::exception_ptr& ep);

struct ServeLimits {
  std::size_t max_body_bytes = std::size_t{4} << 20;  // request bodies over this get 413
  std::size_t max_messages = 4096;
  std::size_t max_stop_strings = 4;
  int64_t max_choices = 64;  // a chat request's n at most (each choice is a fork of the window, decoded together)
  bool max_choices_by_batch = false;  // max_choices is the server's --max-batch (named in the refusal)
  int64_t vocab_size = 0;             // logit_bias keys must be below it; 0: not checked (the server sets its model's)
  // A request's log-probability entries at most: n x max_tokens (the request's, else the server's default,
  // capped by the context) x (1 + top_logprobs), when it asks for logprobs (`--max-answer-logprobs`). Every
  // entry is held until the answer ends (its body, or a stream's usage and stored answer, is built from them):
  // about 50 bytes each in memory and 60-100 in the JSON. Past it the request is refused before it runs
  // (RequestPath::check_lengths). Without logprobs an answer is n x max_tokens tokens, bounded by the context.
  int64_t max_answer_logprobs = int64_t{1} << 20;
};

// The sampling fields shared by both endpoints.
struct SamplingRequest {
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens; nullopt: the server's default
  double temperature = 1.0;           // OpenAI's default
  double top_p = 1.0;
  std::optional<uint64_t> seed;
  // Choices to answer (chat only): choice i is drawn with seed + i·2³² (decode.h); at temperature 0 all are equal.
  int64_t n = 1;
  std::vector<std::string> stop;  // generation ends before the first of these in the text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage before [DONE]
  // stream_options.include_obfuscation: each streamed chunk carries a random "obfuscation" field that pads it
  // to a multiple of 32 bytes (stream_obfuscation.h). On unless false, as in OpenAI's API.
  bool include_obfuscation = true;
  double presence_penalty = 0;
  double frequency_penalty = 0;
  std::map<int64_t, double> logit_bias;  // token id -> bias
  bool logprobs = false;                 // chat: choices[].logprobs.content, one entry per generated token
  int32_t top_logprobs = 0;
};

// How the model may use the request's tools (tool_choice).
struct ToolChoice {
  std::string mode = "auto";  // "none", "auto", "required", or "function" (the one named below)
  std::string function;       // mode "function": the tool's name, one of the request's tools
  // allowed_tools ({"type": "allowed_tools", "allowed_tools": {"mode": "auto" or "required", "tools": [{"type":
  // "function", "function": {"name": ...}}, ...]}}): the tools the model may call (mode auto or required), a
  // subset of the request's, each once; the prompt still lists every tool. Empty: all of them.
  std::vector<std::string> allowed;
};

// The form the answer must take (response_format).
struct ResponseFormat {
  std::string type = "text";  // "text", "json_object" or "json_schema"
  std::string name;           // json_schema.name
  std::string schema_json;    // json_schema.schema, as JSON text
  bool strict = false;        // json_schema.strict
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // roles as given, "developer" read as "system"
  SamplingRequest sampling;
  std::string user;                     // names a session (session_for_user) when the header X-Orbit-Session does not
  std::string tools_json;               // the request's `tools` as JSON text; "" when absent
  std::vector<std::string> tool_names;  // their function names, in order
  ToolChoice tool_choice;
  // The tools the answer may call, as JSON text: tools_json narrowed to tool_choice.allowed ("" when not narrowed,
  // then tools_json). Calls are decoded under this list; the prompt shows tools_json.
  std::string callable_tools_json;
  const std::string& calls_json() const { return callable_tools_json.empty() ? tools_json : callable_tools_json; }
  bool parallel_tool_calls = true;
  ResponseFormat response_format;
  bool store = false;                           // keep the completion (chat_store.h)
  std::map<std::string, std::string> metadata;  // kept with it, and what lists filter by
  // With store: the request's `messages` as sent (JSON text), what GET .../messages lists.
  std::string messages_json;
  // Whether the answer is read for tool calls: tools given and tool_choice not "none".
  bool reads_tool_calls() const { return !tool_names.empty() && tool_choice.mode != "none"; }
};

struct CompletionRequest {
  std::string model;
  std::string prompt;
  SamplingRequest sampling;
  std::string user;
};

// A parse: the request, or the error to answer with.
template <typename T>
struct Parsed {
  std::optional<T> value;
  ApiError error;  // meaningful when !value
  bool ok() const { return value.has_value(); }
};

// Parse and check a /v1/chat/completions body; never throws on any input.
Parsed<ChatRequest> parse_chat_request(std::string_view body, const ServeLimits& limits = {});
// Parse and check a /v1/completions body; never throws on any input.
Parsed<CompletionRequest> parse_completion_request(std::string_view body, const ServeLimits& limits = {});

// The session a request's `user` names when no X-Orbit-Session header does: `user` itself when it is a
// valid session id not starting with "user-", else "user-" and 32 hex digits, the first 128 bits of the
// SHA-256 of its bytes (so "john doe" and "a.b+c@example.com" are sessions too, and "user-7" is hashed rather
// than taken as is: no `user` can name the session another's hash gives); "" for no user.
std::string session_for_user(std::string_view user);

// A session id from the X-Orbit-Session header: 1 to 128 characters of [A-Za-z0-9._:@-]. Returns the error
// message for any other text ("" when valid).
std::string session_id_problem(std::string_view id);

}  // namespace orbit::serve
