// `orbit serve`'s chunked prefill (ServeOptions::prefill_chunk, decode_scheduler.h): a sync's prefill goes in
// pieces and a decode step waiting for the gate runs between two (FairGate::yield_to), on TinyStories-656K.
// Steps and pieces are counted, never timed.
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "orbit_catch.h"
#include "serve/compute/fair_gate.h"
#include "serve/serve_core.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using serve_test::kQuestions;
using serve_test::metric;
using serve_test::wait_until;
using serve_test::words;

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

// What run_long_sync saw: the long request's answer, and orbit_prefill_guests_total at each of its polls after
// the first and before its first text (between two pieces of its sync).
struct LongSync {
  sv::RunResult result;
  std::vector<double> guests_during_sync;
};

// Runs long_chat(core, 2) in session "long". At its first poll (between its first two pieces, or at the gate)
// calls `queue_others`, which starts the runs that are to queue behind the sync and returns once they are queued
// (the caller joins their threads after this returns).
LongSync run_long_sync(sv::ServeCore& core, const std::function<void()>& queue_others) {
  const sv::ChatRequest long_request = long_chat(core, 2);
  std::atomic<bool> long_synced{false};
  std::atomic<int64_t> polls{0};
  LongSync out;  // guests_during_sync: the compute thread's, read after the run
  sv::RunSink sink;
  sink.on_text = [&](const std::string&) {
    long_synced = true;
    return true;
  };
  sink.cancelled = [&] {
    if (long_synced.load()) return false;
    if (++polls == 1) {
      queue_others();
    } else {
      out.guests_during_sync.push_back(metric(core, "orbit_prefill_guests_total"));
    }
    return false;
  };
  out.result = serve_test::run_answered(core, long_request, "long", sink);
  return out;
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

// Starts a thread that enters `gate` on `lane` offering `guest_tokens`, records `lane` in `order` once it holds the
// gate, and leaves; returns once it waits (one more waiter than before).
std::thread queued_waiter(sv::FairGate& gate, const std::string& lane, int64_t guest_tokens,
                          std::vector<std::string>& order, std::mutex& m) {
  const int64_t before = gate.waiting();
  std::thread t([&gate, &order, &m, lane, guest_tokens] {
    REQUIRE(gate.enter(lane, {}, 50, guest_tokens));
    {
      std::lock_guard<std::mutex> lock(m);
      order.push_back(lane);
    }
    gate.leave();
  });
  wait_until([&] { return gate.waiting() == before + 1; });
  return t;
}

TEST_CASE("serve gate: a holder lets short waiters of other lanes in between two pieces, round robin",
          "[serve][gate]") {
  sv::FairGate gate;
  REQUIRE(gate.enter("A"));
  CHECK_FALSE(gate.yield_to_guest("A", 10));  // nobody waits: kept
  std::vector<std::string> order;
  std::mutex m;
  std::vector<std::thread> threads;
  threads.push_back(queued_waiter(gate, "A", 1, order, m));                           // the holder's own lane
  threads.push_back(queued_waiter(gate, "audit", sv::FairGate::kNoGuest, order, m));  // offers nothing
  threads.push_back(queued_waiter(gate, "long", 50, order, m));                       // over the bound
  threads.push_back(queued_waiter(gate, "B", 3, order, m));
  threads.push_back(queued_waiter(gate, "C", 0, order, m));
  threads.push_back(queued_waiter(gate, "B", 2, order, m));  // B's second, behind its first
  // One guest per call, each back before the call returns; B goes to the rotation's back after its turn.
  for (const char* expected : {"B", "C", "B"}) {
    REQUIRE(gate.yield_to_guest("A", 10));
    std::lock_guard<std::mutex> lock(m);
    CHECK(order.back() == expected);
  }
  CHECK_FALSE(gate.yield_to_guest("A", 10));  // only A's own, the audit and the long one wait
  CHECK(gate.busy());
  CHECK_FALSE(gate.try_enter_idle());
  CHECK(gate.guests() == 3);
  CHECK(gate.yields() == 0);
  gate.leave();
  for (std::thread& t : threads) t.join();
  CHECK(order == std::vector<std::string>{"B", "C", "B", "A", "audit", "long"});  // then the rotation as queued
}

TEST_CASE("serve gate: a guest yields to a step in turn and the gate comes back innermost first", "[serve][gate]") {
  sv::FairGate gate;
  REQUIRE(gate.enter("A"));
  CHECK_FALSE(gate.nested());
  std::vector<std::string> order;
  std::mutex m;
  auto note = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(m);
    order.push_back(what);
  };
  std::thread guest([&] {
    REQUIRE(gate.enter("B", {}, 50, 4));
    note("B in");
    CHECK(gate.nested());                        // inside A's yield
    CHECK_FALSE(gate.yield_to_guest("B", 100));  // a guest lets no guest in (C waits and offers 1)
    CHECK(gate.yield_to("~decode"));
    note("B back");
    gate.leave();
  });
  wait_until([&] { return gate.waiting() == 1; });
  std::thread other = queued_waiter(gate, "C", 1, order, m);
  std::thread step = queued_waiter(gate, "~decode", sv::FairGate::kNoGuest, order, m);
  // Rotation [B, C]: B is the first that offered at most 10.
  CHECK(gate.yield_to_guest("A", 10));
  CHECK_FALSE(gate.nested());
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(order == std::vector<std::string>{"B in", "~decode", "B back"});
  }
  gate.leave();
  guest.join();
  step.join();
  other.join();
  CHECK(order == std::vector<std::string>{"B in", "~decode", "B back", "C"});
  CHECK(gate.guests() == 1);
  CHECK(gate.yields() == 1);
}

