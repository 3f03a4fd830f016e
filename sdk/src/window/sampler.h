// The token choice of one decoding sequence: a generate call's options (GenerateOptions: temperature, top_p,
// seed, penalties, logit_bias, logprobs) and its bound constraint, applied to one row of logits per step.
// Window::generate runs one Sampler per call; a batched decode runs one per sequence, on its row of the
// batch's logits. A step:
//
//   logits (the model's, [vocab])
//     -> penalties   logits[t] -= presence · [count(t) > 0] + frequency · count(t)   (tokens chosen so far)
//     -> logit_bias  logits[t] += bias[t]
//     -> constraint  -inf where the token's bytes would leave the grammar (or not fit the tokens left);
//                    with a trigger (GenerateOptions::constraint_trigger) only once the text holds it (outside
//                    constraint_trigger_block: orbit/trigger_watch.h): before, a chosen token that completes
//                    the trigger and goes on where the grammar refuses is excluded and the choice made again
//     -> logprobs    log_softmax(logits): the chosen token's and the top_logprobs best (when asked): the
//                    allowed ones, then, where fewer are allowed, masked ones (-inf) ranked by the logits
//                    before the mask
//     -> choice      argmax at temperature 0, else a draw from softmax(logits / T) cut to the top_p nucleus
//
// Without penalties or biases the logits reach the choice untouched, so a run chooses exactly the tokens the
// same options chose before these existed (golden replays pin them). The draw uses the Sampler's own
// std::mt19937_64 seeded with GenerateOptions::seed, one uniform per sampled step.
//
// Thread-safety: a Sampler is a value for one thread at a time; different Samplers are independent (the
// constraint and vocabulary they share are immutable and lock their caches inside).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/constraint.h"
#include "orbit/trigger_watch.h"
#include "orbit/window.h"
#include "window/open_tag_tokens.h"

namespace orbit::detail {

class EngineCore;

// What a Sampler needs besides the options.
struct SamplerSetup {
  int64_t vocab = 0;  // the logits' length
  // With GenerateOptions::constraint: the tokens that end the constrained text (TokenConstraintOptions::
  // end_tokens: the stop tokens and EOS); the Sampler binds the constraint to `vocabulary` with them.
  std::vector<int64_t> end_tokens;
  // Token bytes for TokenLogprob::bytes (null: none, e.g. a model without a tokenizer); with at_text_start
  // the first token writes TokenBytes::at_start's bytes.
  std::shared_ptr<const TokenVocabulary> vocabulary;
  bool at_text_start = false;
};

// One step's outcome: a token, or why none was chosen.
struct SamplerStep {
  int64_t token = -1;  // -1: no token (stop_reason says why)
  // "" with a token; "constraint_complete" / "constraint_no_token" when the constraint allows none (the
  // text complete and nothing may follow within the tokens left / no token continues it).
  std::string stop_reason;
  std::optional<StepLogprobs> logprobs;  // with GenerateOptions::logprobs and a token
  bool has_token() const { return token >= 0; }
};

class Sampler {
 public:
  // Throws orbit::Error naming the field ("generate: logit_bias[7] = 300 must be in [-100, 100]") for
  // options outside their ranges: max_tokens, temperature, top_p, stop_tokens, stop (empty strings),
  // penalties, logit_bias, top_logprobs. `what` starts the message.
  static void check_options(const GenerateOptions& options, int64_t vocab, const char* what = "generate");

  // Options are copied (the callbacks are not kept). Throws as check_options does.
  Sampler(const GenerateOptions& options, SamplerSetup setup);

  // Chooses the next token from `logits` ([vocab] or [1, vocab], any dtype or device; copied to CPU doubles)
  // and records it: its count for the penalties, the constraint advanced. `tokens_left`: how many tokens the
  // sequence may still emit after this one (the constraint's room to finish; -1: no limit).
  SamplerStep next(const at::Tensor& logits, int64_t tokens_left = -1);

