// What a read of a window decodes with and gives back: GenerateOptions (sampling, stops, constraints, callbacks),
// Generation (the answer, its stop reason, its log probabilities) and Logits; Window::generate, generate_n and
// orbit::generate_many (orbit/window.h, orbit/decode_batch.h) take and return them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/constraint.h"
#include "orbit/trigger_watch.h"

namespace orbit {

// One token's log probability at a step (GenerateOptions::logprobs).
struct TokenLogprob {
  int64_t token = 0;
  double logprob = 0;  // natural log; -inf when masked
  // The bytes the token writes at its place in the text (the first token's at the start of a text where the
  // decoder drops a leading space there); "" for tokens that write none (EOS, BOS, special tokens) and when
  // the engine has no tokenizer. May be part of a UTF-8 character (byte tokens).
  std::string bytes;
};

// A generated token's log probability and the most likely tokens of its step: `top` holds min(top_logprobs,
// vocab) tokens, always: those of highest log probability, most likely first (ties: lower id first); where a
// constraint allows fewer tokens than that, all the allowed ones, then the masked tokens most likely before
// the mask (after the penalties and logit_bias; ties: lower id first), each with logprob -inf. It includes the
// chosen token whenever that one ranks among them.
struct StepLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

struct GenerateOptions {
  int64_t max_tokens = 32;
  double temperature = 0.0;  // 0 = greedy; finite
  double top_p = 1.0;        // nucleus sampling when < 1 (with temperature > 0); 0: the top token alone
  uint64_t seed = 0;
  std::vector<int64_t> stop_tokens;  // generation ends after emitting one of these
  // The engine tokenizer's end tokens end the run as stop_tokens do (stop_reason "stop_token", the token kept
  // in Generation::tokens; its text is none): its EOS, and its BOS, which a llama2.c model writes to begin its
  // next text (run.c stops there), as `orbit generate` and `orbit serve` stop. true: the run goes on past them
  // (vLLM's ignore_eos: a fixed length, for benchmarks). An engine without a tokenizer knows no end tokens.
  bool ignore_eos = false;
  // Stop strings (OpenAI's `stop`; each non-empty, any number): the run ends at the token whose text
  // completes one, and Generation::text ends right before the first occurrence (the stop string left out),
  // stop_reason "stop_string"; `tokens` and `logprobs` keep every token chosen, the stop string's included.
  // A token that completes a stop string and is one of stop_tokens too gives "stop_string" (the reason names
  // the cut that applies: the text ends before the stop string, not after the stop token's text).
  // Under a constraint a stop string ends the answer only where the text before it is complete (from the
  // trigger on, with constraint_trigger), so it never cuts a call or a JSON answer short. Needs the engine's
  // tokenizer. The text is released as orbit/text_stream.h does (a bounded window decoded per token).
  std::vector<std::string> stop;
  // Called on generate()'s thread after each chosen token that did not end the run as a stop token or a
  // stop string's last token, before the next forward, with the token and its index in Generation::tokens. Returning
  // false ends the run there (stop_reason "cancelled"; the token is kept). A server streams and cancels with it, and
  // may wait in it for its turn; it must not use this window: an operation, read, sync, idle call or fork of it
  // from inside on_token, on_text or on_logprobs throws orbit::Error naming the call ("apply (evict): window 1 is
  // decoding on this thread: ..."), the window unchanged. Other windows may be used.
  std::function<bool(int64_t token, int64_t index)> on_token;
  // With `logprobs` (without it, refused): called right before on_token, for the same tokens, with the token's
  // log probabilities (Generation::logprobs' entry), so that a stream can send them along with the token.
  std::function<void(const StepLogprobs& step)> on_logprobs;
  // Streamed text: called on generate()'s thread, right after on_token, with each piece of the answer's text
  // as it becomes final (orbit/text_stream.h): whole UTF-8 characters that no stop string can take back any
  // more, never empty. Pieces held back at a token (a character's first bytes, a stop string's possible start)
  // come with a later one; the rest comes in one last call when the run ends, so the pieces of a run that
  // was not cancelled join to Generation::text (the last piece may end inside a character when max_tokens
  // cut one). Returning false ends the run there (stop_reason "cancelled"; no later piece is sent, and
  // Generation::text holds every token's text, the part not yet sent included); the last call's return
  // value is not read. Tool calls and JSON are text like any other here (a Hermes call streams as its
  // "<tool_call>{...}</tool_call>" markup). Needs the engine's tokenizer; it must not use this window. Under
  // generate_n each branch calls its own copy of it, which shares what it captures: pieces of different
  // branches then interleave in one sink, untagged (Python refuses on_text there).
  std::function<bool(const std::string& text)> on_text;
  // Constrained decoding (orbit/constraint.h); null = unconstrained. Each step, tokens whose bytes would not
  // keep the text a valid prefix get logit -inf before greedy/temperature/top_p sampling, and so do tokens
  // after which the shortest completion no longer fits in max_tokens (one token per byte); the end tokens
  // (stop_tokens and the tokenizer's EOS, which then ends the run like a stop token) only when the text is
  // complete. The run ends with stop_reason "constraint_complete" once the text is complete and nothing can
  // follow (no token is forwarded for that), or when max_tokens is reached with the text complete;
  // "constraint_no_token" when no token of the vocabulary continues it (e.g. a vocabulary without '{' under
  // an object schema). Needs the engine's tokenizer; its token bytes are read once per tokenizer.
  std::shared_ptr<const Constraint> constraint;
  // With a constraint: the run is free (unconstrained, ended as an unconstrained run ends) until its text
  // holds this string; from the string's first byte the constraint applies, to the end of the run (its
  // text starts with the string). A token that would complete the string and go on in a way the constraint
  // refuses is not chosen (the next best is, or a new draw). Empty: constrained from the first token.
  // Tool calls under tool_choice "auto": tool_calls()'s constraint after tool_call_trigger(format), so the
  // model may answer in text, and a call it starts is written whole and valid.
  std::string constraint_trigger;
  // With a constraint: a block at the text's start where the trigger does not count (orbit/trigger_watch.h): a
  // reasoning model's thinking, {"", "</think>"} where the prompt opened `<think>`, {"<think>", "</think>"}
  // where the model may open it. The run is free inside it; the trigger counts from the block's end (or from
  // the first byte where the text does not open it). Without a trigger the constraint applies there: right
  // after `close`, or from the first byte where the text does not begin with `open` (the first steps allow
  // the tokens the constraint allows and those that write `open` or its start, never an end token; leading
  // whitespace keeps both ways open where the constraint takes it, its grammar and the tokens left, and is the
  // answer's if no block follows). Empty (the default): the first trigger counts, or the constraint applies
  // from the first token.
  TriggerBlock constraint_trigger_block;

