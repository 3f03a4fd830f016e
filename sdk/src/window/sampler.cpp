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
  ORBIT_CHECK(o.top_p > 0 && o.top_p <= 1, what << ": top_p = " << o.top_p << " must be in (0, 1]");
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
      constraint_(std::move(setup.constraint)),
      vocabulary_(std::move(setup.vocabulary)),
      at_text_start_(setup.at_text_start),
      rng_(options.seed) {
  check_options(options, vocab_);
  triggered_ = options.constraint_trigger.empty() && options.constraint_trigger_block.empty();
  if (!triggered_) watch_.emplace(options.constraint_trigger, options.constraint_trigger_block);
  options_.on_token = nullptr;
  options_.on_logprobs = nullptr;
  options_.on_text = nullptr;
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
  std::vector<double>& p = probs_;
  p.resize(static_cast<std::size_t>(V));
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < V; ++j) top = std::max(top, logits[j] / options_.temperature);
  double total = 0;
  for (int64_t j = 0; j < V; ++j) total += p[j] = std::exp(logits[j] / options_.temperature - top);
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
  std::vector<int64_t> ids;
  ids.reserve(static_cast<std::size_t>(vocab_));
  for (int64_t j = 0; j < vocab_; ++j) {
    if (std::isfinite(v[j])) ids.push_back(j);
  }
  const std::size_t k = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(options_.top_logprobs));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [v](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  for (std::size_t i = 0; i < k; ++i) out.top.push_back({ids[i], v[ids[i]], bytes_of(ids[i])});
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

SamplerStep Sampler::open_or_answer_step(double* logits, int64_t tokens_left) {
  const std::string& held = watch_->held();  // a proper prefix of the block's open string
  std::vector<double>& answer = probs_;      // the constraint's mask, on a copy (probs_ is free until choose)
  answer.assign(logits, logits + vocab_);
  const bool masked = held.empty() && constraint_->mask_logits(answer.data(), vocab_, tokens_left) > 0;
  for (int64_t j = 0; j < vocab_; ++j) {
    if (std::isinf(logits[j]) && logits[j] < 0) continue;
    if (constraint_->is_end_token(j) || is_stop_token(j)) {
      logits[j] = -std::numeric_limits<double>::infinity();  // the text has not begun: nothing may end it
      continue;
    }
    const std::string bytes = bytes_of(j);
    TriggerWatch next = *watch_;
    if (!next.push(bytes)) continue;  // keeps the open string possible, or opens the block
    const bool allowed = held.empty() ? masked && !(std::isinf(answer[j]) && answer[j] < 0)
                                      : constraint_->matcher().can_advance(held + bytes);
    if (!allowed) logits[j] = -std::numeric_limits<double>::infinity();
  }
  SamplerStep step;
  const int64_t token = choose(logits);
  if (std::isinf(logits[token]) && logits[token] < 0) {
    step.stop_reason = "constraint_no_token";
    return step;
  }
  const std::optional<std::string> from = watch_->push(bytes_of(token));
  return take(token, from, logits);
}

Sampler make_sampler(const EngineCore& core, const GenerateOptions& options, const std::vector<int64_t>& query) {
  const int64_t vocab = core.config().vocab_size;
  Sampler::check_options(options, vocab);
  SamplerSetup setup;
  setup.vocab = vocab;
  ORBIT_CHECK(options.constraint == nullptr || core.has_tokenizer(),
              "generate: a constraint needs the engine's tokenizer (this model has none)");
  ORBIT_CHECK(options.stop.empty() || core.has_tokenizer(),
              "generate: stop strings need the engine's tokenizer (this model has none)");
  ORBIT_CHECK(!options.on_text || core.has_tokenizer(),
              "generate: on_text needs the engine's tokenizer (this model has none)");
  const bool need_vocabulary = options.constraint != nullptr || options.logprobs;
  if (need_vocabulary && core.has_tokenizer()) {
    setup.vocabulary = constrain::tokenizer_vocabulary(core.tokenizer(), vocab);
    setup.at_text_start = !query.empty() && constrain::starts_text(*setup.vocabulary, core.tokenizer(), query.back());
  }
  if (options.constraint != nullptr) {
    TokenConstraintOptions o;
    o.end_tokens = options.stop_tokens;
    const int64_t eos = core.tokenizer().eos_id();
    if (eos >= 0 && eos < vocab && std::find(o.end_tokens.begin(), o.end_tokens.end(), eos) == o.end_tokens.end()) {
      o.end_tokens.push_back(eos);
    }
    o.at_text_start = setup.at_text_start;
    setup.constraint.emplace(options.constraint, setup.vocabulary, std::move(o));
  }
  return Sampler(options, std::move(setup));
}

}  // namespace orbit::detail