TEST_CASE("serve prefill pieces: a short request of another session runs between the pieces of a long sync",
          "[serve][pieces]") {
  const int64_t chunk = 32;
  const sv::ChatRequest short_request = [&] {
    sv::ServeCore probe(options(chunk));
    return serve_test::story_chat(probe, kQuestions[2], 6);
  }();
  sv::RunResult alone;
  {
    sv::ServeCore core(options(chunk));
    const sv::Parsed<int64_t> tokens = core.count_chat_tokens(short_request);
    REQUIRE(tokens.ok());
    REQUIRE(*tokens.value <= chunk);  // its sync forwards at most one piece: it may be a guest
    alone = serve_test::run_answered(core, short_request, "short");
  }
  sv::ServeCore core(options(chunk));
  std::thread short_run, other_long;
  sv::RunResult short_result, other_result;
  const LongSync long_sync = run_long_sync(core, [&] {  // both others queue behind the long sync
    const double queued = metric(core, "orbit_queue_depth");
    other_long = std::thread([&] { other_result = serve_test::run_answered(core, long_chat(core, 2), "other"); });
    wait_until([&] { return metric(core, "orbit_queue_depth") == queued + 1; });
    short_run = std::thread([&] { short_result = serve_test::run_answered(core, short_request, "short"); });
    wait_until([&] { return metric(core, "orbit_queue_depth") == queued + 2; });
  });
  short_run.join();
  other_long.join();
  CHECK(long_sync.result.usage.prompt_tokens > 8 * chunk);
  REQUIRE_FALSE(long_sync.guests_during_sync.empty());
  // The short sync ran as a guest before the long sync ended: with the old code it waited for the whole
  // prefill (and the metric did not exist). The other long request, queued first, was no guest: it waited.
  CHECK(long_sync.guests_during_sync.back() == 1);
  CHECK(metric(core, "orbit_prefill_guests_total") == 1);
  // A guest's answer is the one it gives alone (its forward count may differ: what the long one stored before).
  CHECK(short_result.text == alone.text);
  CHECK(short_result.usage.plan == alone.usage.plan);
  CHECK(other_result.usage.prompt_tokens == long_sync.result.usage.prompt_tokens);
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

// A session in exact mode (an audit found its loss past the budget) heals its window before its next read. A guest
// runs between two pieces of another session's sync for the tokens it offers, at most a piece: such a session offers
// its heal too, so one whose heal runs past a piece waits for its own turn, where it is served exactly, instead of
// healing its whole window while the long sync waits.
TEST_CASE("serve prefill pieces: a session in exact mode whose heal runs past a piece is no guest", "[serve][pieces]") {
  const int64_t chunk = 48;
  sv::ServeOptions o = options(chunk);
  o.policy = "blind";  // reuses every turn as it is, relocated only: losses far past the budget
  o.audit_rate = 1;
  sv::ServeCore core(o);
  // A conversation that keeps its system message and its last 4 messages, each request audited in idle time,
  // until an audit puts it in exact mode: its window is then as the last, approximate, request left it.
  std::vector<orbit::ChatMessage> all = {{"system", "You tell short stories about " + words(1, 12) + "."}};
  std::vector<orbit::ChatMessage> sent;
  bool exact = false;
  for (int i = 0; i < 16 && !exact; ++i) {
    all.push_back({"user", words(i + 2, 10 + i % 5)});
    sent = serve_test::trimmed(all, 4);
    const sv::RunResult r = serve_test::run_answered(core, serve_test::greedy_chat(core, sent), "audited");
    all.push_back({"assistant", r.text});
    sent.push_back(all.back());
    core.run_idle_work();  // the audit of that request
    exact = (*core.session_info("audited"))["audit"]["exact_mode"].get<bool>();
  }
  REQUIRE(exact);
  // Its next request only appends (no eviction, which offers nothing): the answer and a question, a few tokens.
  sent.push_back({"user", "Who came to play?"});
  const sv::ChatRequest next = serve_test::greedy_chat(core, sent);

  std::thread next_run;
  sv::RunResult next_result;
  const LongSync long_sync = run_long_sync(core, [&] {  // it queues behind the long sync
    const double queued = metric(core, "orbit_queue_depth");
    next_run = std::thread([&] { next_result = serve_test::run_answered(core, next, "audited"); });
    wait_until([&] { return metric(core, "orbit_queue_depth") == queued + 1; });
  });
  next_run.join();
  CHECK(long_sync.result.usage.prompt_tokens > 4 * chunk);  // pieces to let a guest in between
  REQUIRE(long_sync.guests_during_sync.size() > 1);
  // It was no guest (the old code let it in for its new tokens alone, and healed the whole window there), and it
  // was served exactly, in its own turn.
  CHECK(long_sync.guests_during_sync.back() == 0);
  CHECK(metric(core, "orbit_prefill_guests_total") == 0);
  CHECK(next_result.usage.exact == "audit");
  CHECK(next_result.usage.predicted_kl == 0);
}

}  // namespace ORBIT_TEST_FILE