  // Logit processors, OpenAI's semantics, applied to each step's logits in this order before the constraint's
  // mask and before sampling (sdk/src/window/sampler.h):
  //   logits[t] -= presence_penalty · [count(t) > 0] + frequency_penalty · count(t)
  // where count(t) is how often t occurs among the tokens generated so far in this call (the query does
  // not count), then logits[t] += logit_bias[t]. Penalties in [-2, 2] (positive discourages repetition),
  // biases in [-100, 100] (-100 in practice bans a token, +100 forces it where the constraint allows it);
  // bias keys are token ids in [0, vocab). Out of range: generate throws orbit::Error naming the field.
  double presence_penalty = 0;
  double frequency_penalty = 0;
  std::map<int64_t, double> logit_bias;

  // Log probabilities (Generation::logprobs): with `logprobs`, each generated token's log probability and
  // the `top_logprobs` (0..20; needs logprobs) most likely tokens of that step. They are of the distribution
  // the token was chosen from after the processors above and the constraint's mask, at temperature 1 and
  // before top_p: log_softmax(processed logits). Temperature and top_p shape only the draw, so greedy and
  // sampled runs report the same numbers for the same step; a token the constraint masked has -inf, and is
  // listed among the top ones only where fewer than top_logprobs tokens are allowed (StepLogprobs::top). Off,
  // nothing is computed (the vocabulary's token bytes are read only when on).
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

struct Generation {
  std::vector<int64_t> tokens;  // generated tokens (a stop token included when it ended the run)
  std::string text;             // the tokens as text when the engine has a tokenizer (else ""), read
                                // after the query's last token (BOS and EOS produce no text); with
                                // stop_reason "stop_string", up to the stop string
  // Query tokens forwarded: all of them, or only the last when KV computed before behind the same window
  // held the others (exact reuse, WindowPolicy::reuse_computed; a repeated call costs one token); 0 when
  // nothing was forwarded (max_tokens 0). Under WindowPolicy::read_attention_weight, plus the query's forward
  // that looked before a read's plan repaired the window (generate_n's look: for its first answer).
  int64_t prompt_forward_tokens = 0;
  // "stop_token", "stop_string" (GenerateOptions::stop; it wins over "stop_token" for a token that is both),
  // "max_tokens", "position_limit", "cancelled" (on_token or on_text returned false); with a constraint also
  // "constraint_complete" and "constraint_no_token" (GenerateOptions::constraint)
  std::string stop_reason;
  // With GenerateOptions::logprobs: one entry per token of `tokens`, in order; else empty.
  std::vector<StepLogprobs> logprobs;
  double seconds = 0;
};

// What Window::generate (generate_n, orbit::generate_many) refuses before it forwards anything, checked
// alone: an empty query or a query token outside [0, vocab), an option out of its range, stop strings, a
// constraint or on_text without a tokenizer. Throws orbit::Error naming the argument ("generate: top_p = 2
// must be in [0, 1]"), as generate() would. For a caller that answers without decoding (a run cancelled
// before it began) and must still refuse what generate() refuses. vocab: ModelInfo::vocab_size.
void check_generate(const std::vector<int64_t>& query, const GenerateOptions& options, int64_t vocab,
                    bool has_tokenizer);

// Next-token logits after each query token.
struct Logits {
  int64_t rows = 0;
  int64_t vocab = 0;
  std::vector<float> values;  // [rows, vocab] row-major
  const float* row(int64_t i) const { return values.data() + i * vocab; }
  const float* last() const { return row(rows - 1); }
  int64_t argmax(int64_t i) const;  // ties: the lowest token id
};

}  // namespace orbit
