#include "serve/run/decode.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <random>

#include "orbit/common/error.h"
#include "orbit/text_stream.h"
#include "serve/compute/decode_scheduler.h"
#include "serve/run/choice_order.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

namespace {

GenerateOptions generate_options(int64_t max_tokens, const SamplingRequest& sampling) {
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
  // The tokenizer's BOS and EOS end the run (GenerateOptions::ignore_eos false): finish_reason "stop".
  return go;
}

// One choice of a run: its text stream and its sequence in the decode batch. The stream is pushed on the
// scheduler's thread while the job runs, and read on the request's thread once it is done.
struct Choice {
  int64_t index = 0;  // 0..n-1
  std::unique_ptr<TextStream> stream;
  std::shared_ptr<DecodeJob> job;
  std::optional<StepLogprobs> logprobs;  // the scheduler's: the step's, until its token is posted
  // A streamed choice's log probabilities not yet handed on (RunSink::on_logprobs): a token's entry waits until the
  // content released reaches its text, so that a token the content leaves out (a stop string's) is never
  // sent, and the stream's entries are the whole answer's (choice_result).
  std::deque<StepLogprobs> held;
  std::deque<DecodeEvent> pending;  // taken from the job, not yet handed on (ChoiceOrder's order)
  std::optional<RunResult> result;  // once it ended
  std::size_t queued = 0;           // entries queued so far
  std::size_t queued_bytes = 0;     // the bytes their tokens spell
  std::size_t released_bytes = 0;   // the content streamed so far
};

// Hands to sink.on_logprobs the held entries of tokens that start before `bytes` of content, then, with
// `count`, more until `count` are handed on in all.
void queue_held(Choice& c, const RunSink& sink, std::size_t bytes, std::size_t count = 0) {
  while (!c.held.empty() && (c.queued_bytes < bytes || c.queued < count)) {
    c.queued_bytes += c.held.front().chosen.bytes.size();
    if (sink.on_logprobs) sink.on_logprobs(c.index, c.held.front());
    c.held.pop_front();
    ++c.queued;
  }
}

// Where a stop string may end an answer decoded under a constraint: only where the text before it is a whole
// match (from the trigger on under tool_choice auto; before the trigger the text is free), so that a stop
// string never cuts a call or a JSON answer short. Null without a constraint: every stop string ends it.
std::function<bool(const std::string&)> stop_rule(const DecodeRequest& request) {
  if (!request.constraint) return nullptr;
  return [constraint = request.constraint, trigger = request.trigger,
          block = request.trigger_block](const std::string& before) {
    if (trigger.empty() && block.empty()) return constraint->matches(before);
    const std::optional<std::size_t> at = TriggerWatch::find(before, trigger, block);
    return !at || constraint->matches(std::string_view(before).substr(*at));
  };
}

// The job of choice `c` on `window`: its callbacks post each token's text (and log probabilities) and end the
// sequence at a stop string or once the request's thread asked (a client that left).
// `backlog`: the request's, shared by its choices (a stream's; null: never held).
std::shared_ptr<DecodeJob> choice_job(Choice& c, const Window& window, const std::vector<int64_t>& query,
                                      GenerateOptions go, StepSignal& signal, std::shared_ptr<OutputBacklog> backlog) {
  if (go.logprobs) go.on_logprobs = [&c](const StepLogprobs& step) { c.logprobs = step; };
  go.on_token = [&c](int64_t token, int64_t) {
    DecodeEvent event{c.stream->push(token), std::move(c.logprobs)};
    c.logprobs.reset();
    event.bytes = event_bytes(event);
    if (OutputBacklog* backlog = c.job->backlog()) backlog->add(event.bytes);
    c.job->post(std::move(event));
    return !c.stream->stopped() && !c.job->cancelled();
  };
  return std::make_shared<DecodeJob>(GenerateRequest{&window, query, std::move(go)}, signal, std::move(backlog));
}

// Whether choice `index`'s text goes to the sink: choice 0's always, the others' when each choice streams.
bool streams(const RunSink& sink, int64_t index) { return index == 0 || sink.on_choice_text; }

// Choice `index`'s text to the sink (when it streams); false: the client left.
bool send(const RunSink& sink, int64_t index, const std::string& delta) {
  if (sink.on_choice_text) return sink.on_choice_text(index, delta);
  return index != 0 || !sink.on_text || sink.on_text(delta);
}

// One event of choice `c`: its text (with the log probabilities it releases) to the sink; false: the client
// left.
bool deliver(Choice& c, DecodeEvent& e, const SamplingRequest& sampling, const RunSink& sink) {
  if (e.logprobs && sampling.stream) c.held.push_back(std::move(*e.logprobs));
  if (e.delta.empty()) return true;
  c.released_bytes += e.delta.size();
  if (sampling.stream) queue_held(c, sink, c.released_bytes);  // sent with the chunk of this delta
  return send(sink, c.index, e.delta);
}

// Choice c's result after its end; sends the text its stream held back (`gone`: the client left, or leaves
// now).
RunResult choice_result(Choice& c, bool& gone, const RunSink& sink) {
  const bool streamed = streams(sink, c.index);
  std::optional<Generation> g = c.job->take_result();
  RunResult r;
  const std::string rest = c.stream->finish();
  r.text = c.stream->released();
  r.tokens = c.stream->tokens();
  r.usage.completion_tokens = static_cast<int64_t>(r.tokens.size());
  if (g) {
    // The streamed tokens' (a stop token that ended the run has none here, as it has no place in `tokens`).
    r.logprobs = std::move(g->logprobs);
    if (r.logprobs.size() > r.tokens.size()) r.logprobs.resize(r.tokens.size());
    if (c.stream->stopped()) {
      // A stop string ends the content before it: the log probabilities end with the last token that writes
      // any of the content (one that writes the stop string's start too is kept), not with the stop string's
      // tokens, which still count as generated in usage.
      std::size_t at = 0, keep = 0;
      while (keep < r.logprobs.size() && at < r.text.size()) at += r.logprobs[keep++].chosen.bytes.size();
      r.logprobs.resize(keep);
    }
    r.prompt_forward_tokens = g->prompt_forward_tokens;
  }
  // A stream's last entries (the tokens of the held-back rest, and those that write no text of their own)
  // go with the rest's chunk or the finishing one: the stream then sent exactly r.logprobs.
  if (streamed) queue_held(c, sink, 0, r.logprobs.size());
  if (streamed && !gone && g && !rest.empty() && !send(sink, c.index, rest)) gone = true;
  if (gone || !g) {
    r.finish_reason = "cancelled";  // the client left, or the server closed before the run could end
  } else if (c.stream->stopped() || g->stop_reason == "stop_token" || g->stop_reason == "constraint_complete") {
    r.finish_reason = "stop";
  } else {
    r.finish_reason = "length";
  }
  return r;
}

// Choice c ended: its result, read by request.read_choice, to sink.on_choice_end. `gone`: the client left,
// or leaves now.
void end_choice(Choice& c, bool& gone, const DecodeRequest& request, const RunSink& sink) {
  c.result = choice_result(c, gone, sink);
  c.result->logprobs_asked = request.sampling != nullptr && request.sampling->logprobs;
  if (request.read_choice) request.read_choice(c.index, *c.result);
  if (!gone && c.result->finish_reason != "cancelled" && sink.on_choice_end &&
      !sink.on_choice_end(c.index, *c.result)) {
    gone = true;
  }
}

// Waits for every choice's end. Each round waits on the choice that holds the stream back and takes what the
// others posted meanwhile, then hands on in ChoiceOrder's order all it can: each event's text to the sink
// (for the choices that stream), each end to end_choice. A client that left cancels every choice. Returns
// whether it left.
bool wait_for_choices(std::vector<Choice>& choices, const DecodeRequest& request, const RunSink& sink,
                      DecodeScheduler& decoder) {
  bool gone = false;
  auto cancel_all = [&] {
    gone = true;
    for (Choice& c : choices) c.job->cancel();
    decoder.wake();  // a held job is released to end
  };
  // An event handed on (or dropped) leaves the request's backlog; one that brings it back within its bound
  // has the scheduler release the request's held sequences.
  auto handed_on = [&](const Choice& c, const DecodeEvent& e) {
    OutputBacklog* backlog = c.job->backlog();
    if (backlog && backlog->sent(e.bytes)) decoder.wake();
  };
  ChoiceOrder order(choices.size());
  std::vector<DecodeEvent> events;
  while (!order.finished()) {
    const std::optional<std::size_t> wait_on = order.laggard();
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (order.ended(i)) continue;
      events.clear();
      const bool done = choices[i].job->take(events, wait_on == i ? 50 : 0);
      for (DecodeEvent& e : events) {
        choices[i].pending.push_back(std::move(e));
        order.token(i);
      }
      if (done) order.end(i);
    }
    for (const ChoiceOrder::Item& item : order.ready()) {
      Choice& c = choices[item.choice];
      const bool was_gone = gone;
      if (item.end) {
        end_choice(c, gone, request, sink);
      } else {
        DecodeEvent e = std::move(c.pending.front());
        c.pending.pop_front();
        if (!gone && streams(sink, c.index) && !deliver(c, e, *request.sampling, sink)) gone = true;
        handed_on(c, e);
      }
      if (gone && !was_gone) cancel_all();
    }
    if (!gone && sink.cancelled && sink.cancelled()) cancel_all();
  }
  return gone;
}

