// `orbit serve`'s continuous batching below HTTP (cli/serve/compute/decode_scheduler.h) on TinyStories-656K: sessions
// running at once decode in shared forwards (the metrics count steps of several sequences) and answer what
// they answer one at a time; a client that leaves ends its own sequence and no other; a chat request's n > 1
// choices are forks of its window decoded together (one query forward, choice i seeded Window::answer_seed(seed, i));
// closing the server while sequences run ends them as cancelled.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "orbit/engine.h"
#include "orbit/text_stream.h"
#include "orbit_catch.h"
#include "serve/compute/decode_scheduler.h"
#include "serve/serve_context.h"
#include "serve/serve_core.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/serve_wire.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using serve_test::kModel;
using serve_test::kQuestions;

sv::ServeOptions options() { return serve_test::quiet_options(); }

sv::ChatRequest chat(const sv::ServeCore& core, const std::string& question, int64_t max_tokens) {
  return serve_test::story_chat(core, question, max_tokens);
}

sv::RunResult run(sv::ServeCore& core, const sv::ChatRequest& r, const std::string& session,
                  const sv::RunSink& sink = {}) {
  return serve_test::run_answered(core, r, session, sink);
}

double metric(sv::ServeCore& core, const std::string& name) { return serve_test::metric(core, name); }

// A story request only the context's end can end: max_tokens all the context leaves, the model's stop token
// banned. A sequence decodes ahead of its request's thread (decode posts each token's event without waiting
// for it to be read), so on a loaded machine a short answer can be whole before that thread reads its first
// piece; a test that must act while a sequence still runs (a client leaving, the server closing) gives it the
// whole context to run instead of the few dozen tokens a story takes.
sv::ChatRequest unending_chat(sv::ServeCore& core, const std::string& question) {
  sv::ChatRequest r = chat(core, question, 1);
  const sv::Parsed<int64_t> prompt = core.count_chat_tokens(r);
  REQUIRE(prompt.ok());
  r.sampling.max_tokens = core.context_tokens() - *prompt.value;
  const int64_t eos = core.engine().model_info().eos_token;
  REQUIRE(eos >= 0);
  r.sampling.logit_bias = {{eos, -100.0}};
  return r;
}

}  // namespace

TEST_CASE("serve batch: sessions decode in shared forwards and answer what they answer alone", "[serve][batch]") {
  sv::ServeCore core(options());
  std::vector<std::string> alone;
  for (const std::string& q : kQuestions) alone.push_back(run(core, chat(core, q, 24), "").text);
  const double steps_alone = metric(core, "orbit_decode_steps_total");
  const double single_steps = metric(core, "orbit_decode_batch_sequences_bucket{le=\"1\"}");
  CHECK(single_steps == steps_alone);  // one at a time: every step held one sequence

  std::vector<std::string> together(kQuestions.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kQuestions.size(); ++i) {
    threads.emplace_back(
        [&, i] { together[i] = run(core, chat(core, kQuestions[i], 24), "s" + std::to_string(i)).text; });
  }
  for (auto& t : threads) t.join();
  CHECK(together == alone);
  // Steps that held several sequences happened: fewer steps than tokens decoded.
  const double steps = metric(core, "orbit_decode_steps_total") - steps_alone;
  const double shared = metric(core, "orbit_decode_batch_sequences_count") -
                        metric(core, "orbit_decode_batch_sequences_bucket{le=\"1\"}");
  CHECK(shared > 0);
  CHECK(steps < 8 * 24);
  CHECK(metric(core, "orbit_decode_running") == 0);
  CHECK(metric(core, "orbit_decode_waiting") == 0);
  core.close();
}

TEST_CASE("serve batch: a client that leaves ends its sequence only", "[serve][batch]") {
  sv::ServeCore core(options());
  std::vector<std::string> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(run(core, chat(core, kQuestions[i], 40), "").text);
  std::vector<sv::RunResult> got(3);
  std::vector<std::thread> threads;
  // Client 1 leaves at its first piece of text: asked for the whole context, its stop token banned, only its
  // leaving ends it early (40 tokens, what the others ask, a loaded machine's scheduler could decode before
  // client 1's thread read its first piece).
  const sv::ChatRequest leaving = unending_chat(core, kQuestions[1]);
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      sv::RunSink sink;
      if (i == 1) sink.on_text = [](const std::string&) { return false; };  // leaves at the first piece of text
      const sv::ChatRequest r = i == 1 ? leaving : chat(core, kQuestions[static_cast<std::size_t>(i)], 40);
      got[static_cast<std::size_t>(i)] = run(core, r, "c" + std::to_string(i), sink);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(got[1].finish_reason == "cancelled");
  CHECK(got[1].usage.completion_tokens < *leaving.sampling.max_tokens);
  CHECK(got[0].text == alone[0]);
  CHECK(got[2].text == alone[2]);
  CHECK(got[0].finish_reason != "cancelled");
  core.close();
}

