#include "serve/decode.h"

#include <algorithm>
#include <random>

#include "serve/serve_wire.h"
#include "serve/text_stream.h"

namespace orbit::serve {

namespace {

GenerateOptions generate_options(const ServeContext& context, int64_t max_tokens, const SamplingRequest& sampling) {
  GenerateOptions go;
  go.max_tokens = max_tokens;
  go.temperature = sampling.temperature;
  go.top_p = sampling.top_p;
  // Without a seed, a fresh one: identical requests at a temperature above 0 answer differently, as
  // OpenAI's do.
  std::random_device fresh;
  go.seed = sampling.seed ? *sampling.seed : (uint64_t{fresh()} << 32 | fresh());
  go.presence_penalty = sampling.presence_penalty;
  go.frequency_penalty = sampling.frequency_penalty;
  go.logit_bias = sampling.logit_bias;
  go.logprobs = sampling.logprobs;
  go.top_logprobs = sampling.top_logprobs;
  for (int64_t stop : {context.info.bos_token, context.info.eos_token}) {
    if (stop >= 0) go.stop_tokens.push_back(stop);
  }
  return go;
}

}  // namespace

int64_t max_tokens_for(const ServeContext& context, int64_t prompt_tokens, const SamplingRequest& sampling) {
  const int64_t room = context.info.max_positions - prompt_tokens;
  return std::max<int64_t>(1, std::min(room, sampling.max_tokens.value_or(context.options.default_max_tokens)));
}

RunResult decode(ServeContext& context, Window& window, const DecodeRequest& request, const RunSink& sink) {
  const std::vector<int64_t>& query = *request.query;
  const int64_t previous = query.back();
  TextStream stream([&](const std::vector<int64_t>& t) { return context.engine->detokenize(t, previous); },
                    request.sampling->stop);
  const int64_t prompt = window.tokens() + static_cast<int64_t>(query.size());
  GenerateOptions go = generate_options(context, max_tokens_for(context, prompt, *request.sampling), *request.sampling);
  bool gone = false;
  GateTurn turn(context, request.lane, sink.cancelled);
  // After each token: the gate goes back (another session's forward may come first), the text out, then
  // the gate again for the next forward unless the run ends here.
  go.on_token = [&](int64_t token, int64_t index) {
    turn.leave();
    const std::string delta = stream.push(token);
    if (!delta.empty() && sink.on_text && !sink.on_text(delta)) return !(gone = true);
    if (stream.stopped()) return false;
    if (index + 1 >= go.max_tokens) return true;  // generate ends without another forward
    if (sink.cancelled && sink.cancelled()) return !(gone = true);
    if (!turn.enter()) gone = true;
    return turn.held();
  };
  go.constraint = request.constraint;
  clear_stream_logprobs();
  if (request.sampling->stream && go.logprobs) go.on_logprobs = queue_stream_logprobs;  // sent with the chunks
  RunResult r;
  if (!turn.enter()) {
    r.finish_reason = "cancelled";
    return r;
  }
  const Generation g = window.generate(query, go);
  turn.leave();  // held still when a stop token ended the run
  const std::string rest = stream.finish();
  if (!gone && !rest.empty() && sink.on_text && !sink.on_text(rest)) gone = true;
  r.text = stream.released();
  r.tokens = stream.tokens();
  r.usage.completion_tokens = static_cast<int64_t>(r.tokens.size());
  // The streamed tokens' (a stop token that ended the run has none here, as it has no place in `tokens`).
  r.logprobs.assign(g.logprobs.begin(),
                    g.logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(g.logprobs.size(), r.tokens.size())));
  r.prompt_forward_tokens = g.prompt_forward_tokens;
  if (gone) {
    r.finish_reason = "cancelled";
  } else if (stream.stopped() || g.stop_reason == "stop_token" || g.stop_reason == "constraint_complete") {
    r.finish_reason = "stop";
  } else {
    r.finish_reason = "length";
  }
  return r;
}

}  // namespace orbit::serve