// Cancels every choice's job and waits until each has ended (the scheduler lets go of the window and the
// choice only then), throwing nothing.
void end_all(std::vector<Choice>& choices, DecodeScheduler& decoder) noexcept {
  for (Choice& c : choices) c.job->cancel();
  decoder.wake();
  std::vector<DecodeEvent> dropped;
  for (Choice& c : choices) {
    while (!c.job->take(dropped, 50)) dropped.clear();
    dropped.clear();
  }
}

}  // namespace

int64_t max_tokens_for(const ServeContext& context, int64_t prompt_tokens, const SamplingRequest& sampling) {
  const int64_t room = context.info.max_positions - prompt_tokens;
  return std::max<int64_t>(1, std::min(room, sampling.max_tokens.value_or(context.options.default_max_tokens)));
}

RunResult decode(ServeContext& context, Window& window, const DecodeRequest& request, const RunSink& sink) {
  const std::vector<int64_t>& query = *request.query;
  const SamplingRequest& sampling = *request.sampling;
  const int64_t n = std::max<int64_t>(1, sampling.n);
  const int64_t previous = query.back();
  const int64_t prompt = window.tokens() + static_cast<int64_t>(query.size());
  GenerateOptions go = generate_options(max_tokens_for(context, prompt, sampling), sampling);
  go.constraint = request.constraint;
  go.constraint_trigger = request.trigger;
  go.constraint_trigger_block = request.trigger_block;
  // Choices 1..n-1 read copy-on-write forks of the window (its pages shared): the batch reads the KV once and
  // forwards the query once for all of them. They live until every job is done.
  std::vector<Window> forks;
  for (int64_t i = 1; i < n; ++i) forks.push_back(window.fork());
  std::vector<Choice> choices(static_cast<std::size_t>(n));
  std::vector<std::shared_ptr<DecodeJob>> jobs;
  // A stream's output waits for its client: past the bound its choices are held (decode_scheduler.h).
  const auto backlog = sampling.stream ? std::make_shared<OutputBacklog>(context.options.max_unsent_bytes) : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    Choice& c = choices[static_cast<std::size_t>(i)];
    c.index = i;
    c.stream = std::make_unique<TextStream>(
        [&context, previous](const std::vector<int64_t>& t) { return context.engine->detokenize(t, previous); },
        sampling.stop, stop_rule(request));
    GenerateOptions branch = go;
    branch.seed = Window::answer_seed(go.seed, static_cast<int64_t>(i));
    c.job = choice_job(c, i == 0 ? window : forks[static_cast<std::size_t>(i - 1)], query, std::move(branch),
                       context.decoder.signal(), backlog);
    jobs.push_back(c.job);
  }
  context.decoder.submit(jobs);
  bool gone = false;
  try {
    gone = wait_for_choices(choices, request, sink, context.decoder);
  } catch (...) {
    // The jobs read the window and these choices until they end: the error leaves once every one has.
    end_all(choices, context.decoder);
    throw;
  }
  for (const Choice& c : choices) {
    const std::string error = c.job->error();
    ORBIT_CHECK(error.empty(), "decode: " << error);
  }
  RunResult r = std::move(*choices[0].result);
  for (int64_t i = 1; i < n; ++i) {
    r.extra_choices.push_back(std::move(*choices[static_cast<std::size_t>(i)].result));
    r.usage.completion_tokens += r.extra_choices.back().usage.completion_tokens;
    r.prompt_forward_tokens += r.extra_choices.back().prompt_forward_tokens;
  }
  // A run the client left, or one the server closed before one of its choices could end, is cancelled as a
  // whole: the choices that ended before with it.
  const bool cut = gone || std::any_of(choices.begin(), choices.end(), [](const Choice& c) { return !c.job->ended(); });
  if (cut) {
    r.finish_reason = "cancelled";
    for (RunResult& extra : r.extra_choices) extra.finish_reason = "cancelled";
  }
  return r;
}

}  // namespace orbit::serve