TEST_CASE("serve batch: n choices are forks decoded together", "[serve][batch][fork]") {
  sv::ServeCore core(options());
  sv::ChatRequest r = chat(core, kQuestions[0], 16);
  const sv::RunResult one = run(core, r, "");
  r.sampling.n = 4;
  const sv::RunResult greedy = run(core, r, "");
  REQUIRE(greedy.extra_choices.size() == 3);
  CHECK(greedy.text == one.text);
  for (const sv::RunResult& c : greedy.extra_choices) CHECK(c.text == one.text);  // temperature 0
  CHECK(greedy.usage.completion_tokens == 4 * static_cast<int64_t>(one.tokens.size()));
  // The wire body: four choices, indexed.
  const nlohmann::json body = sv::chat_completion({"chatcmpl-x", 0, "m"}, greedy);
  REQUIRE(body["choices"].size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(body["choices"][i]["index"] == i);

  // Sampled: choice i is the answer a request with seed + i·2³² gets alone.
  r.sampling.temperature = 1.0;
  r.sampling.seed = 77;
  const sv::RunResult sampled = run(core, r, "");
  r.sampling.n = 1;
  std::set<std::string> distinct{sampled.text};
  for (int i = 0; i < 4; ++i) {
    r.sampling.seed = 77 + (static_cast<uint64_t>(i) << 32);
    const sv::RunResult alone = run(core, r, "");
    const sv::RunResult& choice = i == 0 ? sampled : sampled.extra_choices[static_cast<std::size_t>(i - 1)];
    CHECK(choice.text == alone.text);
    distinct.insert(choice.text);
  }
  CHECK(distinct.size() > 1);
  core.close();
}

TEST_CASE("serve batch: n choices stream together, each under its index", "[serve][batch][fork]") {
  sv::ServeCore core(options());
  sv::ChatRequest r = chat(core, kQuestions[1], 24);
  r.sampling.temperature = 1.0;
  r.sampling.seed = 91;
  r.sampling.n = 3;
  const sv::RunResult whole = run(core, r, "");  // not streamed: the same choices
  r.sampling.stream = true;
  r.sampling.logprobs = true;
  // The sink builds each delta's chunk as the HTTP stream does: the log probabilities decode hands on gathered
  // per choice (StreamExtras), each chunk taking its own choice's.
  const sv::ResponseIds ids{"chatcmpl-x", 0, "m"};
  sv::StreamExtras extras;
  std::vector<std::string> texts(3);
  std::vector<std::size_t> entries(3, 0);
  std::vector<int64_t> order;  // the choice of each delta, in the order they came
  bool first_alone = false;
  sv::RunSink sink;
  sink.on_text = [&](const std::string&) {
    first_alone = true;  // never called: on_choice_text takes every choice's text
    return true;
  };
  sink.on_logprobs = [&](int64_t choice, const orbit::StepLogprobs& step) { extras.add_logprobs(choice, step); };
  sink.on_choice_text = [&](int64_t choice, const std::string& delta) {
    REQUIRE((choice >= 0 && choice < 3));
    const nlohmann::json chunk =
        sv::chat_chunk(ids, delta, texts[static_cast<std::size_t>(choice)].empty(), "", choice, extras.take(choice));
    CHECK(chunk["choices"][0]["index"] == choice);
    if (!chunk["choices"][0]["logprobs"].is_null()) {
      entries[static_cast<std::size_t>(choice)] += chunk["choices"][0]["logprobs"]["content"].size();
    }
    texts[static_cast<std::size_t>(choice)] += delta;
    order.push_back(choice);
    return true;
  };
  const sv::RunResult streamed = run(core, r, "", sink);
  CHECK_FALSE(first_alone);
  REQUIRE(streamed.extra_choices.size() == 2);
  for (int64_t i = 0; i < 3; ++i) {
    const sv::RunResult& choice = i == 0 ? streamed : streamed.extra_choices[static_cast<std::size_t>(i - 1)];
    const sv::RunResult& alone = i == 0 ? whole : whole.extra_choices[static_cast<std::size_t>(i - 1)];
    INFO("choice " << i);
    CHECK(texts[static_cast<std::size_t>(i)] == choice.text);  // everything it answered, streamed
    CHECK(choice.text == alone.text);
    // Its log probabilities went out with its own chunks (the rest with its finishing chunk).
    const nlohmann::json finishing = sv::chat_chunk(ids, "", false, choice.finish_reason, i, extras.take(i));
    const std::size_t last =
        finishing["choices"][0]["logprobs"].is_null() ? 0 : finishing["choices"][0]["logprobs"]["content"].size();
    CHECK(entries[static_cast<std::size_t>(i)] + last == choice.logprobs.size());
  }
  // Interleaved: a later choice's text came before choice 0's last piece.
  const auto last0 = std::find(order.rbegin(), order.rend(), 0);
  const auto first1 = std::find(order.begin(), order.end(), 1);
  REQUIRE(last0 != order.rend());
  REQUIRE(first1 != order.end());
  CHECK(first1 < last0.base() - 1);
  CHECK(streamed.usage.completion_tokens == whole.usage.completion_tokens);

  // A client that leaves during any choice's text ends every choice.
  sink.on_choice_text = [](int64_t choice, const std::string&) { return choice != 2; };
  const sv::RunResult left = run(core, r, "", sink);
  CHECK(left.finish_reason == "cancelled");
  for (const sv::RunResult& c : left.extra_choices) CHECK(c.finish_reason == "cancelled");
  core.close();
}

namespace {

// A word of `text`'s first half (with the space before it, not at its start) that `other` never writes; "" if
// none.
std::string word_only_in(const std::string& text, const std::string& other) {
  std::size_t at = text.find(' ', 1);
  while (at != std::string::npos && at < text.size() / 2) {
    const std::size_t end = std::min(text.find(' ', at + 1), text.size());
    const std::string word = text.substr(at, end - at);
    if (word.size() >= 4 && other.find(word) == std::string::npos && text.find(word) == at) return word;
    at = text.find(' ', at + 1);
  }
  return "";
}

}  // namespace

TEST_CASE("serve batch: a choice's end reaches the sink when it ends, before the others' later text",
          "[serve][batch][fork]") {
  sv::ServeCore core(options());
  sv::ChatRequest r = chat(core, kQuestions[1], 40);
  r.sampling.temperature = 1.0;
  r.sampling.seed = 91;
  r.sampling.n = 2;
  const sv::RunResult free = run(core, r, "");
  REQUIRE(free.extra_choices.size() == 1);
  // A word choice 1 writes early and choice 0 never writes: as a stop string it ends choice 1 and leaves
  // choice 0 running.
  const std::string stop = word_only_in(free.extra_choices[0].text, free.text);
  INFO("choices: " << free.text << " | " << free.extra_choices[0].text << "; stop: " << stop);
  REQUIRE_FALSE(stop.empty());
  r.sampling.stop = {stop};
  r.sampling.stream = true;
  std::vector<std::string> order;  // "t0" a text of choice 0, "end1" choice 1's end, ...
  std::vector<std::optional<sv::RunResult>> ended(2);
  sv::RunSink sink;
  sink.on_choice_text = [&](int64_t choice, const std::string&) {
    order.push_back("t" + std::to_string(choice));
    return true;
  };
  sink.on_choice_end = [&](int64_t choice, const sv::RunResult& result) {
    REQUIRE_FALSE(ended.at(static_cast<std::size_t>(choice)).has_value());  // once
    order.push_back("end" + std::to_string(choice));
    ended[static_cast<std::size_t>(choice)] = result;
    return true;
  };
  const sv::RunResult got = run(core, r, "", sink);
  REQUIRE(got.extra_choices.size() == 1);
  REQUIRE((ended[0] && ended[1]));
  // What each end carried is the choice's result.
  CHECK(ended[0]->text == free.text);
  CHECK(ended[0]->finish_reason == "length");
  CHECK(ended[1]->text == free.extra_choices[0].text.substr(0, free.extra_choices[0].text.find(stop)));
  CHECK(ended[1]->finish_reason == "stop");
  CHECK(got.text == ended[0]->text);
  CHECK(got.extra_choices[0].text == ended[1]->text);
  CHECK(got.extra_choices[0].finish_reason == "stop");
  // Choice 1 ended while choice 0 went on: its end came before choice 0's later text, and choice 0's end last.
  const auto end1 = std::find(order.begin(), order.end(), "end1");
  CHECK(std::count(end1, order.end(), "t0") >= 5);
  CHECK(order.back() == "end0");
}

TEST_CASE("serve batch: with a stop string, log probabilities end with the content's last token", "[serve][batch]") {
  sv::ServeCore core(options());
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    sv::ChatRequest r = chat(core, kQuestions[seed % kQuestions.size()], 60);
    r.sampling.temperature = 1.0;
    r.sampling.seed = seed;
    r.sampling.stop = {"the"};
    r.sampling.logprobs = true;
    const sv::RunResult got = run(core, r, "");
    std::string spelled;
    for (const orbit::StepLogprobs& step : got.logprobs) spelled += step.chosen.bytes;
    INFO("seed " << seed << ": content '" << got.text << "', log probabilities spell '" << spelled << "'");
    if (got.finish_reason != "stop" || got.text.empty()) continue;
    ++stopped;
    // Every token but the last writes content only; the last writes the content's end (and perhaps the stop
    // string's start).
    REQUIRE_FALSE(got.logprobs.empty());
    const std::string& last = got.logprobs.back().chosen.bytes;
    CHECK(spelled.size() - last.size() < got.text.size());
    CHECK(spelled.compare(0, got.text.size(), got.text) == 0);
    CHECK(got.usage.completion_tokens >= static_cast<int64_t>(got.logprobs.size()));
  }
  CHECK(stopped >= 3);
  core.close();
}

