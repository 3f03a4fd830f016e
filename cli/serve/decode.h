// One run's decode: Window::generate after the query, one forward per turn at the gate, so sessions
// interleave token by token; the text streams through RunSink::on_text (TextStream holds back split
// characters and stop strings) and the run ends at a stop token, a stop string, max_tokens, or a client
// that left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/window.h"
#include "serve/serve_api.h"
#include "serve/serve_context.h"
#include "serve/serve_types.h"

namespace orbit::serve {

struct DecodeRequest {
  const std::vector<int64_t>* query = nullptr;  // the tokens read after the window (non-empty)
  const SamplingRequest* sampling = nullptr;
  std::string lane;                              // the gate lane each forward queues in
  std::shared_ptr<const Constraint> constraint;  // what the answer must match (answer_constraint.h); null: free
};

// The tokens to generate at most: max_tokens (the server's default when the request gives none) within the
// room the context leaves after `prompt_tokens`, and at least 1.
int64_t max_tokens_for(const ServeContext& context, int64_t prompt_tokens, const SamplingRequest& sampling);

// Decodes after `window` (the caller holds it, not the gate). Fills text, finish_reason ("stop", "length",
// "cancelled"; a constrained answer finished is "stop", one no token could continue "length"), tokens,
// completion_tokens, prompt_forward_tokens and, when the request asks, logprobs (streamed ones also queued
// for the stream's chunks: serve_wire.h); the rest of the usage is the caller's. The request's penalties and
// logit_bias reach GenerateOptions as given. Throws orbit::Error when the
// engine fails.
RunResult decode(ServeContext& context, Window& window, const DecodeRequest& request, const RunSink& sink);

}  // namespace orbit::serve