  bool constrained() const { return constraint_.has_value(); }
  // The constraint applies now: there is one, and its trigger (if any) has appeared.
  bool constraint_active() const { return constraint_.has_value() && triggered_; }
  // The constraint's text is complete / complete and nothing can follow (false when it does not apply).
  bool complete() const { return constraint_active() && constraint_->complete(); }
  bool finished() const { return constraint_active() && constraint_->finished(); }
  // A stop token of the options, or an end token of the constraint (the tokenizer's EOS there).
  bool is_stop_token(int64_t token) const;
  int64_t tokens_chosen() const { return chosen_; }

 private:
  void apply_processors(double* logits) const;  // penalties, then logit_bias
  // A step before the trigger: a free choice, unless it completes the trigger where the grammar refuses.
  SamplerStep free_step(double* logits);
  // A step where the text may still open the block or begin the constrained answer (a constraint without a
  // trigger past a block the model may open): the tokens the constraint allows after the text so far, and
  // those that write the open string's next bytes or open the block (only open_tokens_ can: the rest are
  // judged by the mask alone). Leading whitespace keeps both ways open, but only where the answer may take
  // it (its grammar and the tokens left): it is accepted into the constraint as the answer's (lead_) and, if
  // the block opens after it, the constraint is bound again. Never an end or stop token.
  SamplerStep open_or_answer_step(double* logits, int64_t tokens_left);
  // Sets to -inf in `row` the tokens that cannot begin the answer after the text so far: the constraint's
  // mask with the budget of `tokens_left`, where the text is the whitespace it took or after the open
  // string's start held (then on a copy past those bytes); end and stop tokens too.
  void mask_answer(double* row, int64_t tokens_left) const;
  // The chosen token of an open-or-answer step taken (`next`: the watch after it; `from`: what it pushed).
  SamplerStep take_open_or_answer(int64_t token, TriggerWatch next, const std::optional<std::string>& from,
                                  double* logits);
  TokenConstraint bind_constraint(bool at_text_start) const;
  void record(SamplerStep& step, double* logits);  // logprobs, counts
  // A free step's `token` taken: the constrained text from the trigger on (`from`, when it began) accepted, the
  // step recorded.
  SamplerStep take(int64_t token, const std::optional<std::string>& from, double* logits);
  int64_t choose(const double* logits);  // argmax or a draw (the processed, masked row)
  StepLogprobs logprobs_of(const at::Tensor& logits, int64_t token) const;
  std::string bytes_of(int64_t token) const;

  GenerateOptions options_;
  int64_t vocab_ = 0;
  std::optional<TokenConstraint> constraint_;
  bool triggered_ = true;              // false while a trigger has not appeared
  std::optional<TriggerWatch> watch_;  // with a trigger: where it appears in the free text
  // With a block the model may open and no trigger: the tokens that can keep it possible (open_tag_tokens.h).
  std::shared_ptr<const OpenTagTokens> open_tokens_;
  std::string lead_;                 // the leading whitespace the constraint took while the block could still open
  std::vector<int64_t> end_tokens_;  // the constraint's (SamplerSetup::end_tokens)
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  bool at_text_start_ = false;
  std::mt19937_64 rng_;
  std::unordered_map<int64_t, int64_t> counts_;  // generated token -> times chosen (the penalties)
  int64_t chosen_ = 0;
  std::vector<double> row_, probs_;  // the step's logits and probabilities (kept to reuse their memory)
  // With a constraint and top_logprobs: the step's logits after the processors, before any mask (empty
  // otherwise); they rank the masked tokens that fill the top list where fewer are allowed.
  std::vector<double> unmasked_;
  std::vector<int64_t> order_;  // top_p's ranking
};

// A generate call's Sampler on the engine's model: its constraint bound to the tokenizer's vocabulary (the end
// tokens are the stop tokens and the tokenizer's EOS; the first token starts the text when the query's last
// token is BOS or special), token bytes for logprobs when the engine has a tokenizer. Checks the options
// first; throws orbit::Error for a constraint on a model without a tokenizer.
Sampler make_sampler(const EngineCore& core, const GenerateOptions& options, const std::vector<int64_t>& query);

// Throws orbit::Error for stop strings, a constraint or on_text asked of a model without a tokenizer.
void check_tokenizer_needs(const GenerateOptions& options, bool has_tokenizer);

}  // namespace orbit::detail