TEST_CASE("serve batch: closing the server ends the sequences in flight with a shutdown error", "[serve][batch]") {
  sv::ServeCore core(options());
  std::vector<sv::RunOutcome> got(4);
  // No stop token: no answer ends (as a story of ~150 tokens would) before the close below.
  std::vector<sv::ChatRequest> requests;
  for (std::size_t i = 0; i < 4; ++i) requests.push_back(unending_chat(core, kQuestions[i]));
  std::atomic<int> started{0};  // the requests whose text has begun
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      sv::RunSink sink;
      sink.on_text = [&, counted = false](const std::string&) mutable {
        if (!counted) ++started;
        counted = true;
        return true;
      };
      sv::RunTicket ticket = core.prepare_chat(requests[static_cast<std::size_t>(i)], "x" + std::to_string(i));
      if (!ticket.ok()) return;  // the server closed before it was prepared
      got[static_cast<std::size_t>(i)] = core.run(ticket, sink);
    });
  }
  // Every request's text has begun (the 60 s bound only keeps a broken server from hanging the test).
  for (int i = 0; i < 60000 && started < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(started == 4);
  core.close();
  for (auto& t : threads) t.join();
  // A client still there is told the answer is incomplete (503 server_shutdown), never given a cut answer as
  // if it were whole.
  int shut = 0;
  for (const sv::RunOutcome& out : got) {
    if (out.result) CHECK(out.result->finish_reason != "cancelled");
    if (!out.result && out.error.code == "server_shutdown") {
      ++shut;
      CHECK(out.error.status == 503);
      CHECK(out.error.message.find("send the request again") != std::string::npos);
    }
  }
  CHECK(shut >= 1);
}

