// The OpenAI wire format of `orbit serve`, apart from the server: request bodies parsed and checked into
// types, and the error and response bodies written back. No model, no sockets: the libFuzzer target
// fuzz_serve_request runs exactly this parser on arbitrary bytes.
//
// What a request may hold (anything else is ignored, as OpenAI ignores unknown fields):
//   chat:        model (string, required), messages (non-empty array, required), max_tokens or
//                max_completion_tokens (integer >= 1), temperature [0, 2], top_p (0, 1], seed (integer),
//                stop (string or array of at most 4 strings), n (1 only), stream (bool),
//                stream_options.include_usage (bool), user (string), tools (array, handed to the template)
//   completions: model, prompt (string, or an array of one string), and the same sampling fields
//   a message:   role in {system, developer, user, assistant, tool}; content a string, null (an assistant
//                message with tool_calls), or an array of {"type": "text", "text": ...} parts;
//                name, tool_call_id (strings); tool_calls (array of {id, type "function",
//                function {name, arguments (string)}})
// Every violation is an ApiError with status 400 (413 for a body over ServeLimits::max_body_bytes) naming
// the field, e.g. "messages[2].role: unknown role 'robot' (expected system, developer, user, assistant
// or tool)". Checks that need the model (prompt longer than the context, max_tokens past it, the model
// name) are the server's (serve_core.h), with the same error body.
#pragma once

#include <cstdint>
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

struct ServeLimits {
  std::size_t max_body_bytes = std::size_t{4} << 20;  // request bodies over this get 413
  std::size_t max_messages = 4096;
  std::size_t max_stop_strings = 4;
};

// The sampling fields shared by both endpoints.
struct SamplingRequest {
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens; nullopt: the server's default
  double temperature = 1.0;           // OpenAI's default
  double top_p = 1.0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // generation ends before the first of these in the text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage before [DONE]
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // roles as given, "developer" read as "system"
  SamplingRequest sampling;
  std::string user;        // names a session when the header X-Orbit-Session does not
  std::string tools_json;  // the request's `tools` as JSON text; "" when absent
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

// A session id from a header or `user`: 1 to 128 characters of [A-Za-z0-9._:@-]. Returns the error
// message for any other text ("" when valid).
std::string session_id_problem(std::string_view id);

}  // namespace orbit::serve
