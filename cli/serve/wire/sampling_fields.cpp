#include "serve/wire/chat_parse.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "serve/wire/request_invalid.h"

namespace orbit::serve::chat_wire {

using nlohmann::json;

namespace {

std::vector<std::string> parse_stop(const json& v, const ServeLimits& limits) {
  if (v.is_null()) return {};
  if (v.is_string()) {
    if (v.get<std::string>().empty()) empty_value("stop", LengthKind::string, "must not be empty");
    return {v.get<std::string>()};
  }
  if (!v.is_array()) wrong_type("stop", "a string or an array of strings", v);
  if (v.size() > limits.max_stop_strings) {
    too_long("stop", LengthKind::array,
             "at most " + std::to_string(limits.max_stop_strings) + " sequences are accepted");
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.push_back(need_string(v[i], "stop[" + std::to_string(i) + "]"));
    if (out.back().empty()) empty_value("stop[" + std::to_string(i) + "]", LengthKind::string, "must not be empty");
  }
  return out;
}

// max_completion_tokens, or the older max_tokens; both given, they must agree (neither is ignored).
std::optional<int64_t> parse_max_tokens(const json& body) {
  std::optional<int64_t> out;
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    const int64_t n = need_int(*it, name);
    if (n < 1) below_minimum(name, NumberKind::integer, "must be >= 1, got " + std::to_string(n));
    if (out && *out != n) {
      invalid_value(name, std::to_string(n) + " differs from max_completion_tokens = " + std::to_string(*out) +
                              ": give one of them (or the same value in both)");
    }
    out = n;
  }
  return out;
}

// logit_bias: {"<token id>": bias}, ids as decimal strings (OpenAI's JSON), biases in [-100, 100].
std::map<int64_t, double> parse_logit_bias(const json& v, const ServeLimits& limits) {
  if (!v.is_object()) wrong_type("logit_bias", "an object", v);
  std::map<int64_t, double> out;
  for (const auto& [key, value] : v.items()) {
    const bool digits = !key.empty() && key.size() <= 18 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) invalid_value("logit_bias", "key '" + key + "' is not a token id (a decimal integer)");
    const int64_t token = std::stoll(key);
    if (limits.vocab_size > 0 && token >= limits.vocab_size) {
      invalid_value("logit_bias", "token " + key + " is outside the model's vocabulary [0, " +
                                      std::to_string(limits.vocab_size) + ")");
    }
    const std::string bad = "the bias of token " + key + " must be a number in [-100, 100], got " + value.dump();
    if (!value.is_number()) {
      throw RequestInvalid{api_error(400, "logit_bias: " + bad, "invalid_request_error", "invalid_type", "logit_bias")};
    }
    if (value.get<double>() > 100) above_maximum("logit_bias", NumberKind::decimal, bad);
    if (value.get<double>() < -100) below_minimum("logit_bias", NumberKind::decimal, bad);
    if (!std::isfinite(value.get<double>())) invalid_value("logit_bias", bad);
    if (out.count(token) > 0) {  // "5" and "05": two keys for one token, neither silently dropped
      invalid_value("logit_bias",
                    "key '" + key + "' names token " + std::to_string(token) + ", which another key names too");
    }
    out[token] = value.get<double>();
  }
  return out;
}

}  // namespace

SamplingRequest parse_sampling(const json& body, const ServeLimits& limits) {
  SamplingRequest s;
  s.max_tokens = parse_max_tokens(body);
  auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("temperature")) s.temperature = need_number(*v, "temperature", 0, 2, false);
  if (const json* v = field("top_p")) s.top_p = need_number(*v, "top_p", 0, 1, false);  // 0: the top token
  if (const json* v = field("seed")) s.seed = static_cast<uint64_t>(need_int(*v, "seed"));
  if (const json* v = field("stop")) s.stop = parse_stop(*v, limits);
  if (const json* v = field("n")) {
    s.n = need_int(*v, "n");
    // Why the top of the range is what it is goes only with a value above it.
    const std::string range = "must be in [1, " + std::to_string(limits.max_choices) + "]";
    const std::string why = limits.max_choices_by_batch
                                ? " (this server decodes at most " + std::to_string(limits.max_choices) +
                                      (limits.max_choices == 1 ? " sequence" : " sequences") + " at once: --max-batch)"
                                : " (the most choices one request may ask for)";
    if (s.n < 1) below_minimum("n", NumberKind::integer, range + ", got " + v->dump());
    if (s.n > limits.max_choices) above_maximum("n", NumberKind::integer, range + why + ", got " + v->dump());
  }
  if (const json* v = field("stream")) s.stream = need_bool(*v, "stream");
  if (const json* v = field("stream_options")) {
    // As OpenAI: only beside stream true; other keys are refused by name. include_obfuscation (on unless
    // false, as OpenAI has it) pads each chunk with a random "obfuscation" field (stream_obfuscation.h).
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (!s.stream) invalid_field("stream_options", "only allowed when stream is true");
    for (const auto& [key, value] : v->items()) {
      if (key == "include_usage") {
        s.include_usage = need_bool(value, "stream_options.include_usage");
      } else if (key == "include_obfuscation") {
        s.include_obfuscation = need_bool(value, "stream_options.include_obfuscation");
      } else {
        invalid_field("stream_options." + key, "unknown option (include_usage and include_obfuscation are served)");
      }
    }
  }
  return s;
}

// OpenAI's logit processors, shared by both endpoints.
void parse_processors(const json& body, const ServeLimits& limits, SamplingRequest& s) {
  const auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("presence_penalty")) s.presence_penalty = need_number(*v, "presence_penalty", -2, 2, false);
  if (const json* v = field("frequency_penalty"))
    s.frequency_penalty = need_number(*v, "frequency_penalty", -2, 2, false);
  if (const json* v = field("logit_bias")) s.logit_bias = parse_logit_bias(*v, limits);
}

// Chat's logprobs (bool) and top_logprobs (0..20, needs logprobs true); with `legacy` (/v1/completions, whose
// logprobs is an integer of top tokens) any logprobs is refused, and so is top_logprobs, which it lacks.
void parse_logprobs(const json& body, SamplingRequest& s, bool legacy) {
  const auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (legacy) {
    if (const json* v = field("logprobs"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
      unsupported("logprobs", "logprobs on /v1/completions (/v1/chat/completions serves them: logprobs: true)");
    }
    if (field("top_logprobs") != nullptr) unsupported("top_logprobs", "top_logprobs on /v1/completions");
    return;
  }
  if (const json* v = field("logprobs")) s.logprobs = need_bool(*v, "logprobs");
  if (const json* v = field("top_logprobs")) {
    const int64_t k = need_int(*v, "top_logprobs");
    if (k < 0) below_minimum("top_logprobs", NumberKind::integer, "must be in [0, 20], got " + v->dump());
    if (k > 20) above_maximum("top_logprobs", NumberKind::integer, "must be in [0, 20], got " + v->dump());
    if (k > 0 && !s.logprobs) invalid_field("top_logprobs", "needs logprobs: true");
    s.top_logprobs = static_cast<int32_t>(k);
  }
}

}  // namespace orbit::serve::chat_wire