TEST_CASE("serve batch: streamed text decodes a window per token and equals the whole decode", "[serve][text]") {
  orbit::EngineOptions eo;
  eo.model = kModel;
  const auto engine = orbit::Engine::open(eo);
  // A long text with multi-byte characters (byte-fallback tokens) and spaces to strip at the start.
  std::string text;
  for (int i = 0; i < 12; ++i) text += " Lily saw a big dog — «¡ça va!» 😀 and they played in the park. ";
  const std::vector<int64_t> tokens = engine->tokenize(text, false);
  REQUIRE(tokens.size() > 200);
  for (const std::vector<std::string>& stops : {std::vector<std::string>{}, std::vector<std::string>{"pa", "ZZZ"}}) {
    int64_t longest = 0;  // the most tokens one decode call was given
    const int64_t previous = 5;
    orbit::TextStream stream(
        [&](const std::vector<int64_t>& t) {
          longest = std::max(longest, static_cast<int64_t>(t.size()));
          return engine->detokenize(t, previous);
        },
        stops);
    std::string streamed;
    for (int64_t t : tokens) {
      streamed += stream.push(t);
      if (stream.stopped()) break;
    }
    streamed += stream.finish();
    std::string whole = engine->detokenize(stream.tokens(), previous);
    if (!stops.empty()) whole = whole.substr(0, whole.find("pa"));
    CHECK(streamed == whole);
    if (stops.empty()) CHECK(longest < 64);  // a window, not the whole answer
  }
}

