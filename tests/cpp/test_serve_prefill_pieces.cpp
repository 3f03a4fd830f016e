// `orbit serve`'s chunked prefill (ServeOptions::prefill_chunk, decode_scheduler.h): a sync's prefill goes in
// pieces and a decode step waiting for the gate runs between two (FairGate::yield_to), on TinyStories-656K.
// Steps and pieces are counted, never timed.
#include <atomic>
#include <string>
#include <thread>

#include "orbit_catch.h"
#include "serve/compute/fair_gate.h"
#include "serve/serve_core.h"
#include "serve_test_util.h"

namespace sv = orbit::serve;

namespace {

using serve_test::kQuestions;
using serve_test::metric;
using serve_test::wait_until;

sv::ServeOptions options(int64_t prefill_chunk) {
  sv::ServeOptions o = serve_test::quiet_options();
  o.prefill_chunk = prefill_chunk;
  return o;
}

// A story question after a long system message (about 400 tokens: the prompt's prefill is most of the sync).
sv::ChatRequest long_chat(const sv::ServeCore& core, int64_t max_tokens) {
  sv::ChatRequest r = serve_test::story_chat(core, kQuestions[1], max_tokens);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Lily and her dog Max played in the park. ";
  r.messages.front().content = text;
  return r;
}

// A story answer only the context's end can end (its stop token banned, max_tokens all the context leaves).
sv::ChatRequest unending_chat(sv::ServeCore& core) {
  sv::ChatRequest r = serve_test::story_chat(core, kQuestions[0], 1);
  const sv::Parsed<int64_t> prompt = core.count_chat_tokens(r);
  REQUIRE(prompt.ok());
  r.sampling.max_tokens = core.context_tokens() - *prompt.value;
  r.sampling.logit_bias = {{core.engine().model_info().eos_token, -100.0}};
  return r;
}

}  // namespace

TEST_CASE("serve gate: a holder yields to one lane's waiter and takes the gate back before the others",
          "[serve][gate]") {
  sv::FairGate gate;
  REQUIRE(gate.enter("sync"));
  CHECK_FALSE(gate.yield_to("~decode"));  // nobody waits there: kept
  std::vector<std::string> order;
  std::mutex m;
  auto waiter = [&](const std::string& lane) {
    return std::thread([&, lane] {
      REQUIRE(gate.enter(lane));
      {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(lane);
      }
      gate.leave();
    });
  };
  std::thread other = waiter("other");
  wait_until([&] { return gate.waiting() == 1; });
  std::thread decode = waiter("~decode");
  wait_until([&] { return gate.waiting() == 2; });
  CHECK(gate.yield_to("~decode"));  // returns once the step left, holding the gate again
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(order == std::vector<std::string>{"~decode"});  // "other" waited first and still waits
  }
  CHECK(gate.busy());
  CHECK_FALSE(gate.try_enter_idle());
  CHECK(gate.yields() == 1);
  gate.leave();
  other.join();
  decode.join();
  CHECK(order == std::vector<std::string>{"~decode", "other"});
}

TEST_CASE("serve prefill pieces: a decoding answer takes steps between the pieces of another session's sync",
          "[serve][pieces]") {
  sv::ServeCore core(options(4));
  std::atomic<int64_t> streamed{0};
  std::atomic<bool> leave{false};
  sv::RunSink sink;
  sink.on_text = [&](const std::string&) {
    ++streamed;
    return !leave.load();
  };
  sink.cancelled = [&] { return leave.load(); };
  const sv::ChatRequest endless = unending_chat(core);
  std::thread decoding([&] { serve_test::run_answered(core, endless, "decoding", sink); });
  wait_until([&] { return streamed.load() > 0; });  // its sequence is in the batch, stepping
  const double yields_before = metric(core, "orbit_decode_prefill_yields_total");
  const sv::RunResult r = serve_test::run_answered(core, long_chat(core, 2), "long");
  const double yields = metric(core, "orbit_decode_prefill_yields_total") - yields_before;
  leave = true;
  decoding.join();
  CHECK(r.usage.prompt_tokens > 250);
  // About 100 piece boundaries, each a step for the running answer when it waits for the gate there: with the
  // whole prefill in one turn (the old code, or prefill_chunk 0), none.
  CHECK(yields > 0);
}

TEST_CASE("serve prefill pieces: an answer after a prefill in pieces is the one after it whole", "[serve][pieces]") {
  sv::RunResult whole, pieces;
  for (const int64_t size : {int64_t{0}, int64_t{5}}) {
    sv::ServeCore core(options(size));
    const sv::RunResult r = serve_test::run_answered(core, long_chat(core, 24), "s");
    (size == 0 ? whole : pieces) = r;
    CHECK(metric(core, "orbit_decode_prefill_yields_total") == 0);  // nothing decoding: nothing to yield to
  }
  CHECK(pieces.text == whole.text);
  CHECK(pieces.usage.plan == whole.usage.plan);
  CHECK(pieces.usage.prompt_tokens == whole.usage.prompt_tokens);
  CHECK(pieces.usage.forward_tokens == whole.usage.forward_tokens);
}

TEST_CASE("serve prefill pieces: a client that leaves between two pieces ends its sync, nothing kept",
          "[serve][pieces]") {
  sv::ServeCore core(options(8));
  std::atomic<int64_t> polls{0};
  sv::RunSink sink;
  sink.cancelled = [&] { return ++polls >= 3; };  // the gate is free: the first polls are between pieces
  const sv::ChatRequest request = long_chat(core, 8);
  sv::RunTicket ticket = core.prepare_chat(request, "s");
  REQUIRE(ticket.ok());
  const sv::RunOutcome out = core.run(ticket, sink);
  REQUIRE(out.result.has_value());
  CHECK(out.result->finish_reason == "cancelled");
  CHECK(out.result->usage.completion_tokens == 0);
  CHECK(polls.load() >= 3);
  // The session's window kept nothing of the interrupted sync: the next request admits the prompt again.
  const sv::RunResult again = serve_test::run_answered(core, request, "s");
  CHECK(again.usage.plan.find("keep") == std::string::npos);
}
