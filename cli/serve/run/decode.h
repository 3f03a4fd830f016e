// One run's decode: its sequence (or, with n > 1, its n sequences over the window and n − 1 copy-on-write
// forks of it) joins the server's decode batch (decode_scheduler.h), which runs one forward per step over
// every session's pending token; the text streams through RunSink::on_text (TextStream holds back split
// characters and stop strings) and the run ends at a stop token, a stop string, max_tokens, or a client
// that left.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orbit/window.h"
#include "serve/serve_context.h"
#include "serve/serve_types.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

struct DecodeRequest {
  const std::vector<int64_t>* query = nullptr;  // the tokens read after the window (non-empty)
  const SamplingRequest* sampling = nullptr;
  std::shared_ptr<const Constraint> constraint;  // what the answer must match (answer_constraint.h); null: free
  std::string trigger;                           // non-empty: the constraint applies from this text on
  TriggerBlock trigger_block;  // where the trigger does not count (GenerateOptions::constraint_trigger_block)
  // Set: applied to each choice's result as the choice ends, before RunSink::on_choice_end sees it (the
  // request path reads the answer's tool calls out with it). Called on the request's thread.
  std::function<void(int64_t choice, RunResult& r)> read_choice;
};

// The tokens to generate at most: max_tokens (the server's default when the request gives none) within the
// room the context leaves after `prompt_tokens`, and at least 1.
int64_t max_tokens_for(const ServeContext& context, int64_t prompt_tokens, const SamplingRequest& sampling);

// Decodes after `window` (the caller holds it, not the gate; the decode batch takes the gate for each of its
// steps) and waits for the end. Fills text, finish_reason ("stop", "length", "cancelled"; a constrained answer
// finished is "stop", one no token could continue "length"), tokens, completion_tokens, prompt_forward_tokens
// and, when the request asks, logprobs (streamed ones also handed to sink.on_logprobs as their text goes); the
// rest of the usage is the caller's. The request's penalties and logit_bias reach GenerateOptions as given.
// With sampling.n > 1, choice i is drawn with Window::answer_seed(seed, i) (seed + i·2³²) from a fork of the window,
// all n decoded together, the query forwarded once: choices 1..n−1 go to extra_choices, and completion_tokens and
// prompt_forward_tokens count every choice. Only choice 0 reaches sink.on_text; with sink.on_choice_text every choice
// streams there as it is generated (its log probabilities to sink.on_logprobs under its index). Each choice's end
// reaches sink.on_choice_end as it ends, while the others go on (its held-back text first, its log probabilities handed
// on before it, for the chunk that ends it). The sink sees the choices' text and ends in ChoiceOrder's order
// (choice_order.h: by step, a choice's end before any later token of the others), whatever the threads'
// timing. A client that left, or a server that closed before a choice could end, cancels the run: every
// choice's finish_reason is then "cancelled", those that ended before too. Throws orbit::Error when the engine
// fails.
RunResult decode(ServeContext& context, Window& window, const DecodeRequest& request, const RunSink& sink);

}  // namespace orbit::serve