// The hand-off between the scheduler's thread and a request's: events wait in the job without a wake, a take
// finds them all at once in order, a waiting take wakes at the signal's raise or the job's end, and a raise
// between reading the generation and waiting is not lost (the wait returns at once).
TEST_CASE("serve batch: a job's events wait for one take; the step's raise or the end wakes a waiting one",
          "[serve][batch][handoff]") {
  constexpr int kForever = 600000;  // ms: a lost wake shows as a test that never ends
  sv::StepSignal signal;
  const uint32_t before = signal.seen();
  signal.raise();
  signal.wait(before, kForever);  // moved on since `before`: returns at once
  CHECK(signal.seen() != before);

  sv::DecodeJob job(orbit::GenerateRequest{}, signal);
  for (const char* piece : {"a", "b", "c"}) job.post(sv::DecodeEvent{piece, std::nullopt});
  std::vector<sv::DecodeEvent> out;
  CHECK_FALSE(job.take(out, kForever));  // events pending: no wait
  REQUIRE(out.size() == 3);
  CHECK((out[0].delta + out[1].delta + out[2].delta) == "abc");

  std::vector<sv::DecodeEvent> later;
  bool done = false;
  std::atomic<int> takes{0};
  std::thread waiter([&] {
    while (!done) {
      done = job.take(later, kForever);  // may return with nothing: asks again
      ++takes;
    }
  });
  while (signal.waiting() == 0) std::this_thread::yield();  // the waiter sleeps in take()
  job.post(sv::DecodeEvent{"d", std::nullopt});
  signal.raise();                                                         // the step's end: the waiter takes "d"
  while (takes == 0 || signal.waiting() == 0) std::this_thread::yield();  // and sleeps again
  job.finish(std::nullopt, "gone");                                       // the end wakes it
  waiter.join();
  CHECK(done);
  REQUIRE(later.size() == 1);
  CHECK(later[0].delta == "d");
  CHECK(job.error() == "gone");
}

// A raise with many threads waiting wakes every one of them, rounds after round (on Linux it wakes one, which
// wakes the others: a relay that lost a thread would leave it asleep here for good), including rounds where a
// second raise races the first.
TEST_CASE("serve batch: every waiting thread wakes at each raise", "[serve][batch][handoff]") {
  constexpr int kForever = 600000;  // ms: a lost wake shows as a test that never ends
  constexpr int kThreads = 8, kRounds = 50;
  sv::StepSignal signal;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> woken{0};
    std::vector<std::thread> waiters;
    const uint32_t seen = signal.seen();
    for (int t = 0; t < kThreads; ++t) {
      waiters.emplace_back([&] {
        while (signal.seen() == seen) signal.wait(seen, kForever);
        ++woken;
      });
    }
    while (signal.waiting() < kThreads) std::this_thread::yield();  // all asleep
    signal.raise();
    if (round % 2 == 1) signal.raise();
    for (std::thread& t : waiters) t.join();
    CHECK(woken == kThreads);
  }
}

// The scheduler ends the jobs whose client left before they joined and takes the others into the batch. A
// request thread cancels whenever its client leaves, so each job's flag must be read once there: read twice
// (once to end, once to take out), a job cancelled between the reads was taken out without an end and its
// request waited for it forever (a server's in-flight count stuck at 1 with nothing decoding). Each round a
// job is submitted behind eight cancelled ones (their ends take the scheduler a few wake-ups, with a thread
// asleep on the signal) and cancelled a little later each round, so the cancels land all over that pass. The
// jobs have no window: one that joins ends with the batch's refusal, which is an end too.
TEST_CASE("serve batch: a job cancelled while the scheduler takes in its round still ends", "[serve][batch][handoff]") {
  sv::ServeContext context(options());
  sv::DecodeScheduler& decoder = context.decoder;
  constexpr int kRounds = 4000, kCancelledAlready = 8, kLongest = 60000;  // spins before the cancel
  std::atomic<bool> stop{false};
  std::thread sleeper([&] {
    while (!stop) decoder.signal().wait(decoder.signal().seen(), 50);
  });
  int lost = 0, refused = 0;
  for (int round = 0; round < kRounds && lost == 0; ++round) {
    const auto job = std::make_shared<sv::DecodeJob>(orbit::GenerateRequest{}, decoder.signal());
    std::vector<std::shared_ptr<sv::DecodeJob>> jobs{job};
    for (int i = 0; i < kCancelledAlready; ++i) {
      jobs.push_back(std::make_shared<sv::DecodeJob>(orbit::GenerateRequest{}, decoder.signal()));
      jobs.back()->cancel();
    }
    decoder.submit(jobs);
    for (volatile int spin = 0; spin < (round * 97) % kLongest; spin = spin + 1) {
    }
    job->cancel();
    // Not a timing claim: a job that ended is seen at once; one lost is never ended.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::vector<sv::DecodeEvent> events;
    bool ended = false;
    while (!(ended = job->take(events, 100)) && std::chrono::steady_clock::now() < deadline) {
    }
    lost += ended ? 0 : 1;
    refused += job->error().empty() ? 0 : 1;
  }
  stop = true;
  sleeper.join();
  CHECK(lost == 0);
  CHECK(refused > 0);  // some rounds' jobs joined before their cancel (the pass was reached both ways)
}

