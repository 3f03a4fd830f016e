// The token choice of one decoding sequence (sampler.h).
#include "window/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "constrain/tokenizer_vocabulary.h"
#include "engine/engine_core.h"
#include "orbit/common/error.h"

namespace orbit::detail {

namespace {

constexpr double kMaxPenalty = 2;  // OpenAI's range for presence_penalty and frequency_penalty
constexpr double kMaxBias = 100;   // ... and for a logit_bias value
constexpr int32_t kMaxTopLogprobs = 20;

}  // namespace

void Sampler::check_options(const GenerateOptions& o, int64_t vocab, const char* what) {
  ORBIT_CHECK(o.max_tokens >= 0, what << ": max_tokens = " << o.max_tokens << " must be >= 0");
  ORBIT_CHECK(o.temperature >= 0 && std::isfinite(o.temperature),
              what << ": temperature = " << o.temperature << " must be a finite number >= 0");
  // 0 is the top token alone (the smallest set whose mass reaches it holds one token), as OpenAI takes it.
  ORBIT_CHECK(o.top_p >= 0 && o.top_p <= 1, what << ": top_p = " << o.top_p << " must be in [0, 1]");
  for (int64_t stop : o.stop_tokens) {
    ORBIT_CHECK(stop >= 0 && stop < vocab,
                what << ": stop_tokens holds " << stop << ", outside the vocabulary [0, " << vocab << ")");
  }
  ORBIT_CHECK(std::abs(o.presence_penalty) <= kMaxPenalty,
              what << ": presence_penalty = " << o.presence_penalty << " must be in [-2, 2]");
  ORBIT_CHECK(std::abs(o.frequency_penalty) <= kMaxPenalty,
              what << ": frequency_penalty = " << o.frequency_penalty << " must be in [-2, 2]");
  for (const auto& [token, bias] : o.logit_bias) {
    ORBIT_CHECK(token >= 0 && token < vocab,
                what << ": logit_bias names token " << token << ", outside the vocabulary [0, " << vocab << ")");
    ORBIT_CHECK(std::abs(bias) <= kMaxBias,
                what << ": logit_bias[" << token << "] = " << bias << " must be in [-100, 100]");
  }
  ORBIT_CHECK(o.top_logprobs >= 0 && o.top_logprobs <= kMaxTopLogprobs,
              what << ": top_logprobs = " << o.top_logprobs << " must be in [0, 20]");
  ORBIT_CHECK(o.top_logprobs == 0 || o.logprobs,
              what << ": top_logprobs = " << o.top_logprobs << " needs logprobs = true");
  ORBIT_CHECK(!o.on_logprobs || o.logprobs, what << ": on_logprobs needs logprobs = true (it is called with them)");
  for (std::size_t i = 0; i < o.stop.size(); ++i) {
    ORBIT_CHECK(!o.stop[i].empty(), what << ": stop[" << i << "] is empty (a stop string has at least one byte)");
  }
  ORBIT_CHECK(o.constraint_trigger.empty() || o.constraint != nullptr,
              what << ": constraint_trigger = \"" << o.constraint_trigger << "\" needs a constraint");
  ORBIT_CHECK(
      o.constraint_trigger_block.empty() || o.constraint != nullptr,
      what << ": constraint_trigger_block (close \"" << o.constraint_trigger_block.close << "\") needs a constraint");
  ORBIT_CHECK(
      o.constraint_trigger_block.open.empty() || !o.constraint_trigger_block.close.empty(),
      what << ": constraint_trigger_block.open = \"" << o.constraint_trigger_block.open << "\" needs a close string");
}

Sampler::Sampler(const GenerateOptions& options, SamplerSetup setup)
    : options_(options),
      vocab_(setup.vocab),
      end_tokens_(std::move(setup.end_tokens)),
      vocabulary_(std::move(setup.vocabulary)),
      at_text_start_(setup.at_text_start),
      rng_(options.seed) {
  check_options(options, vocab_);
  if (options.constraint != nullptr) {
    ORBIT_CHECK(vocabulary_ != nullptr, "Sampler: a constraint needs the tokens' bytes (a vocabulary)");
    constraint_.emplace(bind_constraint(at_text_start_));
  }
  triggered_ = options.constraint_trigger.empty() && options.constraint_trigger_block.empty();
  if (!triggered_) watch_.emplace(options.constraint_trigger, options.constraint_trigger_block);
  if (!triggered_ && options.constraint_trigger.empty() && !options.constraint_trigger_block.open.empty()) {
    open_tokens_ = open_tag_tokens(vocabulary_, options.constraint_trigger_block.open);
  }
  options_.on_token = nullptr;
  options_.on_logprobs = nullptr;
  options_.on_text = nullptr;
}

TokenConstraint Sampler::bind_constraint(bool at_text_start) const {
  TokenConstraintOptions o;
  o.end_tokens = end_tokens_;
  o.at_text_start = at_text_start;
  return TokenConstraint(options_.constraint, vocabulary_, std::move(o));
}

bool Sampler::is_stop_token(int64_t token) const {
  const std::vector<int64_t>& stops = options_.stop_tokens;
  return std::find(stops.begin(), stops.end(), token) != stops.end() ||
         (constraint_active() && constraint_->is_end_token(token));
}

void Sampler::apply_processors(double* logits) const {
  if (options_.presence_penalty != 0 || options_.frequency_penalty != 0) {
    for (const auto& [token, count] : counts_) {
      logits[token] -= options_.presence_penalty + options_.frequency_penalty * static_cast<double>(count);
    }
  }
  for (const auto& [token, bias] : options_.logit_bias) logits[token] += bias;
}

// The argmax when temperature is 0, else a draw from the softmax at that temperature, cut to the top_p
// nucleus. Tokens at -inf (masked by a constraint) are never drawn.
int64_t Sampler::choose(const double* logits) {
  const int64_t V = vocab_;
  if (options_.temperature == 0) {  // the first largest (a NaN counts as largest, as at::argmax has it)
    int64_t best = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (std::isnan(logits[j])) return j;
      if (logits[j] > logits[best]) best = j;
    }
    return best;
  }
  // softmax(logits / T) in one pass over a private buffer (a step of a batched decode pays this per sequence).
  // The largest logit is taken off before the division: a temperature so small that a logit over it passes
  // a double's range (1e-308) then leaves the largest at exp(0) = 1 and the rest at 0, a greedy choice among
  // the tied largest, where inf - inf was NaN and every token fell to token 0.
  std::vector<double>& p = probs_;
  p.resize(static_cast<std::size_t>(V));
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < V; ++j) top = std::max(top, logits[j]);
  double total = 0;
  for (int64_t j = 0; j < V; ++j) total += p[j] = std::exp((logits[j] - top) / options_.temperature);
  for (double& v : p) v /= total;
  if (options_.top_p < 1) {
    // Keep the smallest prefix of the tokens by probability whose mass reaches top_p (at least one token).
    std::vector<int64_t>& order = order_;
    order.resize(static_cast<std::size_t>(V));
    for (int64_t j = 0; j < V; ++j) order[j] = j;
    std::sort(order.begin(), order.end(),
              [&p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double mass = 0;
    int64_t below = 0;
    for (int64_t i = 0; i < V; ++i) {
      mass += p[order[i]];
      if (mass < options_.top_p) ++below;
    }
    const int64_t keep = std::min(V, below + 1);
    for (int64_t i = keep; i < V; ++i) p[order[i]] = 0;
  }
  double kept = 0;
  for (double v : p) kept += v;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cdf = 0;
  int64_t last = 0;  // the last token with mass: where rounding leaves u above the cdf's end
  for (int64_t j = 0; j < V; ++j) {
    const double pj = p[j] / kept;
    cdf += pj;
    if (pj > 0) last = j;
    if (u < cdf && pj > 0) return j;
  }
  return last;
}

std::string Sampler::bytes_of(int64_t token) const {
  if (vocabulary_ == nullptr || token >= vocabulary_->size()) return "";
  if (chosen_ == 0 && at_text_start_) {
    for (const auto& [id, bytes] : vocabulary_->at_start()) {
      if (id == token) return bytes.value_or("");
    }
  }
  return vocabulary_->bytes(token).value_or("");
}

StepLogprobs Sampler::logprobs_of(const at::Tensor& logits, int64_t token) const {
  const at::Tensor lp = at::log_softmax(logits, 0).contiguous();
  const double* v = lp.data_ptr<double>();
  StepLogprobs out;
  out.chosen = {token, v[token], bytes_of(token)};
  if (options_.top_logprobs == 0) return out;
  const auto want = static_cast<std::size_t>(std::min<int64_t>(options_.top_logprobs, vocab_));
  std::vector<int64_t> allowed, masked;
  allowed.reserve(static_cast<std::size_t>(vocab_));
  for (int64_t j = 0; j < vocab_; ++j) (std::isfinite(v[j]) ? allowed : masked).push_back(j);
  // The allowed tokens first, by their log probability (ties: lower id first).
  const std::size_t k = std::min(allowed.size(), want);
  std::partial_sort(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(k), allowed.end(),
                    [v](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  for (std::size_t i = 0; i < k; ++i) out.top.push_back({allowed[i], v[allowed[i]], bytes_of(allowed[i])});
  // Then, where fewer are allowed, the masked tokens the processed logits rank highest, at -inf: the list
  // always has min(top_logprobs, vocab) entries.
  const std::size_t rest = std::min(masked.size(), want - k);
  if (rest == 0) return out;
  const double* before = unmasked_.size() == static_cast<std::size_t>(vocab_) ? unmasked_.data() : v;
  std::partial_sort(
      masked.begin(), masked.begin() + static_cast<std::ptrdiff_t>(rest), masked.end(),
      [before](int64_t a, int64_t b) { return before[a] > before[b] || (before[a] == before[b] && a < b); });
  for (std::size_t i = 0; i < rest; ++i) out.top.push_back({masked[i], v[masked[i]], bytes_of(masked[i])});
  return out;
}

SamplerStep Sampler::next(const at::Tensor& logits, int64_t tokens_left) {
  ORBIT_CHECK(logits.numel() == vocab_,
              "Sampler::next: " << logits.numel() << " logits for a vocabulary of " << vocab_);
  // A private double copy: the processors and the mask write into it.
  row_.resize(static_cast<std::size_t>(vocab_));
  double* data = row_.data();
  if (logits.device().is_cpu() && logits.scalar_type() == at::kFloat && logits.is_contiguous()) {
    const float* f = logits.data_ptr<float>();
    for (int64_t j = 0; j < vocab_; ++j) data[j] = f[j];
  } else {
    const at::Tensor d = logits.reshape({vocab_}).to(at::kCPU, at::kDouble).contiguous();
    std::copy(d.data_ptr<double>(), d.data_ptr<double>() + vocab_, data);
  }
  apply_processors(data);
  // The processed logits before any mask: where the constraint leaves fewer than top_logprobs tokens, the
  // list goes on with the masked ones these rank highest (logprobs_of).
  if (constraint_.has_value() && options_.top_logprobs > 0) {
    unmasked_.assign(data, data + vocab_);
  } else {
    unmasked_.clear();
  }
  if (constraint_.has_value() && !triggered_) {
    const bool answer_may_begin = options_.constraint_trigger.empty() && watch_->may_open();
    return answer_may_begin ? open_or_answer_step(data, tokens_left) : free_step(data);
  }
  SamplerStep step;
  if (constraint_.has_value() && constraint_->mask_logits(data, vocab_, tokens_left) == 0) {
    step.stop_reason = constraint_->complete() ? "constraint_complete" : "constraint_no_token";
    return step;
  }
  step.token = choose(data);
  if (constraint_.has_value()) constraint_->accept(step.token);
  record(step, data);
  return step;
}

void Sampler::record(SamplerStep& step, double* logits) {
  if (options_.logprobs) step.logprobs = logprobs_of(at::from_blob(logits, {vocab_}, at::kDouble), step.token);
  ++counts_[step.token];
  ++chosen_;
}

SamplerStep Sampler::take(int64_t token, const std::optional<std::string>& from, double* logits) {
  if (from) {
    constraint_->accept_text(*from);
    triggered_ = true;
  }
  SamplerStep step;
  step.token = token;
  record(step, logits);
  return step;
}

SamplerStep Sampler::free_step(double* logits) {
  constexpr int kMaxRefused = 64;
  SamplerStep step;
  for (int refused = 0; refused < kMaxRefused; ++refused) {
    const int64_t token = choose(logits);
    if (std::isinf(logits[token]) && logits[token] < 0) break;  // every token excluded
    TriggerWatch next = *watch_;  // tried on a copy: a refused token leaves the watch as it was
    const std::optional<std::string> from = next.push(is_stop_token(token) ? std::string() : bytes_of(token));
    if (from && !constraint_->matcher().can_advance(*from)) {
      logits[token] = -std::numeric_limits<double>::infinity();  // starts the constrained text wrongly
      continue;
    }
    *watch_ = std::move(next);
    return take(token, from, logits);
  }
  step.stop_reason = "constraint_no_token";
  return step;
}

namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

}  // namespace

void Sampler::mask_answer(double* row, int64_t tokens_left) const {
  constexpr double kOut = -std::numeric_limits<double>::infinity();
  // The text held past the whitespace the constraint took: "" or the open string's start (after whitespace).
  const std::string rest = watch_->held().substr(lead_.size());
  if (rest.empty()) {
    if (constraint_->mask_logits(row, vocab_, tokens_left) == 0) {
      std::fill(row, row + vocab_, kOut);
    } else if (constraint_->complete()) {  // the grammar takes the text so far, but no answer began
      for (int64_t j = 0; j < vocab_; ++j) {
        if (constraint_->is_end_token(j)) row[j] = kOut;
      }
    }
  } else if (!constraint_->matcher().can_advance(rest)) {
    std::fill(row, row + vocab_, kOut);
  } else {
    // The answer after the open string's start, with the budget as the plain step has it: a copy of the
    // constraint past the held bytes (its mask cached per state, the budget read off it: no walk of the
    // vocabulary but where the budget binds, as in the plain step). The held bytes' tokens were counted.
    TokenConstraint after_held = *constraint_;
    after_held.accept_text(rest);
    if (after_held.mask_logits(row, vocab_, tokens_left) == 0) std::fill(row, row + vocab_, kOut);
    for (int64_t e : end_tokens_) {
      if (e < vocab_) row[e] = kOut;  // the held bytes are text: the run does not end here
    }
  }
  for (int64_t stop : options_.stop_tokens) row[stop] = kOut;
}

SamplerStep Sampler::open_or_answer_step(double* logits, int64_t tokens_left) {
  constexpr int kMaxRefused = 64;
  std::vector<double>& row = probs_;  // the step's allowed tokens, on a copy (probs_ is free until choose)
  row.assign(logits, logits + vocab_);
  mask_answer(row.data(), tokens_left);
  const OpenTagTokens& open = *open_tokens_;
  for (const auto& [j, bytes] : chosen_ == 0 && at_text_start_ ? open.first : open.later) {
    if (j >= vocab_ || constraint_->is_end_token(j) || is_stop_token(j)) continue;
    TriggerWatch next = *watch_;
    if (next.push(bytes)) continue;                       // begins the answer: the mask judges it
    if (next.may_open() && blank(next.held())) continue;  // whitespace: the answer must be able to take it
    row[j] = logits[j];                                   // writes the open string's next bytes, or opens the block
  }
  std::copy(row.begin(), row.end(), logits);
  for (int refused = 0; refused < kMaxRefused; ++refused) {
    const int64_t token = choose(logits);
    if (std::isinf(logits[token]) && logits[token] < 0) break;  // every token excluded
    TriggerWatch next = *watch_;
    const std::optional<std::string> from = next.push(bytes_of(token));
    if (from && !constraint_->matcher().can_advance(from->substr(lead_.size()))) {
      logits[token] = -std::numeric_limits<double>::infinity();  // the mask's grammar passed it (a key repeated
      continue;                                                  // within the token), the matcher refuses it
    }
    return take_open_or_answer(token, std::move(next), from, logits);
  }
  SamplerStep step;
  step.stop_reason = "constraint_no_token";
  return step;
}

SamplerStep Sampler::take_open_or_answer(int64_t token, TriggerWatch next, const std::optional<std::string>& from,
                                         double* logits) {
  *watch_ = std::move(next);
  if (from) return take(token, from->substr(lead_.size()), logits);  // the answer, past the whitespace it took
  if (watch_->may_open() && blank(watch_->held())) {
    constraint_->accept(token);  // whitespace, tentatively the answer's
    lead_ = watch_->held();
  } else if (!watch_->may_open() && !lead_.empty()) {
    constraint_.emplace(bind_constraint(false));  // the block opened: the answer begins after it, from scratch
    lead_.clear();
  }
  return take(token, std::nullopt, logits);
}

void check_tokenizer_needs(const GenerateOptions& options, bool has_tokenizer) {
  ORBIT_CHECK(options.constraint == nullptr || has_tokenizer,
              "generate: a constraint needs the engine's tokenizer (this model has none)");
  ORBIT_CHECK(options.stop.empty() || has_tokenizer,
              "generate: stop strings need the engine's tokenizer (this model has none)");
  ORBIT_CHECK(!options.on_text || has_tokenizer,
              "generate: on_text needs the engine's tokenizer (this model has none)");
}

Sampler make_sampler(const EngineCore& core, const GenerateOptions& given, const std::vector<int64_t>& query) {
  const int64_t vocab = core.config().vocab_size;
  Sampler::check_options(given, vocab);
  GenerateOptions options = given;
  if (!options.ignore_eos && core.has_tokenizer()) {
    std::vector<int64_t>& stops = options.stop_tokens;
    for (const int64_t end : {core.tokenizer().eos_id(), core.tokenizer().bos_id()}) {
      if (end >= 0 && end < vocab && std::find(stops.begin(), stops.end(), end) == stops.end()) stops.push_back(end);
    }
  }
  SamplerSetup setup;
  setup.vocab = vocab;
  check_tokenizer_needs(options, core.has_tokenizer());
  const bool need_vocabulary = options.constraint != nullptr || options.logprobs;
  if (need_vocabulary && core.has_tokenizer()) {
    setup.vocabulary = constrain::tokenizer_vocabulary(core.tokenizer(), vocab);
    setup.at_text_start = !query.empty() && constrain::starts_text(*setup.vocabulary, core.tokenizer(), query.back());
  }
  if (options.constraint != nullptr) {
    setup.end_tokens = options.stop_tokens;
    const int64_t eos = core.tokenizer().eos_id();
    std::vector<int64_t>& ends = setup.end_tokens;
    if (eos >= 0 && eos < vocab && std::find(ends.begin(), ends.end(), eos) == ends.end()) ends.push_back(eos);
  }
  return Sampler(options, std::move(setup));
}

}  // namespace orbit::detail