// A sink that throws (a client's write failing in a way the front reports by an exception, say) ends the run
// with that error, but only once its sequence has ended: the scheduler reads the request's window and its
// choices until then, and the error unwinds both. Before, the error left at once while the sequence decoded on,
// asked for the whole context, into a window its request had let go.
TEST_CASE("serve batch: an error out of the sink leaves once the run's sequence ended", "[serve][batch]") {
  sv::ServeCore core(options());
  const sv::ChatRequest endless = unending_chat(core, kQuestions[0]);
  sv::RunSink sink;
  sink.on_text = [](const std::string&) -> bool { throw std::runtime_error("the sink failed"); };
  std::string error;
  {
    sv::RunTicket ticket = core.prepare_chat(endless, "thrown");  // its session's window, until it goes
    REQUIRE(ticket.ok());
    try {
      const sv::RunOutcome out = core.run(ticket, sink);
      error = out.result ? "no error" : out.error.message;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  CHECK(error.find("the sink failed") != std::string::npos);
  CHECK(metric(core, "orbit_decode_running") == 0);
  // The session's window serves its next request.
  const sv::RunResult next = run(core, chat(core, kQuestions[1], 8), "thrown");
  CHECK(next.finish_reason != "cancelled");
  core.close();
}

TEST_CASE("serve batch: --max-batch queues the runs past it in order, and a queued run's client can leave",
          "[serve][batch][max-batch]") {
  sv::ServeOptions o = options();
  o.max_batch = 2;
  o.max_unsent_bytes = 1;  // a streamed answer its client does not read is held at once, and keeps its slots
  sv::ServeCore core(o);
  const std::string alone = run(core, chat(core, kQuestions[2], 24), "").text;
  // Two forks whose client reads nothing until told to leave: they fill the batch and stay in it, held.
  sv::ChatRequest forks = unending_chat(core, kQuestions[0]);
  forks.sampling.n = 2;
  forks.sampling.stream = true;
  std::atomic<bool> started{false}, stop_forks{false}, leave_queued{false};
  sv::RunResult forked, queued, left;
  std::thread a([&] {
    sv::RunSink sink;
    sink.on_text = [&](const std::string&) {
      started = true;
      while (!stop_forks) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return false;
    };
    forked = run(core, forks, "a", sink);
  });
  serve_test::wait_until([&] { return started.load(); });
  std::thread c([&] {
    sv::RunSink sink;
    sink.cancelled = [&] { return leave_queued.load(); };
    left = run(core, chat(core, kQuestions[1], 24), "c", sink);
  });
  serve_test::wait_until([&] { return metric(core, "orbit_decode_waiting") == 1; });
  std::thread b([&] { queued = run(core, chat(core, kQuestions[2], 24), "b"); });
  serve_test::wait_until([&] { return metric(core, "orbit_decode_waiting") == 2; });
  // The queued run behind nothing leaves; the one behind it stays queued while the forks hold the batch.
  leave_queued = true;
  c.join();
  CHECK(left.finish_reason == "cancelled");
  CHECK(left.usage.completion_tokens == 0);
  CHECK(metric(core, "orbit_decode_waiting") == 1);
  CHECK(metric(core, "orbit_decode_running") == 2);
  stop_forks = true;
  a.join();
  b.join();
  CHECK(forked.finish_reason == "cancelled");
  CHECK(queued.text == alone);
  // No step forwarded more than two sequences.
  CHECK(metric(core, "orbit_decode_batch_sequences_bucket{le=\"2\"}") ==
        metric(core, "orbit_decode_batch_sequences_count"));
  core.close();
}

}  // namespace ORBIT_TEST_FILE
